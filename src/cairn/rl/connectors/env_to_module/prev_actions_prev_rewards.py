"""PrevActionsPrevRewards: the module sees each episode's last actions and rewards with its observation.

RLlib's ``ray.rllib.connectors.env_to_module.PrevActionsPrevRewards``. The observation
becomes a ``Dict``: ``{"_orig_obs": obs, "prev_n_actions": the last n_prev_actions actions
(one-hot for a Discrete action space, oldest first), "prev_n_rewards": the last
n_prev_rewards rewards}``; missing ones (an episode's first steps) are zeros (RLlib's
``fill=0.0``). Put ``FlattenObservations`` after it for a module that reads a ``Box``.

What differs from RLlib, because cairn's runners have no episode objects in their loop:
the env runner hands the piece each row's previous action and reward
(``prev_actions=``, ``prev_rewards=``), and the piece keeps each env slot's window of
the last ones. The windows of the episodes in flight are state (``actions``, ``rewards``,
one row per slot), in the env runner's checkpoint like frame stacks, so that a restored
runner goes on with the same windows; the runner checkpoints the last action and reward
of each slot with its environments. A slot's window is cleared when its episode starts.
cairn's single-agent env runner passes the previous actions and rewards; the multi-agent
runner does not (yet): the piece refuses to run without them. ``Discrete`` and
one-dimensional ``Box`` action spaces.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.utils._util import Names
from cairn.state_checks import ArrayField, Count, Schema

__all__ = ["MAX_PREV", "PrevActionsPrevRewards"]

MAX_PREV = 1024
"""The most actions or rewards a window keeps per slot (the numbers may come from a checkpoint's config)."""


def _count(name: str, value: Any) -> int:
    if not Count(0, MAX_PREV).fits(value):
        raise ValueError(f"PrevActionsPrevRewards({name}={value!r:.60}) needs an int from 0 to {MAX_PREV}.")
    return int(value)


class PrevActionsPrevRewards(ConnectorV2):
    """Adds each slot's last actions and rewards to its observation (see the module docstring).

    Args:
        multi_agent: RLlib's flag; cairn builds one pipeline per module, so the piece works
            the same either way (accepted for RLlib's signature).
        n_prev_actions: How many previous actions the module sees (0: none).
        n_prev_rewards: How many previous rewards the module sees (0: none).
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.

    Raises:
        ValueError: A count out of range; an action space other than Discrete or a 1-D Box.
    """

    ORIG_OBS_KEY = "_orig_obs"
    PREV_ACTIONS_KEY = "prev_n_actions"
    PREV_REWARDS_KEY = "prev_n_rewards"

    NEEDS_PREV_ACTIONS_REWARDS: ClassVar[bool] = True
    """Tells the env runner to pass ``prev_actions`` and ``prev_rewards`` (and to checkpoint them)."""

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        multi_agent: bool = False,
        n_prev_actions: int = 1,
        n_prev_rewards: int = 1,
    ) -> None:
        self.multi_agent = bool(multi_agent)
        self.n_prev_actions = _count("n_prev_actions", n_prev_actions)
        self.n_prev_rewards = _count("n_prev_rewards", n_prev_rewards)
        self._action_size = 0
        self._discrete = True
        self._rows: dict[int, int] = {}  # slot id -> row of the windows
        self._actions: npt.NDArray[np.float32] = np.zeros((0, self.n_prev_actions, 0), dtype=np.float32)
        self._rewards: npt.NDArray[np.float32] = np.zeros((0, self.n_prev_rewards), dtype=np.float32)
        super().__init__(input_observation_space, input_action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """``Dict({"_orig_obs": input, "prev_n_actions": Box, "prev_n_rewards": Box})`` (keys of counts > 0)."""
        if isinstance(input_action_space, gym.spaces.Discrete):
            discrete, size = True, int(input_action_space.n)
            low, high = np.zeros(size, np.float32), np.ones(size, np.float32)
        elif isinstance(input_action_space, gym.spaces.Box) and len(input_action_space.shape) == 1:
            discrete, size = False, int(input_action_space.shape[0])
            low, high = input_action_space.low.astype(np.float32), input_action_space.high.astype(np.float32)
        else:
            raise ValueError(
                f"PrevActionsPrevRewards takes Discrete or one-dimensional Box action spaces, got {input_action_space}."
            )
        if (discrete, size) != (self._discrete, self._action_size) or not self._rows:
            self._discrete, self._action_size = discrete, size
            self._rows = {}
            self._actions = np.zeros((0, self.n_prev_actions, size), dtype=np.float32)
            self._rewards = np.zeros((0, self.n_prev_rewards), dtype=np.float32)
        spaces: dict[str, gym.Space[Any]] = {self.ORIG_OBS_KEY: input_observation_space}
        if self.n_prev_actions:
            spaces[self.PREV_ACTIONS_KEY] = gym.spaces.Box(
                np.tile(low, self.n_prev_actions), np.tile(high, self.n_prev_actions), dtype=np.float32
            )
        if self.n_prev_rewards:
            spaces[self.PREV_REWARDS_KEY] = gym.spaces.Box(-np.inf, np.inf, (self.n_prev_rewards,), np.float32)
        return gym.spaces.Dict(spaces)

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
        """Replace ``batch["obs"]`` by the dict of the observations and the slots' windows.

        Keyword args (from the runner): ``slots``, ``prev_actions`` (each row's previous
        action), ``prev_rewards`` (each row's previous reward), ``episode_starts`` (rows
        whose window is empty), ``update`` (move the windows on; default True).

        Raises:
            ValueError: ``slots``, ``prev_actions`` or ``prev_rewards`` missing or of another length.
        """
        slots, prev_actions, prev_rewards = (kwargs.get(k) for k in ("slots", "prev_actions", "prev_rewards"))
        if slots is None or prev_actions is None or prev_rewards is None:
            raise ValueError(
                "PrevActionsPrevRewards needs the rows' slot ids, previous actions and rewards (slots=, prev_actions=, "
                "prev_rewards=), which cairn's single-agent EnvRunner passes; the multi-agent env runner does not yet."
            )
        slot_ids = np.asarray(slots, dtype=np.int64).reshape(-1)
        n = len(slot_ids)
        actions = self._encode(np.asarray(prev_actions), n)
        rewards = np.asarray(prev_rewards, dtype=np.float32).reshape(-1)
        if rewards.shape != (n,):
            raise ValueError(f"PrevActionsPrevRewards got {rewards.shape[0]} previous rewards for {n} rows.")
        starts = kwargs.get("episode_starts")
        start = np.zeros(n, dtype=np.bool_) if starts is None else np.asarray(starts, dtype=np.bool_)
        rows = self._rows_of(slot_ids)
        # The window moves on by one: the oldest out, the previous step's in (a window of 0 stays empty).
        window_a = np.concatenate([self._actions[rows], actions[:, None]], axis=1)[:, 1:]
        window_r = np.concatenate([self._rewards[rows], rewards[:, None]], axis=1)[:, 1:]
        window_a[start], window_r[start] = 0.0, 0.0  # a new episode has no previous action or reward yet
        if kwargs.get("advance", kwargs.get("update", True)):
            self._actions[rows], self._rewards[rows] = window_a, window_r
        out: dict[str, Any] = {self.ORIG_OBS_KEY: batch["obs"]}
        if self.n_prev_actions:
            out[self.PREV_ACTIONS_KEY] = window_a.reshape(n, -1)
        if self.n_prev_rewards:
            out[self.PREV_REWARDS_KEY] = window_r
        batch["obs"] = out
        return batch

    def _encode(self, actions: npt.NDArray[Any], rows: int) -> npt.NDArray[np.float32]:
        """Actions ``[rows, action_size]`` as the window holds them: one-hot (Discrete) or as they are (Box)."""
        if self._discrete:
            index = actions.reshape(-1).astype(np.int64)
            if index.shape != (rows,) or ((index < 0) | (index >= self._action_size)).any():
                raise ValueError(f"PrevActionsPrevRewards got previous actions {actions.shape} for {rows} rows.")
            return np.eye(self._action_size, dtype=np.float32)[index]
        values = actions.astype(np.float32).reshape(rows, -1) if actions.size == rows * self._action_size else None
        if values is None:
            raise ValueError(f"PrevActionsPrevRewards got previous actions {actions.shape} for {rows} rows.")
        return values

    def _rows_of(self, slot_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The window rows of ``slot_ids``, adding zero rows for slots not seen before."""
        new = [int(s) for s in dict.fromkeys(slot_ids.tolist()) if int(s) not in self._rows]
        if new:
            for slot in new:
                self._rows[slot] = len(self._rows)
            self._actions = np.concatenate([self._actions, np.zeros((len(new), *self._actions.shape[1:]), np.float32)])
            self._rewards = np.concatenate([self._rewards, np.zeros((len(new), *self._rewards.shape[1:]), np.float32)])
        return np.array([self._rows[int(s)] for s in slot_ids], dtype=np.int64)

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"slots": int64 [S], "actions": [S, n_prev_actions, size], "rewards": [S, n_prev_rewards]}`` (copies)."""
        order = sorted(self._rows, key=self._rows.__getitem__)
        return {
            "slots": np.array(order, dtype=np.int64),
            "actions": self._actions.copy(),
            "rewards": self._rewards.copy(),
        }

    @property
    def state_schema(self) -> Schema:
        """What a saved state holds: distinct slot ids, and each slot's finite action and reward windows."""
        return Schema(
            {
                "slots": ArrayField("iu", ndim=1, low=0, unique=True),
                "actions": ArrayField("fiu", shape=("slots", self.n_prev_actions, self._action_size), finite=True),
                "rewards": ArrayField("fiu", shape=("slots", self.n_prev_rewards), finite=True),
            },
            unfit="the checkpoint was taken with other n_prev_actions / n_prev_rewards or action space.",
            together=True,
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the slots' windows (all three keys, or nothing).

        Raises:
            IncompatibleCheckpointError, CorruptCheckpointError: What :attr:`state_schema` refuses.
        """
        read = self.state_schema.read(state, where=type(self).__name__)
        if not read:
            return
        self._rows = {int(s): i for i, s in enumerate(read["slots"].tolist())}
        self._actions = read["actions"].astype(np.float32, copy=True)
        self._rewards = read["rewards"].astype(np.float32, copy=True)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The spaces, ``multi_agent``, ``n_prev_actions`` and ``n_prev_rewards``."""
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {
            **kwargs,
            "multi_agent": self.multi_agent,
            "n_prev_actions": self.n_prev_actions,
            "n_prev_rewards": self.n_prev_rewards,
        }
