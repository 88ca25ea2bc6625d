"""Connector pipelines between environments and modules, and cairn's two built-in pieces.

A pipeline (:class:`ConnectorPipeline`) runs a batch through its pieces on its way
from the environments to the module (``env_to_module_connector``: observation
filters, frame stacks) or from the module to the environments
(``module_to_env_connector``: action clipping). Every piece is a
:class:`~cairn.rl.connectors.connector_v2.ConnectorV2` called as RLlib calls it
(``piece(rl_module=, batch=, episodes=, explore=, shared_data=, metrics=, **kwargs)``), and so
is the pipeline. Every piece is a ``Checkpointable``; a pipeline is one too, with each
piece a component named by the piece's ``name`` (its class name), so a checkpoint
reads ``env_runner/env_to_module_connector/MeanStdFilter/``.

The running mean/variance of :class:`MeanStdFilter` is plain array math
(:func:`normalize`, Chan et al.'s combination of ``(count, mean, m2)``), which the
piece uses and the exporter bakes into a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn import Checkpointable
from cairn.errors import IncompatibleCheckpointError
from cairn.rl._aliases import register_old_paths
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.utils._util import (
    Names,
    check_component_name,
)
from cairn.state_checks import ArrayField, Schema, count

__all__ = ["MAX_FILTER_SIZE", "ClipActions", "ConnectorPipeline", "MeanStdFilter", "normalize"]

MAX_FILTER_SIZE = 1 << 24
"""The most numbers one observation a :class:`MeanStdFilter` normalises may hold (an 84x84x4 frame
holds 28,224). Its ``shape`` may come from a checkpoint's recorded config or constructor arguments,
and ``shape=[10**6, 10**6]`` would allocate terabytes before any check."""

Array = npt.NDArray[Any]


class MeanStdFilter(ConnectorV2):
    """Normalises observations by their running mean and standard deviation.

    Statistics are kept in float64 with Chan et al.'s parallel update (so
    a batch update is exact and order-stable) and can be merged across
    env runners with :meth:`merge_states`. State: ``count`` (int), ``mean``
    and ``m2`` (float64 arrays; variance = m2 / count). Called with ``update=False``
    it normalises without changing its statistics.

    Args:
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.
        shape: Shape of one observation; left out, the pipeline builder gives the
            shape of the filter's input space.
        clip: Normalised values are clipped to ``[-clip, clip]``.
        epsilon: Added to the standard deviation.
        multi_agent: RLlib's flag, accepted for its signature (pipelines are per module).
    """

    RUNNER_LOCAL_STATE: ClassVar[bool] = False  # statistics of all runners' data, merged by the group

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        shape: Sequence[int] | None = None,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        multi_agent: bool = False,
    ) -> None:
        # multi_agent: RLlib's flag (``MeanStdFilter(multi_agent=True)``); cairn builds one pipeline per
        # module from one space, so the filter works the same either way and does not record it.
        del multi_agent
        # Without a shape (RLlib's ``MeanStdFilter()`` in a connector factory), the pipeline
        # builder gives it the shape of its input space (set_input_spaces) before any data.
        self._shape_given = shape is not None
        self.shape = _filter_shape(shape) if shape is not None else ()
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.count = 0
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.m2 = np.zeros(self.shape, dtype=np.float64)
        # Statistics of the data seen since the last pop_delta (not part of the state).
        self._delta = _empty_stats(self.shape)
        super().__init__(input_observation_space, input_action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """Take the shape of the input space when none was given; it must be an array space of that shape.

        Raises:
            ValueError: A Dict or Tuple space (flatten it first), or another shape than the one given.
        """
        if input_observation_space.shape is None or isinstance(
            input_observation_space, gym.spaces.Dict | gym.spaces.Tuple
        ):
            raise ValueError(
                f"MeanStdFilter normalises arrays, but its input space is {input_observation_space}. Put "
                "cairn.rl.connectors.env_to_module.FlattenObservations before it (env_to_module_connector), or set "
                "observation_filter=None."
            )
        shape = _filter_shape(input_observation_space.shape)
        if not self._shape_given:
            self.shape, self._shape_given = shape, True
            self.count = 0
            self.mean = np.zeros(shape, dtype=np.float64)
            self.m2 = np.zeros(shape, dtype=np.float64)
            self._delta = _empty_stats(shape)
        elif shape != self.shape:
            raise ValueError(f"MeanStdFilter(shape={list(self.shape)}) is given observations of shape {list(shape)}.")
        return input_observation_space

    @property
    def var(self) -> npt.NDArray[np.float64]:
        """The running (population) variance; ones before any data."""
        if self.count < 2:
            return np.ones(self.shape, dtype=np.float64)
        out: npt.NDArray[np.float64] = self.m2 / self.count
        return out

    def update(self, batch: Array) -> None:
        """Add a batch ``[B, *shape]`` to the statistics."""
        batch64 = np.asarray(batch, dtype=np.float64).reshape((-1, *self.shape))
        n = batch64.shape[0]
        if n == 0:
            return
        batch_mean = batch64.mean(axis=0)
        batch_stats = (n, batch_mean, ((batch64 - batch_mean) ** 2).sum(axis=0))
        self.count, self.mean, self.m2 = _combine((self.count, self.mean, self.m2), batch_stats)
        self._delta = _combine(self._delta, batch_stats)

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        metrics: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Update the statistics with ``batch["obs"]`` (unless ``update=False``), then normalise it (float32)."""
        obs = batch["obs"]
        if kwargs.get("update", True):
            self.update(obs)
        batch["obs"] = normalize(obs, self.mean, self.var, epsilon=self.epsilon, clip=self.clip)
        return batch

    @staticmethod
    def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Combine the statistics of filters that saw disjoint data.

        Args:
            states: States from :meth:`get_state` of filters with the same shape.

        Returns:
            One state whose statistics are those of all the data together.
        """
        if not states:
            raise ValueError("merge_states needs at least one state.")
        mean = np.zeros_like(np.asarray(states[0]["mean"], dtype=np.float64))
        count, m2 = 0, np.zeros_like(mean)
        for state in states:
            count, mean, m2 = _combine(
                (count, mean, m2),
                (
                    int(state["count"]),
                    np.asarray(state["mean"], dtype=np.float64),
                    np.asarray(state["m2"], dtype=np.float64),
                ),
            )
        return {"count": count, "mean": mean, "m2": m2}

    def pop_delta(self) -> dict[str, Any]:
        """``{"count", "mean", "m2"}`` of the observations seen since the last call."""
        count, mean, m2 = self._delta
        self._delta = _empty_stats(self.shape)
        return {"count": int(count), "mean": mean.copy(), "m2": m2.copy()}

    def merge_delta(self, delta: Mapping[str, Any]) -> None:
        """Combine another runner's delta into the statistics (exact, Chan et al.)."""
        self.count, self.mean, self.m2 = _combine((self.count, self.mean, self.m2), _stats_of(delta, self.shape))

    def set_synced_state(self, state: dict[str, Any]) -> None:
        """Statistics := the group's merged ``state`` plus what this filter saw since it last reported."""
        pending = self._delta
        self.set_state(state)
        self._delta = pending
        self.count, self.mean, self.m2 = _combine((self.count, self.mean, self.m2), pending)

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"count": int, "mean": float64 array, "m2": float64 array}`` (copies)."""
        return {"count": int(self.count), "mean": self.mean.copy(), "m2": self.m2.copy()}

    # No get_state_buffers: a restore reads the statistics into fresh arrays, so that check_state sees
    # their values (a NaN mean, a negative m2) before any live array changes; set_state then copies
    # them into the live arrays (their identity stays, as a read in place would keep it).

    @property
    def state_schema(self) -> Schema:
        """What a saved state holds: a count, and finite statistics of this filter's shape (``m2`` >= 0)."""
        return Schema(
            {
                "count": count,
                "mean": ArrayField(shape=self.shape, finite=True),
                "m2": ArrayField(shape=self.shape, finite=True, low=0),
            },
            unfit="the checkpoint was taken on another environment.",
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load statistics; keys missing from ``state`` are left as they are.

        Raises:
            IncompatibleCheckpointError, CorruptCheckpointError: What :attr:`state_schema` refuses;
                the filter is left as it was.
        """
        read = self.state_schema.read(state, where="MeanStdFilter")
        arrays = {key: np.asarray(state[key], dtype=np.float64) for key in ("mean", "m2") if key in state}
        for key, value in arrays.items():
            getattr(self, key)[...] = value  # into the live arrays (same shape, checked above)
        if "count" in read:
            self.count = read["count"]
        # A restored state starts a new timeline: data seen before it is not reported.
        self._delta = _empty_stats(self.shape)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((), {"shape": ..., "clip": ..., "epsilon": ...})``."""
        return (), {"shape": list(self.shape), "clip": self.clip, "epsilon": self.epsilon}


_Stats = tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]


