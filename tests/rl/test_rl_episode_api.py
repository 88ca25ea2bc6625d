"""RLlib's Episode API in episode hooks (issue 28 item 4, issue 27 item 6): custom_data across a checkpoint."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rl_helpers import small_config

import cairn.rl.env.games
from cairn.rl import PPO, PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.episodes import EpisodeTracker, SingleAgentEpisode
from cairn.testing import assert_states_equal
from callback_helpers import LongEpisodes
from episode_callbacks_helpers import AgentCustomData, BadCustomData, IntAgentIds, PoleAngles

TINY = {"rollout_length": 24, "minibatch_size": 24, "num_epochs": 1, "model_config": {"hidden_sizes": [8]}}


def _results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


class Collect(RLlibCallback):
    """Keeps every ended episode's history (this process only)."""

    ended: list[dict[str, Any]] = []

    def on_episode_end(self, *, episode: SingleAgentEpisode, **kwargs: Any) -> None:
        Collect.ended.append(
            {
                "id": episode.id_,
                "len": len(episode),
                "return": episode.get_return(),
                "rewards": episode.get_rewards(),
                "obs": episode.get_observations(),
                "actions": episode.get_actions(),
                "infos": episode.get_infos(),
                "last_two": episode.get_rewards(slice(-2, None)),
                "picked": episode.get_observations([0, -1]),
                "done": (episode.is_done, episode.is_terminated, episode.is_truncated),
                "module": episode.module_for(),
            }
        )


def test_an_ended_episode_holds_its_whole_history() -> None:
    Collect.ended = []
    runner = EnvRunner(small_config(**TINY, num_envs_per_env_runner=3, callbacks_class=Collect))
    try:
        runner.sample_batches()
        runner.sample_batches()
        runner.sample_batches()
    finally:
        runner.close()
    assert Collect.ended
    ids = [e["id"] for e in Collect.ended]
    assert len(set(ids)) == len(ids)
    for e in Collect.ended:
        n = e["len"]
        assert len(e["rewards"]) == len(e["actions"]) == n and len(e["obs"]) == len(e["infos"]) == n + 1
        assert e["return"] == sum(e["rewards"]) == n  # CartPole: a reward of 1 per step
        assert e["last_two"] == e["rewards"][-2:] and len(e["picked"]) == 2
        assert np.array_equal(e["picked"][1], e["obs"][-1])
        assert all(a in (0, 1) for a in e["actions"])
        assert e["done"][0] and e["done"][1] != e["done"][2] and e["module"] == "default_policy"
        # The final observation is the one that ended it (a pole past 12 degrees, or a cart out of bounds).
        final = e["obs"][-1]
        assert e["done"][1] == bool(abs(final[2]) > 0.2095 or abs(final[0]) > 2.4)


def test_no_episode_objects_without_an_episode_hook() -> None:
    runner = EnvRunner(small_config(**TINY))
    try:
        runner.sample_batches()
        assert runner.episode_tracker is None
    finally:
        runner.close()
    hooked = EnvRunner(small_config(**TINY, callbacks_class=LongEpisodes))
    try:
        assert hooked.episode_tracker is not None
    finally:
        hooked.close()


def test_custom_data_of_episodes_in_flight_survives_a_checkpoint(tmp_path: Path) -> None:
    straight = PPO(small_config(**TINY, callbacks_class=PoleAngles))
    try:
        _results(straight, 1)
        tracker = straight.env_runner.episode_tracker
        assert tracker is not None
        in_flight = [(e.id_, len(e), list(e.custom_data["angles"])) for e in tracker.episodes]
        assert all(n > 0 for _, n, _ in in_flight)  # the checkpoint cuts episodes in two
        saved = tracker.get_state()
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, 2)
        expected_state = straight.env_runner.get_state()
    finally:
        straight.stop()
    assert expected[-1]["env_runners/pole_angle_max"] > 0
    resumed = PPO.from_checkpoint(path)
    try:
        tracker = resumed.env_runner.episode_tracker
        assert tracker is not None
        assert [(e.id_, len(e), e.custom_data["angles"]) for e in tracker.episodes] == in_flight
        assert_states_equal(tracker.get_state(), saved)
        assert _results(resumed, 2) == expected  # on_episode_end saw the whole episodes' custom_data
        assert_states_equal(resumed.env_runner.get_state(), expected_state)
    finally:
        resumed.stop()


def test_a_value_a_checkpoint_cannot_hold_is_refused_at_save_naming_key_and_episode(tmp_path: Path) -> None:
    algo = PPO(small_config(**TINY, callbacks_class=BadCustomData))
    try:
        algo.train()
        with pytest.raises(TypeError, match=r"episode '0-0-\d+' .*custom_data\['handle'\] is a builtins\.object"):
            algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()


def test_a_checkpoint_without_episode_data_starts_episode_objects_from_the_restored_observations(
    tmp_path: Path,
) -> None:
    algo = PPO(small_config(**TINY))  # no episode hook: no episode objects in the checkpoint
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        state = restored.env_runner.get_state()
    finally:
        restored.stop()
    runner = EnvRunner(small_config(**TINY, callbacks_class=PoleAngles))
    try:
        runner.set_state(state)
        assert runner.episode_tracker is not None
        assert all(len(e) == 0 and e.custom_data == {} for e in runner.episode_tracker.episodes)
        assert np.array_equal(runner.episode_tracker.episodes[0].get_observations(0), runner._obs[0])
        # on_episode_start fires for the new episode objects first: PoleAngles' steps find their list
        runner.sample_batches()
        assert all(len(e.custom_data["angles"]) == len(e) + 1 for e in runner.episode_tracker.episodes)
    finally:
        runner.close()


TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"


def _game_config(**overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=TICTACTOE,
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=7,  # iterations end mid-game
        minibatch_size=14,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("a", "b"),
        policy_mapping={"player_0": "a", "player_1": "b"},
        callbacks_class=AgentCustomData,
    )
    return dataclasses.replace(base, **overrides)


def test_multi_agent_episodes_keep_custom_data_across_a_checkpoint(tmp_path: Path) -> None:
    straight = PPO(_game_config())
    try:
        _results(straight, 1)
        games = straight.env_runner._games.episodes
        in_flight = {e.id_: dict(e.custom_data) for e in games if e is not None}
        assert in_flight and any(d["steps"] > 0 for d in in_flight.values())
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, 2)
    finally:
        straight.stop()
    assert expected[-1]["env_runners/by_module/a"] > 0 and expected[-1]["env_runners/by_module/b"] > 0
    resumed = PPO.from_checkpoint(path)
    try:
        assert {e.id_: e.custom_data for e in resumed.env_runner._games.episodes if e is not None} == in_flight
        assert _results(resumed, 2) == expected
    finally:
        resumed.stop()


class DictCorridor(gym.Env[dict[str, Any], int]):
    """A corridor with a Dict observation (position and a goal id): episodes of 3 steps."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(0.0, 10.0, (1,)), "goal": gym.spaces.Discrete(3)})
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.pos = 0.0
        return {"pos": np.array([self.pos], np.float32), "goal": 2}, {"start": True}

    def step(self, action: int) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.pos += 1.0
        return (
            {"pos": np.array([self.pos], np.float32), "goal": 2},
            float(action),
            self.pos >= 3,
            False,
            {"at": self.pos},
        )


def test_episode_objects_of_a_dict_observation_env_round_trip() -> None:
    envs = gym.vector.SyncVectorEnv([DictCorridor] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, infos = envs.reset(seed=0)
    tracker = EpisodeTracker(0, ["default_agent"] * 2, ["default_policy"] * 2, obs, infos)
    ended = []
    for t in range(5):
        actions = np.array([t % 2, 1])
        obs, rewards, terms, truncs, infos = envs.step(actions)
        tracker.step(obs, actions, rewards, terms, truncs, infos)
        for slot in np.flatnonzero(terms | truncs):
            ended.append(tracker.episodes[slot])
            tracker.begin_next(int(slot))
    first = ended[0]
    assert [o["pos"][0] for o in first.get_observations()] == [0.0, 1.0, 2.0, 3.0]
    assert first.get_infos()[0] == {"start": True} and [i["at"] for i in first.get_infos()[1:]] == [1.0, 2.0, 3.0]
    assert first.get_actions() == [0, 1, 0] and first.get_rewards() == [0.0, 1.0, 0.0] and first.is_terminated
    restored = EpisodeTracker(0, ["default_agent"] * 2, ["default_policy"] * 2, obs, infos)
    restored.set_state(tracker.get_state())
    for mine, back in zip(tracker.episodes, restored.episodes, strict=True):
        assert (back.id_, len(back), back.get_rewards(), back.get_actions()) == (
            mine.id_,
            len(mine),
            mine.get_rewards(),
            mine.get_actions(),
        )
        assert all(
            np.array_equal(a["pos"], b["pos"]) and a["goal"] == b["goal"]
            for a, b in zip(mine.get_observations(), back.get_observations(), strict=True)
        )


def _int_id_config() -> PPOConfig:
    from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole

    base = small_config(**TINY, num_envs_per_env_runner=2, seed=17, callbacks_class=IntAgentIds)
    cfg = dataclasses.replace(base, policies=("p0", "p1"), policy_mapping={0: "p0", 1: "p1"})
    return cfg.environment(MultiAgentCartPole, env_config={"num_agents": 2})


def _game_ids(runner: Any) -> dict[str, tuple[list[Any], list[Any]]]:
    """Game id -> (its agents, the ids its hooks saw) of the runner's games in flight."""
    return {
        e.id_: (list(e.agent_episodes), list(e.custom_data["ids"])) for e in runner._games.episodes if e is not None
    }


def test_int_agent_ids_reach_the_hooks_as_ints_and_come_back_from_a_checkpoint_as_ints(tmp_path: Path) -> None:
    """MultiAgentCartPole (agents 0, 1): every hook sees an int ``episode.agent_id``; a checkpoint taken
    mid-episode keeps the ids and custom_data of the episodes in flight as ints, and the run goes on bit for bit."""
    straight = PPO(_int_id_config())
    try:
        _results(straight, 1)
        in_flight = _game_ids(straight.env_runner)
        assert in_flight and all(type(agent) is int for agents, ids in in_flight.values() for agent in [*agents, *ids])
        path = straight.save_to_path(tmp_path / "mid")
        expected = _results(straight, 2)
    finally:
        straight.stop()
    counted = [k for k in expected[-1] if k.startswith("env_runners/agent_")]
    assert {k.rsplit("/", 1)[-1] for k in counted} == {"int"}  # no hook ever saw a str id
    assert {"env_runners/agent_0/int", "env_runners/agent_1/int"} <= set(counted)
    resumed = PPO.from_checkpoint(path)
    try:
        runner = resumed.env_runner
        assert not runner.episodes_restarted
        got = _game_ids(runner)
        assert got == in_flight and all(type(agent) is int for agents, ids in got.values() for agent in [*agents, *ids])
        assert _results(resumed, 2) == expected
    finally:
        resumed.stop()
