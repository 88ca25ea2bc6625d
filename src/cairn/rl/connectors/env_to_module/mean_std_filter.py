"""RLlib's import path (``ray.rllib.connectors.env_to_module.mean_std_filter``) of cairn's MeanStdFilter."""

from __future__ import annotations

from cairn.rl.connectors.connectors import MeanStdFilter

__all__ = ["MeanStdFilter"]
