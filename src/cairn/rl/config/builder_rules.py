"""The rules of RLlib's config builders that every config shares (:data:`BASE_RULES`), per builder.

For each RLlib setting a builder takes: the cairn field it sets, an
:class:`~cairn.rl.config.translations.Accept`, a :class:`~cairn.rl.config.translations.Refuse`,
or a translation from :mod:`cairn.rl.config.translations`. The full table is
docs/rllib_parity.md ("RLlib's config builders").
"""

from __future__ import annotations

from cairn.rl.config.callback_forms import CALLBACK_HOOKS
from cairn.rl.config.translations import (
    Accept,
    Refuse,
    Rule,
    _batch,
    _env,
    _env_config,
    _evaluation_config,
    _evaluation_duration,
    _evaluation_interval,
    _framework,
    _grad_clip,
    _lr,
    _lr_schedule,
    _model_config,
    _number,
    _observation_filter,
    _overrides_per_module,
    _policies,
    _policies_to_train,
    _rollout_fragment_length,
    _seed,
    _space,
    integer,
)

__all__ = ["BASE_RULES"]


_DEFAULT_ONLY = "cairn has no such option; RLlib's default is what cairn does"

BASE_RULES: dict[str, dict[str, Rule]] = {
    "environment": {
        "env": _env,
        "env_config": _env_config,
        "observation_space": _space("observation_space"),
        "action_space": _space("action_space"),
        "render_env": Accept((False,), "cairn renders nothing while training"),
        "clip_rewards": Accept((None, False), "cairn does not clip rewards"),
        "clip_actions": Accept((True,), "cairn clips Box actions into the action space"),
        "normalize_actions": Accept((True,), "cairn's default modules act in the action space's bounds"),
        "disable_env_checking": Accept((False,), _DEFAULT_ONLY),
        "is_atari": Accept((None, False), "cairn has no Atari preprocessing"),
        "action_mask_key": Accept(("action_mask",), _DEFAULT_ONLY),
        "env_task_fn": Refuse("cairn has no task curriculum: change env_config between runs"),
    },
    "env_runners": {
        "num_env_runners": "num_env_runners",
        "num_envs_per_env_runner": "num_envs_per_env_runner",
        "rollout_fragment_length": _rollout_fragment_length,
        "num_cpus_per_env_runner": "num_cpus_per_env_runner",
        "num_gpus_per_env_runner": Accept((0, 0.0), "cairn's env runners run on CPU"),
        "custom_resources_per_env_runner": "custom_resources_per_env_runner",
        "observation_filter": _observation_filter,
        "batch_mode": "batch_mode",
        "explore": "explore",
        "create_env_on_local_worker": Accept((False,), _DEFAULT_ONLY),
        "create_local_env_runner": Accept((True,), "cairn always has a local env runner"),
        "env_to_module_connector": "env_to_module_connector",
        "module_to_env_connector": "module_to_env_connector",
        "add_default_connectors_to_env_to_module_pipeline": Accept((True,), _DEFAULT_ONLY),
        "add_default_connectors_to_module_to_env_pipeline": Accept((True,), _DEFAULT_ONLY),
        "episode_lookback_horizon": Accept((1,), _DEFAULT_ONLY),
        "gym_env_vectorize_mode": Accept(("SYNC", "sync"), "cairn steps its sub-environments in one process"),
        "validate_env_runners_after_construction": Accept((True,), _DEFAULT_ONLY),
        "merge_env_runner_states": Accept(("training_only", True), "cairn merges connector states on every save"),
        "broadcast_env_runner_states": Accept((True,), _DEFAULT_ONLY),
        "episodes_to_numpy": Accept((False, True), "cairn's batches are numpy arrays either way"),
        "sample_timeout_s": "sample_timeout_s",
        "max_requests_in_flight_per_env_runner": Accept((1, 2), "cairn samples synchronously"),
        "compress_observations": Accept((False,), _DEFAULT_ONLY),
        "update_worker_filter_stats": Accept((True,), "training runners update their filters and merge them"),
        "use_worker_filter_stats": Accept((True,), "training runners normalize with their own filter statistics"),
    },
    "learners": {
        "num_learners": "num_learners",
        "num_cpus_per_learner": lambda config, value: (
            {} if value == "auto" else {"num_cpus_per_learner": _number("num_cpus_per_learner", value)}
        ),
        "num_gpus_per_learner": "num_gpus_per_learner",
        "custom_resources_per_learner": "custom_resources_per_learner",
        "local_gpu_idx": Accept((0,), "cairn's learners train on CPU"),
        "num_aggregator_actors_per_learner": Accept((0,), _DEFAULT_ONLY),
        "max_requests_in_flight_per_learner": Accept((3,), _DEFAULT_ONLY),
    },
    "training": {
        "lr": _lr,
        "lr_schedule": _lr_schedule,
        "grad_clip": _grad_clip,
        "grad_clip_by": Accept(("global_norm",), "cairn clips the global norm (max_grad_norm)"),
        "train_batch_size_per_learner": _batch("per_learner"),
        "train_batch_size": _batch("total"),
        "num_epochs": "num_epochs",
        "minibatch_size": "minibatch_size",
        "mini_batch_size_per_learner": integer("minibatch_size", name="mini_batch_size_per_learner"),
        "shuffle_batch_per_epoch": Accept((True,), "cairn shuffles every epoch"),
        "optimizer": Accept(({},), "cairn's learners use Adam with torch's defaults"),
        "learner_class": Accept((None,), "each config names its learner (get_default_learner_class)"),
        "learner_connector": "learner_connector",
        "add_default_connectors_to_learner_pipeline": Accept((True,), _DEFAULT_ONLY),
        "learner_config_dict": Accept(({},), _DEFAULT_ONLY),
        "model": Refuse("it is RLlib's old API stack: use rl_module(model_config={'fcnet_hiddens': [...]})"),
    },
    "multi_agent": {
        "policies": _policies,
        "policy_mapping_fn": "policy_mapping_fn",
        "policies_to_train": _policies_to_train,
        "algorithm_config_overrides_per_module": _overrides_per_module,
        "count_steps_by": "count_steps_by",
        "policy_map_capacity": Accept((100,), _DEFAULT_ONLY),
        "policy_states_are_swappable": Accept((False,), _DEFAULT_ONLY),
        "observation_fn": Accept((None,), _DEFAULT_ONLY),
    },
    "rl_module": {
        "rl_module_spec": "rl_module_spec",
        "model_config": _model_config,
        "algorithm_config_overrides_per_module": _overrides_per_module,
        "model_config_dict": _model_config,
    },
    "callbacks": {"callbacks_class": "callbacks_class"},
    "reporting": {
        "metrics_num_episodes_for_smoothing": "episode_return_window",
        "keep_per_episode_custom_metrics": Accept((False,), _DEFAULT_ONLY),
        "metrics_episode_collection_timeout_s": Accept((60.0, 60), _DEFAULT_ONLY),
        "min_time_s_per_iteration": Accept((None, 0, 0.0), "one train() call is one iteration"),
        "min_train_timesteps_per_iteration": Accept((0,), "one train() call is one iteration"),
        "min_sample_timesteps_per_iteration": "min_sample_timesteps_per_iteration",
        "log_gradients": Accept((True, False), "cairn reports the gradient norm either way"),
    },
    "debugging": {
        "seed": _seed,
        "log_level": Accept(("WARN", "INFO", "ERROR", "DEBUG"), "cairn logs through Python's logging"),
        "log_sys_usage": Accept((True,), _DEFAULT_ONLY),
        "logger_creator": Accept((None,), _DEFAULT_ONLY),
        "logger_config": Accept((None,), _DEFAULT_ONLY),
        "fake_sampler": Accept((False,), _DEFAULT_ONLY),
    },
    "resources": {
        "num_gpus": Accept((0, 0.0), "cairn trains on CPU"),
        "num_cpus_for_main_process": "num_cpus_for_main_process",
        "placement_strategy": "placement_strategy",
        "_fake_gpus": Accept((False,), _DEFAULT_ONLY),
    },
    "framework": {
        "framework": _framework,
        "eager_tracing": Accept((False, True), "PyTorch has no tracing option"),
        "torch_compile_learner": Accept((False,), "cairn does not torch.compile"),
        "torch_compile_worker": Accept((False,), "cairn does not torch.compile"),
        "torch_skip_nan_gradients": Accept((False,), _DEFAULT_ONLY),
        "torch_ddp_kwargs": Accept(({},), _DEFAULT_ONLY),
    },
    "api_stack": {
        "enable_rl_module_and_learner": Accept((True,), "cairn has only RLlib's new API stack"),
        "enable_env_runner_and_connector_v2": Accept((True,), "cairn has only RLlib's new API stack"),
    },
    "fault_tolerance": {
        "env_runner_restore_timeout_s": "env_runner_restore_timeout_s",
        "restart_failed_env_runners": "restart_failed_env_runners",
        "restart_failed_sub_environments": "restart_failed_sub_environments",
        "ignore_env_runner_failures": "ignore_env_runner_failures",
        "max_num_env_runner_restarts": "max_num_env_runner_restarts",
        "env_runner_health_probe_timeout_s": Accept(
            (30.0, 30), "cairn gives a liveness ping at most 30 s (and at most checkpoint_timeout_s)"
        ),
    },
    "evaluation": {
        "evaluation_interval": _evaluation_interval,
        "evaluation_duration": _evaluation_duration,
        "evaluation_duration_unit": "evaluation_duration_unit",
        "evaluation_num_env_runners": "evaluation_num_env_runners",
        "evaluation_config": _evaluation_config,
        "evaluation_parallel_to_training": Accept(
            (False,), "cairn evaluates after the iteration's training step, in train() (not in parallel)"
        ),
        "evaluation_force_reset_envs_before_iteration": Accept(
            (False,),
            "cairn's evaluation runners go on with their episodes from one evaluation to the next "
            "(their environments are checkpointed with them)",
        ),
        "evaluation_sample_timeout_s": Accept((120.0, 120), _DEFAULT_ONLY),
        "always_attach_evaluation_results": "always_attach_evaluation_results",
        "custom_evaluation_function": Refuse(
            "cairn records no functions by value in a config: call algo.evaluate() and compute what you need "
            "from its result, or subclass the algorithm"
        ),
    },
}

_CALLBACK_HOOKS = (
    "on_algorithm_init",
    "on_env_runners_recreated",
    "on_checkpoint_loaded",
    "on_environment_created",
    "on_episode_created",
    "on_episode_start",
    "on_episode_step",
    "on_episode_end",
    "on_evaluate_start",
    "on_evaluate_end",
    "on_sample_end",
    "on_train_result",
)
for _hook in _CALLBACK_HOOKS:
    # The hooks cairn calls take functions (recorded by reference in callbacks_<hook>; the config checks
    # them); the others are hooks of parts cairn does not have, so a function given for them would never run.
    BASE_RULES["callbacks"][_hook] = (
        f"callbacks_{_hook}"
        if _hook in CALLBACK_HOOKS
        else Accept((None,), f"cairn never calls {_hook} (it has no such event), so the function would never run")
    )
