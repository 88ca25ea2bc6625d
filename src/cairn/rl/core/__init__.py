"""Core of the RL stack: RLModules and Learners; RLlib's component and module id names.

The ``COMPONENT_*`` constants are RLlib's (``ray.rllib.core``) and name the folders of
cairn's checkpoints the same way: ``algo.save_to_path(p)`` writes ``p/learner_group/learner/
rl_module/default_policy``, i.e. ``COMPONENT_LEARNER_GROUP/COMPONENT_LEARNER/COMPONENT_RL_MODULE/
DEFAULT_MODULE_ID``, which ``restore_from_path(..., component=...)`` and ``load_state_path`` take.
"""

__all__ = [
    "ALL_MODULES",
    "COMPONENT_ENV_RUNNER",
    "COMPONENT_ENV_TO_MODULE_CONNECTOR",
    "COMPONENT_EVAL_ENV_RUNNER",
    "COMPONENT_LEARNER",
    "COMPONENT_LEARNER_GROUP",
    "COMPONENT_MODULE_TO_ENV_CONNECTOR",
    "COMPONENT_RL_MODULE",
    "DEFAULT_AGENT_ID",
    "DEFAULT_MODULE_ID",
    "Columns",
]

from cairn.rl.core.columns import Columns  # RLlib's ray.rllib.core.Columns (columns.py imports nothing)

# Literals, not imports: this package is imported by everything below it, and must import nothing else.
# tests/rl/test_rl_results_layout.py checks them against the names cairn's components use.
DEFAULT_MODULE_ID = "default_policy"
"""The module id of a single-policy algorithm (also ``cairn.rl.config.algorithm_config.DEFAULT_MODULE_ID``)."""
DEFAULT_AGENT_ID = "default_agent"
"""The agent id of a single-agent env."""
ALL_MODULES = "__all_modules__"
"""Results: the key of statistics over all modules."""

COMPONENT_ENV_RUNNER = "env_runner"
"""The algorithm's (local) env runner."""
COMPONENT_EVAL_ENV_RUNNER = "eval_env_runner"
"""The algorithm's evaluation env runner (present when the config asks for evaluation)."""
COMPONENT_ENV_TO_MODULE_CONNECTOR = "env_to_module_connector"
"""An env runner's env-to-module connector pipeline."""
COMPONENT_MODULE_TO_ENV_CONNECTOR = "module_to_env_connector"
"""An env runner's module-to-env connector pipeline."""
COMPONENT_LEARNER_GROUP = "learner_group"
"""The algorithm's learner group."""
COMPONENT_LEARNER = "learner"
"""The learner group's learner."""
COMPONENT_RL_MODULE = "rl_module"
"""The learner's MultiRLModule."""
