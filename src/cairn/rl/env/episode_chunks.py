"""RLlib's chunk operations on a ``SingleAgentEpisode``: buffer views, slices, ``cut``, ``concat_episode``,
``to_numpy`` and the setters (and the spaces and ``get_duration_s``).

RLlib's env runners hand out an episode in chunks (``cut()`` continues one in the next
``sample()``; ``concat_episode`` joins two chunks of one episode again) and learners slice
them (``episode[10:20]``). :class:`EpisodeChunks` gives cairn's
:class:`~cairn.rl.env.episodes.SingleAgentEpisode` those operations with RLlib's semantics:

- ``episode.observations`` (``infos``, ``actions``, ``rewards``) is a :class:`LookbackList`:
  the episode's part (lookback buffer excluded), with ``.data`` (all items, lookback
  included) and ``.lookback`` (how many of them are lookback), as RLlib's
  ``InfiniteLookbackBuffer`` reads. It is a copy: change the episode through the setters.
- ``episode[a:b]`` / ``slice(slice(a, b), len_lookback_buffer=None)`` is the chunk of steps
  ``a`` to ``b`` (Python's bounds, clipped to the episode), keeping up to the episode's own
  lookback length (or the given one) of the steps before it as its lookback buffer;
  ``t_started`` counts on from the episode's, and only a chunk that reaches the end keeps
  the episode's end flags.
- ``cut(len_lookback_buffer=0)``: the chunk that continues the episode (same ``id_``, its last
  observation and info, ``t_started`` = ``t``).
- ``to_numpy()``: the getters return numpy arrays (stacked where the items are numbers or
  arrays of one shape; infos stay lists), and the episode takes no more steps.

What differs from RLlib: a refused operation (chunks that do not follow each other, a
missing extra model output) raises :class:`EpisodeError`, a ``ValueError`` that is also an
``AssertionError`` (RLlib asserts); ``to_numpy`` changes what the getters return, not how
the items are stored; a chunk's ``custom_data`` and temporary data start empty.

This module imports nothing of ``cairn.rl`` (``episodes.py``, which both env runners import,
builds on it).
"""

from __future__ import annotations

import builtins
import copy
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

__all__ = ["EpisodeChunks", "EpisodeError", "LookbackList", "as_array"]

Indices = int | builtins.slice | Sequence[int] | None


class EpisodeError(ValueError, AssertionError):
    """An episode refused an operation (RLlib asserts; so an ``AssertionError`` as well as a ``ValueError``)."""


def as_array(items: Sequence[Any]) -> Any:
    """``items`` as one numpy array where they are numbers or arrays of one shape; else as a list."""
    values = list(items)
    if all(isinstance(v, np.ndarray | np.generic | int | float) for v in values):
        arrays = [np.asarray(v) for v in values]
        if len({a.shape for a in arrays}) <= 1:
            return np.asarray(arrays)
    return values


class LookbackList(list[Any]):
    """One buffer of an episode as RLlib's tests read it: the list of the episode's items (its lookback
    buffer excluded), with ``data`` (every item, lookback included; an array for a numpy'ized episode)
    and ``lookback`` (how many of ``data`` are lookback). A copy: the episode's setters change the episode.
    """

    def __init__(self, items: Sequence[Any], lookback: int, *, as_numpy: bool) -> None:
        super().__init__(items[lookback:])
        self.lookback = lookback
        self.data: Any = as_array(items) if as_numpy else list(items)


def _bounds(slice_: builtins.slice, length: int) -> tuple[int, int]:
    """``slice_``'s start and stop within ``length`` steps, Python's way (negative from the end, clipped)."""
    if slice_.step not in (None, 1):
        raise EpisodeError(f"an episode slice takes step 1 (got {slice_.step}); slice the getters' results instead.")

    def bound(value: int | None, default: int) -> int:
        if value is None:
            return default
        return min(max(value if value >= 0 else length + value, 0), length)

    start = bound(slice_.start, 0)
    return start, max(start, bound(slice_.stop, length))


