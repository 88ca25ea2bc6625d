"""Building an env runner's connector pipelines from a config (RLlib's connector factories).

:func:`build_env_to_module` and :func:`build_module_to_env` build the pipelines of
one observation/action space pair: the single-agent :class:`~cairn.rl.env.env_runner.EnvRunner`
calls them once, a multi-agent runner once per module. Factories are recorded by
reference in the config (:func:`~cairn.rl.config.algorithm_config.connector_reference`)
and resolved here through the allow-list (:func:`cairn.registry.resolve`, role
:data:`~cairn.registry.CONNECTOR_FACTORY`), which imports nothing: a connector class
must be a :class:`~cairn.rl.connectors.connector_v2.ConnectorV2` subclass, a function one
the program registered (or a load trusted). Remote env runners register only the names
their driver resolved (:func:`connector_names`, part of the driver's ``AllowedNames``).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from cairn.errors import IncompatibleCheckpointError
from cairn.registry import CONNECTOR_FACTORY, Role, Unrecorded, resolve
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.references import CONNECTOR_FIELDS
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.connectors import ClipActions, ConnectorPipeline, MeanStdFilter
from cairn.rl.connectors.env_to_module.flatten_observations import FlattenObservations
from cairn.rl.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from cairn.rl.connectors.learner.frame_stacking import FrameStackingLearner
from cairn.rl.core.rl_module.multi_rl_module import module_specs_from_config

__all__ = [
    "OBSERVATION_FILTERS",
    "build_env_to_module",
    "build_module_to_env",
    "check_learner_connector",
    "connector_names",
    "nested_module_name",
    "resolve_connector_factory",
]

OBSERVATION_FILTERS: dict[str, type[ConnectorV2]] = {"MeanStdFilter": MeanStdFilter}
"""``config.observation_filter`` name -> the connector class appended after the user's pieces."""

_FIELDS = CONNECTOR_FIELDS


def resolve_connector_factory(recorded: Mapping[str, Any], *, where: str) -> tuple[Any, dict[str, Any]]:
    """The class or function a recorded factory names, and its keyword arguments; never imports anything.

    The name resolves through the allow-list (:func:`cairn.registry.resolve`, role
    :data:`~cairn.registry.CONNECTOR_FACTORY`): a ``ConnectorV2`` subclass on the list
    (cairn's own, registered, or trusted by the load), or a function the program
    registered (building a config in code registers the factory it is given) or the load trusted.

    Raises:
        cairn.CheckpointError: The reference is malformed or not allowed in the role.
    """
    ref = recorded.get("ref")
    kwargs = recorded.get("kwargs", {})
    if not isinstance(ref, str | Unrecorded) or not isinstance(kwargs, Mapping):
        raise IncompatibleCheckpointError(
            f"{where}={recorded!r:.120} is not {{'ref': 'module:QualName', 'kwargs': {{}}}}."
        )
    return resolve(ref, where=where, role=CONNECTOR_FACTORY), dict(kwargs)


def connector_names(config: AlgorithmConfig) -> list[tuple[str, str, Role]]:
    """``(path, field, role)`` of every connector factory of ``config``, for a driver's allowed names."""
    names: list[tuple[str, str, Role]] = []
    for name in _FIELDS:
        recorded = getattr(config, name, None)
        if isinstance(recorded, Mapping) and not isinstance(recorded.get("ref"), Unrecorded):
            names.append((str(recorded.get("ref")), name, CONNECTOR_FACTORY))
    return names


