"""RLlib's evaluation examples (``ray.rllib.examples.evaluation``): the callbacks its tests import."""
