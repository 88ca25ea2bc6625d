"""cairn.rl: an RLlib-style RL stack whose every part is a cairn ``Checkpointable``.

The layout follows RLlib's new API stack (SPEC 9)::

    cairn.rl.algorithms.algorithm          Algorithm
    cairn.rl.config.algorithm_config       AlgorithmConfig (of rl/ it imports only rl/config and the Ray probe)
    cairn.rl.algorithms.ppo                PPO, PPOConfig, PPOLearner (the loss)
    cairn.rl.algorithms.dqn                DQN, DQNConfig, DQNLearner, DefaultDQNRLModule
    cairn.rl.algorithms.off_policy         OffPolicyAlgorithm, OffPolicyConfig, TargetNetworkLearner
    cairn.rl.core.rl_module                RLModule, RLModuleSpec, MultiRLModule
    cairn.rl.core.learner                  Learner (optimizers, schedules, update loop), LearnerGroup
    cairn.rl.env                           EnvRunner, EnvRunnerGroup, multi-agent envs, env state
    cairn.rl.connectors                    ConnectorPipeline, ConnectorV2, MeanStdFilter, ClipActions
    cairn.rl.callbacks                     RLlibCallback (imports only rl/config's callback forms and the logger)
    cairn.rl.utils                         compute_gae, metrics.MetricsLogger
    cairn.rl.distributed                   Ray actors behind the groups

Public names here (imported on first use, so that ``cairn.cli`` can register the
``train``/``evaluate`` commands without importing torch)::

    PPO, PPOConfig, PPOLearner     the algorithm, its config and its learner
    DQN, DQNConfig, DQNLearner     DQN (double Q, target network, n-step), its config and learner
    DefaultDQNRLModule             DQN's default module (an MLP Q-network, epsilon-greedy)
    OffPolicyAlgorithm, OffPolicyConfig, TargetNetworkLearner   the replay-buffer scaffolding
    Algorithm, AlgorithmConfig     the base classes
    RLModule, RLModuleSpec         the base class of your own modules, and its recipe
    DefaultPPORLModule             PPO's default module (an MLP actor-critic)
    SAC, SACConfig, SACLearner, DefaultSACRLModule   soft actor-critic (continuous actions)
    MultiRLModule, MultiRLModuleSpec   module id -> RLModule, and its recipe
    Learner, LearnerGroup          optimizers, schedules, the update loop
    EnvRunner, EnvRunnerGroup      vector environments, connectors, RNGs
    RLlibCallback, Episode         callbacks (config.callbacks_class) and what episode hooks see
    MetricsLogger                  what callbacks log; lifetime sums are checkpointed
    IndependentAgentsEnv           the "multi:<env id>" multi-agent env, dict API
    MultiAgentEnv, MultiAgentEnvRunner, EpisodeInfo   RLlib's multi-agent env API, its runner,
                                   what a policy_mapping_fn(agent_id, episode) is given
    ParallelPettingZooEnv, register_env   PettingZoo's parallel API; naming an env for configs
    ConnectorPipeline, ConnectorV2, MeanStdFilter, ClipActions
    compute_gae, register_env_state_handler

Using any of them imports torch and gymnasium (``import cairn`` does not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn._lazy import lazy_names
from cairn.rl.algorithms.catalog import ALGORITHMS as _ALGORITHMS

if TYPE_CHECKING:
    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.rl.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
    from cairn.rl.algorithms.dqn.dqn import DQN, DQNConfig
    from cairn.rl.algorithms.dqn.dqn_learner import DQNLearner
    from cairn.rl.algorithms.off_policy import OffPolicyAlgorithm, OffPolicyConfig, TargetNetworkLearner
    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from cairn.rl.algorithms.ppo.ppo import PPO, PPOConfig
    from cairn.rl.algorithms.ppo.ppo_learner import PPOLearner
    from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
    from cairn.rl.algorithms.sac.sac import SAC, SACConfig
    from cairn.rl.algorithms.sac.sac_learner import SACLearner
    from cairn.rl.callbacks.callbacks import RLlibCallback
    from cairn.rl.config.algorithm_config import DEFAULT_MODULE_ID, AlgorithmConfig
    from cairn.rl.connectors.connector_v2 import ConnectorV2
    from cairn.rl.connectors.connectors import ClipActions, ConnectorPipeline, MeanStdFilter
    from cairn.rl.core.learner.learner import Learner, LinearSchedule
    from cairn.rl.core.learner.learner_group import LearnerGroup
    from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
    from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
    from cairn.rl.env.env_runner import EnvRunner
    from cairn.rl.env.env_runner_group import EnvRunnerGroup
    from cairn.rl.env.env_state import register_env_state_handler
    from cairn.rl.env.episodes import Episode
    from cairn.rl.env.independent_agents_env import IndependentAgentsEnv
    from cairn.rl.env.multi_agent_env import (
        DEFAULT_AGENT_ID,
        EpisodeInfo,
        MultiAgentEnv,
        register_env,
    )
    from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
    from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv
    from cairn.rl.utils.gae import compute_gae
    from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

__all__ = [
    "DEFAULT_AGENT_ID",
    "DEFAULT_MODULE_ID",
    "DQN",
    "PPO",
    "SAC",
    "Algorithm",
    "AlgorithmConfig",
    "ClipActions",
    "ConnectorPipeline",
    "ConnectorV2",
    "DQNConfig",
    "DQNLearner",
    "DefaultDQNRLModule",
    "DefaultPPORLModule",
    "DefaultSACRLModule",
    "EnvRunner",
    "EnvRunnerGroup",
    "Episode",
    "EpisodeInfo",
    "IndependentAgentsEnv",
    "Learner",
    "LearnerGroup",
    "LinearSchedule",
    "MeanStdFilter",
    "MetricsLogger",
    "MultiAgentEnv",
    "MultiAgentEnvRunner",
    "MultiRLModule",
    "MultiRLModuleSpec",
    "OffPolicyAlgorithm",
    "OffPolicyConfig",
    "PPOConfig",
    "PPOLearner",
    "ParallelPettingZooEnv",
    "RLModule",
    "RLModuleSpec",
    "RLlibCallback",
    "SACConfig",
    "SACLearner",
    "TargetNetworkLearner",
    "compute_gae",
    "register_env",
    "register_env_state_handler",
]

# Public name -> its module. The algorithms' names come from their one table (the CLI's --algo
# reads it too); the rest of the stack is listed here.
_HOMES: dict[str, str] = {
    **{name: home for entry in _ALGORITHMS.values() for name, home in entry.homes().items()},
    "DEFAULT_AGENT_ID": "cairn.rl.env.multi_agent_env",
    "DEFAULT_MODULE_ID": "cairn.rl.config.algorithm_config",
    "OffPolicyAlgorithm": "cairn.rl.algorithms.off_policy",
    "OffPolicyConfig": "cairn.rl.algorithms.off_policy",
    "TargetNetworkLearner": "cairn.rl.algorithms.off_policy",
    "Algorithm": "cairn.rl.algorithms.algorithm",
    "AlgorithmConfig": "cairn.rl.config.algorithm_config",
    "ClipActions": "cairn.rl.connectors.connectors",
    "ConnectorPipeline": "cairn.rl.connectors.connectors",
    "ConnectorV2": "cairn.rl.connectors.connector_v2",
    "EnvRunner": "cairn.rl.env.env_runner",
    "EnvRunnerGroup": "cairn.rl.env.env_runner_group",
    "Episode": "cairn.rl.env.episodes",
    "IndependentAgentsEnv": "cairn.rl.env.independent_agents_env",
    "EpisodeInfo": "cairn.rl.env.multi_agent_env",
    "MultiAgentEnv": "cairn.rl.env.multi_agent_env",
    "MultiAgentEnvRunner": "cairn.rl.env.multi_agent_env_runner",
    "ParallelPettingZooEnv": "cairn.rl.env.pettingzoo_env",
    "register_env": "cairn.rl.env.multi_agent_env",
    "Learner": "cairn.rl.core.learner.learner",
    "LearnerGroup": "cairn.rl.core.learner.learner_group",
    "LinearSchedule": "cairn.rl.core.learner.learner",
    "MeanStdFilter": "cairn.rl.connectors.connectors",
    "MetricsLogger": "cairn.rl.utils.metrics.metrics_logger",
    "MultiRLModule": "cairn.rl.core.rl_module.multi_rl_module",
    "MultiRLModuleSpec": "cairn.rl.core.rl_module.multi_rl_module",
    "RLModule": "cairn.rl.core.rl_module.rl_module",
    "RLModuleSpec": "cairn.rl.core.rl_module.rl_module",
    "RLlibCallback": "cairn.rl.callbacks.callbacks",
    "compute_gae": "cairn.rl.utils.gae",
    "register_env_state_handler": "cairn.rl.env.env_state",
}


# Names whose users may meet 0.1's module: its checkpoints name "cairn.rl.rl_module:RLModule" (PPO's
# MLP), and its class-less specs build that MLP. PPO's module registers both when imported; the package
# imports it for them, so that core/ never imports an algorithm.
_REGISTERS_OLD_MODULE_PATH = dict.fromkeys(
    ("MultiRLModule", "MultiRLModuleSpec", "RLModule", "RLModuleSpec"), "cairn.rl.algorithms.ppo.default_ppo_rl_module"
)

__getattr__, __dir__ = lazy_names(__name__, _HOMES, also=_REGISTERS_OLD_MODULE_PATH)
