"""Small competitive multi-agent environments, shipped for self-play examples and tests.

:class:`TicTacToe` is a two-player zero-sum game played in turns: only the
player to move gets an observation, and the rewards (+1 win, -1 loss, 0 draw)
come when the game ends. Its whole state (board, player to move, RNG) is
saved in checkpoints, so a run resumes exactly. Name it in a config as
``"cairn.rl.env.games:TicTacToe"`` (after ``import cairn.rl.env.games``).

:func:`self_play_policy_mapping` is a policy mapping for self-play in any
two-player game: the module ``"main"`` plays one side, drawn per episode, and
a frozen copy of it (a module whose id starts with ``"main_v"``), drawn at
random per episode, plays the other (``examples/self_play.py``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.registry import register
from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import ALL_AGENTS, EpisodeInfo, MultiAgentEnv

__all__ = ["FROZEN_PREFIX", "MAIN_MODULE_ID", "TicTacToe", "self_play_policy_mapping"]

MAIN_MODULE_ID = "main"
"""The module that learns in :func:`self_play_policy_mapping`."""

FROZEN_PREFIX = "main_v"
"""Prefix of the ids of frozen copies of the main module (``"main_v1"``, ``"main_v2"``, ...)."""

_LINES = np.array([[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]])


class TicTacToe(MultiAgentEnv):
    """Tic-tac-toe for ``"player_0"`` and ``"player_1"``, in turns; who starts is drawn at random.

    Observation (of the player to move): 27 floats, for each of the 9 cells
    one-hot ``[mine, theirs, empty]``. Action: the cell, ``Discrete(9)``. A
    move on an occupied cell loses at once. Rewards: +1 to the winner and -1
    to the loser when the game ends, 0 to both for a draw.

    Args:
        config: The ``env_config`` (no keys are read).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.possible_agents = ["player_0", "player_1"]
        self.agents = []
        observation_space = gym.spaces.Box(0.0, 1.0, (27,), np.float32)
        action_space = gym.spaces.Discrete(9)
        self.observation_spaces = dict.fromkeys(self.possible_agents, observation_space)
        self.action_spaces = dict.fromkeys(self.possible_agents, action_space)
        self.board: npt.NDArray[np.int8] = np.zeros(9, dtype=np.int8)
        self.to_move = 0

    def _observe(self, player: int) -> npt.NDArray[np.float32]:
        mine = self.board == player + 1
        theirs = self.board == 2 - player
        empty = self.board == 0
        return np.stack([mine, theirs, empty], axis=1).astype(np.float32).reshape(27)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Empty board; the player to move first is drawn with ``np_random``."""
        gym.Env.reset(self, seed=seed)
        self.board = np.zeros(9, dtype=np.int8)
        self.to_move = int(self.np_random.integers(2))
        self.agents = list(self.possible_agents)
        agent = self.possible_agents[self.to_move]
        return {agent: self._observe(self.to_move)}, {agent: {}}

    def step(  # type: ignore[override]  # MultiAgentEnv's dict signature
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """The player to move places its mark; the other player moves next, or the game ends.

        Raises:
            KeyError: ``action_dict`` has no action for the player to move.
        """
        mover = self.possible_agents[self.to_move]
        other = self.possible_agents[1 - self.to_move]
        if mover not in action_dict:
            raise KeyError(f"It is {mover!r}'s turn, but action_dict holds actions for {sorted(action_dict)}.")
        cell = int(action_dict[mover])
        not_done = {ALL_AGENTS: False}
        if not 0 <= cell < 9 or self.board[cell] != 0:
            return self._end({mover: -1.0, other: 1.0})
        self.board[cell] = self.to_move + 1
        marks = self.board[_LINES]
        if bool(np.any(np.all(marks == self.to_move + 1, axis=1))):
            return self._end({mover: 1.0, other: -1.0})
        if not bool(np.any(self.board == 0)):
            return self._end({mover: 0.0, other: 0.0})
        self.to_move = 1 - self.to_move
        return {other: self._observe(self.to_move)}, {mover: 0.0}, dict(not_done), dict(not_done), {other: {}}

    def _end(
        self, rewards: dict[str, float]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        self.agents = []
        observations = {agent: self._observe(index) for index, agent in enumerate(self.possible_agents)}
        terminateds = {**dict.fromkeys(self.possible_agents, True), ALL_AGENTS: True}
        truncateds = {**dict.fromkeys(self.possible_agents, False), ALL_AGENTS: False}
        return observations, rewards, terminateds, truncateds, {agent: {} for agent in self.possible_agents}

    def render(self) -> str:
        """The board as text (``X`` is player_0)."""
        marks = np.array([".", "X", "O"])[self.board]
        return "\n".join("".join(marks[row * 3 : row * 3 + 3]) for row in range(3))


def _get_state(env: TicTacToe) -> dict[str, Any]:
    return {"board": env.board.copy(), "to_move": env.to_move, "agents": list(env.agents)}


def _state_problem(env: TicTacToe, state: Any) -> str | None:
    """Why a saved TicTacToe state cannot be applied (it comes from a file, SPEC 8), or None."""
    if not isinstance(state, dict) or set(state) != {"board", "to_move", "agents"}:
        return "a TicTacToe state holds exactly board, to_move and agents; this one was written elsewhere"
    board, to_move, agents = state["board"], state["to_move"], state["agents"]
    if not isinstance(board, np.ndarray) or board.dtype.kind not in "iu" or board.shape != (9,):
        return "the saved TicTacToe board is not 9 ints"
    if not np.isin(board, (0, 1, 2)).all() or isinstance(to_move, bool) or to_move not in (0, 1):
        return "the saved TicTacToe board or player to move is out of range"
    if not isinstance(agents, list) or any(not isinstance(a, str) or a not in env.possible_agents for a in agents):
        return f"the saved TicTacToe agents {agents!r:.80} are not {env.possible_agents}"
    return None


def _set_state(env: TicTacToe, state: Any) -> None:
    problem = _state_problem(env, state)
    if problem is not None:
        raise ValueError(f"{problem}.")
    env.board = np.asarray(state["board"]).astype(np.int8, copy=True)
    env.to_move = int(state["to_move"])
    env.agents = [str(agent) for agent in state["agents"]]


register_env_state_handler(TicTacToe, _get_state, _set_state, check=_state_problem)


@register  # a config records it by reference; cairn's own functions are allowed only when registered
def self_play_policy_mapping(agent_id: str, episode: EpisodeInfo) -> str:
    """``"main"`` for one player (drawn per episode), a random frozen copy for the other.

    The side of ``"main"`` and the opponent are drawn from ``episode.seed``, so
    every agent of an episode sees the same draw and a restored run maps
    exactly as the original. Before the first copy exists, ``"main"`` plays
    both sides. For two-player games whose agent ids end in ``0`` and ``1``
    (``"player_0"``, ``"player_1"``).
    """
    rng = np.random.default_rng(episode.seed)
    main_side = int(rng.integers(2))
    opponents = [module_id for module_id in episode.module_ids if module_id.startswith(FROZEN_PREFIX)]
    if agent_id.endswith(str(main_side)) or not opponents:
        return MAIN_MODULE_ID
    return opponents[int(rng.integers(len(opponents)))]
