"""RLlib's torch testing classes: ``DiscreteBCTorchModule`` and ``BCTorchLearner``."""
