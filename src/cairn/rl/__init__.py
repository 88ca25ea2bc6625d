"""cairn.rl: an RLlib-style RL stack whose every part is a cairn ``Checkpointable``.

Importing this package imports torch and gymnasium (``import cairn`` does not).

Public names::

    PPO, PPOConfig                 the algorithm and its config
    Algorithm, AlgorithmConfig     the base classes
    RLModule, RLModuleSpec         a torch actor-critic (one policy)
    MultiRLModule                  module id -> RLModule
    Learner, LearnerGroup          optimizers, schedules, the PPO loss
    EnvRunner, EnvRunnerGroup      vector environments, connectors, RNGs
    ConnectorPipeline, Connector, MeanStdFilter, ClipActions
    compute_gae
"""

from __future__ import annotations

from cairn.rl.algorithm import Algorithm, AlgorithmConfig
from cairn.rl.connectors import ClipActions, Connector, ConnectorPipeline, MeanStdFilter
from cairn.rl.env_runner import EnvRunner
from cairn.rl.env_runner_group import EnvRunnerGroup
from cairn.rl.env_state import register_env_state_handler
from cairn.rl.gae import compute_gae
from cairn.rl.learner import Learner, LinearSchedule
from cairn.rl.learner_group import LearnerGroup
from cairn.rl.multi_agent import DEFAULT_AGENT_ID
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
