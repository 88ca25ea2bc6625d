"""cairn.rl: an RLlib-style RL stack whose every part is a cairn ``Checkpointable``.

Public names (imported on first use, so that ``cairn.rl._cli`` can register the
``train``/``evaluate`` commands without importing torch)::

    PPO, PPOConfig                 the algorithm and its config
    Algorithm, AlgorithmConfig     the base classes
    RLModule, RLModuleSpec         a torch actor-critic (one policy)
    MultiRLModule                  module id -> RLModule
    Learner, LearnerGroup          optimizers, schedules, the PPO loss
    EnvRunner, EnvRunnerGroup      vector environments, connectors, RNGs
    IndependentAgentsEnv           the "multi:<env id>" multi-agent env, dict API
    ConnectorPipeline, Connector, MeanStdFilter, ClipActions
    compute_gae, register_env_state_handler

Using any of them imports torch and gymnasium (``import cairn`` does not).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cairn.rl.algorithm import Algorithm, AlgorithmConfig
    from cairn.rl.connectors import ClipActions, Connector, ConnectorPipeline, MeanStdFilter
    from cairn.rl.env_runner import EnvRunner
    from cairn.rl.env_runner_group import EnvRunnerGroup
    from cairn.rl.env_state import register_env_state_handler
    from cairn.rl.gae import compute_gae
    from cairn.rl.learner import Learner, LinearSchedule
    from cairn.rl.learner_group import LearnerGroup
    from cairn.rl.multi_agent import DEFAULT_AGENT_ID, IndependentAgentsEnv
    from cairn.rl.multi_rl_module import DEFAULT_MODULE_ID, MultiRLModule
    from cairn.rl.ppo import PPO, PPOConfig
    from cairn.rl.rl_module import RLModule, RLModuleSpec

__all__ = [
    "DEFAULT_AGENT_ID",
    "DEFAULT_MODULE_ID",
    "PPO",
    "Algorithm",
    "AlgorithmConfig",
    "ClipActions",
    "Connector",
    "ConnectorPipeline",
    "EnvRunner",
    "EnvRunnerGroup",
    "IndependentAgentsEnv",
    "Learner",
    "LearnerGroup",
    "LinearSchedule",
    "MeanStdFilter",
    "MultiRLModule",
    "PPOConfig",
    "RLModule",
    "RLModuleSpec",
    "compute_gae",
    "register_env_state_handler",
]

_HOMES: dict[str, str] = {
    "DEFAULT_AGENT_ID": "cairn.rl.multi_agent",
    "DEFAULT_MODULE_ID": "cairn.rl.multi_rl_module",
    "PPO": "cairn.rl.ppo",
    "Algorithm": "cairn.rl.algorithm",
    "AlgorithmConfig": "cairn.rl.algorithm",
    "ClipActions": "cairn.rl.connectors",
    "Connector": "cairn.rl.connectors",
    "ConnectorPipeline": "cairn.rl.connectors",
    "EnvRunner": "cairn.rl.env_runner",
    "EnvRunnerGroup": "cairn.rl.env_runner_group",
    "IndependentAgentsEnv": "cairn.rl.multi_agent",
    "Learner": "cairn.rl.learner",
    "LearnerGroup": "cairn.rl.learner_group",
    "LinearSchedule": "cairn.rl.learner",
    "MeanStdFilter": "cairn.rl.connectors",
    "MultiRLModule": "cairn.rl.multi_rl_module",
    "PPOConfig": "cairn.rl.ppo",
    "RLModule": "cairn.rl.rl_module",
    "RLModuleSpec": "cairn.rl.rl_module",
    "compute_gae": "cairn.rl.gae",
    "register_env_state_handler": "cairn.rl.env_state",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cairn.rl' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
