"""RLlib's import path of :class:`AlgorithmConfig` (``ray.rllib.algorithms.algorithm_config``).

The config lives in :mod:`cairn.rl.config.algorithm_config`, below ``core/``,
``env/`` and ``connectors/``, which all read it. This module only re-exports
RLlib's public names so that scripts written for RLlib import it unchanged;
nothing inside ``cairn`` imports it.
"""

from __future__ import annotations

from cairn.rl.config.algorithm_config import DEFAULT_MODULE_ID, AlgorithmConfig

__all__ = ["DEFAULT_MODULE_ID", "AlgorithmConfig"]
