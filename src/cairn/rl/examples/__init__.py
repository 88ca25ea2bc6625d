"""RLlib's example code at RLlib's import paths (``ray.rllib.examples`` -> ``cairn.rl.examples``)."""
