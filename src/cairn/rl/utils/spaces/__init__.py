"""Helpers for gymnasium spaces at RLlib's path (``ray.rllib.utils.spaces``)."""