def normalize(
    rows: Array, mean: npt.NDArray[np.float64], var: npt.NDArray[np.float64], *, epsilon: float, clip: float
) -> npt.NDArray[np.float32]:
    """``(rows - mean) / (sqrt(var) + epsilon)`` clipped to ``[-clip, clip]``, computed in float64, as float32."""
    std = np.sqrt(var) + epsilon
    out = np.clip((np.asarray(rows, dtype=np.float64) - mean) / std, -clip, clip)
    return out.astype(np.float32)


def _filter_shape(shape: Any) -> tuple[int, ...]:
    """A filter's observation shape: non-negative ints holding at most :data:`MAX_FILTER_SIZE` numbers.

    Raises:
        ValueError: Another shape (it may come from a checkpoint's recorded arguments).
    """
    dims = list(shape) if isinstance(shape, list | tuple) else None
    if dims is None or any(not count.fits(d) for d in dims):
        raise ValueError(f"MeanStdFilter(shape={shape!r:.80}) needs a list of non-negative ints.")
    size = math.prod(int(d) for d in dims)
    if size > MAX_FILTER_SIZE:
        raise ValueError(
            f"MeanStdFilter(shape={[int(d) for d in dims]}) normalises {size} numbers per observation, more than "
            f"{MAX_FILTER_SIZE} (MAX_FILTER_SIZE); a recorded shape that large is a damaged or hostile checkpoint."
        )
    return tuple(int(d) for d in dims)


