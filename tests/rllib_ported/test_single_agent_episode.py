"""RLlib's ``rllib/env/tests/test_single_agent_episode.py`` on cairn (issue 38, item 3).

Same test names, cases and expected values as RLlib 2.60's (one pytest function per
``unittest`` method); ``ray.rllib`` -> ``cairn.rl``.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl.env.single_agent_episode import SingleAgentEpisode
from cairn.rl.utils.test_utils import check


class TestEnv(gym.Env[int, int]):
    """RLlib's test env: observation and reward ``t``, terminated at t=200."""

    __test__ = False  # RLlib's name; not a pytest class

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Discrete(201)
        self.action_space = gym.spaces.Discrete(200)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        self.t = 0
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.t, self.t, self.t == 200, False, {}


class DictTestEnv(gym.Env[dict[str, Any], int]):
    """RLlib's env with Dict observations that never ends."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Dict(a=gym.spaces.Discrete(10), b=gym.spaces.Box(0, 1, shape=(1,)))
        self.action_space = gym.spaces.Discrete(10)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.observation_space.sample(), {}

    def step(self, action: int) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        return self.observation_space.sample(), 0.0, False, False, {}


def _create_episode(num_data: int, t_started: int | None = None, len_lookback_buffer: int = 0) -> SingleAgentEpisode:
    env = gym.make("CartPole-v1")
    observations: list[Any] = []
    rewards: list[float] = []
    actions: list[Any] = []
    infos: list[dict[str, Any]] = []
    extra_model_outputs: dict[str, list[Any]] = defaultdict(list)
    init_obs, init_info = env.reset()
    observations.append(init_obs)
    infos.append(init_info)
    for _ in range(num_data):
        action = env.action_space.sample()
        obs, reward, _, _, info = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        infos.append(info)
        extra_model_outputs["extra_1"].append(np.random.random())
        extra_model_outputs["state_out"].append(np.random.random())
    return SingleAgentEpisode(
        observations=observations,
        infos=infos,
        actions=actions,
        rewards=rewards,
        extra_model_outputs=extra_model_outputs,
        t_started=t_started,
        len_lookback_buffer=len_lookback_buffer,
    )


def _fill(episode: SingleAgentEpisode, env: TestEnv, actions: range) -> None:
    for i in actions:
        obs, reward, terminated, truncated, info = env.step(i)
        episode.add_env_step(
            observation=obs,
            action=i,
            reward=reward,
            infos=info,
            terminated=terminated,
            truncated=truncated,
            extra_model_outputs={"extra": np.random.random(1)},
        )


def test_init() -> None:
    episode = SingleAgentEpisode()
    assert episode.t_started == episode.t == 0
    episode = SingleAgentEpisode(t_started=10)
    assert episode.t == episode.t_started == 10

    episode = _create_episode(num_data=100)
    assert len(episode) == 100
    assert episode.t == 100
    assert episode.t_started == 0

    episode = _create_episode(num_data=100, len_lookback_buffer=10)
    assert len(episode) == 90
    assert episode.t_started == 0
    assert episode.t == 90
    assert len(episode.rewards) == 90
    assert len(episode.rewards.data) == 100

    episode = _create_episode(num_data=100, len_lookback_buffer=10, t_started=50)
    assert len(episode) == 90
    assert episode.t_started == 50
    assert episode.t == 140
    assert len(episode.rewards) == 90
    assert len(episode.rewards.data) == 100


def test_add_env_reset() -> None:
    episode = SingleAgentEpisode()
    env = gym.make("CartPole-v1")
    obs, info = env.reset()
    episode.add_env_reset(observation=obs, infos=info)
    assert len(episode.observations) == 1
    assert len(episode.infos) == 1
    assert episode.t == episode.t_started == 0


def test_add_env_step() -> None:
    episode = SingleAgentEpisode(len_lookback_buffer=10)
    env = gym.make("CartPole-v1")
    obs, info = env.reset(seed=0)
    episode.add_env_reset(observation=obs, infos=info)
    terminated = truncated = False
    i = 0
    for i in range(100):  # noqa: B007 (RLlib reads i after the loop)
        action = env.action_space.sample()
        obs, reward, terminated, truncated, info = env.step(action)
        episode.add_env_step(
            observation=obs,
            action=action,
            reward=reward,
            infos=info,
            terminated=terminated,
            truncated=truncated,
            extra_model_outputs={"extra": np.random.random(1)},
        )
        if terminated or truncated:
            break
    assert episode.t == len(episode.observations) - 1 == i + 1
    assert episode.t_started == 0
    assert (
        len(episode.actions) == len(episode.rewards) == len(episode.observations) - 1 == len(episode.infos) - 1 == i + 1
    )
    assert episode.is_terminated == terminated
    assert episode.is_truncated == truncated
    assert episode.is_done == (terminated or truncated)


def test_getters() -> None:
    episode = SingleAgentEpisode(
        observations=[0, 1, 2, 3, 4, 5, 6],
        actions=[0, 1, 2, 3, 4, 5],
        rewards=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
        len_lookback_buffer=0,
    )
    check(episode.get_observations(0), 0)
    check(episode.get_observations([0, 1]), [0, 1])
    check(episode.get_observations([-1]), [6])
    check(episode.get_observations(-2), 5)
    check(episode.get_observations(slice(1, 3)), [1, 2])
    check(episode.get_observations(slice(-3, None)), [4, 5, 6])

    check(episode.get_actions(0), 0)
    check(episode.get_actions([0, 1]), [0, 1])
    check(episode.get_actions([-1]), [5])
    check(episode.get_actions(-2), 4)
    check(episode.get_actions(slice(1, 3)), [1, 2])
    check(episode.get_actions(slice(-3, None)), [3, 4, 5])

    check(episode.get_rewards(0), 0.0)
    check(episode.get_rewards([0, 1]), [0.0, 0.1])
    check(episode.get_rewards([-1]), [0.5])
    check(episode.get_rewards(-2), 0.4)
    check(episode.get_rewards(slice(1, 3)), [0.1, 0.2])
    check(episode.get_rewards(slice(-3, None)), [0.3, 0.4, 0.5])


def test_cut() -> None:
    episode_1 = SingleAgentEpisode()
    env = TestEnv()
    init_obs, init_info = env.reset()
    episode_1.add_env_reset(observation=init_obs, infos=init_info)
    _fill(episode_1, env, range(100))
    assert episode_1.t == 100

    episode_2 = episode_1.cut()
    assert episode_1.id_ == episode_2.id_
    assert episode_1.t == episode_2.t == episode_2.t_started
    assert episode_1.observations[-1] == episode_2.observations[0]
    assert episode_1.infos[-1] == episode_2.infos[0]

    _fill(episode_2, env, range(100, 101))
    assert len(episode_1.observations) != len(episode_2.observations)


def _check_slice(slice_: SingleAgentEpisode, length: int, observations: list[int]) -> None:
    """RLlib's five checks of each slice: length, observations, actions, rewards (obs / 10), not done."""
    check(len(slice_), length)
    check(slice_.observations, observations)
    check(slice_.actions, observations[:-1])
    check(slice_.rewards, [o / 10 for o in observations[:-1]])
    check(slice_.is_done, False)


