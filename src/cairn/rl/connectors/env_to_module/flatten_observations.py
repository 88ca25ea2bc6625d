"""FlattenObservations: Dict, Tuple, Discrete and MultiDiscrete observations -> one flat float32 Box.

RLlib's ``ray.rllib.connectors.env_to_module.FlattenObservations``. Each row is
flattened as ``gymnasium.spaces.flatten`` flattens one observation (Dict keys in
the space's order, Discrete and MultiDiscrete one-hot, Box and MultiBinary
raveled), vectorised over the batch, in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.connectors.connector_v2 import ConnectorV2

__all__ = ["FlattenObservations"]


class FlattenObservations(ConnectorV2):
    """Flattens every observation to a 1-D float32 array (``gymnasium.spaces.flatten``'s layout).

    Args:
        multi_agent: RLlib's flag: the piece sits in a multi-agent runner, where
            ``agent_ids`` may pick the agents whose observations it flattens. cairn
            builds one pipeline per module from that module's observation space, so
            without ``agent_ids`` the piece flattens the rows of its one space either way.
        agent_ids: RLlib's choice of agents (with ``multi_agent=True``): only these
            agents' observations are flattened, the others' pass unchanged. cairn's
            pipelines are per module, so the multi-agent runner tells the piece which
            agents its module serves (:meth:`serve_agents`): a module of listed agents
            flattens, one of unlisted agents passes its observations on, and a module
            that serves both is refused (its rows would have two layouts).
        input_observation_space: Set by the pipeline builder.
        input_action_space: Set by the pipeline builder.

    Raises:
        ValueError: ``agent_ids`` without ``multi_agent=True`` (RLlib ignores it then;
            cairn refuses input it would ignore), or not a list of agent ids.
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
            if not multi_agent:
                raise ValueError(
                    f"FlattenObservations(agent_ids={agent_ids!r:.80}) without multi_agent=True: agent_ids picks "
                    "agents of a multi-agent env (RLlib ignores it otherwise). Pass multi_agent=True, or leave "
                    "agent_ids out to flatten every observation."
                )
            if isinstance(agent_ids, str | bytes) or not isinstance(agent_ids, list | tuple | set | frozenset):
                raise ValueError(
                    f"FlattenObservations(agent_ids={agent_ids!r:.80}) needs a list of agent ids (str or int)."
                )
            for agent in agent_ids:
                if isinstance(agent, bool) or not isinstance(agent, str | int):
                    raise ValueError(
                        f"FlattenObservations(agent_ids=...) holds {agent!r:.40}, which is no agent id (str or int)."
                    )
        self.multi_agent = bool(multi_agent)
        self.agent_ids: list[str | int] | None = None if agent_ids is None else list(agent_ids)
        # Whether this piece flattens its rows: False only for a module of unlisted agents (serve_agents).
        self._flattens = True
        self._served: list[str | int] | None = None
        super().__init__(input_observation_space, input_action_space)

    def serve_agents(self, agents: Sequence[str | int] | None) -> None:
        """Tell the piece which agents its pipeline's rows belong to (the multi-agent runner does, per module).

        ``None``: the agents are not known (a single-agent runner, or a module no agent
        is mapped to yet); with ``agent_ids`` the piece then flattens, as for a listed
        agent. Call it before the pipeline builder sets the input spaces.

        Raises:
            ValueError: ``agent_ids`` lists some of ``agents`` but not all.
        """
        self._served = None if agents is None else list(agents)
        if self.agent_ids is None or not self._served:
            self._flattens = True
            return
        listed = [a for a in self._served if _listed(a, self.agent_ids)]
        if listed and len(listed) != len(self._served):
            unlisted = [a for a in self._served if not _listed(a, self.agent_ids)]
            raise ValueError(
                f"FlattenObservations(agent_ids={self.agent_ids!r:.80}) in the pipeline of a module that serves the "
                f"listed agents {listed!r:.80} and the unlisted {unlisted!r:.80}: one module's rows have one layout. "
                "Map flattened and unflattened agents to different modules, or list all of them."
            )
        self._flattens = bool(listed)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space[Any], input_action_space: gym.Space[Any]
    ) -> gym.Space[Any]:
        """``gymnasium.spaces.flatten_space`` of the input, as a float32 Box.

        Raises:
            ValueError: A space gymnasium cannot flatten to a Box (Text, Graph, Sequence).
        """
        if not self._flattens:
            return input_observation_space  # a module of agents agent_ids leaves out: observations pass on
        _check_flattenable(input_observation_space)
        flat = gym.spaces.flatten_space(input_observation_space)
        assert isinstance(flat, gym.spaces.Box)
        return gym.spaces.Box(flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32)

    def __call__(
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
        self._check_rows(kwargs.get("agent_ids"))
        if self._flattens:
            batch["obs"] = flatten_batch(space, batch["obs"])
        return batch

    def _check_rows(self, row_agents: Any) -> None:
        """Refuse rows of an agent ``agent_ids`` treats otherwise than this module's (a mapping made per episode)."""
        if self.agent_ids is None or row_agents is None:
            return
        for agent in row_agents:
            if _listed(agent, self.agent_ids) != self._flattens:
                what = "flattens" if self._flattens else "leaves unflattened"
                raise ValueError(
                    f"FlattenObservations(agent_ids={self.agent_ids!r:.80}) {what} the observations of this module's "
                    f"agents, but agent {agent!r} acts with it in this episode and is treated otherwise by agent_ids. "
                    "Map listed and unlisted agents to different modules in every episode."
                )

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The spaces, ``multi_agent`` and ``agent_ids``."""
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "multi_agent": self.multi_agent, "agent_ids": self.agent_ids}


def _listed(agent: Any, agent_ids: Sequence[Any]) -> bool:
    """Whether ``agent`` is one of ``agent_ids``, types included (``1`` and ``"1"`` are two agents)."""
    return any(type(agent) is type(listed) and agent == listed for listed in agent_ids)


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
