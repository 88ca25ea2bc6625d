"""FrameStackingLearner: RLlib's learner half of frame stacking, which cairn's learners need no work for.

In RLlib the env-to-module frame stacker does not write its stacks back into
the episodes, so the learner pipeline stacks the frames again
(``FrameStackingLearner``). cairn's sample batches hold the module's input as
the env runner computed it (the stacked observations), so the learner already
trains on the very stacks the module acted on: there is nothing left to do.
cairn accepts the piece in ``training(learner_connector=...)`` only when the
env-to-module pipeline has a :class:`FrameStackingEnvToModule` with the same
``num_frames`` (the pairing RLlib's example uses), and refuses it otherwise:
alone it would promise stacks that nothing makes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.connectors.env_to_module.frame_stacking import MAX_NUM_FRAMES
from cairn.state_checks import Count

__all__ = ["FrameStackingLearner"]


class FrameStackingLearner(ConnectorV2):
    """The learner counterpart of ``FrameStackingEnvToModule``: a no-op in cairn (see the module docstring).

    Args:
        num_frames: Must equal the env-to-module stacker's ``num_frames``.
        multi_agent: RLlib's flag; accepted as the env-to-module piece's.
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.

    Raises:
        ValueError: ``num_frames`` < 1.
    """

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        num_frames: int = 1,
        multi_agent: bool = False,
    ) -> None:
        if not Count(1, MAX_NUM_FRAMES).fits(num_frames):
            raise ValueError(
                f"FrameStackingLearner(num_frames={num_frames!r}) needs an int from 1 to {MAX_NUM_FRAMES}."
            )
        self.num_frames = num_frames
        self.multi_agent = bool(multi_agent)
        super().__init__(input_observation_space, input_action_space)

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
        """Return ``batch`` as it is: its observations are the stacks the env runner made."""
        return batch

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The spaces, ``num_frames`` and ``multi_agent``."""
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "num_frames": self.num_frames, "multi_agent": self.multi_agent}