def test_slice() -> None:
    observations = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    actions = observations[:-1]
    rewards = [o / 10 for o in observations[:-1]]
    episode = SingleAgentEpisode(observations=observations, actions=actions, rewards=rewards, len_lookback_buffer=0)
    check(len(episode), 9)
    for s in [slice(None, None, None), slice(-100, None, None), slice(None, 1000, None), slice(-1000, 1000, None)]:
        _check_slice(episode[s], len(episode), observations)
    _check_slice(episode[-100:], len(episode), observations)
    _check_slice(episode[2:], 7, [2, 3, 4, 5, 6, 7, 8, 9])
    _check_slice(episode[:1], 1, [0, 1])
    _check_slice(episode[:3], 3, [0, 1, 2, 3])
    _check_slice(episode[:-4], 5, [0, 1, 2, 3, 4, 5])
    _check_slice(episode[-2:], 2, [7, 8, 9])
    _check_slice(episode[-3:], 3, [6, 7, 8, 9])
    _check_slice(episode[-5:], 5, [4, 5, 6, 7, 8, 9])
    _check_slice(episode[-4:-2], 2, [5, 6, 7])
    _check_slice(episode[-4:6], 1, [5, 6])
    _check_slice(episode[1:3], 2, [1, 2, 3])

    # With some of the data in the lookback buffer.
    episode = SingleAgentEpisode(observations=observations, actions=actions, rewards=rewards, len_lookback_buffer=4)
    check(len(episode), 5)
    for s in [slice(None, None, None), slice(-100, None, None), slice(None, 1000, None), slice(-1000, 1000, None)]:
        _check_slice(episode[s], len(episode), [4, 5, 6, 7, 8, 9])
    _check_slice(episode[2:], 3, [6, 7, 8, 9])
    _check_slice(episode[:1], 1, [4, 5])
    _check_slice(episode[:3], 3, [4, 5, 6, 7])
    _check_slice(episode[:-4], 1, [4, 5])
    _check_slice(episode[-2:], 2, [7, 8, 9])
    _check_slice(episode[-3:], 3, [6, 7, 8, 9])
    _check_slice(episode[-5:], 5, [4, 5, 6, 7, 8, 9])
    _check_slice(episode[-4:-2], 2, [5, 6, 7])
    _check_slice(episode[-4:2], 1, [5, 6])
    _check_slice(episode[1:3], 2, [5, 6, 7])

    # Even split (50/50) of a numpy'ized episode.
    episode = _create_episode(100)
    assert episode.t == 100 and episode.t_started == 0
    episode.to_numpy()
    e1 = episode[:50]
    assert e1.is_numpy
    e2 = episode.slice(slice(50, None))
    assert e2.is_numpy
    assert len(e1) == 50 and len(e2) == 50
    assert e1.id_ == e2.id_
    assert e1.t_started == 0 and e1.t == 50
    assert e2.t_started == 50 and e2.t == 100
    check(e1.get_observations(-1), e2.get_observations(0))
    check(e1.observations[4], e2.observations[4], false=True)
    check(e1.observations[10], e2.observations[10], false=True)

    # Uneven split (33/66).
    episode = _create_episode(99)
    assert episode.t == 99 and episode.t_started == 0
    episode.to_numpy()
    e1 = episode.slice(slice(None, 33))
    assert e1.is_numpy
    e2 = episode[33:]
    assert e2.is_numpy
    assert len(e1) == 33 and len(e2) == 66
    assert e1.id_ == e2.id_
    assert e1.t_started == 0 and e1.t == 33
    assert e2.t_started == 33 and e2.t == 99
    check(e1.get_observations(-1), e2.get_observations(0))
    check(e1.observations[4], e2.observations[4], false=True)
    check(e1.observations[10], e2.observations[10], false=True)

    # Split with a lookback buffer (buffer=10, split=20/30).
    len_lookback_buffer = 10
    episode = _create_episode(num_data=60, t_started=15, len_lookback_buffer=len_lookback_buffer)
    assert episode.t == 65 and episode.t_started == 15
    episode.to_numpy()
    e1 = episode.slice(slice(None, 20))
    assert e1.is_numpy
    e2 = episode[20:]
    assert e2.is_numpy
    assert len(e1) == 20 and len(e2) == 30
    assert e1.id_ == e2.id_
    assert e1.t_started == 15 and e1.t == 35
    assert e2.t_started == 35 and e2.t == 65
    check(e1.get_observations(-1), e2.get_observations(0))
    check(e1.observations[5], e2.observations[5], false=True)
    check(e1.observations[11], e2.observations[11], false=True)
    check(
        e1.get_observations(-1, neg_index_as_lookback=True),
        episode.observations.data[len_lookback_buffer - 1],
    )
    check(e1.get_actions(-1, neg_index_as_lookback=True), episode.actions.data[len_lookback_buffer - 1])
    check(
        e2.get_observations([-5, -2], neg_index_as_lookback=True),
        [
            episode.observations.data[20 + len_lookback_buffer - 5],
            episode.observations.data[20 + len_lookback_buffer - 2],
        ],
    )
    check(
        e2.get_rewards([-5, -2], neg_index_as_lookback=True),
        [
            episode.rewards.data[20 + len_lookback_buffer - 5],
            episode.rewards.data[20 + len_lookback_buffer - 2],
        ],
    )