def _pieces(
    config: AlgorithmConfig, name: str, args: tuple[Any, ...], spaces_args: tuple[Any, ...] = ()
) -> list[ConnectorV2]:
    """Call the factory of ``config.<name>``; a class is built from its kwargs alone."""
    recorded = getattr(config, name, None)
    if recorded is None:
        return []
    factory, kwargs = resolve_connector_factory(recorded, where=name)
    if isinstance(factory, type):
        built: Any = factory(**kwargs)
    else:
        # RLlib calls fn(env, spaces, device) for env-to-module and fn(env, spaces) for module-to-env
        # when the function takes them, else fn(env): as many of (spaces, device) as it takes.
        params = inspect.signature(factory).parameters.values()
        positional = [
            p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in kwargs
        ]
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            extra = spaces_args
        else:
            extra = spaces_args[: max(0, len(positional) - len(args))]
        built = factory(*args, *extra, **kwargs)
    pieces = list(built) if isinstance(built, list | tuple) else [built]
    for piece in pieces:
        if not isinstance(piece, ConnectorV2):
            raise TypeError(
                f"{name}={recorded['ref']!r} returned a {type(piece).__qualname__}, not a connector piece (a "
                "cairn.rl.connectors.connector_v2.ConnectorV2) or a list of them."
            )
    return pieces


def _chain(
    pipeline: ConnectorPipeline, pieces: list[ConnectorV2], obs: gym.Space[Any], act: gym.Space[Any]
) -> gym.Space[Any]:
    for piece in pieces:
        pipeline.append(piece)
        obs = piece.set_input_spaces(obs, act)
    return obs


def build_env_to_module(
    config: AlgorithmConfig,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    *,
    env: Any = None,
    multi_agent: bool = False,
    agents: Sequence[Any] | None = None,
    nested_module: str | None = None,
) -> tuple[ConnectorPipeline, gym.Space[Any]]:
    """The env-to-module pipeline of one observation/action space, and the space its output has.

    The pipeline is the pieces of ``config.env_to_module_connector`` (called as
    ``fn(env)``, or ``fn(env, spaces, device)`` when it takes three arguments, as
    RLlib does), then the ``config.observation_filter`` (unless the pieces
    already hold a ``MeanStdFilter``). The module is built for the returned space.

    Args:
        config: The algorithm's config.
        observation_space: The observation space of the rows the pipeline gets (one agent's).
        action_space: The matching action space.
        env: What the factory receives as ``env`` (the runner's vector env, or the multi-agent env).
        multi_agent: Whether the runner is multi-agent (given to the factory in ``spaces`` only).
        agents: The agents whose rows the pipeline gets (a multi-agent runner's module's
            agents); ``FlattenObservations(agent_ids=...)`` flattens only listed agents'
            observations. ``None``: not known (single-agent runners).
        nested_module: The name (for messages) of the module(s) the pipeline feeds when every one
            of them takes Dict/Tuple observations as they are (``RLModule.takes_nested_observations``):
            such an output space is then allowed. ``None``: they need arrays, and it is refused.

    Raises:
        ValueError: An unknown observation filter, an observation space the filter or
            a module cannot take (Dict/Tuple without FlattenObservations, unless ``nested_module``;
            never for an off-policy algorithm, whose replay buffers hold arrays),
            a ``FlattenObservations(agent_ids=...)`` whose module serves listed and unlisted agents.
    """
    spaces = {"__env__": (observation_space, action_space), "__env_single__": (observation_space, action_space)}
    pieces = _pieces(config, "env_to_module_connector", (env,), (spaces, "cpu"))
    for piece in pieces:
        if isinstance(piece, FlattenObservations):
            piece.serve_agents(agents)  # before its spaces: they depend on whether it flattens
    pipeline = ConnectorPipeline()
    out = _chain(pipeline, pieces, observation_space, action_space)
    name = config.observation_filter
    if name is not None and not any(isinstance(p, MeanStdFilter) for p in pieces):
        filter_cls = OBSERVATION_FILTERS.get(name)
        if filter_cls is None:
            raise ValueError(f"observation_filter={name!r} is not one of {sorted(OBSERVATION_FILTERS)} or None.")
        if isinstance(out, gym.spaces.Dict | gym.spaces.Tuple):
            if nested_module is not None:
                raise ValueError(
                    f"The observation space {out} reaches {nested_module} unflattened, as it takes them, but "
                    f"observation_filter={name!r} normalises arrays only: turn the filter off "
                    "(config.env_runners(observation_filter=None)) or flatten the observations."
                )
            raise ValueError(_unflattened(out, f"observation_filter={name!r} normalises arrays"))
        out = _chain(pipeline, [filter_cls()], out, action_space)
    if isinstance(out, gym.spaces.Dict | gym.spaces.Tuple):
        if nested_module is None:
            raise ValueError(
                _unflattened(
                    out,
                    "the module needs arrays (cairn's default modules do; a module of your own that reads a dict "
                    "of tensors sets the class attribute takes_nested_observations = True)",
                )
            )
        if config.sample_next_obs:
            raise ValueError(
                _unflattened(
                    out,
                    f"{type(config).__name__} is off-policy: its replay buffers store arrays, not the dicts "
                    f"{nested_module} takes (it may take them with PPO)",
                )
            )
    return pipeline, out


