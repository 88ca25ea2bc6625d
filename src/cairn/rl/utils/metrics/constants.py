"""RLlib's result and metric key names (``ray.rllib.utils.metrics``), the ones cairn reports.

Each constant is the same string as RLlib's, so that code written against RLlib's
results (``result[ENV_RUNNER_RESULTS][EPISODE_RETURN_MEAN]``,
``algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME))``) reads
cairn's results unchanged. Only names with a cairn value are here: a constant
whose key cairn never fills would make such code fail later, with a KeyError,
instead of at the import.
"""

from __future__ import annotations

__all__ = [
    "AGENT_EPISODE_RETURNS_MEAN",
    "ALL_MODULES",
    "ENV_RUNNER_RESULTS",
    "EPISODE_LEN_MEAN",
    "EPISODE_RETURN_MAX",
    "EPISODE_RETURN_MEAN",
    "EPISODE_RETURN_MIN",
    "EVALUATION_RESULTS",
    "LEARNER_RESULTS",
    "MODULE_EPISODE_RETURNS_MEAN",
    "NUM_AGENT_STEPS_SAMPLED",
    "NUM_AGENT_STEPS_SAMPLED_LIFETIME",
    "NUM_ENV_STEPS_SAMPLED",
    "NUM_ENV_STEPS_SAMPLED_LIFETIME",
    "NUM_EPISODES",
    "NUM_EPISODES_LIFETIME",
    "NUM_MODULE_STEPS_TRAINED",
    "NUM_MODULE_STEPS_TRAINED_LIFETIME",
    "NUM_TRAINING_STEP_CALLS_PER_ITERATION",
    "REPLAY_BUFFER_RESULTS",
    "TIMERS",
    "TRAINING_ITERATION",
    "TRAINING_ITERATION_TIMER",
]

# Sections of a train() result.
ENV_RUNNER_RESULTS = "env_runners"
"""The env runners' episode statistics and step counters."""
LEARNER_RESULTS = "learners"
"""The learners' statistics, per module id (and :data:`ALL_MODULES`)."""
EVALUATION_RESULTS = "evaluation"
"""An evaluation's results (its ``env_runners`` section), in iterations that ran one."""
REPLAY_BUFFER_RESULTS = "replay_buffer"
"""Off-policy algorithms: the replay buffers' sizes, per module id."""
TIMERS = "timers"
"""Wall-clock durations in seconds (not reproducible from run to run)."""

ALL_MODULES = "__all_modules__"
"""Key of the statistics summed over all modules, beside the per-module ones."""

# Keys under env_runners/.
EPISODE_RETURN_MEAN = "episode_return_mean"
EPISODE_RETURN_MAX = "episode_return_max"
EPISODE_RETURN_MIN = "episode_return_min"
EPISODE_LEN_MEAN = "episode_len_mean"
NUM_EPISODES = "num_episodes"
NUM_EPISODES_LIFETIME = "num_episodes_lifetime"
NUM_ENV_STEPS_SAMPLED = "num_env_steps_sampled"
NUM_ENV_STEPS_SAMPLED_LIFETIME = "num_env_steps_sampled_lifetime"
NUM_AGENT_STEPS_SAMPLED = "num_agent_steps_sampled"
NUM_AGENT_STEPS_SAMPLED_LIFETIME = "num_agent_steps_sampled_lifetime"
MODULE_EPISODE_RETURNS_MEAN = "module_episode_returns_mean"
"""Per module id: the mean return of the recent episodes (agents' episodes, multi-agent) it played."""
AGENT_EPISODE_RETURNS_MEAN = "agent_episode_returns_mean"
"""Per agent id; cairn reports it for single-agent envs (the agent ``default_agent``) only."""

# Keys under learners/<module id>/.
NUM_MODULE_STEPS_TRAINED = "num_module_steps_trained"
NUM_MODULE_STEPS_TRAINED_LIFETIME = "num_module_steps_trained_lifetime"

# Top level and timers/.
TRAINING_ITERATION = "training_iteration"
NUM_TRAINING_STEP_CALLS_PER_ITERATION = "num_training_step_calls_per_iteration"
TRAINING_ITERATION_TIMER = "training_iteration"
"""Under :data:`TIMERS`: the wall-clock seconds of the iteration."""
