"""RLlib's builder methods on cairn's config dataclasses (issue 25).

RLlib users build a config by chaining ``PPOConfig().environment(...).env_runners(...)
.training(...)``; cairn's configs are dataclasses. :class:`ConfigBuilders` (a base of
:class:`~cairn.rl.config.algorithm_config.AlgorithmConfig`) gives every config
RLlib's builders. Each sets the dataclass's fields and returns ``self`` (RLlib's
semantics), so the builder form and the keyword form give equal dataclasses and equal
checkpoints: nothing a builder is told lives outside the fields, except
``train_batch_size_per_learner``, which cairn turns into ``rollout_length`` from the
number of env runners, envs and learners whenever one of them changes (in any order).

Every RLlib setting a builder takes is one of:

* a cairn field under RLlib's name or another (``lambda_`` -> ``gae_lambda``);
* a translation (``train_batch_size_per_learner`` -> ``rollout_length``, DQN's
  ``epsilon`` schedule -> ``epsilon_start/_end/_timesteps``, ``fcnet_hiddens`` ->
  ``hidden_sizes``);
* accepted only at the values cairn behaves like (RLlib's default, mostly:
  ``framework("torch")``, ``use_gae=True``), anything else refused;
* refused: what cairn does not implement.

A refusal is a ``ValueError`` that names the setting, says why, and what to do; an
unknown name a ``TypeError`` listing the names the builder takes. Nothing is ignored.
A builder also takes cairn's own field names of its group (``training(lr_anneal_timesteps=...)``).
The full table is docs/rllib_parity.md ("RLlib's config builders").
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from cairn.rl.config.callback_forms import CALLBACK_HOOKS
from cairn.rl.config.policy_spec import PolicySpec

__all__ = [
    "Accept",
    "ConfigBuilders",
    "Refuse",
    "Rule",
    "epsilon_schedule",
    "integer",
    "number",
    "replay_buffer_config",
    "translate_model_config",
]


class _NotProvided:
    """RLlib's ``NotProvided``: an argument left out, told apart from an explicit ``None``."""

    def __repr__(self) -> str:
        return "NotProvided"


NOT_PROVIDED: Any = _NotProvided()


@dataclass(frozen=True)
class Accept:
    """An RLlib setting cairn takes only at ``values`` (what cairn does anyway); ``why`` says what cairn does."""

    values: tuple[Any, ...]
    why: str


@dataclass(frozen=True)
class Refuse:
    """An RLlib setting cairn does not implement; ``why`` says what to do instead."""

    why: str


Translate = Callable[[Any, Any], dict[str, Any]]
"""``(config, value) -> {cairn field: value}``: a setting that is not one field under another name."""

Rule = str | Accept | Refuse | Translate
"""How a builder takes one RLlib setting: a cairn field name, :class:`Accept`, :class:`Refuse`, or a Translate."""

_PENDING_BATCH = "_rllib_train_batch_size"
"""Instance attribute (not a field) keeping the train batch size the last ``training()`` asked for,
as ``("per_learner" | "total", size)``, so that later ``env_runners()`` / ``learners()`` recompute
``rollout_length`` (RLlib resolves the batch when the algorithm is built, whatever the call order)."""

_GROUPS: dict[str, tuple[str, ...]] = {
    "environment": ("env", "env_config", "num_agents", "env_creator"),
    "env_runners": (
        "num_env_runners",
        "num_envs_per_env_runner",
        "rollout_length",
        "num_cpus_per_env_runner",
        "custom_resources_per_env_runner",
        "sample_timeout_s",
        "observation_filter",
        "env_to_module_connector",
        "module_to_env_connector",
        "explore",
    ),
    "learners": ("num_learners", "num_cpus_per_learner", "num_gpus_per_learner", "custom_resources_per_learner"),
    "multi_agent": (
        "policies",
        "policy_mapping",
        "policy_mapping_fn",
        "policies_to_train",
        "count_steps_by",
        "algorithm_config_overrides_per_module",
    ),
    "rl_module": ("rl_module_spec", "model_config"),
    "callbacks": ("callbacks_class", *(f"callbacks_{hook}" for hook in CALLBACK_HOOKS)),
    "reporting": ("episode_return_window", "min_sample_timesteps_per_iteration"),
    "debugging": ("seed",),
    "resources": ("num_torch_threads", "num_cpus_for_main_process", "placement_strategy"),
    "fault_tolerance": (
        "checkpoint_timeout_s",
        "env_runner_restore_timeout_s",
        "restart_failed_env_runners",
        "ignore_env_runner_failures",
        "max_num_env_runner_restarts",
    ),
    "framework": (),
    "api_stack": (),
    "evaluation": (
        "evaluation_interval",
        "evaluation_duration",
        "evaluation_duration_unit",
        "evaluation_num_env_runners",
        "evaluation_config",
        "always_attach_evaluation_results",
    ),
}
"""Builder -> the cairn fields it takes by their own names; ``training`` takes every other field."""