def test_concat_episode() -> None:
    env = TestEnv()
    init_obs, init_info = env.reset()
    episode_1 = SingleAgentEpisode()
    episode_1.add_env_reset(observation=init_obs, infos=init_info)
    _fill(episode_1, env, range(100))
    episode_2 = episode_1.cut()
    _fill(episode_2, env, range(100, 200))
    assert episode_1.t == episode_2.t_started
    assert episode_2.t == 200

    episode_2.id_ = "wrong"
    with pytest.raises(AssertionError):
        episode_1.concat_episode(episode_2)
    episode_2.id_ = episode_1.id_
    episode_2.t_started += 1
    with pytest.raises(AssertionError):
        episode_1.concat_episode(episode_2)
    episode_2.t_started -= 1
    episode_1.is_terminated = True
    with pytest.raises(AssertionError):
        episode_1.concat_episode(episode_2)
    episode_1.is_terminated = False

    episode_1.concat_episode(episode_2)
    assert episode_1.t_started == 0
    assert episode_1.t == 200
    assert (
        len(episode_1.actions)
        == len(episode_1.rewards)
        == len(episode_1.observations) - 1
        == len(episode_1.infos) - 1
        == 200
    )
    assert episode_2.observations[5] == episode_1.observations[105]


def test_concat_episode_with_complex_obs() -> None:
    env = DictTestEnv()
    init_obs, init_info = env.reset()
    episode_1 = SingleAgentEpisode()
    episode_1.add_env_reset(observation=init_obs, infos=init_info)
    for i in range(4):
        obs, reward, terminated, truncated, info = env.step(i)
        episode_1.add_env_step(
            observation=obs, action=i, reward=reward, infos=info, terminated=terminated, truncated=truncated
        )
    assert len(episode_1) == 4
    episode_2 = episode_1.cut()
    for i in range(6):
        obs, reward, terminated, truncated, info = env.step(i)
        episode_2.add_env_step(
            observation=obs, action=i, reward=reward, infos=info, terminated=terminated, truncated=truncated
        )
    assert len(episode_2) == 6
    episode_1.concat_episode(episode_2)
    assert len(episode_1) == 10


