"""RLlib's env-to-module connector pieces (``ray.rllib.connectors.env_to_module``), for cairn's env runners.

:class:`EnvToModulePipeline` is RLlib's pipeline of them, loaded from a checkpoint for
inference (docs/deploy.md).

``env_runners(env_to_module_connector=factory)`` puts them before cairn's own
observation filter (docs/rl.md, "Connectors").
"""

from __future__ import annotations

from cairn.rl.connectors.env_to_module.env_to_module_pipeline import EnvToModulePipeline
from cairn.rl.connectors.env_to_module.flatten_observations import FlattenObservations
from cairn.rl.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from cairn.rl.connectors.env_to_module.mean_std_filter import MeanStdFilter
from cairn.rl.connectors.env_to_module.prev_actions_prev_rewards import PrevActionsPrevRewards

__all__ = [
    "EnvToModulePipeline",
    "FlattenObservations",
    "FrameStackingEnvToModule",
    "MeanStdFilter",
    "PrevActionsPrevRewards",
]
