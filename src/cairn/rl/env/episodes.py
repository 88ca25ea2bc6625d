"""Episodes as callbacks see them: RLlib's ``SingleAgentEpisode`` API, kept whole and checkpointed.

An env runner whose callbacks override an episode hook (``on_episode_start``,
``on_episode_step``, ``on_episode_end``, a class's method or a function) keeps
one :class:`SingleAgentEpisode` per sub-environment in an :class:`EpisodeTracker`,
and passes it to every hook of that episode. The hooks see RLlib's names:
``custom_data`` (a dict the callbacks fill), ``id_``, ``get_observations()``,
``get_actions()``, ``get_rewards()``, ``get_infos()``, ``get_return()``,
``len(episode)``, ``is_done``, ``is_terminated``, ``is_truncated``, ``module_for()``,
``add_temporary_timestep_data()`` / ``get_temporary_timestep_data()``.

What differs from RLlib:

- cairn's runner keeps the whole episode, not a chunk per ``sample()``: the
  history of an episode lives until it ends, so its memory is bounded by the
  environment's episode length (observations, actions, rewards, infos of every
  step; CartPole: about 100 bytes a step). A runner whose callbacks override
  no episode hook keeps no episode objects and does no per-step work.
- Everything an episode in flight holds (``custom_data``, its history, its id,
  the temporary data) is in the env runner's checkpoint (``env/episode_api``)
  and restored exactly: save mid-episode, restore in a new process, and
  ``on_episode_end`` sees the ``custom_data`` the earlier hooks put there.
  Values there must be plain data a checkpoint holds without pickle (None,
  bool, int, float, str, bytes, numpy arrays and scalars, and lists, tuples
  and dicts with str/int keys of them); another value is refused at save time
  with an error naming the key and the episode.
- ``id_`` is deterministic (runner index, sub-environment, episode number), so
  that a run and its resumed copy log the same ids.

This module imports nothing of ``cairn.rl`` but :mod:`cairn.rl.env.episode_chunks` (RLlib's slices, ``cut``,
``concat_episode``, setters): both env runners import it.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from cairn.rl.env.episode_chunks import EpisodeChunks, as_array

__all__ = [
    "Episode",
    "EpisodeTracker",
    "SingleAgentEpisode",
    "check_episode_data",
    "slot_info",
    "slot_value",
]

Indices = int | slice | Sequence[int] | None


def _pick(
    items: list[Any], indices: Indices, *, lookback: int = 0, neg_index_as_lookback: bool = False, fill: Any = None
) -> Any:
    """RLlib's ``indices`` argument over ``items`` whose first ``lookback`` are a lookback buffer.

    All (None: the episode's part), one (an int: from the episode's start; negative: from the end, or
    into the lookback buffer with ``neg_index_as_lookback``), a slice, or a list of ints. ``fill``
    stands in for positions outside the data (else an int out of range raises ``IndexError`` and a
    slice is cut to the data, as Python's are).
    """

    def position(i: int) -> int:
        return lookback + i if i >= 0 or neg_index_as_lookback else len(items) + i

    def one(p: int) -> Any:
        if 0 <= p < len(items):
            return items[p]
        if fill is None:
            raise IndexError(f"index {p - lookback} is outside the episode's {len(items) - lookback} items")
        return _filled(items, fill)

    if indices is None:
        return list(items[lookback:])
    if isinstance(indices, int):
        return one(position(indices))
    if isinstance(indices, slice):
        start = lookback if indices.start is None else position(indices.start)
        stop = len(items) if indices.stop is None else position(indices.stop)
        positions = range(start, stop, indices.step or 1)
        if fill is None:
            low = 0 if neg_index_as_lookback else lookback
            positions = range(max(start, low), min(stop, len(items)), indices.step or 1)
        return [one(p) for p in positions]
    return [one(position(int(i))) for i in indices]


def _filled(items: list[Any], fill: Any) -> Any:
    """``fill`` in the shape of the items (an array of ``fill`` for array items, RLlib's way)."""
    if items and isinstance(items[0], np.ndarray):
        return np.full_like(items[0], fill)
    return fill


def check_episode_data(value: Any, *, where: str) -> None:
    """Raise ``TypeError`` unless ``value`` is data a checkpoint holds without pickle (see the module docstring)."""
    if value is None or type(value) in (bool, int, float, str, bytes):
        return
    if isinstance(value, np.ndarray) and not value.dtype.hasobject:
        return
    if isinstance(value, np.generic) and not isinstance(value, np.object_):
        return
    if type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_episode_data(item, where=f"{where}[{i}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if not (key is None or type(key) in (str, int)):
                raise TypeError(f"{where} has the key {key!r:.80} ({type(key).__name__}); keys must be str or int.")
            check_episode_data(item, where=f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which a checkpoint cannot hold without "
        "pickle. Keep plain data there (numbers, str, numpy arrays, lists and dicts of them)."
    )


def slot_info(infos: Mapping[str, Any], slot: int) -> dict[str, Any]:
    """The info dict of sub-environment ``slot`` from a gymnasium vector env's batched infos (without ``final_*``)."""
    out: dict[str, Any] = {}
    for key, values in infos.items():
        if key.startswith("_") or key in ("final_obs", "final_info"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not bool(mask[slot]):
            continue
        if isinstance(values, Mapping):  # nested infos (RecordEpisodeStatistics' "episode") batch the same way
            out[key] = slot_info(values, slot)
        else:
            value = values[slot]
            out[key] = value.item() if isinstance(value, np.generic) else value
    return out


def slot_value(batch: Any, slot: int) -> Any:
    """Sub-environment ``slot``'s row of a batched observation, copied (Dict and Tuple spaces batch per key/item)."""
    if isinstance(batch, Mapping):
        return {key: slot_value(value, slot) for key, value in batch.items()}
    if isinstance(batch, tuple):
        return tuple(slot_value(value, slot) for value in batch)
    return copy.deepcopy(batch[slot])


class SingleAgentEpisode(EpisodeChunks):
    """One agent's episode (RLlib's ``SingleAgentEpisode``): built by hand for inference, or by a runner for hooks.

    Built the RLlib way (``cairn.rl.env.single_agent_episode`` is RLlib's import path)::

        episode = SingleAgentEpisode(observations=[obs], observation_space=env.observation_space,
                                     action_space=env.action_space)
        episode.add_env_step(obs, action, reward, terminated=term, truncated=trunc)
        if episode.is_done:
            print(episode.get_return())

    Data given to the constructor is, as in RLlib, a *lookback buffer* by default
    (``len_lookback_buffer="auto"``: all given rewards and actions are history the
    episode can look back into, and ``len(episode)`` starts at 0); give
    ``len_lookback_buffer=0`` for data that is part of the episode. The getters'
    ``indices`` count from the episode's start (lookback excluded); a negative index
    counts from the end, or into the lookback buffer with ``neg_index_as_lookback=True``;
    ``fill`` stands in for what lies outside the data.

    Attributes:
        id_: A unique id (a random hex string unless given; an env runner's is
            ``"<runner>-<env>-<number>"``, stable across a checkpoint).
        env_index: The sub-environment (slot) of the env runner it runs in (0 when built by hand).
        agent_id: The agent (``"default_agent"`` in cairn's single-agent runners), ``str`` or ``int`` as
            the env gives it (RLlib's MultiAgentCartPole numbers agents ``0, 1, ...``); checkpoints keep its type.
        module_id: The module that acts for the agent (None when built by hand without one).
        custom_data: What callbacks keep for the episode (RLlib's ``custom_data``); checkpointed.
        is_terminated: The environment terminated it.
        is_truncated: It was truncated (a time limit).
        t_started: The time step it started at (after its lookback buffer).
        observation_space: The observations' space (for reference; None when not given).
        action_space: The actions' space (for reference; None when not given).

    Raises:
        ValueError: Data whose lengths do not fit (one observation and info more than actions
            and rewards, extra model outputs one per action), or a negative ``len_lookback_buffer``.
    """

    def __init__(
        self,
        id_: str | None = None,
        *,
        observations: Sequence[Any] | None = None,
        observation_space: Any = None,
        infos: Sequence[Mapping[str, Any]] | None = None,
        actions: Sequence[Any] | None = None,
        action_space: Any = None,
        rewards: Sequence[float] | None = None,
        terminated: bool = False,
        truncated: bool = False,
        extra_model_outputs: Mapping[str, Sequence[Any]] | None = None,
        t_started: int | None = None,
        len_lookback_buffer: int | str = "auto",
        agent_id: str | int | None = None,
        module_id: str | None = None,
        multi_agent_episode_id: str | None = None,
        env_index: int = 0,
        keep_history: bool = True,
    ) -> None:
        self.id_ = id_ if id_ is not None else uuid.uuid4().hex
        self.env_index = env_index
        self.agent_id = agent_id
        self.module_id = module_id
        self.multi_agent_episode_id = multi_agent_episode_id
        self._observation_space = observation_space
        self._action_space = action_space
        self.custom_data: dict[str, Any] = {}
        # RLlib's wall-clock times (add_env_reset/add_env_step); a runner's (add_step) stay None: checkpoints repeat.
        self._start_time: float | None = None
        self._last_step_time: float | None = None
        self.is_terminated = bool(terminated)
        self.is_truncated = bool(truncated)
        self.keep_history = keep_history
        self._observations: list[Any] = list(observations or [])
        self._infos: list[dict[str, Any]] = (
            [dict(i) for i in infos] if infos is not None else [{} for _ in self._observations]
        )
        self._actions: list[Any] = list(actions or [])
        self._rewards: list[float] = [float(r) for r in (rewards or [])]
        self._extra: dict[str, list[Any]] = {str(k): list(v) for k, v in (extra_model_outputs or {}).items()}
        if len_lookback_buffer == "auto":
            lookback = len(self._rewards)
        elif isinstance(len_lookback_buffer, int) and not isinstance(len_lookback_buffer, bool):
            if len_lookback_buffer < 0:
                raise ValueError(f"len_lookback_buffer={len_lookback_buffer} must be >= 0 (or 'auto').")
            lookback = min(len_lookback_buffer, len(self._rewards))
        else:
            raise ValueError(f"len_lookback_buffer={len_lookback_buffer!r:.40} must be an int >= 0 or 'auto'.")
        self._lookback = lookback
        self._check_lengths()
        self.t_started = int(t_started or 0)
        self._length = len(self._rewards) - lookback
        self._return = float(sum(self._rewards[lookback:]))
        self._temporary: dict[str, list[Any]] = {}
        self._is_numpy = False

    def _check_lengths(self) -> None:
        n_obs, n_steps = len(self._observations), len(self._rewards)
        extra = {k: len(v) for k, v in self._extra.items()}
        fits = len(self._infos) == n_obs and (
            (n_obs == 0 and n_steps == len(self._actions) == 0 and not any(extra.values()))
            or (n_obs == n_steps + 1 == len(self._actions) + 1 and all(n == n_steps for n in extra.values()))
        )
        if not fits:
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r}: {n_obs} observations, {len(self._infos)} infos, "
                f"{len(self._actions)} actions, {n_steps} rewards and extra model outputs {extra} do not fit: an "
                "episode holds one observation (and info) more than actions and rewards (the reset's), and one "
                "extra model output per action."
            )

    # ------------------------------------------------------------------ RLlib's API

    @property
    def is_done(self) -> bool:
        """Whether it ended (terminated or truncated)."""
        return self.is_terminated or self.is_truncated

    @property
    def is_reset(self) -> bool:
        """Whether it has its first observation (:meth:`add_env_reset`, or given to the constructor)."""
        return bool(self._observations)

    @property
    def episode_return(self) -> float:
        """The sum of its rewards so far (cairn's older name of :meth:`get_return`)."""
        return self._return

    @property
    def length(self) -> int:
        """Its steps so far (cairn's older name of ``len(episode)``)."""
        return self._length

    @property
    def t(self) -> int:
        """The current time step: ``t_started + len(episode)`` (RLlib's ``episode.t``)."""
        return self.t_started + self._length

    def __len__(self) -> int:
        return self._length

    def get_return(self) -> float:
        """The sum of the episode's rewards so far, lookback buffer excluded (RLlib's ``get_return()``)."""
        return self._return

    def env_steps(self) -> int:
        """Its steps so far (RLlib's name; ``len(episode)``)."""
        return self._length

    def agent_steps(self) -> int:
        """Its steps so far (RLlib's name; one agent: ``len(episode)``)."""
        return self._length

    def module_for(self, agent_id: Any = None) -> str | None:
        """The module that acts for the agent (RLlib's ``MultiAgentEpisode.module_for``; here the episode's own)."""
        if agent_id is not None and agent_id != self.agent_id:
            raise KeyError(f"Episode {self.id_!r} is agent {self.agent_id!r}'s, not {agent_id!r}'s.")
        return self.module_id

    def add_env_reset(self, observation: Any, infos: Mapping[str, Any] | None = None) -> None:
        """Record what ``env.reset()`` returned (RLlib's ``add_env_reset``).

        Raises:
            ValueError: The episode already has data.
        """
        if self._observations:
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r} already has {len(self._observations)} observations; "
                "add_env_reset starts an empty episode (make a new one for the next reset)."
            )
        self._observations.append(observation)
        self._infos.append(dict(infos or {}))
        self._start_time = time.perf_counter()

    def add_env_step(
        self,
        observation: Any,
        action: Any,
        reward: float,
        infos: Mapping[str, Any] | None = None,
        *,
        terminated: bool = False,
        truncated: bool = False,
        extra_model_outputs: Mapping[str, Any] | None = None,
    ) -> None:
        """Record what ``env.step(action)`` returned, with the action (RLlib's ``add_env_step``).

        Args:
            observation: The observation after the step.
            action: The action taken.
            reward: The reward of the step.
            infos: The step's info dict.
            terminated: The environment terminated the episode.
            truncated: The episode was truncated.
            extra_model_outputs: The module's other outputs of this step (one value per key).

        Raises:
            ValueError: The episode is done, has no first observation, or the extra model
                outputs' keys differ from those of its earlier steps.
        """
        if self.is_done or self._is_numpy:
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r} is {'done' if self.is_done else 'numpy-ized (to_numpy())'}: no "
                "step can be added; start a new episode (or cut() the running one)."
            )
        if not self._observations:
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r} has no first observation: call add_env_reset(obs) first, "
                "or build it with observations=[obs]."
            )
        extra = dict(extra_model_outputs or {})
        if self._extra and set(extra) != set(self._extra):
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r}: extra_model_outputs has keys {sorted(extra)}, its earlier steps "
                f"{sorted(self._extra)}; give the same keys at every step."
            )
        if not self._extra and self._rewards and extra:
            raise ValueError(
                f"SingleAgentEpisode {self.id_!r}: extra_model_outputs {sorted(extra)} after {len(self._rewards)} "
                "steps without any; give them from the first step."
            )
        self.add_step(observation, action, reward, infos or {})
        self._last_step_time = time.perf_counter()
        if self._start_time is None:
            self._start_time = self._last_step_time
        for key, value in extra.items():
            self._extra.setdefault(str(key), []).append(value)
        self.is_terminated, self.is_truncated = bool(terminated), bool(truncated)

    def _history(
        self, name: str, items: list[Any], indices: Indices, neg_index_as_lookback: bool, fill: Any, lookback: int
    ) -> Any:
        if not self.keep_history:
            raise ValueError(
                f"episode.{name}() is not available here: episode {self.id_!r} was built with keep_history=False "
                "and holds its return, length and custom_data, not its per-step history."
            )
        picked = _pick(items, indices, lookback=lookback, neg_index_as_lookback=neg_index_as_lookback, fill=fill)
        # After to_numpy() (RLlib's): several items come back as one array; infos stay dicts.
        return as_array(picked) if self._is_numpy and isinstance(picked, list) and name != "get_infos" else picked

    def get_observations(
        self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None
    ) -> Any:
        """The observations as the env returned them (``len + 1``: the reset's, then one per step)."""
        return self._history(
            "get_observations", self._observations, indices, neg_index_as_lookback, fill, self._lookback
        )

    def get_infos(self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """The infos (``len + 1``: the reset's, then one per step; a runner's final step's is its ``final_info``)."""
        return self._history("get_infos", self._infos, indices, neg_index_as_lookback, fill, self._lookback)

    def get_actions(self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """The actions the module chose (before the module_to_env connector clipped them), one per step."""
        return self._history("get_actions", self._actions, indices, neg_index_as_lookback, fill, self._lookback)

    def get_rewards(self, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None) -> Any:
        """The rewards, one per step (floats)."""
        return self._history("get_rewards", self._rewards, indices, neg_index_as_lookback, fill, self._lookback)

    def get_extra_model_outputs(
        self, key: str, indices: Indices = None, *, neg_index_as_lookback: bool = False, fill: Any = None
    ) -> Any:
        """The module's extra output ``key`` (``add_env_step(extra_model_outputs=...)``), one per step.

        Raises:
            KeyError: No step recorded ``key``.
        """
        if key not in self._extra:
            raise KeyError(f"Episode {self.id_!r} has no extra model output {key!r}; it has {sorted(self._extra)}.")
        return self._history(
            "get_extra_model_outputs", self._extra[key], indices, neg_index_as_lookback, fill, self._lookback
        )

    @property
    def extra_model_outputs(self) -> dict[str, list[Any]]:
        """Key -> the module's extra outputs, one per step (lookback buffer included; copies of the lists)."""
        return {key: list(values) for key, values in self._extra.items()}

    def add_temporary_timestep_data(self, key: str, data: Any) -> None:
        """Append ``data`` to the episode's temporary list ``key`` (RLlib's name; kept until the episode ends)."""
        self._temporary.setdefault(key, []).append(data)

    def get_temporary_timestep_data(self, key: str) -> list[Any]:
        """The list :meth:`add_temporary_timestep_data` built under ``key``.

        Raises:
            KeyError: Nothing was added under ``key``.
        """
        if key not in self._temporary:
            raise KeyError(f"Episode {self.id_!r} has no temporary data {key!r}; it has {sorted(self._temporary)}.")
        return self._temporary[key]

    def __repr__(self) -> str:
        return (
            f"SingleAgentEpisode(id_={self.id_!r}, env_index={self.env_index}, agent_id={self.agent_id!r}, "
            f"len={self._length}, return={self._return}, done={self.is_done})"
        )

    # ------------------------------------------------------------------ runner side

    def add_step(self, observation: Any, action: Any, reward: float, info: Mapping[str, Any]) -> None:
        """Record one step (the runner calls it; a callback never needs to)."""
        self._return += float(reward)
        self._length += 1
        if self.keep_history:
            self._observations.append(observation)
            self._actions.append(action)
            self._rewards.append(float(reward))
            self._infos.append(dict(info))

    def get_state(self) -> dict[str, Any]:
        """Everything the episode holds, as plain data (refuses what a checkpoint cannot hold).

        Raises:
            TypeError: A value of ``custom_data``, an info or the temporary data
                is not plain data (the message names the key and the episode).
        """
        where = f"episode {self.id_!r} (env {self.env_index}, agent {self.agent_id!r})"
        check_episode_data(self.custom_data, where=f"{where}: custom_data")
        check_episode_data(self._infos, where=f"{where}: infos")
        check_episode_data(self._temporary, where=f"{where}: temporary timestep data")
        state: dict[str, Any] = {
            "id": self.id_,
            "env_index": self.env_index,
            "agent_id": self.agent_id,
            "module_id": self.module_id,
            "custom_data": copy.deepcopy(self.custom_data),
            "terminated": self.is_terminated,
            "truncated": self.is_truncated,
            "keep_history": self.keep_history,
            "return": self._return,
            "length": self._length,
            "rewards": list(self._rewards),
            "infos": copy.deepcopy(self._infos),
            "temporary": copy.deepcopy(self._temporary),
            "lookback": self._lookback,
            "t_started": self.t_started,
        }
        # Kept only where set: an env runner's episodes have neither, and their state stays as it was.
        if self.multi_agent_episode_id is not None:
            state["multi_agent_episode_id"] = self.multi_agent_episode_id
        if self._start_time is not None:
            state["start_time"], state["last_step_time"] = self._start_time, self._last_step_time
        if self._extra:
            check_episode_data(self._extra, where=f"{where}: extra_model_outputs")
            state["extra_model_outputs"] = copy.deepcopy(self._extra)
        if self.keep_history:
            state["observations"] = _stacked(self._observations, where=f"{where}: observations")
            state["actions"] = _stacked(self._actions, where=f"{where}: actions")
        return state

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SingleAgentEpisode:
        """The episode :meth:`get_state` recorded (values come back as they were saved).

        Raises:
            ValueError: ``state`` is not an episode's state.
        """
        try:
            agent_id = state["agent_id"]
            if agent_id is not None and (isinstance(agent_id, bool) or not isinstance(agent_id, str | int)):
                raise ValueError(f"agent id {agent_id!r:.40} is no str, int or None")
            episode = cls(
                str(state["id"]),
                env_index=int(state["env_index"]),
                agent_id=agent_id,
                module_id=None if state["module_id"] is None else str(state["module_id"]),
                keep_history=bool(state["keep_history"]),
                t_started=int(state.get("t_started", 0)),
            )
            lookback = episode._lookback = int(state.get("lookback", 0))
            if lookback < 0:
                raise ValueError(f"a lookback buffer of {lookback} steps")
            episode._extra = {str(k): list(v) for k, v in dict(state.get("extra_model_outputs", {})).items()}
            episode.custom_data = dict(state["custom_data"])
            episode.multi_agent_episode_id = None if (ma := state.get("multi_agent_episode_id")) is None else str(ma)
            times = state.get("start_time"), state.get("last_step_time")
            episode._start_time, episode._last_step_time = (None if t is None else float(t) for t in times)
            episode.is_terminated = bool(state["terminated"])
            episode.is_truncated = bool(state["truncated"])
            episode._return = float(state["return"])
            episode._length = int(state["length"])
            episode._temporary = {str(k): list(v) for k, v in dict(state["temporary"]).items()}
            if episode.keep_history:
                episode._observations = _unstacked(state["observations"])
                episode._actions = [a.item() if isinstance(a, np.ndarray) and a.ndim == 0 else a
                                    for a in _unstacked(state["actions"])]  # fmt: skip
                episode._rewards = [float(r) for r in state["rewards"]]
                episode._infos = [dict(i) for i in state["infos"]]
                steps = episode._length + lookback
                if not (
                    len(episode._rewards) == len(episode._actions) == steps
                    and len(episode._observations) == len(episode._infos) == steps + 1
                    and all(len(v) == steps for v in episode._extra.values())
                ):
                    raise ValueError("its history's lengths do not match its length")
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an episode's state ({type(err).__name__}: {err})") from err
        return episode


def _stacked(items: list[Any], *, where: str) -> Any:
    """Arrays of one shape as one array (a checkpoint's tensors stay few); other values (Dict spaces) as a list."""
    if items and all(isinstance(i, np.ndarray | np.generic | int | float) for i in items):
        arrays = [np.asarray(i) for i in items]
        if len({(a.shape, a.dtype) for a in arrays}) == 1:
            return {"stacked": np.stack(arrays)}
    check_episode_data(items, where=where)
    return {"items": copy.deepcopy(items)}


def _unstacked(record: Any) -> list[Any]:
    if not isinstance(record, Mapping) or len(record) != 1:
        raise ValueError("expected {'stacked': array} or {'items': [...]}")
    if "stacked" in record:
        return [np.array(row, copy=True) for row in np.asarray(record["stacked"])]
    return list(record["items"])


Episode = SingleAgentEpisode
"""What the callbacks' episode hooks see: RLlib's ``SingleAgentEpisode`` API (``custom_data``, ``id_``,
``get_rewards()``, ``get_infos()``, ``get_return()``, ...)."""


class EpisodeTracker:
    """The episodes in flight of a single-agent env runner's sub-environments (one per slot).

    Args:
        worker_index: The runner's index (part of every episode id).
        slot_agents: The agent of each slot.
        slot_modules: The module of each slot.
        observations: The slots' first observations (batched, as the vector env returned them).
    """

    def __init__(
        self,
        worker_index: int,
        slot_agents: Sequence[str],
        slot_modules: Sequence[str],
        observations: Any,
        infos: Mapping[str, Any] | None = None,
    ) -> None:
        self.worker_index = worker_index
        self.slot_agents = list(slot_agents)
        self.slot_modules = list(slot_modules)
        self.numbers = [0] * len(self.slot_agents)
        self._next: list[tuple[Any, dict[str, Any]] | None] = [None] * len(self.slot_agents)
        self.episodes = [
            self._new(slot, slot_value(observations, slot), slot_info(infos or {}, slot)) for slot in self.slots
        ]

    @property
    def slots(self) -> range:
        """The slot indices."""
        return range(len(self.slot_agents))

    def _new(self, slot: int, observation: Any, info: dict[str, Any]) -> SingleAgentEpisode:
        return SingleAgentEpisode(
            f"{self.worker_index}-{slot}-{self.numbers[slot]}",
            env_index=slot,
            agent_id=self.slot_agents[slot],
            module_id=self.slot_modules[slot],
            observations=[observation],
            infos=[info],
        )

    def step(
        self,
        next_obs: Any,
        actions: npt.NDArray[Any],
        rewards: npt.NDArray[Any],
        terminateds: npt.NDArray[np.bool_],
        truncateds: npt.NDArray[np.bool_],
        infos: Mapping[str, Any],
    ) -> None:
        """Record one vector-env step (same-step autoreset: an ended slot's ``next_obs`` is the next episode's)."""
        final_infos = infos.get("final_info", {})
        for slot in self.slots:
            episode = self.episodes[slot]
            action = actions[slot]
            action = action.item() if np.ndim(action) == 0 else np.array(action, copy=True)
            if terminateds[slot] or truncateds[slot]:
                final_obs = copy.deepcopy(infos["final_obs"][slot])
                episode.add_step(final_obs, action, rewards[slot], slot_info(final_infos, slot))
                episode.is_terminated, episode.is_truncated = bool(terminateds[slot]), bool(truncateds[slot])
                self._next[slot] = (slot_value(next_obs, slot), slot_info(infos, slot))
            else:
                episode.add_step(slot_value(next_obs, slot), action, rewards[slot], slot_info(infos, slot))

    def begin_next(self, slot: int) -> SingleAgentEpisode:
        """Start the episode that follows the one that ended in ``slot`` (after its ``on_episode_end``)."""
        pending, self._next[slot] = self._next[slot], None
        if pending is None:
            raise RuntimeError(f"Slot {slot}'s episode has not ended: there is no next episode to begin.")
        self.numbers[slot] += 1
        self.episodes[slot] = self._new(slot, *pending)
        return self.episodes[slot]

    def restart(self, slot: int, observation: Any, info: dict[str, Any]) -> SingleAgentEpisode:
        """Drop ``slot``'s episode in flight for a new one from a reset (``batch_mode="complete_episodes"``
        drops unfinished episodes); an episode without a step yet keeps its number."""
        self._next[slot] = None
        if len(self.episodes[slot]) > 0:
            self.numbers[slot] += 1
        self.episodes[slot] = self._new(slot, observation, info)
        return self.episodes[slot]

    def get_state(self) -> dict[str, Any]:
        """The episodes in flight and the episode numbers (raises ``TypeError`` for data a checkpoint cannot hold)."""
        return {"numbers": list(self.numbers), "episodes": [episode.get_state() for episode in self.episodes]}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Take the episodes :meth:`get_state` recorded.

        Raises:
            ValueError: ``state`` does not fit this runner's slots (nothing is changed).
        """
        numbers = [int(n) for n in state["numbers"]]
        episodes = [SingleAgentEpisode.from_state(s) for s in state["episodes"]]
        if len(numbers) != len(self.slot_agents) or len(episodes) != len(self.slot_agents):
            raise ValueError(f"the state holds {len(episodes)} episodes, this runner has {len(self.slot_agents)} slots")
        self.take(numbers, episodes)

    def take(self, numbers: Sequence[int], episodes: Sequence[SingleAgentEpisode]) -> None:
        """Take checked episode numbers and episodes, one per slot (a restore's, see ``state_checks``)."""
        self.numbers, self.episodes = list(numbers), list(episodes)
        self._next = [None] * len(self.slot_agents)