def _empty_stats(shape: tuple[int, ...]) -> _Stats:
    return 0, np.zeros(shape, dtype=np.float64), np.zeros(shape, dtype=np.float64)


def _stats_of(state: Mapping[str, Any], shape: tuple[int, ...]) -> _Stats:
    mean = np.asarray(state["mean"], dtype=np.float64)
    m2 = np.asarray(state["m2"], dtype=np.float64)
    if mean.shape != shape or m2.shape != shape:
        raise ValueError(f"MeanStdFilter statistics of shape {mean.shape} cannot merge into a filter of shape {shape}.")
    return int(state["count"]), mean, m2


def _combine(
    a: tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]],
    b: tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]],
) -> tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Chan et al.'s parallel combination of (count, mean, M2) statistics."""
    n_a, mean_a, m2_a = a
    n_b, mean_b, m2_b = b
    if n_b == 0:
        return n_a, mean_a.copy(), m2_a.copy()
    if n_a == 0:
        return n_b, mean_b.copy(), m2_b.copy()
    n = n_a + n_b
    delta = mean_b - mean_a
    mean = mean_a + delta * (n_b / n)
    m2 = m2_a + m2_b + delta**2 * (n_a * n_b / n)
    return n, mean, m2


class ClipActions(ConnectorV2):
    """Clips continuous actions (``batch["actions"]``) to the bounds of a ``Box`` action space.

    The module keeps the unclipped sample (its log-probability is what the
    loss needs); only what the environment receives is clipped.

    Args:
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.
        low: Lower bounds.
        high: Upper bounds.
    """

    RUNNER_LOCAL_STATE: ClassVar[bool] = False  # stateless: nothing of its runner's own

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        low: Sequence[float] | Array,
        high: Sequence[float] | Array,
    ) -> None:
        self.low = np.asarray(low, dtype=np.float32)
        self.high = np.asarray(high, dtype=np.float32)
        super().__init__(input_observation_space, input_action_space)

    @classmethod
    def for_space(cls, space: gym.spaces.Box) -> ClipActions:
        """A clipper for the bounds of ``space``."""
        return cls(low=space.low, high=space.high)

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        metrics: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Clip ``batch["actions"]`` ``[B, act_dim]`` to the bounds (float32)."""
        batch["actions"] = np.clip(np.asarray(batch["actions"], dtype=np.float32), self.low, self.high)
        return batch

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``((), {"low": array, "high": array})``."""
        return (), {"low": self.low.copy(), "high": self.high.copy()}


