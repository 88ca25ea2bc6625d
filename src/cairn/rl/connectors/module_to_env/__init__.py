"""RLlib's module-to-env connector path (``ray.rllib.connectors.module_to_env``): :class:`ModuleToEnvPipeline`."""

from __future__ import annotations

from cairn.rl.connectors.module_to_env.module_to_env_pipeline import ModuleToEnvPipeline

__all__ = ["ModuleToEnvPipeline"]
