"""Callbacks on a real multi-agent game (TicTacToe, MultiAgentEnvRunner): each game is one episode (RLlib's
MultiAgentEpisode), each agent's part of it one of its agent episodes."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

import cairn.rl.env.games
from cairn.rl import PPO, PPOConfig
from cairn.rl.env.multi_agent_env import EpisodeInfo, register_policy_mapping_fn
from callback_helpers import EVENTS, CountGames, WinsPerModule

TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"


def sides(agent_id: str, episode: EpisodeInfo) -> str:
    """``"a"`` on one side, ``"b"`` on the other, drawn per episode."""
    side = int(np.random.default_rng(episode.seed).integers(2))
    return "a" if agent_id.endswith(str(side)) else "b"


register_policy_mapping_fn("callbacks_test_sides", sides)


def all_a(agent_id: str, episode: EpisodeInfo) -> str:
    """Every agent to module ``"a"`` (after ``"b"`` is removed)."""
    return "a"


register_policy_mapping_fn("callbacks_test_all_a", all_a)


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


def test_each_game_starts_once_and_ends_once_and_its_agents_count_per_module() -> None:
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
    open_games: dict[int, str] = {}
    created = [e for e in events if e[1] == "created"]
    events = [e for e in events if e[1] != "created"]
    # on_episode_created comes first, for the new game object (no agent in it before the reset's data).
    assert [e[2:4] for e in created] == [e[2:4] for e in events if e[1] == "start"]
    assert all(agents == 0 for *_, agents in created)
    for _, kind, env_index, game_id, length in events:
        if kind == "start":
            assert env_index not in open_games and length == 0
            open_games[env_index] = game_id
        else:
            assert open_games.pop(env_index) == game_id and length >= 1
    assert result["env_runners/games"] == len(ends)
    assert result["env_runners/agent_episodes"] == 2 * len(ends)  # both players of every game
    wins = sum(result.get(f"env_runners/wins/{m}", 0) for m in ("a", "b"))
    assert 0 <= wins <= len(ends)  # at most one winner per game
    assert result["env_runners/num_episodes_lifetime"] == 2 * len(ends)  # the runner's own per-agent count


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


def test_a_game_in_flight_whose_module_is_removed_is_saved_and_restored_with_its_new_module(tmp_path: Any) -> None:
    algo = PPO(config())
    try:
        algo.train()
        games = [e for e in algo.env_runner._games.episodes if e is not None]
        assert any(e.module_for(a) == "b" for e in games for a in e.agent_episodes), "a game in flight uses b"
        algo.remove_module("b", new_agent_to_module_mapping_fn="callbacks_test_all_a")
        games = [e for e in algo.env_runner._games.episodes if e is not None]
        assert {e.module_for(a) for e in games for a in e.agent_episodes} == {"a"}
        assert {a.module_id for e in games for a in e.agent_episodes.values()} == {"a"}
        path = algo.save_to_path(str(tmp_path / "ck"))
        expected = algo.train().flatten(wall_clock=False)
    finally:
        algo.stop()
    resumed = PPO.from_checkpoint(path)
    try:
        got = resumed.train().flatten(wall_clock=False)
    finally:
        resumed.stop()
    keys = [k for k in expected if k.startswith("env_runners/")]
    assert "env_runners/games" in keys or "env_runners/agent_episodes" in keys
    assert {k: got.get(k) for k in keys} == {k: expected.get(k) for k in keys}


def test_rllibs_sample_calls_the_hooks_per_game_with_the_earlier_chunks() -> None:
    from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner

    # One copy: a sample(num_episodes=) call ends no game beyond those it returns.
    runner = MultiAgentEnvRunner(config(callbacks_class=CountGames, num_envs_per_env_runner=1))
    callback = runner.callbacks[0]
    assert isinstance(callback, CountGames)
    steps = 0
    for _ in range(3):  # 4 env steps per call: games (up to 9 moves) run across calls
        episodes = runner.sample(num_timesteps=4)
        steps += sum(len(e) for e in episodes)
    done = runner.sample(num_episodes=2)
    steps += sum(len(e) for e in done)
    assert callback.counts["sample"] == 4 and callback.counts["end"] >= 2
    assert callback.counts["start"] - callback.counts["end"] == len(callback.lengths)  # games still in flight
    assert callback.counts["step"] == steps