def nested_module_name(
    config: AlgorithmConfig, observation_space: gym.Space[Any], action_space: gym.Space[Any], module_ids: Sequence[str]
) -> str | None:
    """The class name of the modules ``module_ids`` of ``config`` when all of them take Dict/Tuple
    observations as they are (``RLModule.takes_nested_observations``), else ``None``."""
    specs = module_specs_from_config(config, observation_space, action_space)
    classes = {specs[module_id].module_class for module_id in dict.fromkeys(module_ids) if module_id in specs}
    if not classes or not all(getattr(cls, "takes_nested_observations", False) is True for cls in classes):
        return None
    return " and ".join(sorted(cls.__qualname__ for cls in classes if cls is not None))


def _unflattened(space: gym.Space[Any], why: str) -> str:
    return (
        f"The observation space {space} reaches the module unflattened, and {why}. Flatten it: "
        "config.env_runners(env_to_module_connector=functools.partial(FlattenObservations)) with "
        "FlattenObservations from cairn.rl.connectors.env_to_module (RLlib's piece of that name)."
    )


def build_module_to_env(
    config: AlgorithmConfig,
    observation_space: gym.Space[Any],
    action_space: gym.Space[Any],
    *,
    env: Any = None,
    multi_agent: bool = False,
) -> ConnectorPipeline:
    """The module-to-env pipeline of one space pair: the pieces of ``config.module_to_env_connector``,
    then :class:`ClipActions` for a Box action space (arguments as :func:`build_env_to_module`)."""
    spaces = {"__env__": (observation_space, action_space), "__env_single__": (observation_space, action_space)}
    pieces = _pieces(config, "module_to_env_connector", (env,), (spaces, "cpu"))
    pipeline = ConnectorPipeline()
    _chain(pipeline, pieces, observation_space, action_space)
    if isinstance(action_space, gym.spaces.Box):
        pipeline.append(ClipActions.for_space(action_space))
    return pipeline


def check_learner_connector(
    config: AlgorithmConfig, env_to_module: ConnectorPipeline, observation_space: gym.Space[Any], action_space: Any
) -> None:
    """Accept ``config.learner_connector`` only as what cairn's learners already do (see FrameStackingLearner).

    Raises:
        ValueError: A learner piece other than ``FrameStackingLearner``, or one without an
            env-to-module ``FrameStackingEnvToModule`` of the same ``num_frames``.
    """
    pieces = _pieces(config, "learner_connector", (observation_space, action_space))
    stackers = [p.num_frames for p in env_to_module.connectors if isinstance(p, FrameStackingEnvToModule)]
    for piece in pieces:
        if not isinstance(piece, FrameStackingLearner):
            raise ValueError(
                f"learner_connector gives a {type(piece).__qualname__}: cairn's learners train on the batches the "
                "env runners made (the module's input, as it acted), and a learner pipeline that changes them is "
                "not implemented. Put the transformation in env_to_module_connector instead."
            )
        if piece.num_frames not in stackers:
            raise ValueError(
                f"learner_connector gives FrameStackingLearner(num_frames={piece.num_frames}) but the env-to-module "
                f"pipeline stacks {stackers or 'no'} frames. cairn's batches hold the env runner's stacks, so the "
                "learner piece only confirms them: pair it with env_to_module_connector="
                f"functools.partial(FrameStackingEnvToModule, num_frames={piece.num_frames})."
            )
