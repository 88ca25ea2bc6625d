"""RLlib's ``ray.rllib.utils.postprocessing`` helpers that cairn has (``value_predictions``)."""
