"""RLlib's env-to-module connector pieces (``ray.rllib.connectors.env_to_module``), for cairn's env runners.

``env_runners(env_to_module_connector=factory)`` puts them before cairn's own
observation filter (docs/rl.md, "Connectors").
"""

from __future__ import annotations

from cairn.rl.connectors.env_to_module.flatten_observations import FlattenObservations
from cairn.rl.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from cairn.rl.connectors.env_to_module.mean_std_filter import MeanStdFilter
from cairn.rl.connectors.env_to_module.prev_actions_prev_rewards import PrevActionsPrevRewards

__all__ = ["FlattenObservations", "FrameStackingEnvToModule", "MeanStdFilter", "PrevActionsPrevRewards"]