class ConnectorPipeline(Checkpointable):
    """An ordered list of connector pieces, called as RLlib calls a pipeline (:meth:`__call__`).

    Args:
        connectors: ``(ConnectorV2 class, keyword arguments)`` pairs, built in
            order. (Specs rather than objects so that the pipeline can be
            rebuilt by ``from_checkpoint``.)

    Raises:
        ValueError: Two connectors with the same name, or an invalid name.
    """

    # The layout of this class's own state; raise it (and implement upgrade_state) when it changes.
    STATE_VERSION = 1

    def __init__(self, connectors: Sequence[tuple[type[ConnectorV2], Mapping[str, Any]]] = ()) -> None:
        self.connectors: list[ConnectorV2] = []
        for cls, kwargs in connectors:
            # The pairs may come from a checkpoint's ctor.json: call nothing but a ConnectorV2 class
            # (numpy.memmap(mode="w+"), say, would truncate a file before any check ran).
            if not (isinstance(cls, type) and issubclass(cls, ConnectorV2)):
                raise TypeError(
                    f"ConnectorPipeline: {cls!r} is not a ConnectorV2 class; a pipeline builds only connector pieces."
                )
            self.append(cls(**dict(kwargs)))

    def append(self, connector: ConnectorV2) -> None:
        """Add ``connector`` at the end of the pipeline."""
        check_component_name(connector.name, what="Connector name")
        if any(c.name == connector.name for c in self.connectors):
            raise ValueError(
                f"The pipeline already has a connector named {connector.name!r}; names must "
                "be unique because each is a checkpoint folder."
            )
        self.connectors.append(connector)

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        metrics: Any = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Run ``batch`` through every piece in order, each called as RLlib calls it; return the batch.

        Args:
            rl_module: The runner's module (given to every piece).
            batch: ``{"obs": rows}`` or ``{"actions": rows}`` (see
                :mod:`~cairn.rl.connectors.connector_v2`); the pieces change it.
            episodes: ``None`` in cairn's runners (see ``slots`` and ``episode_starts``).
            explore: Whether the runner explores.
            shared_data: A dict the pieces of this call share (a new one when left out).
            metrics: The runner's metrics logger (given to every piece; ``None`` outside a runner).
            kwargs: ``update``, ``slots``, ``episode_starts``, ... (given to every piece).

        Raises:
            TypeError: A piece returned something other than the batch dict.
            ValueError: A piece returned observations of another shape than its
                ``recompute_output_observation_space`` said.
        """
        if not self.connectors:  # the runners call every pipeline every step, most of them empty
            return batch
        shared = {} if shared_data is None else shared_data
        for piece in self.connectors:
            out = piece(
                rl_module=rl_module,
                batch=batch,
                episodes=episodes,
                explore=explore,
                shared_data=shared,
                metrics=metrics,
                **kwargs,
            )
            if not isinstance(out, dict):
                raise TypeError(
                    f"{piece.name}.__call__ returned {type(out).__name__}, not the batch dict; return the batch "
                    "you were given (changed)."
                )
            space = piece.observation_space
            obs = out.get("obs")
            if space is not None and isinstance(obs, np.ndarray) and space.shape not in (None, obs.shape[1:]):
                raise ValueError(
                    f"{piece.name} returned observations of shape {obs.shape[1:]}, but its "
                    f"recompute_output_observation_space said {space.shape}; make them agree."
                )
            batch = out
        return batch

    def __getitem__(self, name: str) -> ConnectorV2:
        for connector in self.connectors:
            if connector.name == name:
                return connector
        raise KeyError(f"No connector {name!r}; the pipeline has {[c.name for c in self.connectors]}.")

    def __len__(self) -> int:
        return len(self.connectors)

    def get_checkpointable_components(self) -> list[tuple[str, Checkpointable]]:
        """Each connector, named by its ``name``."""
        return [(c.name, c) for c in self.connectors]

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """Connector name -> connector state, for the selected connectors."""
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        """Forward each connector's state; connectors missing from ``state`` are left as is."""
        self._set_components_state(state)

    def pop_deltas(self) -> dict[str, dict[str, Any]]:
        """Connector name -> delta (:meth:`ConnectorV2.pop_delta`) of each connector that has one.

        Keyed by name, not position, so that merging never mixes up connectors,
        whatever stateless connectors stand before a filter.
        """
        out: dict[str, dict[str, Any]] = {}
        for connector in self.connectors:
            delta = connector.pop_delta()
            if delta is not None:
                out[connector.name] = delta
        return out

    def merge_deltas(self, deltas: Mapping[str, Mapping[str, Any]]) -> None:
        """Add deltas (connector name -> delta, from another pipeline's :meth:`pop_deltas`).

        Raises:
            ValueError: A delta for a connector this pipeline does not have.
        """
        names = [c.name for c in self.connectors]
        for name, delta in deltas.items():
            if name not in names:
                raise ValueError(f"A delta for connector {name!r}, which this pipeline ({names}) does not have.")
            self[name].merge_delta(delta)

    def set_synced_states(self, state: Mapping[str, Any]) -> None:
        """Take the group's merged states (connector name -> state, as :meth:`get_state` gives).

        Connectors with :attr:`ConnectorV2.RUNNER_LOCAL_STATE` keep their own.
        """
        for connector in self.connectors:
            if connector.name in state and not connector.RUNNER_LOCAL_STATE:
                connector.set_synced_state(dict(state[connector.name]))

    def get_runner_local_states(self) -> dict[str, Any]:
        """Connector name -> state of the connectors whose state is their runner's own (see RUNNER_LOCAL_STATE)."""
        states = {c.name: c.get_state() for c in self.connectors if c.RUNNER_LOCAL_STATE}
        return {name: state for name, state in states.items() if state}

    def set_runner_local_states(self, states: Mapping[str, Any]) -> None:
        """Load :meth:`get_runner_local_states` of the same pipeline; names it does not hold are ignored."""
        if not isinstance(states, Mapping):
            raise IncompatibleCheckpointError(f"Runner-local connector states must be a dict, got {type(states)}.")
        for connector in self.connectors:
            state = states.get(connector.name)
            if connector.RUNNER_LOCAL_STATE and isinstance(state, Mapping):
                connector.set_state(dict(state))

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``(([(class, kwargs), ...],), {})``."""
        return ([(type(c), c.get_ctor_args_and_kwargs()[1]) for c in self.connectors],), {}


register_old_paths(ConnectorPipeline, MeanStdFilter, ClipActions)
