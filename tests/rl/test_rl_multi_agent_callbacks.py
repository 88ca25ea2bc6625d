"""Callbacks on a real multi-agent game (TicTacToe, MultiAgentEnvRunner): each agent's part is an episode."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import cairn.rl.env.games
from cairn.rl import PPO, PPOConfig
from cairn.rl.env.multi_agent_env import EpisodeInfo, register_policy_mapping_fn
from callback_helpers import EVENTS, WinsPerModule

TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"


def sides(agent_id: str, episode: EpisodeInfo) -> str:
    """``"a"`` on one side, ``"b"`` on the other, drawn per episode."""
    side = int(np.random.default_rng(episode.seed).integers(2))
    return "a" if agent_id.endswith(str(side)) else "b"


register_policy_mapping_fn("callbacks_test_sides", sides)


def config(**overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=TICTACTOE,
        seed=11,
        num_envs_per_env_runner=2,
        rollout_length=9,  # iterations end mid-game
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [16]},
        policies=("a", "b"),
        policy_mapping_fn="callbacks_test_sides",
        callbacks_class=WinsPerModule,
    )
    return dataclasses.replace(base, **overrides)


def test_each_agent_episode_starts_once_and_ends_once_with_its_module() -> None:
    EVENTS.clear()
    algo = PPO(config())
    try:
        for _ in range(3):
            result = algo.train()
    finally:
        algo.stop()
    events = [e for e in EVENTS if e[0] == "ma"]
    ends = [e for e in events if e[1] == "end"]
    assert ends, "no game ended in 3 iterations"
    open_episodes: dict[tuple[int, str], str] = {}
    for _, kind, env_index, agent, module, length in events:
        key = (env_index, agent)
        if kind == "start":
            assert key not in open_episodes and length == 0
            open_episodes[key] = module
        else:
            assert open_episodes.pop(key) == module and length >= 1
    assert {m for *_, m, _ in ends} <= {"a", "b"}
    assert result["env_runners/agent_episodes"] == len(ends)
    wins = sum(result.get(f"env_runners/wins/{m}", 0) for m in ("a", "b"))
    assert 0 <= wins <= len(ends)


def test_lifetime_counts_of_a_multi_agent_run_continue_exactly_across_a_checkpoint(tmp_path: Any) -> None:
    straight = PPO(config())
    try:
        expected = [straight.train().flatten(wall_clock=False) for _ in range(4)]
    finally:
        straight.stop()

    first = PPO(config())
    try:
        for _ in range(2):
            first.train()
        path = first.save_to_path(str(tmp_path / "ck"))
    finally:
        first.stop()
    resumed = PPO.from_checkpoint(path)
    try:
        got = [resumed.train().flatten(wall_clock=False) for _ in range(2)]
    finally:
        resumed.stop()
    keys = [k for k in expected[-1] if k.startswith("env_runners/") or k == "num_env_steps_sampled_lifetime"]
    assert "env_runners/agent_episodes" in keys
    for want, have in zip(expected[2:], got, strict=True):
        assert {k: have.get(k) for k in keys} == {k: want.get(k) for k in keys}
