"""PettingZoo's parallel API through ParallelPettingZooEnv (issue 14 item 4).

The environment is a PettingZoo ``ParallelEnv`` that PettingZoo's own
``parallel_api_test`` accepts: repeated rock-paper-scissors, agents acting
together. (PettingZoo's ``classic.rps_v2`` imports pygame at import time, and
the ``rl`` extra does not bring pygame.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pettingzoo = pytest.importorskip("pettingzoo")
from pettingzoo.test import parallel_api_test  # noqa: E402

from cairn.rl import PPO, PPOConfig  # noqa: E402
from cairn.rl.env.multi_agent_env import register_env  # noqa: E402
from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv  # noqa: E402


class RockPaperScissors(pettingzoo.ParallelEnv):  # type: ignore[misc]
    """Two players, ``rounds`` simultaneous rounds; each sees the other's last move (one-hot, 4: none/R/P/S)."""

    metadata = {"name": "rps_test_v0", "render_modes": []}

    def __init__(self, rounds: int = 5) -> None:
        self.possible_agents = ["player_0", "player_1"]
        self.agents: list[str] = []
        self.rounds = rounds
        self._observation_space = gym.spaces.Box(0.0, 1.0, (4,), np.float32)
        self._action_space = gym.spaces.Discrete(3)

    def observation_space(self, agent: str) -> gym.Space[Any]:
        return self._observation_space

    def action_space(self, agent: str) -> gym.Space[Any]:
        return self._action_space

    def _seen(self, move: int) -> np.ndarray:
        return np.eye(4, dtype=np.float32)[move]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict[str, Any], ...]:
        self.agents = list(self.possible_agents)
        self.round = 0
        return {a: self._seen(0) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        a0, a1 = int(actions["player_0"]), int(actions["player_1"])
        score = 0.0 if a0 == a1 else (1.0 if (a0 - a1) % 3 == 1 else -1.0)
        self.round += 1
        over = self.round >= self.rounds
        obs = {"player_0": self._seen(a1 + 1), "player_1": self._seen(a0 + 1)}
        rewards = {"player_0": score, "player_1": -score}
        terminateds = dict.fromkeys(self.agents, False)
        truncateds = dict.fromkeys(self.agents, over)
        infos: dict[str, Any] = {a: {} for a in self.agents}
        if over:
            self.agents = []
        return obs, rewards, terminateds, truncateds, infos


register_env("pz_rps_test", lambda env_config: ParallelPettingZooEnv(RockPaperScissors(**env_config)))


def test_the_env_passes_pettingzoos_parallel_api_test() -> None:
    parallel_api_test(RockPaperScissors(), num_cycles=20)


def test_the_adapter_speaks_multi_agent_env() -> None:
    env = ParallelPettingZooEnv(RockPaperScissors(rounds=2))
    assert env.possible_agents == ["player_0", "player_1"]
    assert env.get_action_space("player_1") == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert set(obs) == set(env.agents) == {"player_0", "player_1"}
    _, rewards, terminateds, truncateds, _ = env.step({"player_0": 0, "player_1": 2})  # rock beats scissors
    assert rewards == {"player_0": 1.0, "player_1": -1.0}
    assert terminateds["__all__"] is False and truncateds["__all__"] is False
    _, _, terminateds, truncateds, _ = env.step({"player_0": 1, "player_1": 1})
    assert truncateds["__all__"] is True and terminateds["__all__"] is False and env.agents == []
    with pytest.raises(TypeError, match="aec_to_parallel"):
        ParallelPettingZooEnv(object())


def test_ppo_trains_on_a_pettingzoo_env_and_a_checkpoint_says_episodes_restart(tmp_path: Path) -> None:
    config = PPOConfig(
        env="pz_rps_test",
        env_config={"rounds": 4},
        seed=1,
        num_envs_per_env_runner=2,
        rollout_length=10,
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("p0", "p1"),
        policy_mapping={"player_0": "p0", "player_1": "p1"},
    )
    algo = PPO(config)
    results = algo.train()
    # Simultaneous moves: both players act every step; each round is one agent step per player.
    assert results["num_agent_steps_sampled_lifetime"] == 2 * results["num_env_steps_sampled_lifetime"] == 40
    assert results["learner/p0/num_module_steps_trained"] > 0 and results["learner/p1/num_module_steps_trained"] > 0
    # Zero-sum: the two modules' mean returns cancel out.
    assert results["env_runner/p0/episode_return_mean"] == -results["env_runner/p1/episode_return_mean"]
    path = algo.save_to_path(tmp_path / "ckpt")
    metadata = json.loads((Path(path) / "metadata.json").read_text())
    assert metadata["episodes_restart_on_restore"] is True
    restored = PPO.from_checkpoint(path)
    assert restored.env_runner.episodes_restarted
    restored.train()
    algo.stop()
    restored.stop()
    assert dataclasses.asdict(restored.config)["env"] == "pz_rps_test"
