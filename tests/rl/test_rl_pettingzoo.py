"""PettingZoo's parallel API through ParallelPettingZooEnv (issue 14 item 4).

The first environment is a PettingZoo ``ParallelEnv`` written here that
PettingZoo's own ``parallel_api_test`` accepts: repeated rock-paper-scissors,
agents acting together, and bad replay states. The last test plays the game
PettingZoo ships, ``classic.rps_v2`` (:mod:`pettingzoo_games`; it imports
pygame, which the ``dev`` extra brings), and resumes it in a new process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
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
from cairn.testing import assert_states_equal  # noqa: E402

SRC = str(Path(__file__).resolve().parents[2] / "src")


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


def test_an_episode_is_saved_as_its_seed_and_actions_and_replayed() -> None:
    env = ParallelPettingZooEnv(RockPaperScissors(rounds=3))
    env.reset(seed=7)
    env.step({"player_0": 0, "player_1": 2})
    state = env.get_episode_state()
    assert len(state["actions"]) == 1
    expected = env.step({"player_0": 1, "player_1": 1})
    other = ParallelPettingZooEnv(RockPaperScissors(rounds=3))
    other.set_episode_state(state)
    got = other.step({"player_0": 1, "player_1": 1})
    assert [{k: np.asarray(v).tolist() for k, v in part.items()} for part in got] == [
        {k: np.asarray(v).tolist() for k, v in part.items()} for part in expected
    ]
    # A state from a file that does not fit the game is refused, naming the step.
    with pytest.raises(ValueError, match="step 0 acts for"):
        other.set_episode_state({"seed": 1, "actions": [{"player_0": 0}]})
    with pytest.raises(ValueError, match="outside Discrete"):
        other.set_episode_state({"seed": 1, "actions": [{"player_0": 7, "player_1": 0}]})
    with pytest.raises(ValueError, match="seed"):
        other.set_episode_state({"seed": -1, "actions": []})


def test_ppo_trains_on_a_pettingzoo_env_and_a_checkpoint_resumes_its_episodes(tmp_path: Path) -> None:
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
    assert (
        results["env_runners/num_agent_steps_sampled_lifetime"] == 2 * results["num_env_steps_sampled_lifetime"] == 40
    )
    assert results["learners/p0/num_module_steps_trained"] > 0 and results["learners/p1/num_module_steps_trained"] > 0
    # Zero-sum: the two modules' mean returns cancel out.
    assert (
        results["env_runners/module_episode_returns_mean/p0"] == -results["env_runners/module_episode_returns_mean/p1"]
    )
    path = algo.save_to_path(tmp_path / "ckpt")
    metadata = json.loads((Path(path) / "metadata.json").read_text())
    # The adapter saves each episode as its seed and actions, and a restore replays them.
    assert metadata["episodes_restart_on_restore"] is False
    restored = PPO.from_checkpoint(path)
    assert not restored.env_runner.episodes_restarted
    restored.train()
    algo.stop()
    restored.stop()
    assert dataclasses.asdict(restored.config)["env"] == "pz_rps_test"


# ---------------------------------------------------------------------- a game PettingZoo ships

RPS_SCRIPT = r"""
import json, sys
import pettingzoo_games
from cairn.rl import PPO

algo = PPO.from_checkpoint(sys.argv[1])
metrics = [algo.train() for _ in range(int(sys.argv[2]))]
algo.save_to_path(sys.argv[3])
algo.stop()
print(json.dumps([r.flatten(wall_clock=False) for r in metrics]))
"""


def test_ppo_on_pettingzoos_rps_resumes_in_a_new_process_bit_for_bit(tmp_path: Path) -> None:
    """PettingZoo's own ``classic.rps_v2``: two modules play, iterations end mid-episode, and a run
    resumed in a new process from a checkpoint goes on exactly as the run that never stopped."""
    pettingzoo_games = pytest.importorskip("pettingzoo_games", exc_type=ImportError)  # needs pygame (dev extra)
    from cairn.rl import RLModuleSpec

    config = PPOConfig(
        env="pettingzoo_games:RockPaperScissors",
        env_config={"max_cycles": 6},
        seed=4,
        num_envs_per_env_runner=2,
        rollout_length=5,  # episodes last 6 steps: every checkpoint falls mid-episode
        minibatch_size=10,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("p0", "p1"),
        policy_mapping={"player_0": "p0", "player_1": "p1"},
        rl_module_spec=RLModuleSpec(module_class=pettingzoo_games.OneHotPPOModule),
        observation_filter=None,
    )
    algo = PPO(config)
    for _ in range(2):
        algo.train()
    mid = algo.save_to_path(tmp_path / "mid")
    assert json.loads((Path(mid) / "metadata.json").read_text())["episodes_restart_on_restore"] is False
    straight = [algo.train().flatten(wall_clock=False) for _ in range(2)]
    algo.save_to_path(tmp_path / "straight")
    algo.stop()
    assert straight[-1]["learners/p0/num_module_steps_trained"] > 0
    assert (
        straight[-1]["env_runners/module_episode_returns_mean/p0"]
        == -straight[-1]["env_runners/module_episode_returns_mean/p1"]
    )

    env = dict(os.environ)
    tests = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([SRC, tests, env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", RPS_SCRIPT, mid, "2", str(tmp_path / "resumed")],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == straight
    a = PPO.from_checkpoint(tmp_path / "straight")
    b = PPO.from_checkpoint(tmp_path / "resumed")
    assert_states_equal(a.get_state(), b.get_state())
    a.stop()
    b.stop()
