"""Metrics: the :class:`~cairn.rl.utils.metrics.metrics_logger.MetricsLogger` (RLlib's home for it)."""
