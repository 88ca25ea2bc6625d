"""Kept for compatibility: docs/monitoring.md of cairn 0.1 named ``cairn._metrics_log.read_metrics``.

The module is :mod:`cairn.cli.metrics_log`; this one only re-exports its public names.
"""

from cairn.cli.metrics_log import METRICS_FILE, MetricsLog, TensorBoardLog, jsonable, read_metrics

__all__ = ["METRICS_FILE", "MetricsLog", "TensorBoardLog", "jsonable", "read_metrics"]
