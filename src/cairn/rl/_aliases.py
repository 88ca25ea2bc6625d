"""Old class paths of ``cairn.rl`` (before the RLlib layout, cairn 0.1), for old checkpoints.

Checkpoints record classes by path (``"cairn.rl.ppo:PPO"``); when a class
moved, its old path is registered here as an alias of the class, so every
checkpoint written before the move still loads (the golden checkpoints under
``tests/data`` prove it). Each moved module calls :func:`register_old_paths`
for its own classes, so the aliases exist whenever the class does. Every
0.1 ``Learner`` trained PPO, so its old path names :class:`PPOLearner`, and
every 0.1 ``RLModule`` was PPO's MLP, so its old path names
:class:`DefaultPPORLModule`.
"""

from __future__ import annotations

from cairn.registry import register_class_alias

__all__ = ["OLD_PATHS", "register_old_paths"]

OLD_PATHS: dict[str, str] = {
    # new "module:QualName" -> the path 0.1 recorded
    "cairn.rl.algorithms.algorithm:Algorithm": "cairn.rl.algorithm:Algorithm",
    "cairn.rl.config.algorithm_config:AlgorithmConfig": "cairn.rl.algorithm:AlgorithmConfig",
    "cairn.rl.algorithms.ppo.ppo:PPO": "cairn.rl.ppo:PPO",
    "cairn.rl.algorithms.ppo.ppo:PPOConfig": "cairn.rl.ppo:PPOConfig",
    "cairn.rl.algorithms.ppo.ppo_learner:PPOLearner": "cairn.rl.learner:Learner",
    "cairn.rl.core.learner.learner_group:LearnerGroup": "cairn.rl.learner_group:LearnerGroup",
    # 0.1's RLModule was PPO's MLP actor-critic; RLModule is now the base class users subclass.
    "cairn.rl.algorithms.ppo.default_ppo_rl_module:DefaultPPORLModule": "cairn.rl.rl_module:RLModule",
    "cairn.rl.core.rl_module.rl_module:RLModuleSpec": "cairn.rl.rl_module:RLModuleSpec",
    "cairn.rl.core.rl_module.multi_rl_module:MultiRLModule": "cairn.rl.multi_rl_module:MultiRLModule",
    "cairn.rl.env.env_runner:EnvRunner": "cairn.rl.env_runner:EnvRunner",
    "cairn.rl.connectors.connectors:ConnectorPipeline": "cairn.rl.connectors:ConnectorPipeline",
    "cairn.rl.connectors.connectors:MeanStdFilter": "cairn.rl.connectors:MeanStdFilter",
    "cairn.rl.connectors.connectors:ClipActions": "cairn.rl.connectors:ClipActions",
}


def register_old_paths(*classes: type) -> None:
    """Register the 0.1 path of each of ``classes`` that has one as an alias of it."""
    for cls in classes:
        old = OLD_PATHS.get(f"{cls.__module__}:{cls.__qualname__}")
        if old is not None:
            register_class_alias(old, cls)
