"""RLlib's testing learner and module (``ray.rllib.core.testing``): a behaviour-cloning learner for learner tests."""
