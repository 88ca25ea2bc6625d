"""FlattenObservations: Dict, Tuple, Discrete and MultiDiscrete observations -> one flat float32 Box.

RLlib's ``ray.rllib.connectors.env_to_module.FlattenObservations``. Each row is
flattened as ``gymnasium.spaces.flatten`` flattens one observation (Dict keys in
the space's order, Discrete and MultiDiscrete one-hot, Box and MultiBinary
raveled), vectorised over the batch, in float32.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.connectors.connector_v2 import ConnectorV2

__all__ = ["FlattenObservations"]


class FlattenObservations(ConnectorV2):
    """Flattens every observation to a 1-D float32 array (``gymnasium.spaces.flatten``'s layout).

    Args:
        multi_agent: RLlib's flag. cairn builds one pipeline per module from that
            module's observation space, so the piece flattens the rows of its
            one space either way; accepted for RLlib's signature.
        agent_ids: RLlib flattens only these agents' observations. cairn's pipelines
            are per module, not per agent: only ``None`` (flatten all) is accepted.
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.

    Raises:
        ValueError: ``agent_ids`` is given.
    """

    def __init__(
        self,
        input_observation_space: gym.Space[Any] | None = None,
        input_action_space: gym.Space[Any] | None = None,
        *,
        multi_agent: bool = False,
        agent_ids: Any = None,
    ) -> None:
        if agent_ids is not None:
            raise ValueError(
                f"FlattenObservations(agent_ids={agent_ids!r:.80}) is refused: cairn builds one env-to-module pipeline "
                "per module from that module's observation space, so a piece cannot pick agents. Flatten every "
                "agent's observations (agent_ids=None); agents with other spaces get their own module's pipeline."
            )
        self.multi_agent = bool(multi_agent)
        super().__init__(input_observation_space, input_action_space)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """``gymnasium.spaces.flatten_space`` of the input, as a float32 Box.

        Raises:
            ValueError: A space gymnasium cannot flatten to a Box (Text, Graph, Sequence).
        """
        _check_flattenable(input_observation_space)
        flat = gym.spaces.flatten_space(input_observation_space)
        assert isinstance(flat, gym.spaces.Box)
        return gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)

    def __call__(  # type: ignore[override]
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: bool | None = None,
        shared_data: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Flatten ``batch["obs"]`` (a batch of the input space) to ``[B, n]`` float32."""
        space = self.input_observation_space
        if space is None:
            raise RuntimeError("FlattenObservations has no input space: a pipeline builder sets it before use.")
        batch["obs"] = flatten_batch(space, batch["obs"])
        return batch

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The spaces and ``multi_agent``."""
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "multi_agent": self.multi_agent}


def _check_flattenable(space: gym.Space[Any]) -> None:
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        for sub in space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces:
            _check_flattenable(sub)
    elif not isinstance(
        space, gym.spaces.Box | gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary
    ):
        raise ValueError(
            "FlattenObservations flattens Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple spaces, "
            f"not {space}."
        )


def flatten_batch(space: gym.Space[Any], rows: Any) -> npt.NDArray[np.float32]:
    """``[B, n]`` float32: each row as ``gymnasium.spaces.flatten(space, row)``."""
    if isinstance(space, gym.spaces.Dict):
        parts = [flatten_batch(sub, rows[key]) for key, sub in space.spaces.items()]
        return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0), np.float32)
    if isinstance(space, gym.spaces.Tuple):
        return np.concatenate([flatten_batch(sub, rows[i]) for i, sub in enumerate(space.spaces)], axis=1)
    array = np.asarray(rows)
    n = array.shape[0]
    if isinstance(space, gym.spaces.Discrete):
        return _one_hot(array.reshape(n) - int(space.start), int(space.n))
    if isinstance(space, gym.spaces.MultiDiscrete):
        values = (array - space.start).reshape(n, -1)
        sizes = space.nvec.reshape(-1)
        return np.concatenate([_one_hot(values[:, i], int(size)) for i, size in enumerate(sizes)], axis=1)
    return array.reshape(n, -1).astype(np.float32)


def _one_hot(values: npt.NDArray[Any], size: int) -> npt.NDArray[np.float32]:
    out = np.zeros((values.shape[0], size), dtype=np.float32)
    out[np.arange(values.shape[0]), values.astype(np.int64)] = 1.0
    return out
