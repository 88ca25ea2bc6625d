"""How RLlib's builder settings become cairn's fields: the parts of the builders' rules (issue 25).

A rule (:data:`Rule`) is a cairn field name, an :class:`Accept` (only at the values cairn
behaves like), a :class:`Refuse`, or a translation (``(config, value) -> {field: value}``);
this module holds the translations (``train_batch_size_per_learner`` -> ``rollout_length``,
RLlib's ``model_config`` -> cairn's, ...), :data:`GROUPS` (which of cairn's own fields each
builder takes by name) and :func:`builder_of`. The table of rules every config shares is
:mod:`cairn.rl.config.builder_rules`; an algorithm's config adds its own in ``RLLIB_RULES``,
built with :func:`number`, :func:`integer` and the translations here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cairn.rl.config.callback_forms import CALLBACK_HOOKS
from cairn.rl.config.policy_spec import PolicySpec
from cairn.rl.config.setting_checks import check_lr_schedule

__all__ = [
    "GROUPS",
    "PENDING_BATCH",
    "Accept",
    "Refuse",
    "Rule",
    "Translate",
    "builder_of",
    "epsilon_schedule",
    "integer",
    "number",
    "replay_buffer_config",
    "same_setting",
    "translate_model_config",
]


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

PENDING_BATCH = "_rllib_train_batch_size"
"""Instance attribute (not a field) keeping the train batch size the last ``training()`` asked for,
as ``("per_learner" | "total", size)``, so that later ``env_runners()`` / ``learners()`` recompute
``rollout_length`` (RLlib resolves the batch when the algorithm is built, whatever the call order)."""

GROUPS: dict[str, tuple[str, ...]] = {
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


def same_setting(value: Any, accepted: Any) -> bool:
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
    """A number, or RLlib's ``[[timestep, lr], ...]`` schedule: ``[[0, lr]]`` is a constant lr and
    ``[[0, lr], [T, 0.0]]`` ``lr_anneal_timesteps=T`` (cairn's own form of that decay); any other schedule is
    kept as ``lr_schedule`` (linear between its points, the last value after them), checked by
    :func:`~cairn.rl.config.setting_checks.check_lr_schedule`. A new ``lr`` replaces the config's schedule."""
    settings: dict[str, Any]
    if not isinstance(value, list | tuple):
        settings = {"lr": _number("lr", value, "anneal it with training(lr_anneal_timesteps=...)")}
    else:
        check_lr_schedule(value)
        points = tuple((int(t), float(lr)) for t, lr in value)
        settings = {"lr": points[0][1], "lr_anneal_timesteps": None}
        if len(points) == 2 and points[1][1] == 0:
            # The learner's schedule runs over the module's trained steps (single-agent PPO: env steps sampled).
            settings["lr_anneal_timesteps"] = points[1][0]
        elif len(points) > 1:
            settings["lr_schedule"] = points
    if getattr(config, "lr_schedule", None) is not None and "lr_schedule" not in settings:
        settings["lr_schedule"] = None
    return settings


def _lr_schedule(config: Any, value: Any) -> dict[str, Any]:
    """RLlib's (older) ``lr_schedule=[[timestep, lr], ...]``: the same schedule as ``lr`` in list form
    (``None`` keeps ``lr`` and ``lr_anneal_timesteps``); what ``to_dict()`` records."""
    if value is None:
        return {"lr_schedule": None}
    return _lr(config, value)


def _grad_clip(config: Any, value: Any) -> dict[str, Any]:
    return {"max_grad_norm": None if value is None else _number("grad_clip", value)}


def _batch(kind: str) -> Translate:
    def translate(config: Any, value: Any) -> dict[str, Any]:
        name = f"train_batch_size{'_per_learner' if kind == 'per_learner' else ''}"
        size = _must_be_int(name, value)
        if size < 1:  # the share per env is rounded up: 0 would silently sample one step per env
            raise ValueError(f"{name}={size} is refused: a train batch holds at least one step.")
        config.__dict__[PENDING_BATCH] = (kind, size)
        return {}

    return translate


def _rollout_fragment_length(config: Any, value: Any) -> dict[str, Any]:
    if value == "auto":  # RLlib computes it from the train batch: so does cairn (train_batch_size_per_learner)
        return {}
    config.__dict__.pop(PENDING_BATCH, None)  # an explicit fragment wins over an earlier batch size
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
        builder = builder_of(cls, str(key), fields)
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


def _policy_spec(value: Any) -> Any:
    """RLlib's tuple form ``(policy_class, observation_space, action_space, config)`` as a :class:`PolicySpec`."""
    return PolicySpec(*value) if isinstance(value, tuple) and len(value) == 4 else value


def _policies(config: Any, value: Any) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    if isinstance(value, Mapping):
        # RLlib's new API stack: None or an empty PolicySpec() only names the module; a spec (or RLlib's
        # tuple) that sets only a config gives that module's settings (algorithm_config_overrides_per_module).
        given = {k: _policy_spec(v) for k, v in value.items()}
        overrides = {
            str(k): dict(v.config)
            for k, v in given.items()
            if isinstance(v, PolicySpec) and isinstance(v.config, Mapping) and PolicySpec(config=v.config) == v
        }
        specs = {
            k: v
            for k, v in given.items()
            if v is not None and str(k) not in overrides and not (isinstance(v, PolicySpec) and v.names_only)
        }
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
    if not overrides:
        return {"policies": tuple(ids)}
    per_module = _overrides_per_module(config, overrides)["algorithm_config_overrides_per_module"]
    return {
        "policies": tuple(ids),
        "algorithm_config_overrides_per_module": {**config.algorithm_config_overrides_per_module, **per_module},
    }


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


def builder_of(cls: Any, key: str, fields: set[str]) -> str:
    """The builder that takes ``key`` on the config class ``cls`` (its rules first, then its groups)."""
    for builder in GROUPS:
        if key in cls._rules(builder):
            return builder
    for builder, group in GROUPS.items():
        if key in group:
            return builder
    if key in fields or key in cls._rules("training"):
        return "training"
    raise TypeError(f"{cls.__name__} has no setting {key!r} (neither cairn's field nor an RLlib setting it takes).")
