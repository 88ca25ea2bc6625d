"""FrameStackingEnvToModule: the module sees the last ``num_frames`` observations of each episode.

RLlib's ``ray.rllib.connectors.env_to_module.FrameStackingEnvToModule``. RLlib
stacks image frames of shape ``(w, h, 1)`` along the last axis into
``(w, h, num_frames)``; cairn does the same for any Box by concatenating the
frames along their last axis, oldest first: ``(w, h, 1)`` gives RLlib's
``(w, h, num_frames)``, CartPole's ``(4,)`` gives ``(4 * num_frames,)``. Before an
episode has ``num_frames`` observations, the missing older frames are zeros
(RLlib's ``fill=0.0``).

The frames of the episodes in flight are state (``frames``: one row of the last
``num_frames - 1`` observations per env slot), in the env runner's checkpoint,
so that a restored runner goes on with the same stacks. A slot's history is
cleared when its episode starts (``episode_starts``), so the last frames of an
ended episode never enter the next one's stack.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.utils._util import Names
from cairn.state_checks import ArrayField, Schema

__all__ = ["MAX_NUM_FRAMES", "FrameStackingEnvToModule"]

MAX_NUM_FRAMES = 1024
"""The most frames a stacker keeps per slot. The number may come from a checkpoint's recorded
config, and a hostile ``num_frames=10**9`` would allocate gigabytes at the first step."""


class FrameStackingEnvToModule(ConnectorV2):
    """Stacks each slot's last ``num_frames`` observations along the last axis (see the module docstring).

    Args:
        num_frames: How many observations the module sees at once (>= 1).
        multi_agent: RLlib's flag. cairn builds one pipeline per module from one
            observation space and keys the history by the runner's slot ids, so the
            piece works the same either way; accepted for RLlib's signature.
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.

    Raises:
        ValueError: ``num_frames`` < 1; an input space that is not a Box.
    """

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        num_frames: int = 1,
        multi_agent: bool = False,
    ) -> None:
        if (
            isinstance(num_frames, bool)
            or not isinstance(num_frames, int | np.integer)
            or not 1 <= num_frames <= MAX_NUM_FRAMES
        ):
            raise ValueError(
                f"FrameStackingEnvToModule(num_frames={num_frames!r}) needs an int from 1 to {MAX_NUM_FRAMES}."
            )
        self.num_frames = int(num_frames)
        self.multi_agent = bool(multi_agent)
        self._frame_shape: tuple[int, ...] = ()
        self._dtype: np.dtype[Any] = np.dtype(np.float32)
        # Slot id -> row of ``_frames`` (the slot's last num_frames - 1 observations, oldest first).
        self._rows: dict[int, int] = {}
        self._frames: npt.NDArray[Any] = np.zeros((0, self.num_frames - 1), dtype=np.float32)
        super().__init__(input_observation_space, input_action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """The input Box with its last axis ``num_frames`` times as long (bounds repeated)."""
        space = input_observation_space
        if not isinstance(space, gym.spaces.Box) or not space.shape:
            raise ValueError(
                f"FrameStackingEnvToModule stacks Box observations with at least one axis, but its input space is "
                f"{space}. Put FlattenObservations before it for Dict, Tuple or Discrete observations."
            )
        if space.shape != self._frame_shape or space.dtype != self._dtype or not self._rows:
            self._frame_shape, self._dtype = tuple(space.shape), np.dtype(space.dtype)
            self._rows = {}
            self._frames = np.zeros((0, self.num_frames - 1, *self._frame_shape), dtype=self._dtype)
        return gym.spaces.Box(
            low=np.concatenate([space.low] * self.num_frames, axis=-1),
            high=np.concatenate([space.high] * self.num_frames, axis=-1),
            dtype=space.dtype,
        )

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
        """Replace ``batch["obs"]`` ``[B, *shape]`` by the stacks ``[B, *shape[:-1], num_frames * shape[-1]]``.

        Keyword args (from the runner): ``slots`` (required: the rows' slot ids),
        ``episode_starts`` (rows whose observation starts an episode; default none),
        ``update`` (push the rows into the slots' histories; default True), ``advance``
        (overrides ``update`` for the histories only).

        Raises:
            ValueError: No ``slots``, or a batch of another shape than the input space.
        """
        obs = np.asarray(batch["obs"])
        slots = kwargs.get("slots")
        if slots is None:
            raise ValueError(
                "FrameStackingEnvToModule needs the rows' slot ids (slots=) to keep each episode's frames; call it "
                "through an env runner's pipeline, which passes them."
            )
        slot_ids = np.asarray(slots, dtype=np.int64).reshape(-1)
        if obs.shape[1:] != self._frame_shape or obs.shape[0] != slot_ids.shape[0]:
            raise ValueError(
                f"FrameStackingEnvToModule got observations of shape {obs.shape} for {slot_ids.shape[0]} slots; "
                f"its input space has shape {self._frame_shape}."
            )
        starts = kwargs.get("episode_starts")
        start = np.zeros(len(slot_ids), dtype=np.bool_) if starts is None else np.asarray(starts, dtype=np.bool_)
        rows = self._rows_of(slot_ids)
        history = self._frames[rows].copy()
        history[start] = 0  # a new episode: nothing older than its first observation (RLlib's fill=0.0)
        frames = np.concatenate([history, obs.astype(self._dtype)[:, None]], axis=1)
        # ``advance`` (default: ``update``) moves the histories on; an evaluation advances them while
        # it keeps the filters' statistics frozen (update=False, advance=True).
        if kwargs.get("advance", kwargs.get("update", True)) and self.num_frames > 1:
            self._frames[rows] = frames[:, 1:]
        batch["obs"] = np.concatenate([frames[:, i] for i in range(self.num_frames)], axis=-1)
        return batch

    def _rows_of(self, slot_ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The history rows of ``slot_ids``, adding zero rows for slots not seen before."""
        new = [int(s) for s in dict.fromkeys(slot_ids.tolist()) if int(s) not in self._rows]
        if new:
            for slot in new:
                self._rows[slot] = len(self._rows)
            grown = np.zeros((len(new), *self._frames.shape[1:]), dtype=self._frames.dtype)
            self._frames = np.concatenate([self._frames, grown], axis=0)
        return np.array([self._rows[int(s)] for s in slot_ids], dtype=np.int64)

    def get_state(self, components: Names = None, *, not_components: Names = None, **kwargs: Any) -> dict[str, Any]:
        """``{"slots": int64 [S], "frames": [S, num_frames - 1, *shape]}`` (copies), slots in row order."""
        order = sorted(self._rows, key=self._rows.__getitem__)
        return {"slots": np.array(order, dtype=np.int64), "frames": self._frames.copy()}

    @property
    def state_schema(self) -> Schema:
        """What a saved state holds: distinct slot ids, and each slot's last ``num_frames - 1`` frames."""
        return Schema(
            {
                "slots": ArrayField("iu", ndim=1, low=0, unique=True),
                "frames": ArrayField(shape=("slots", self.num_frames - 1, *self._frame_shape)),
            },
            unfit="the checkpoint was taken with another num_frames or environment.",
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Load the slots' histories (both keys, or nothing).

        Raises:
            IncompatibleCheckpointError, CorruptCheckpointError: What :attr:`state_schema` refuses.
        """
        read = self.state_schema.read(state, where=type(self).__name__)
        if "slots" not in read or "frames" not in read:
            return
        slots, frames = read["slots"], read["frames"]
        self._rows = {int(s): i for i, s in enumerate(slots.tolist())}
        self._frames = frames.astype(self._dtype, copy=True)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The spaces, ``num_frames`` and ``multi_agent``."""
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "num_frames": self.num_frames, "multi_agent": self.multi_agent}