def _same(value: Any, accepted: Any) -> bool:
    """Equal, and a bool only equals a bool (``0 == False`` must not accept ``False`` for ``0``)."""
    if isinstance(value, bool) or isinstance(accepted, bool):
        return type(value) is type(accepted) and value == accepted
    try:
        return bool(value == accepted)
    except Exception:  # an array or another value without a plain truth value
        return False


def _must_be_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r:.80}.")
    return value


def _number(name: str, value: Any, hint: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"{name}={value!r:.80} is refused: cairn takes a number here"
            + (f" ({hint})" if hint else "")
            + ". RLlib's schedules (lists of [timestep, value]) are not implemented."
        )
    return float(value)


def number(field: str, *, name: str | None = None, hint: str = "") -> Translate:
    """A rule: a number (not a schedule) into ``field``."""
    return lambda config, value: {field: _number(name or field, value, hint)}


def integer(field: str, *, name: str | None = None) -> Translate:
    """A rule: an int (not a range or a schedule) into ``field``."""
    return lambda config, value: {field: _must_be_int(name or field, value)}


_UNIFORM_BUFFERS = ("EpisodeReplayBuffer", "MultiAgentEpisodeReplayBuffer", "ReplayBuffer", "MultiAgentReplayBuffer")


def replay_buffer_config(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's ``replay_buffer_config``: a uniform buffer's ``type`` and ``capacity``."""
    if not isinstance(value, Mapping):
        raise ValueError(f"replay_buffer_config must be a dict, got {value!r:.80}.")
    kind = value.get("type", "EpisodeReplayBuffer")
    if kind not in _UNIFORM_BUFFERS:
        raise ValueError(
            f"replay_buffer_config type={kind!r:.80} is refused: this algorithm's replay buffer samples uniformly "
            f"(prioritized replay is DQN's only); use one of {list(_UNIFORM_BUFFERS)} or leave type out."
        )
    unknown = sorted(set(value) - {"type", "capacity"})
    if unknown:
        raise ValueError(
            f"replay_buffer_config keys {unknown} are refused: a uniform buffer takes type and capacity "
            "(alpha/beta are prioritized replay's, DQN's only); its chunking is replay_buffer_chunk_rows."
        )
    return {} if "capacity" not in value else {"replay_buffer_capacity": _must_be_int("capacity", value["capacity"])}


def epsilon_schedule(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's DQN ``epsilon``: a number, or ``[[0, start], [timesteps, end]]`` (a linear schedule)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"epsilon_start": float(value), "epsilon_end": float(value), "epsilon_timesteps": 0}
    points = list(value) if isinstance(value, list | tuple) else []
    if len(points) == 1 and points[0][0] == 0:
        return {"epsilon_start": float(points[0][1]), "epsilon_end": float(points[0][1]), "epsilon_timesteps": 0}
    if len(points) == 2 and all(len(p) == 2 for p in points) and points[0][0] == 0 and points[1][0] >= 0:
        return {
            "epsilon_start": float(points[0][1]),
            "epsilon_end": float(points[1][1]),
            "epsilon_timesteps": _must_be_int("epsilon timesteps", points[1][0]),
        }
    raise ValueError(
        f"training(epsilon={value!r:.80}) is refused: cairn's epsilon falls linearly once: give a number or "
        "[[0, start], [timesteps, end]]."
    )


def _lr(config: Any, value: Any) -> dict[str, Any]:
    """A number, or one of RLlib's ``[[timestep, lr], ...]`` schedules that cairn's learners run exactly:
    ``[[0, lr]]`` (constant) and ``[[0, lr], [T, 0.0]]`` (linear to 0 at T: ``lr_anneal_timesteps=T``)."""
    if not isinstance(value, list | tuple):
        return {"lr": _number("lr", value, "anneal it with training(lr_anneal_timesteps=...)")}
    points = [tuple(p) for p in value if isinstance(p, list | tuple) and len(p) == 2]
    ok = len(points) == len(value) and all(
        isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x >= 0
        for point in points
        for x in point
    )
    if ok and len(points) == 1 and points[0][0] == 0 and points[0][1] > 0:
        return {"lr": float(points[0][1]), "lr_anneal_timesteps": None}
    decays_to_zero = ok and len(points) == 2 and points[0][0] == 0 and points[0][1] > 0 and points[1][1] == 0
    if decays_to_zero and points[1][0] >= 1:
        # The learner's schedule runs over the module's trained steps (single-agent PPO: env steps sampled).
        return {"lr": float(points[0][1]), "lr_anneal_timesteps": _must_be_int("lr schedule's end", points[1][0])}
    raise ValueError(
        f"training(lr={value!r:.80}) is refused: cairn's learners keep lr constant or anneal it linearly to 0, so "
        "they run [[0, lr]] and [[0, lr], [T, 0.0]] exactly; a schedule to another value (or with more points) "
        "is not implemented. Give one of those, or a number and training(lr_anneal_timesteps=...)."
    )


def _grad_clip(config: Any, value: Any) -> dict[str, Any]:
    return {"max_grad_norm": None if value is None else _number("grad_clip", value)}


def _batch(kind: str) -> Translate:
    def translate(config: Any, value: Any) -> dict[str, Any]:
        name = f"train_batch_size{'_per_learner' if kind == 'per_learner' else ''}"
        size = _must_be_int(name, value)
        if size < 1:  # the share per env is rounded up: 0 would silently sample one step per env
            raise ValueError(f"{name}={size} is refused: a train batch holds at least one step.")
        config.__dict__[_PENDING_BATCH] = (kind, size)
        return {}

    return translate


def _rollout_fragment_length(config: Any, value: Any) -> dict[str, Any]:
    if value == "auto":  # RLlib computes it from the train batch: so does cairn (train_batch_size_per_learner)
        return {}
    config.__dict__.pop(_PENDING_BATCH, None)  # an explicit fragment wins over an earlier batch size
    return {"rollout_length": _must_be_int("rollout_fragment_length", value)}


def _observation_filter(config: Any, value: Any) -> dict[str, Any]:
    filters = {"NoFilter": None, None: None, "MeanStdFilter": "MeanStdFilter"}
    if value not in filters:
        raise ValueError(f"observation_filter={value!r:.80} is refused: cairn has 'NoFilter' and 'MeanStdFilter'.")
    return {"observation_filter": filters[value]}


def _env(config: Any, value: Any) -> dict[str, Any]:
    """A gymnasium id, a registered name, a ``gymnasium.Env`` / ``MultiAgentEnv`` subclass (by reference),
    or a creator function ``creator(env_config)`` (kept, never recorded: cairn.rl.config.env_creators)."""
    if isinstance(value, str):
        return {"env": value, "env_creator": None}  # a registered name's creator is set when the config is built
    if isinstance(value, type):
        import gymnasium

        from cairn.registry import class_path, register_passed

        if not issubclass(value, gymnasium.Env):
            raise ValueError(
                f"environment({value.__qualname__}) is refused: the class is no gymnasium.Env (nor a MultiAgentEnv); "
                "give an env class, a gymnasium id, a name given to register_env, or a creator function."
            )
        if value.__module__ == "__main__" or "<locals>" in value.__qualname__:
            from cairn.rl.config.env_creators import env_creator_setting

            return env_creator_setting(value)  # no path names it: kept as a creator, as a lambda is
        path = class_path(value)
        register_passed(value)  # the program passed it: this config's checkpoint loads again here
        return {"env": path, "env_creator": None}
    if callable(value):  # RLlib's environment(lambda env_config: ...): kept, and asked for again by a new process
        from cairn.rl.config.env_creators import env_creator_setting

        return env_creator_setting(value)
    raise ValueError(
        f"environment(env={value!r:.80}) is refused: cairn takes a gymnasium id, a name given to "
        "cairn.rl.env.multi_agent_env.register_env, a gymnasium.Env or MultiAgentEnv subclass (recorded by "
        "reference, built as cls(env_config)), or a creator function env_config -> env."
    )


def _deep_update(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_update(merged[key], value)
        else:
            merged[key] = value
    return merged


def _env_config(config: Any, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"env_config must be a dict, got {value!r:.80}.")
    return {"env_config": _deep_update(config.env_config, value)}  # RLlib deep-updates it


def _space(name: str) -> Translate:
    def translate(config: Any, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        raise ValueError(
            f"environment({name}=...) is refused: cairn reads the spaces from the environment (a MultiAgentEnv "
            "gives each agent's). For a module with other spaces give them in its RLModuleSpec "
            "(rl_module(rl_module_spec=RLModuleSpec(observation_space=..., action_space=...)))."
        )

    return translate


_MODEL_CONFIG_NAMES = {
    "fcnet_hiddens": "hidden_sizes",
    "fcnet_activation": "activation",
    # RLlib's older names of the initializer settings (its model_config_dict scripts use them).
    "fcnet_weights_initializer": "fcnet_kernel_initializer",
    "fcnet_weights_initializer_config": "fcnet_kernel_initializer_kwargs",
    "fcnet_bias_initializer_config": "fcnet_bias_initializer_kwargs",
}
_MODEL_CONFIG_DEFAULTS = {
    "use_attention": False,
    "lstm_use_prev_action": False,
    "lstm_use_prev_reward": False,
}


def translate_model_config(model_config: Any) -> dict[str, Any]:
    """RLlib's ``model_config`` keys in cairn's names (``fcnet_hiddens`` -> ``hidden_sizes``, ...).

    RLlib keys cairn's default modules do not have are kept, and refused by the module
    that is built (a module of your own reads its own keys), and so are values the default
    modules judge (activations, initializers, ``vf_share_layers=True``, which PPO's builds).
    RLlib's ``use_attention``, ``lstm_use_prev_action`` and ``lstm_use_prev_reward`` are
    taken at ``False`` (cairn's LSTM reads observations only) and refused otherwise.
    ``use_lstm`` and ``vf_share_layers`` are dropped when ``False`` (cairn's defaults, so a
    config records as it always did; ``use_lstm=True`` with ``vf_share_layers=False`` is
    refused by the module) and kept when ``True``. RLlib's older initializer names
    (``fcnet_weights_initializer``, ``..._config``) are translated, and a ``torch.nn.init``
    function given as an initializer is recorded by its name (any other callable is refused).
    """
    to_dict = getattr(model_config, "to_dict", None)
    if dataclasses.is_dataclass(model_config) and callable(to_dict):
        # cairn.rl.core.rl_module.default_model_config.DefaultModelConfig (not imported: this module is a
        # leaf): its set fields, by RLlib's names.
        model_config = to_dict()
    if not isinstance(model_config, Mapping):
        raise ValueError(f"model_config must be a dict or a DefaultModelConfig, got {model_config!r:.80}.")
    out: dict[str, Any] = {}
    for key, value in model_config.items():
        if key in ("use_lstm", "vf_share_layers") and value is False:
            if key == "vf_share_layers" and model_config.get("use_lstm") is True:
                out[key] = False  # kept for the module to refuse (cairn builds no separate value LSTM)
            continue
        if key in _MODEL_CONFIG_DEFAULTS:
            if value != _MODEL_CONFIG_DEFAULTS[key]:
                raise ValueError(
                    f"model_config[{key!r}]={value!r} is refused: cairn's default modules have no attention, and "
                    "their LSTM (PPO's, use_lstm=True) reads observations only. Write your own "
                    "RLModule (RLModuleSpec(module_class=...))."
                )
            continue
        if key == "uses_new_env_runners" and value is True:
            continue  # RLlib's flag of its new env runners: cairn has only those
        if str(key).endswith("_initializer") and callable(value):
            value = _initializer_by_name(str(key), value)
        name = _MODEL_CONFIG_NAMES.get(str(key), str(key))
        if name in out:
            raise ValueError(f"model_config gives {name!r} twice (as {key!r} and by another name): give one of them.")
        out[name] = list(value) if key == "fcnet_hiddens" else value
    return out


def _initializer_by_name(key: str, value: Any) -> str:
    """A ``torch.nn.init`` function given as an initializer (RLlib's older scripts) -> its name, which the
    config records; the module looks it up in its fixed list. Any other callable is refused here."""
    name = getattr(value, "__name__", None)
    if getattr(value, "__module__", None) != "torch.nn.init" or not isinstance(name, str):
        raise ValueError(
            f"model_config[{key!r}]={value!r:.80} is refused: cairn records initializers by name (a checkpoint "
            "never holds code); give the name of a torch.nn.init function, e.g. 'xavier_uniform_'."
        )
    return name


def _evaluation_interval(config: Any, value: Any) -> dict[str, Any]:
    # RLlib reads 0 as "no evaluation" too.
    if value is None or (not isinstance(value, bool) and value == 0):
        return {"evaluation_interval": None}
    return {"evaluation_interval": _must_be_int("evaluation_interval", value)}


def _evaluation_duration(config: Any, value: Any) -> dict[str, Any]:
    if value == "auto":
        raise ValueError(
            "evaluation(evaluation_duration='auto') is refused: 'auto' evaluates as long as a parallel training "
            "step takes, and cairn evaluates after the training step. Give a number of episodes or timesteps."
        )
    return {"evaluation_duration": _must_be_int("evaluation_duration", value)}


_NOT_PER_EVALUATION = ("train_batch_size_per_learner", "train_batch_size")


def _evaluation_config(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's ``evaluation_config`` (a dict, or ``AlgorithmConfig.overrides(...)``'s) in cairn's field names.

    Each setting is translated by the builder that takes it (``explore`` -> ``env_runners``),
    so what a builder refuses is refused here too, before anything changes.
    """
    if value is None:
        return {"evaluation_config": {}}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"evaluation_config must be a dict of settings (or AlgorithmConfig.overrides(...)), got {type(value)}."
        )
    cls = type(config)
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    translated: dict[str, Any] = {}
    for key, setting in value.items():
        if key in _NOT_PER_EVALUATION or str(key).startswith("evaluation_"):
            raise ValueError(
                f"evaluation(evaluation_config={{{key!r}: ...}}) is refused: evaluation runners do not train and "
                "cannot nest another evaluation; set the evaluation's length with evaluation_duration."
            )
        if key in _EVALUATION_FILTER_STATS:
            _evaluation_filter_stats(str(key), setting)
            continue
        builder = _builder_of(cls, str(key), fields)
        translated.update(cls._translate(builder, {key: setting}, copy.deepcopy(config)))
    return {"evaluation_config": translated}


_EVALUATION_FILTER_STATS = ("use_worker_filter_stats", "update_worker_filter_stats")
"""RLlib's filter-statistics settings, which in ``evaluation_config`` describe what cairn's evaluation
runners always do: before each evaluation they take the training runners' merged connector states
and drop what they added (:mod:`cairn.rl.algorithms.evaluation`)."""


def _evaluation_filter_stats(key: str, value: Any) -> None:
    """Accept ``evaluation_config={key: False}`` (what cairn's evaluation runners do); refuse anything else."""
    if value is not False:
        raise ValueError(
            f"evaluation(evaluation_config={{{key!r}: {value!r:.40}}}) is refused: cairn's evaluation runners "
            "always normalize with the training runners' merged filter statistics, broadcast before each "
            f"evaluation, and drop their own (RLlib's {key}=False); leave the setting out or set it to False."
        )


def _model_config(config: Any, value: Any) -> dict[str, Any]:
    return {"model_config": translate_model_config(value)}


def _policies(config: Any, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        # RLlib's new API stack: None or an empty PolicySpec() only names the module.
        specs = {k: v for k, v in value.items() if v is not None and not (isinstance(v, PolicySpec) and v.names_only)}
        if specs:
            raise ValueError(
                f"multi_agent(policies=...) gives specs for {sorted(specs)}: cairn takes module ids "
                "(a set or list); give each module's spec in rl_module(rl_module_spec=MultiRLModuleSpec(...)) and its "
                "settings in multi_agent(algorithm_config_overrides_per_module=...)."
            )
        ids = list(value)
    elif isinstance(value, set | frozenset):
        ids = sorted(value)  # a set has no order: sorted, so that a checkpoint is the same every run
    elif isinstance(value, list | tuple):
        ids = list(value)
    else:
        raise ValueError(f"multi_agent(policies={value!r:.80}) is refused: give a set or list of module ids.")
    if not ids or not all(isinstance(i, str) and i for i in ids):
        raise ValueError(f"multi_agent(policies=...) must name at least one module id (str), got {value!r:.80}.")
    return {"policies": tuple(ids)}


def _policies_to_train(config: Any, value: Any) -> dict[str, Any]:
    if value is None:
        return {"policies_to_train": None}
    if callable(value):
        raise ValueError(
            "multi_agent(policies_to_train=<function>) is refused: cairn takes the list of module ids that learn."
        )
    return {"policies_to_train": tuple(sorted(value) if isinstance(value, set | frozenset) else value)}


def _overrides_per_module(config: Any, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"algorithm_config_overrides_per_module must be a dict, got {value!r:.80}.")
    return {
        "algorithm_config_overrides_per_module": {
            str(module_id): type(config).overrides(**dict(settings)) for module_id, settings in value.items()
        }
    }


def _seed(config: Any, value: Any) -> dict[str, Any]:
    if value is None:
        raise ValueError(
            "debugging(seed=None) is refused: cairn always seeds (same seed on CPU, same results); give an int."
        )
    return {"seed": _must_be_int("seed", value)}


def _framework(config: Any, value: Any) -> dict[str, Any]:
    if value != "torch":
        raise ValueError(f"framework({value!r}) is refused: cairn runs on PyTorch only; use framework('torch').")
    return {}


_DEFAULT_ONLY = "cairn has no such option; RLlib's default is what cairn does"

_BASE_RULES: dict[str, dict[str, Rule]] = {
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
        "batch_mode": Accept(("truncate_episodes",), "cairn samples rollout_length steps per env, cutting episodes"),
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
    _BASE_RULES["callbacks"][_hook] = (
        f"callbacks_{_hook}"
        if _hook in CALLBACK_HOOKS
        else Accept((None,), f"cairn never calls {_hook} (it has no such event), so the function would never run")
    )


class _AlgoClassCall(type):
    """Lets ``AlgorithmConfig(algo_class=PPO)`` build the algorithm's own config (RLlib's generic config)."""

    def __call__(cls, *args: Any, algo_class: type[Any] | None = None, **kwargs: Any) -> Any:
        if algo_class is None:
            return super().__call__(*args, **kwargs)
        target = getattr(algo_class, "config_class", None)
        if not (isinstance(target, type) and issubclass(target, cls)):
            raise ValueError(
                f"{cls.__name__}(algo_class={getattr(algo_class, '__name__', algo_class)!r:.60}): give a cairn "
                f"algorithm class (PPO, DQN, SAC) whose config is a {cls.__name__}."
            )
        return type.__call__(target, *args, **kwargs)


class ConfigBuilders(metaclass=_AlgoClassCall):
    """RLlib's config builders; see the module docstring. A base of ``AlgorithmConfig``.

    ``AlgorithmConfig(algo_class=PPO)`` is RLlib's generic form: it makes a ``PPOConfig()``.
    """

    @property
    def train_batch_size(self) -> int:
        """RLlib's ``config.train_batch_size``, read-only: the rows one iteration trains on (PPO:
        ``rollout_length`` x envs per runner x sampling runners; off-policy algorithms: the minibatch)."""
        return self._train_batch_rows()

    def _train_batch_rows(self) -> int:
        config: Any = self
        return int(config.rollout_length) * int(config.num_envs_per_env_runner) * max(1, int(config.num_env_runners))

    RLLIB_RULES: ClassVar[dict[str, dict[str, Rule]]] = {}
    """Per builder, the RLlib settings an algorithm's config adds (``training``: PPO's ``lambda_``, ...)."""

    @classmethod
    def _rules(cls, builder: str) -> dict[str, Rule]:
        rules: dict[str, Rule] = {}
        for klass in reversed(cls.__mro__):
            own = klass.__dict__.get("RLLIB_RULES")
            if isinstance(own, dict) and builder in own:
                rules.update(own[builder])
        merged = dict(_BASE_RULES[builder])
        merged.update(rules)
        return merged

    @classmethod
    def _own_fields(cls, builder: str) -> set[str]:
        """The cairn fields ``builder`` takes under their own names."""
        names: set[str] = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
        if builder == "training":
            grouped = {name for group in _GROUPS.values() for name in group}
            return names - grouped
        return names & set(_GROUPS[builder])

    @classmethod
    def _translate(cls, builder: str, settings: Mapping[str, Any], config: Any) -> dict[str, Any]:
        """The cairn field updates of ``settings`` given to ``builder`` (refusals raise here)."""
        rules = cls._rules(builder)
        own = cls._own_fields(builder)
        updates: dict[str, Any] = {}
        for key, value in settings.items():
            rule = rules.get(key)
            if rule is None and key in own:
                rule = key
            if rule is None:
                raise TypeError(
                    f"{cls.__name__}.{builder}() got an unexpected setting {key!r}. It takes RLlib's "
                    f"{sorted(rules)} and cairn's {sorted(own)}; docs/rllib_parity.md lists where each RLlib "
                    "setting lives."
                )
            if isinstance(rule, str):
                updates[rule] = copy.deepcopy(value) if isinstance(value, dict | list) else value
            elif isinstance(rule, Accept):
                if not any(_same(value, v) for v in rule.values):
                    raise ValueError(
                        f"{cls.__name__}.{builder}({key}={value!r:.80}) is refused: {rule.why}. cairn accepts "
                        f"{key} only as {' or '.join(repr(v) for v in rule.values)}."
                    )
            elif isinstance(rule, Refuse):
                raise ValueError(f"{cls.__name__}.{builder}({key}=...) is refused: {rule.why}.")
            else:
                updates.update(rule(config, value))
        return updates

    def _apply(self, builder: str, settings: Mapping[str, Any]) -> Self:
        trial = copy.copy(self)  # refuse before anything changes: translate against a copy
        trial.__dict__ = copy.deepcopy(self.__dict__)
        updates = type(self)._translate(builder, settings, trial)
        for name, value in updates.items():
            setattr(trial, name, value)
        _resolve_batch(trial)
        post_init = getattr(trial, "__post_init__", None)
        if post_init is not None:
            post_init()  # the checks and normalisations a keyword-built config gets
        self.__dict__.clear()
        self.__dict__.update(trial.__dict__)
        return self

    # ------------------------------------------------------------------ RLlib's builders

    def environment(self, env: Any = NOT_PROVIDED, **settings: Any) -> Self:
        """RLlib's ``environment(env, env_config=..., ...)``: the env id or ``MultiAgentEnv`` class, its config.

        As in RLlib, an ``env`` that is given is applied, ``None`` included (which the config
        then refuses, by name); only an ``env`` left out keeps the current one.
        """
        if env is not NOT_PROVIDED:
            settings = {"env": env, **settings}
        return self._apply("environment", settings)

    def env_runners(self, **settings: Any) -> Self:
        """RLlib's ``env_runners(num_env_runners=, num_envs_per_env_runner=, rollout_fragment_length=, ...)``."""
        return self._apply("env_runners", settings)

    def learners(self, **settings: Any) -> Self:
        """RLlib's ``learners(num_learners=, ...)``."""
        return self._apply("learners", settings)

    def training(self, **settings: Any) -> Self:
        """RLlib's ``training(lr=, train_batch_size_per_learner=, minibatch_size=, num_epochs=, gamma=, ...)``
        with the algorithm's own keys (PPO's ``clip_param``, DQN's ``replay_buffer_config``, ...)."""
        return self._apply("training", settings)

    def multi_agent(self, **settings: Any) -> Self:
        """RLlib's ``multi_agent(policies=, policy_mapping_fn=, policies_to_train=,
        algorithm_config_overrides_per_module=)``."""
        return self._apply("multi_agent", settings)

    def rl_module(self, **settings: Any) -> Self:
        """RLlib's ``rl_module(rl_module_spec=, model_config=)``."""
        return self._apply("rl_module", settings)

    def callbacks(self, callbacks_class: Any = NOT_PROVIDED, **settings: Any) -> Self:
        """RLlib's ``callbacks(callbacks_class, on_algorithm_init=, on_episode_end=, ...)``.

        ``callbacks_class``: an ``RLlibCallback`` subclass, a ``functools.partial`` of one
        with plain-data arguments, or a list of them. ``on_<hook>=``: a function (or a
        list) defined at the top level of an imported module, recorded as
        ``"module:function"`` in ``callbacks_on_<hook>`` and called after the classes'
        hooks, as RLlib does (cairn.rl.config.callback_forms). As in RLlib, ``callbacks(None)``
        resets to the default callbacks; only a ``callbacks_class`` left out keeps the
        current one.
        """
        if callbacks_class is not NOT_PROVIDED:
            settings = {"callbacks_class": callbacks_class, **settings}
        return self._apply("callbacks", settings)

    def reporting(self, **settings: Any) -> Self:
        """RLlib's ``reporting(metrics_num_episodes_for_smoothing=, ...)``."""
        return self._apply("reporting", settings)

    def debugging(self, **settings: Any) -> Self:
        """RLlib's ``debugging(seed=, ...)``."""
        return self._apply("debugging", settings)

    def resources(self, **settings: Any) -> Self:
        """RLlib's ``resources(...)``: CPU only (``num_gpus=0``); cairn's ``num_torch_threads``."""
        return self._apply("resources", settings)

    def framework(self, framework: Any = "torch", **settings: Any) -> Self:
        """RLlib's ``framework("torch")``; other frameworks are refused."""
        return self._apply("framework", {"framework": framework, **settings})

    def api_stack(self, **settings: Any) -> Self:
        """RLlib's ``api_stack(...)``: the new API stack only."""
        return self._apply("api_stack", settings)

    def fault_tolerance(self, **settings: Any) -> Self:
        """RLlib's ``fault_tolerance(restart_failed_env_runners=, ignore_env_runner_failures=,
        max_num_env_runner_restarts=, env_runner_restore_timeout_s=)``; cairn's ``checkpoint_timeout_s``."""
        return self._apply("fault_tolerance", settings)

    def evaluation(self, **settings: Any) -> Self:
        """RLlib's ``evaluation(evaluation_interval=, evaluation_duration=, evaluation_duration_unit=,
        evaluation_num_env_runners=, evaluation_config=)``: evaluation runners that ``train()`` runs every
        ``evaluation_interval`` iterations and ``Algorithm.evaluate()`` on demand."""
        return self._apply("evaluation", settings)

    # ------------------------------------------------------------------ RLlib's helpers

    def copy(self, copy_frozen: bool | None = None) -> Self:
        """A deep copy (RLlib's ``copy``); cairn's configs are never frozen."""
        return copy.deepcopy(self)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a dict of cairn's field names (``from_dict`` takes it back)."""
        assert dataclasses.is_dataclass(self)
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in dataclasses.fields(self) if f.init}

    def update_from_dict(self, config_dict: Mapping[str, Any]) -> Self:
        """Apply a dict of cairn field names and RLlib setting names (each routed to its builder)."""
        fields: set[str] = {f.name for f in dataclasses.fields(self)} if dataclasses.is_dataclass(self) else set()
        per_builder: dict[str, dict[str, Any]] = {}
        for key, value in config_dict.items():
            builder = _builder_of(type(self), key, fields)
            per_builder.setdefault(builder, {})[key] = value
        for builder, settings in per_builder.items():
            self._apply(builder, settings)
        return self

    @classmethod
    def from_dict(cls, config_dict: Mapping[str, Any]) -> Self:
        """A config from :meth:`to_dict`'s dict, or from RLlib's setting names."""
        return cls().update_from_dict(config_dict)

    @classmethod
    def overrides(cls, **settings: Any) -> dict[str, Any]:
        """RLlib's ``AlgorithmConfig.overrides(...)``: the settings in cairn's names, checked, for
        ``algorithm_config_overrides_per_module`` (``PPOConfig.overrides(lambda_=0.9)`` -> ``{"gae_lambda": 0.9}``).

        Raises:
            TypeError: A setting no builder of this config takes.
            ValueError: A refused setting, or one that cannot differ per module (batch sizes).
        """
        default = cls()
        fields: set[str] = {f.name for f in dataclasses.fields(default)} if dataclasses.is_dataclass(default) else set()
        out: dict[str, Any] = {}
        for key, value in settings.items():
            if key in ("train_batch_size_per_learner", "train_batch_size", "rollout_fragment_length"):
                raise ValueError(
                    f"{cls.__name__}.overrides({key}=...) is refused: every module trains on the same sampled "
                    "batch in cairn; override per module what the learner reads (lr, num_epochs, minibatch_size, ...)."
                )
            builder = _builder_of(cls, key, fields)
            out.update(cls._translate(builder, {key: value}, default))
        return out

    def build_algo(self, env: Any = None) -> Any:
        """The algorithm of this config (RLlib's ``build_algo``), e.g. ``PPO(self)``."""
        if env is not None:
            self.environment(env)
        return self.algo_class()(self)

    def build(self, env: Any = None) -> Any:
        """RLlib's older name of :meth:`build_algo`."""
        return self.build_algo(env)

    @classmethod
    def algo_class(cls) -> type[Any]:
        """The algorithm this config builds; each algorithm's config names it."""
        raise NotImplementedError(f"{cls.__name__} belongs to no algorithm: use PPOConfig, DQNConfig or SACConfig.")


def _builder_of(cls: type[ConfigBuilders], key: str, fields: set[str]) -> str:
    for builder in _GROUPS:
        if key in cls._rules(builder):
            return builder
    for builder, group in _GROUPS.items():
        if key in group:
            return builder
    if key in fields or key in cls._rules("training"):
        return "training"
    raise TypeError(f"{cls.__name__} has no setting {key!r} (neither cairn's field nor an RLlib setting it takes).")


def _resolve_batch(config: Any) -> None:
    """``rollout_length`` from the pending train batch size (see :data:`_PENDING_BATCH`).

    PPO samples ``rollout_length`` steps in each of ``num_envs_per_env_runner`` envs of
    each sampling runner (``max(1, num_env_runners)``) per iteration, and splits that
    batch over ``max(1, num_learners)`` learners. A batch that is no multiple of the envs
    is taken as RLlib takes it (its ``rollout_fragment_length="auto"``): each env samples
    the batch's share rounded up, so an iteration trains on up to ``envs - 1`` more steps.
    """
    pending = config.__dict__.get(_PENDING_BATCH)
    if pending is None:
        return
    kind, size = pending
    total = size * max(1, int(config.num_learners)) if kind == "per_learner" else size
    envs = max(1, int(config.num_env_runners)) * int(config.num_envs_per_env_runner)
    config.rollout_length = max(1, -(-total // envs))  # ceil: at least the batch asked for