class EpisodeChunks:
    """RLlib's chunk operations, mixed into :class:`~cairn.rl.env.episodes.SingleAgentEpisode` (see the module)."""

    id_: str
    t_started: int
    is_terminated: bool
    is_truncated: bool
    keep_history: bool
    custom_data: dict[str, Any]
    _observations: list[Any]
    _infos: list[dict[str, Any]]
    _actions: list[Any]
    _rewards: list[float]
    _extra: dict[str, list[Any]]
    _temporary: dict[str, list[Any]]
    _lookback: int
    _length: int
    _return: float
    _is_numpy: bool
    _observation_space: Any
    _action_space: Any
    _start_time: float | None
    _last_step_time: float | None

    # ------------------------------------------------------------------ views

    @property
    def observation_space(self) -> Any:
        """The observations' space (for reference; None when not given)."""
        return self._observation_space

    @observation_space.setter
    def observation_space(self, value: Any) -> None:
        self._observation_space = value

    @property
    def action_space(self) -> Any:
        """The actions' space (for reference; None when not given)."""
        return self._action_space

    @action_space.setter
    def action_space(self, value: Any) -> None:
        self._action_space = value

    def get_duration_s(self) -> float:
        """Seconds from :meth:`add_env_reset` (or the first :meth:`add_env_step`) to the latest step (RLlib's)."""
        if self._start_time is None or self._last_step_time is None:
            return 0.0
        return self._last_step_time - self._start_time

    @property
    def is_numpy(self) -> bool:
        """Whether :meth:`to_numpy` was called (the getters return arrays; no more steps)."""
        return self._is_numpy

    def to_numpy(self) -> Self:
        """Make the getters return numpy arrays and close the episode to new steps (RLlib's ``to_numpy``)."""
        self._is_numpy = True
        return self

    @property
    def observations(self) -> LookbackList:
        """The observations (the episode's, one more than its steps; ``.data`` with the lookback buffer)."""
        return LookbackList(self._observations, self._lookback, as_numpy=self._is_numpy)

    @property
    def infos(self) -> LookbackList:
        """The infos (the episode's, one more than its steps; ``.data`` with the lookback buffer)."""
        return LookbackList(self._infos, self._lookback, as_numpy=False)

    @property
    def actions(self) -> LookbackList:
        """The actions, one per step (``.data`` with the lookback buffer)."""
        return LookbackList(self._actions, self._lookback, as_numpy=self._is_numpy)

    @property
    def rewards(self) -> LookbackList:
        """The rewards, one per step (``.data`` with the lookback buffer)."""
        return LookbackList(self._rewards, self._lookback, as_numpy=self._is_numpy)

    # ------------------------------------------------------------------ chunks

    def _require_history(self, what: str) -> None:
        if not self.keep_history:
            raise EpisodeError(f"Episode {self.id_!r} keeps no per-step history: it cannot {what}.")

    def _chunk(self, first: int, stop: int, keep: int, *, ends: bool) -> Self:
        """The chunk of steps at positions ``[first, stop)`` with ``keep`` steps before it as lookback."""
        low = first - keep
        chunk = copy.copy(self)
        chunk._observations = list(self._observations[low : stop + 1])
        chunk._infos = [dict(info) for info in self._infos[low : stop + 1]]
        chunk._actions = list(self._actions[low:stop])
        chunk._rewards = list(self._rewards[low:stop])
        # A key without data in the chunk is dropped: the chunk's next steps may give other outputs.
        chunk._extra = {key: kept for key, values in self._extra.items() if (kept := list(values[low:stop]))}
        chunk._lookback, chunk._length = keep, stop - first
        chunk._return = float(sum(chunk._rewards[keep:]))
        chunk.t_started = self.t_started + first - self._lookback
        chunk.is_terminated = self.is_terminated and ends
        chunk.is_truncated = self.is_truncated and ends
        chunk.custom_data, chunk._temporary = {}, {}
        return chunk

    def slice(self, slice_: builtins.slice, *, len_lookback_buffer: int | None = None) -> Self:
        """The chunk of steps ``slice_`` selects (RLlib's ``episode.slice``; ``episode[a:b]`` is the same).

        Args:
            slice_: Steps of the episode (lookback excluded); Python's bounds, clipped; step 1.
            len_lookback_buffer: Steps before the chunk to keep as its lookback buffer (default: the
                episode's own lookback length; fewer where the data holds fewer).

        Raises:
            EpisodeError: A step other than 1, or an episode without per-step history.
        """
        self._require_history("be sliced")
        start, stop = _bounds(slice_, self._length)
        lookback = self._lookback if len_lookback_buffer is None else int(len_lookback_buffer)
        if lookback < 0:
            raise EpisodeError(f"len_lookback_buffer={lookback} must be >= 0.")
        first = self._lookback + start
        return self._chunk(first, self._lookback + stop, min(lookback, first), ends=stop == self._length)

    def __getitem__(self, item: builtins.slice) -> Self:
        if not isinstance(item, builtins.slice):
            raise TypeError(f"episode[...] takes a slice of steps (got {type(item).__name__}); use the getters.")
        return self.slice(item)

    def cut(self, len_lookback_buffer: int = 0) -> Self:
        """The chunk that continues this episode (RLlib's ``cut``): same ``id_``, no steps yet, this episode's
        last observation and info (and ``len_lookback_buffer`` steps before them as lookback).

        Raises:
            EpisodeError: A negative ``len_lookback_buffer``, or an episode without per-step history.
        """
        self._require_history("be cut")
        if len_lookback_buffer < 0:
            raise EpisodeError(f"len_lookback_buffer={len_lookback_buffer} must be >= 0.")
        end = len(self._actions)
        return self._chunk(end, end, min(int(len_lookback_buffer), end), ends=False)

    def concat_episode(self, other: EpisodeChunks) -> None:
        """Append ``other``, the chunk that continues this one (RLlib's ``concat_episode``).

        Raises:
            EpisodeError: ``other`` has another ``id_``, does not start at this chunk's ``t``, this chunk
                is done, or their extra model outputs differ in keys (nothing is changed then).
        """
        self._require_history("be concatenated")
        other._require_history("be concatenated")
        if other.id_ != self.id_:
            raise EpisodeError(f"Episode {self.id_!r} cannot take a chunk of episode {other.id_!r}.")
        if self.is_terminated or self.is_truncated:
            raise EpisodeError(f"Episode {self.id_!r} is done: no chunk can follow it.")
        if other.t_started != self.t_started + self._length:
            raise EpisodeError(
                f"Episode {self.id_!r} ends at t={self.t_started + self._length}; the chunk starts at "
                f"t={other.t_started}: chunks must follow each other."
            )
        if self._actions and other._length and set(self._extra) != set(other._extra):
            raise EpisodeError(
                f"Episode {self.id_!r} has extra model outputs {sorted(self._extra)}, the chunk "
                f"{sorted(other._extra)}: they must be the same."
            )
        low = other._lookback
        self._observations.extend(other._observations[low + 1 :])
        self._infos.extend(dict(info) for info in other._infos[low + 1 :])
        self._actions.extend(other._actions[low:])
        self._rewards.extend(other._rewards[low:])
        for key, values in other._extra.items():
            self._extra.setdefault(key, []).extend(values[low:])
        self._length += other._length
        self._return += other._return
        self.is_terminated, self.is_truncated = other.is_terminated, other.is_truncated

    # ------------------------------------------------------------------ setters

    def _positions(self, count: int, indices: Indices, neg_index_as_lookback: bool) -> list[int] | int:
        """Positions in a buffer of ``count`` items that ``indices`` address (as the getters read them)."""

        def position(i: int) -> int:
            return self._lookback + i if i >= 0 or neg_index_as_lookback else count + i

        def checked(p: int) -> int:
            if not 0 <= p < count:
                raise IndexError(f"Episode {self.id_!r}: index {p - self._lookback} is outside its items.")
            return p

        if indices is None:
            return list(range(self._lookback, count))
        if isinstance(indices, int):
            return checked(position(indices))
        if isinstance(indices, builtins.slice):
            start = self._lookback if indices.start is None else position(indices.start)
            stop = count if indices.stop is None else position(indices.stop)
            return [checked(p) for p in range(start, stop, indices.step or 1)]
        return [checked(position(int(i))) for i in indices]

    def _set(self, items: list[Any], new_data: Any, at_indices: Indices, neg_index_as_lookback: bool) -> None:
        self._require_history("take new data")
        positions = self._positions(len(items), at_indices, neg_index_as_lookback)
        if isinstance(positions, int):
            items[positions] = new_data
            return
        values = list(new_data)
        if len(values) != len(positions):
            raise IndexError(
                f"Episode {self.id_!r}: {len(values)} new items for {len(positions)} indices; give one per index."
            )
        for p, value in zip(positions, values, strict=True):
            items[p] = value

    def set_observations(
        self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite observations (``at_indices`` as the getters read them; a list or slice takes one item each).

        Raises:
            IndexError: An index outside the data, or a count of new items that differs from the indices'.
        """
        self._set(self._observations, new_data, at_indices, neg_index_as_lookback)

    def set_actions(self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrite actions (see :meth:`set_observations`)."""
        self._set(self._actions, new_data, at_indices, neg_index_as_lookback)

    def set_rewards(self, *, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False) -> None:
        """Overwrite rewards (see :meth:`set_observations`); ``get_return()`` follows."""
        self._set(self._rewards, new_data, at_indices, neg_index_as_lookback)
        self._rewards[:] = [float(r) for r in self._rewards]
        self._return = float(sum(self._rewards[self._lookback :]))

    def set_extra_model_outputs(
        self, *, key: str, new_data: Any, at_indices: Indices = None, neg_index_as_lookback: bool = False
    ) -> None:
        """Overwrite the extra model output ``key`` (see :meth:`set_observations`).

        Raises:
            EpisodeError: The episode has no output ``key``.
        """
        if key not in self._extra:
            raise EpisodeError(f"Episode {self.id_!r} has no extra model output {key!r}; it has {sorted(self._extra)}.")
        self._set(self._extra[key], new_data, at_indices, neg_index_as_lookback)
