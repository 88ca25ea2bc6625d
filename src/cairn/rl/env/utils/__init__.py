"""Env helpers at RLlib's path (``ray.rllib.env.utils``)."""