def test_get_and_from_state() -> None:
    episode = _create_episode(100)
    state = episode.get_state()
    episode_2 = SingleAgentEpisode.from_state(state)
    assert episode_2.id_ == episode.id_
    assert episode_2.agent_id == episode.agent_id
    assert episode_2.multi_agent_episode_id == episode.multi_agent_episode_id
    check(episode_2.t, episode.t)
    check(episode_2.t_started, episode.t_started)
    check(episode_2.observations[5], episode.observations[5])
    check(episode_2.actions[5], episode.actions[5])
    check(episode_2.rewards[5], episode.rewards[5])
    check(episode_2.infos[5], episode.infos[5])
    check(episode_2.is_terminated, episode.is_terminated)
    check(episode_2.is_truncated, episode.is_truncated)
    assert type(episode_2._observation_space) is type(episode._observation_space)
    assert type(episode_2._action_space) is type(episode._action_space)
    check(episode_2._start_time, episode._start_time)
    check(episode_2._last_step_time, episode._last_step_time)
    check(episode_2.custom_data, episode.custom_data)
    assert episode_2.extra_model_outputs == episode.extra_model_outputs


SETTER_PATTERNS: list[tuple[str, Any, Any]] = [
    ("zero index", 7353.0, 0),
    ("single index", 7353.0, 2),
    ("negative index", 7353.0, -1),
    ("short list of indices", [7353.0], [1]),
    ("long list of indices", [73.0, 53.0, 35.0, 53.0], [1, 2, 3, 4]),
    ("short slice", [7353.0], slice(2, 3)),
    ("long slice", [7.0, 3.0, 5.0, 3.0], slice(2, 6)),
]


def test_setters() -> None:
    some_key = "some_key"
    episode = SingleAgentEpisode(
        observations=[100, 101, 102, 103, 104, 105, 106],
        actions=[1, 2, 3, 4, 5, 6],
        rewards=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        extra_model_outputs={some_key: [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]},
        len_lookback_buffer=0,
    )
    numpy_episode = copy.deepcopy(episode).to_numpy()
    for e in [episode, numpy_episode]:
        for desc, new_data, indices in SETTER_PATTERNS:
            expected_data = new_data
            if e.is_numpy and isinstance(new_data, list):
                new_data = np.array(new_data)
            e.set_observations(new_data=new_data, at_indices=indices)
            check(e.get_observations(indices), expected_data)
            e.set_actions(new_data=new_data, at_indices=indices)
            check(e.get_actions(indices), expected_data)
            e.set_rewards(new_data=new_data, at_indices=indices)
            check(e.get_rewards(indices), expected_data)
            e.set_extra_model_outputs(key=some_key, new_data=new_data, at_indices=indices)
            actual_data = e.get_extra_model_outputs(some_key)
            if desc in ("single index", "zero index", "negative index"):
                check(actual_data[e.t_started + indices], expected_data)
            elif desc in ("long list of indices", "short list of indices"):
                check(actual_data[slice(e.t_started + indices[0], e.t_started + indices[-1] + 1)], expected_data)
            else:
                check([actual_data[e.t_started + i] for i in range(indices.start, indices.stop)], expected_data)


def test_setters_error_cases() -> None:
    episode = _create_episode(100)
    with pytest.raises(IndexError):
        episode.set_observations(new_data=[7, 3, 5, 3], at_indices=slice(0, 2))
    with pytest.raises(AssertionError):
        episode.set_extra_model_outputs(key="nonexistent_key", new_data=999, at_indices=0)
