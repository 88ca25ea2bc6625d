"""RLlib's ``RockPaperScissors`` (``ray.rllib.examples.envs.classes.multi_agent.rock_paper_scissors``).

Two players (``"player1"``, ``"player2"``) move at once for 10 steps; the winner of a
step gets +1, the loser -1. Each player observes the opponent's last move.
``config={"sheldon_cooper_mode": True}`` adds Lizard and Spock.

Differs from RLlib: the observation is the opponent's last move one-hot, a ``Box`` of
3 (5) values (RLlib: a ``Discrete`` index, which its example scripts one-hot with the
``FlattenObservations`` connector; cairn's default modules take ``Box`` observations).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv

__all__ = ["RockPaperScissors"]


class RockPaperScissors(MultiAgentEnv):
    """Two-player rock paper scissors, 10 simultaneous moves an episode.

    Args:
        config: ``sheldon_cooper_mode`` (default False): also Lizard and Spock.
    """

    ROCK = 0
    PAPER = 1
    SCISSORS = 2
    LIZARD = 3
    SPOCK = 4

    WIN_MATRIX: dict[tuple[int, int], tuple[int, int]] = {
        (ROCK, ROCK): (0, 0),
        (ROCK, PAPER): (-1, 1),
        (ROCK, SCISSORS): (1, -1),
        (PAPER, ROCK): (1, -1),
        (PAPER, PAPER): (0, 0),
        (PAPER, SCISSORS): (-1, 1),
        (SCISSORS, ROCK): (-1, 1),
        (SCISSORS, PAPER): (1, -1),
        (SCISSORS, SCISSORS): (0, 0),
        (LIZARD, LIZARD): (0, 0),
        (LIZARD, SPOCK): (1, -1),
        (LIZARD, ROCK): (-1, 1),
        (LIZARD, PAPER): (1, -1),
        (LIZARD, SCISSORS): (-1, 1),
        (ROCK, LIZARD): (1, -1),
        (PAPER, LIZARD): (-1, 1),
        (SCISSORS, LIZARD): (1, -1),
        (SPOCK, SPOCK): (0, 0),
        (SPOCK, LIZARD): (-1, 1),
        (SPOCK, ROCK): (1, -1),
        (SPOCK, PAPER): (-1, 1),
        (SPOCK, SCISSORS): (1, -1),
        (ROCK, SPOCK): (-1, 1),
        (PAPER, SPOCK): (1, -1),
        (SCISSORS, SPOCK): (-1, 1),
    }
    """(move of player1, move of player2) -> (reward of player1, reward of player2)."""

    NUM_MOVES = 10

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.agents = ["player1", "player2"]
        self.possible_agents = list(self.agents)
        self.sheldon_cooper_mode = bool(dict(config or {}).get("sheldon_cooper_mode", False))
        self.num_choices = 5 if self.sheldon_cooper_mode else 3
        observation_space = gym.spaces.Box(0.0, 1.0, (self.num_choices,), np.float32)
        action_space = gym.spaces.Discrete(self.num_choices)
        self.observation_spaces = dict.fromkeys(self.possible_agents, observation_space)
        self.action_spaces = dict.fromkeys(self.possible_agents, action_space)
        self.num_moves = 0

    def _one_hot(self, move: int) -> npt.NDArray[np.float32]:
        obs = np.zeros(self.num_choices, dtype=np.float32)
        obs[move] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A new game; the first observations do not matter (nobody moved): move 0, as RLlib."""
        gym.Env.reset(self, seed=seed)
        self.num_moves = 0
        return {"player1": self._one_hot(0), "player2": self._one_hot(0)}, {}

    def step(  # type: ignore[override]  # dicts of rewards and flags, as MultiAgentEnv.step
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        """Both players move; each observes the other's move."""
        self.num_moves += 1
        move1, move2 = int(action_dict["player1"]), int(action_dict["player2"])
        observations = {"player1": self._one_hot(move2), "player2": self._one_hot(move1)}
        r1, r2 = self.WIN_MATRIX[move1, move2]
        rewards = {"player1": float(r1), "player2": float(r2)}
        terminateds = {ALL_AGENTS: self.num_moves >= self.NUM_MOVES}
        return observations, rewards, terminateds, {ALL_AGENTS: False}, {}
