"""RLlib's ``rllib/env/tests/test_multi_agent_episode.py`` on cairn (issue 38, item 3).

Same test names, cases and expected values as RLlib 2.60's (one pytest function per
``unittest`` method); ``ray.rllib`` -> ``cairn.rl``. RLlib's ``setUpClass`` starts Ray,
which none of its tests use, so it is left out. ``test_other_getters`` and
``test_get_sample_batch`` return on their first line in RLlib (their bodies are dead code
there, kept out here), as does the end of ``test_cut`` after its ``return``.

The file is RLlib's newest version (after 2.60: ray 2.60 itself fails ``test_init``, ``test_cut``,
``test_slice`` and ``test_concat_episode``). ``test_cut`` fails here on purpose in one case
(docs/rllib_parity.md): cairn's ``cut()`` keeps an agent whose action hangs since an older
observation.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from cairn.rl.env.multi_agent_env import MultiAgentEnv
from cairn.rl.env.multi_agent_episode import MultiAgentEpisode
from cairn.rl.utils.test_utils import check

MultiAgentDict = dict[Any, Any]


class MultiAgentTestEnv(MultiAgentEnv):
    """RLlib's test env: ten agents, a random subset of them steps each time; agents 1 and 5 die."""

    def __init__(self, truncate: bool = True) -> None:
        super().__init__()
        self.t = 0
        self._agent_ids = {"agent_" + str(i) for i in range(10)}
        self.observation_space = gym.spaces.Dict({agent_id: gym.spaces.Discrete(201) for agent_id in self._agent_ids})
        self.action_space = gym.spaces.Dict({agent_id: gym.spaces.Discrete(200) for agent_id in self._agent_ids})
        self._agents_alive = set(self._agent_ids)
        self.truncate = truncate

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        super().reset(seed=seed, options=options)
        self.t = 0
        num_agents_step = self._np_random.integers(1, len(self._agent_ids) + 1)  # type: ignore[union-attr]
        agents_step = self._np_random.choice(  # type: ignore[union-attr]
            np.array(sorted(self._agent_ids)), num_agents_step, replace=False
        )
        init_obs = {agent_id: 0 for agent_id in agents_step}
        init_info: MultiAgentDict = {agent_id: {} for agent_id in agents_step}
        self._agents_alive = set(self._agent_ids)
        return init_obs, init_info

    def step(
        self, action_dict: MultiAgentDict
    ) -> tuple[MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict, MultiAgentDict]:
        self.t += 1
        num_agents_step = self._np_random.integers(1, len(self._agents_alive) + 1)  # type: ignore[union-attr]
        agents_step = self._np_random.choice(  # type: ignore[union-attr]
            np.array(sorted(self._agents_alive)), num_agents_step, replace=False
        )
        # About to truncate: every agent still alive gets an obs (its last one).
        if self.t >= 200 and self.truncate:
            agents_step = self._agents_alive

        obs: MultiAgentDict = {agent_id: self.t for agent_id in agents_step}
        info: MultiAgentDict = {agent_id: {} for agent_id in agents_step}
        reward: MultiAgentDict = {agent_id: 1.0 for agent_id in agents_step}
        # Also agents without observations get rewards.
        reward.update(
            {
                agent_id: 1.0
                for agent_id in self._np_random.choice(  # type: ignore[union-attr]
                    np.array(sorted(self._agents_alive)), num_agents_step, replace=False
                )
                if agent_id not in reward
            }
        )

        is_truncated: MultiAgentDict = {"__all__": False}
        is_truncated.update({agent_id: False for agent_id in agents_step})
        is_terminated: MultiAgentDict = {"__all__": False}
        is_terminated.update({agent_id: False for agent_id in agents_step})

        if self.t == 50:
            # Agent 1 dies (with an observation).
            is_terminated["agent_1"] = True
            is_truncated["agent_1"] = False
            self._agents_alive -= {"agent_1"}
            obs.update({"agent_1": self.t})
            reward.update({"agent_1": 1.0})
            info.update({"agent_1": {}})

        if self.t == 100 and "agent_5":
            # Agent 5 dies (with an observation).
            is_terminated["agent_5"] = True
            is_truncated["agent_5"] = False
            self._agents_alive -= {"agent_5"}
            obs.update({"agent_5": self.t})
            reward.update({"agent_5": 1.0})
            info.update({"agent_5": {}})

        if self.t >= 200 and self.truncate:
            is_truncated["__all__"] = True
            is_truncated.update({agent_id: True for agent_id in agents_step})

        return obs, reward, is_terminated, is_truncated, info


def test_init() -> None:
    # Create an empty episode.
    episode = MultiAgentEpisode()
    assert episode.env_t_started == episode.env_t == 0

    # Create an episode with a specific starting point, but no data.
    episode = MultiAgentEpisode(env_t_started=10)
    assert episode.env_t == episode.env_t_started == 10

    # A simple multi-agent episode; check all internals after construction.
    observations: list[MultiAgentDict] = [{"a0": 0, "a1": 0}, {"a1": 1}, {"a1": 2}, {"a1": 3}]
    actions: list[MultiAgentDict] = [{"a0": 0, "a1": 0}, {"a1": 1}, {"a1": 2}]
    rewards: list[MultiAgentDict] = [{"a0": 0.1, "a1": 0.1}, {"a1": 0.2}, {"a1": 0.3}]
    episode = MultiAgentEpisode(observations=observations, actions=actions, rewards=rewards)
    check(episode.agent_episodes["a0"].observations.data, [0])
    check(episode.agent_episodes["a1"].observations.data, [0, 1, 2, 3])
    check(episode.agent_episodes["a0"].actions.data, [])
    check(episode.agent_episodes["a1"].actions.data, [0, 1, 2])
    check(episode.agent_episodes["a0"].rewards.data, [])
    check(episode.agent_episodes["a1"].rewards.data, [0.1, 0.2, 0.3])
    check(episode._hanging_actions_end, {"a0": 0})
    check(episode._hanging_rewards_end, {"a0": 0.1})
    check(episode._hanging_extra_model_outputs_end, {"a0": {}})
    check(episode.env_t_to_agent_t["a0"].data, [0, "S", "S", "S"])
    check(episode.env_t_to_agent_t["a1"].data, [0, 1, 2, 3])
    check(episode.env_t_to_agent_t["a0"].lookback, 3)
    check(episode.env_t_to_agent_t["a1"].lookback, 3)

    # One of the agents doesn't step after reset.
    observations = [{"a0": 0}, {"a1": 1}, {"a0": 2, "a1": 2}, {"a1": 3}, {"a1": 4}]
    actions = [{"a0": 0}, {"a1": 1}, {"a0": 2, "a1": 2}, {"a1": 3}]
    rewards = [{"a0": 0.1}, {"a1": 0.2}, {"a0": 0.3, "a1": 0.3}, {"a1": 0.4}]
    episode = MultiAgentEpisode(observations=observations, actions=actions, rewards=rewards)
    check(episode.agent_episodes["a0"].observations.data, [0, 2])
    check(episode.agent_episodes["a1"].observations.data, [1, 2, 3, 4])
    check(episode.agent_episodes["a0"].actions.data, [0])
    check(episode.agent_episodes["a1"].actions.data, [1, 2, 3])
    check(episode.agent_episodes["a0"].rewards.data, [0.1])
    check(episode.agent_episodes["a1"].rewards.data, [0.2, 0.3, 0.4])
    check(episode._hanging_actions_end, {"a0": 2})
    check(episode._hanging_rewards_end, {"a0": 0.3})
    check(episode._hanging_extra_model_outputs_end, {"a0": {}})
    check(episode.env_t_to_agent_t["a0"].data, [0, "S", 1, "S", "S"])
    check(episode.env_t_to_agent_t["a1"].data, ["S", 0, 1, 2, 3])
    check(episode.env_t_to_agent_t["a0"].lookback, 4)
    check(episode.env_t_to_agent_t["a1"].lookback, 4)

    # Sample 100 values and initialize the episode with observations.
    env = MultiAgentTestEnv()
    observations = []
    rewards = []
    actions = []
    infos: list[MultiAgentDict] = []
    terminateds: MultiAgentDict = {}
    truncateds: MultiAgentDict = {}
    extra_model_outputs: list[MultiAgentDict] = []
    agent_0_steps: list[Any] = []
    agent_0_num_steps = 0

    obs, info = env.reset(seed=0)
    # If "agent_0" is part of the reset obs, it steps in the first ts.
    agent_0_steps.append(agent_0_num_steps if "agent_0" in obs else episode.SKIP_ENV_TS_TAG)
    if "agent_0" in obs:
        agent_0_num_steps += 1
    observations.append(obs)
    infos.append(info)

    for i in range(100):
        agents_to_step_next = [aid for aid in obs if aid in env._agents_alive]
        action = {agent_id: i + 1 for agent_id in agents_to_step_next}
        obs, reward, terminated, truncated, info = env.step(action)
        agent_0_steps.append(agent_0_num_steps if "agent_0" in obs else episode.SKIP_ENV_TS_TAG)
        if "agent_0" in obs:
            agent_0_num_steps += 1
        observations.append(obs)
        actions.append(action)
        rewards.append(reward)
        infos.append(info)
        terminateds.update(terminated)
        truncateds.update(truncated)
        extra_model_outputs.append({agent_id: {"extra_1": 10.5} for agent_id in agents_to_step_next})

    # All given data is lookback; the episode (chunk) starts at its end.
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=terminateds,
        truncateds=truncateds,
        extra_model_outputs=extra_model_outputs,
        env_t_started=len(rewards),
        len_lookback_buffer="auto",  # default
    )
    assert episode.env_t == episode.env_t_started == len(rewards)
    assert episode.agent_episodes["agent_1"].is_terminated
    assert episode.agent_episodes["agent_5"].is_terminated
    for agent_id in env.agents:
        if agent_id != "agent_1" and agent_id != "agent_5":
            assert not episode.agent_episodes[agent_id].is_done
    check(episode.env_t_to_agent_t["agent_0"].data, agent_0_steps)

    # Initialize an episode and set its starting timestep.
    episode = MultiAgentEpisode(
        observations=observations[-11:],
        actions=actions[-10:],
        rewards=rewards[-10:],
        infos=infos[-11:],
        terminateds=terminateds,
        truncateds=truncateds,
        extra_model_outputs=extra_model_outputs[-10:],
        env_t_started=100,
        len_lookback_buffer="auto",  # default: all data goes into lookback buffers
    )
    check(episode.env_t, episode.env_t_started, 100)
    # All data went into lookback buffers: every length is 0.
    check(len(episode), 0)
    for agent_id in episode.agent_ids:
        check(len(episode.agent_episodes[agent_id]), 0)
        check(len(episode.agent_episodes[agent_id].observations), 1)
        check(len(episode.agent_episodes[agent_id].actions), 0)
        check(len(episode.agent_episodes[agent_id].rewards), 0)
        check(episode.agent_episodes[agent_id].is_truncated, False)
        check(episode.agent_episodes[agent_id].is_numpy, False)
    check(episode.agent_episodes["agent_5"].is_terminated, True)
    check(episode.env_t_to_agent_t["agent_5"].data, ["S", 0, 1, "S", 2, 3, 4, 5, 6, 7, 8])

    # Agents that have never stepped (agent 5 here).
    (observations, actions, rewards, terminateds, truncateds, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=terminateds,
        truncateds=truncateds,
        len_lookback_buffer=0,
    )
    check(len(episode.agent_episodes["agent_1"]), 1)
    check(len(episode.agent_episodes["agent_2"]), 1)
    check(len(episode.agent_episodes["agent_3"]), 1)
    check(len(episode.agent_episodes["agent_4"]), 1)


def test_add_env_reset() -> None:
    env = MultiAgentTestEnv()
    episode = MultiAgentEpisode(observation_space=env.observation_space, action_space=env.action_space)
    obs, infos = env.reset(seed=0)
    episode.add_env_reset(observations=obs, infos=infos)
    assert episode.env_t == episode.env_t_started == 0
    for agent_id in env.agents:
        if agent_id in obs:
            assert len(episode.agent_episodes[agent_id].observations) > 0
            assert len(episode.agent_episodes[agent_id].infos) > 0
            check(episode.env_t_to_agent_t[agent_id].data, [0])
        else:
            # No reset obs: no single-agent episode yet, an empty mapping.
            assert agent_id not in episode.agent_episodes
            check(episode.env_t_to_agent_t[agent_id].data, [])


def test_add_env_step() -> None:
    env = MultiAgentTestEnv()
    episode = MultiAgentEpisode()
    agent_0_steps: list[Any] = []
    agent_0_num_steps = 0

    obs, infos = env.reset(seed=10)
    episode.add_env_reset(observations=obs, infos=infos)
    agent_0_steps.append(agent_0_num_steps if "agent_0" in obs else episode.SKIP_ENV_TS_TAG)
    if "agent_0" in obs:
        agent_0_num_steps += 1

    for i in range(100):
        action = {agent_id: i + 1 for agent_id in obs if agent_id in env._agents_alive}
        obs, reward, terminated, truncated, info = env.step(action)
        agent_0_steps.append(agent_0_num_steps if "agent_0" in obs else episode.SKIP_ENV_TS_TAG)
        if "agent_0" in obs:
            agent_0_num_steps += 1
        episode.add_env_step(
            observations=obs,
            actions=action,
            rewards=reward,
            infos=info,
            terminateds=terminated,
            truncateds=truncated,
            extra_model_outputs={agent_id: {"extra": 10.5} for agent_id in action},
        )

    check(episode.env_t, 100)
    assert not episode.is_done
    assert episode.agent_episodes["agent_1"].is_done
    assert episode.agent_episodes["agent_5"].is_done
    for agent_id in ["agent_1", "agent_5"]:
        assert agent_id not in episode._hanging_actions_end
        assert agent_id not in episode._hanging_rewards_end
        assert agent_id not in episode._hanging_extra_model_outputs_end
    check(episode.env_t_to_agent_t["agent_0"].data, agent_0_steps)

    for i in range(100, 200):
        action = {agent_id: i + 1 for agent_id in obs if agent_id in env._agents_alive}
        obs, reward, terminated, truncated, info = env.step(action)
        episode.add_env_step(
            observations=obs,
            actions=action,
            rewards=reward,
            infos=info,
            terminateds=terminated,
            truncateds=truncated,
            extra_model_outputs={agent_id: {"extra": 10.5} for agent_id in action},
        )

    assert truncated["__all__"]
    for agent_id in episode.agent_ids:
        assert episode.agent_episodes[agent_id].is_done
    # Agents 1 and 5 have nothing after the timesteps they terminated in.
    assert episode.agent_episodes["agent_1"].observations[-1] <= 50
    assert episode.agent_episodes["agent_1"].actions[-1] <= 50
    assert episode.agent_episodes["agent_5"].observations[-1] <= 100
    assert episode.agent_episodes["agent_5"].actions[-1] <= 100

    # Agents that have never stepped (agent 5 here).
    (observations, actions, rewards, terminated, truncated, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=terminated,
        truncateds=truncated,
    )
    # Intermediate rewards get recorded and actions buffered.
    action = {"agent_2": 3, "agent_4": 3}
    reward = {"agent_1": 1.0, "agent_2": 1.0, "agent_3": 1.0, "agent_5": 1.0}
    observation = {"agent_1": 3, "agent_2": 3}
    infos_ = {"agent_1": {}, "agent_2": {}}
    terminated = {k: False for k in observation}
    terminated.update({"__all__": False})
    truncated = {k: False for k in observation}
    truncated.update({"__all__": False})
    episode.add_env_step(
        observations=observation,
        actions=action,
        rewards=reward,
        infos=infos_,
        terminateds=terminated,
        truncateds=truncated,
    )
    # Agent 4 acts, but receives no observation: its action hangs.
    assert episode._hanging_actions_end["agent_4"] is not None
    # The reward caches of agents 3 and 5 (agent 5 has done nothing yet: the begin cache).
    check(episode._hanging_rewards_end["agent_3"], 2.2)
    check(episode._hanging_rewards_begin["agent_5"], 1.0)


def test_get_observations() -> None:
    (observations, actions, rewards, is_terminateds, is_truncateds, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=is_terminateds,
        truncateds=is_truncateds,
        len_lookback_buffer="auto",  # default: use all data as lookback
    )

    obs = episode.get_observations(indices=-1)
    check(obs, {"agent_2": 2, "agent_4": 2})

    # In the order of the `indices` arg.
    obs = episode.get_observations(indices=[-1, -2])
    check(obs, {"agent_1": [1], "agent_2": [2], "agent_3": [1], "agent_4": [2, 1]})

    obs = episode.get_observations(slice(-2, None))
    check(obs, {"agent_1": [1], "agent_2": [2], "agent_3": [1], "agent_4": [1, 2]})

    obs = episode.get_observations(slice(-5, None), fill=-10)
    check(
        obs,
        {
            "agent_1": [-10, -10, 0, 1, -10],
            "agent_2": [-10, -10, 0, -10, 2],
            "agent_3": [-10, -10, 0, 1, -10],
            "agent_4": [-10, -10, -10, 1, 2],
        },
    )

    # `fill` to look into the future (ts=100 and 101).
    obs = episode.get_observations(slice(100, 102), fill=9.9)
    check(
        obs,
        {
            "agent_1": [9.9, 9.9],
            "agent_2": [9.9, 9.9],
            "agent_3": [9.9, 9.9],
            "agent_4": [9.9, 9.9],
        },
    )

    # Lookback with `neg_index_as_lookback=True` and an index list, w/ fill.
    obs = episode.get_observations(indices=[-2, -1], fill=-10, neg_index_as_lookback=True)
    check(
        obs,
        {
            "agent_1": [0, 1],
            "agent_2": [0, -10],
            "agent_3": [0, 1],
            "agent_4": [-10, 1],
        },
    )
    # Same, but w/o fill.
    obs = episode.get_observations(indices=[-2, -1], neg_index_as_lookback=True)
    check(obs, {"agent_1": [0, 1], "agent_2": [0], "agent_3": [0, 1], "agent_4": [1]})

    # Last observations for each individual agent.
    obs = episode.get_observations(indices=-1, env_steps=False)
    check(obs, {"agent_1": 1, "agent_2": 2, "agent_3": 1, "agent_4": 2})

    # With `agent_ids` filters.
    obs = episode.get_observations(-1, env_steps=False, agent_ids="agent_1")
    check(obs, {"agent_1": 1})
    obs = episode.get_observations(-1, env_steps=False, agent_ids=["agent_2"])
    check(obs, {"agent_2": 2})
    obs = episode.get_observations(-1, env_steps=False, agent_ids=("agent_3",))
    check(obs, {"agent_3": 1})
    obs = episode.get_observations(-1, env_steps=False, agent_ids={"agent_4"})
    check(obs, {"agent_4": 2})
    obs = episode.get_observations(-1, env_steps=False, agent_ids=["agent_1", "agent_2"])
    check(obs, {"agent_1": 1, "agent_2": 2})
    obs = episode.get_observations(-2, env_steps=True, agent_ids={"agent_4"})
    check(obs, {"agent_4": 1})
    obs = episode.get_observations([-1, -2], env_steps=True, agent_ids={"agent_4"})
    check(obs, {"agent_4": [2, 1]})

    obs = episode.get_observations(indices=[-1, -2], env_steps=False)
    check(
        obs,
        {
            "agent_1": [1, 0],
            "agent_2": [2, 0],
            "agent_3": [1, 0],
            "agent_4": [2, 1],
        },
    )

    # As a list.
    obs = episode.get_observations(return_list=True)
    check(obs, [{"agent_2": 2, "agent_4": 2}])
    with pytest.raises(ValueError):
        episode.get_observations(env_steps=False, return_list=True)
    obs = episode.get_observations(indices=[-1, -2], return_list=True)
    check(
        obs,
        [
            {"agent_2": 2, "agent_4": 2},
            {"agent_1": 1, "agent_3": 1, "agent_4": 1},
        ],
    )
    obs = episode.get_observations(slice(-1, 1), return_list=True, fill=-8, neg_index_as_lookback=True)
    check(
        obs,
        [
            {"agent_1": 1, "agent_2": -8, "agent_3": 1, "agent_4": 1},
            {"agent_1": -8, "agent_2": 2, "agent_3": -8, "agent_4": 2},
        ],
    )

    # lookback="auto": only the last observations are outside the lookback buffers.
    obs = episode.get_observations(env_steps=False)
    check(obs, {"agent_1": [1], "agent_2": [2], "agent_3": [1], "agent_4": [2]})

    # Initial observations only.
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=observations[0], infos=infos[0])
    obs = episode.get_observations()
    for agent_id, agent_obs in observations[0].items():
        check(obs[agent_id][0], agent_obs)
    obs = episode.get_observations(return_list=True)
    for agent_id, agent_obs in observations[0].items():
        check(obs[0][agent_id], agent_obs)
    obs = episode.get_observations(env_steps=False)
    for agent_id, agent_obs in observations[0].items():
        check(obs[agent_id][0], agent_obs)


def test_get_infos() -> None:
    (observations, actions, rewards, is_terminateds, is_truncateds, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=is_terminateds,
        truncateds=is_truncateds,
        len_lookback_buffer="auto",  # default: use all data as lookback
    )

    inf = episode.get_infos(indices=-1)
    check(inf, infos[-1])

    inf = episode.get_infos(indices=[-1, -2])
    check(
        inf,
        {
            "agent_1": [{"a1_i1": 1.1}],
            "agent_2": [{"a2_i2": 2.2}],
            "agent_3": [{"a3_i1": 3.1}],
            "agent_4": [{"a4_i2": 4.2}, {"a4_i1": 4.1}],
        },
    )

    inf = episode.get_infos(slice(-2, None))
    check(
        inf,
        {
            "agent_1": [{"a1_i1": 1.1}],
            "agent_2": [{"a2_i2": 2.2}],
            "agent_3": [{"a3_i1": 3.1}],
            "agent_4": [{"a4_i1": 4.1}, {"a4_i2": 4.2}],
        },
    )

    inf = episode.get_infos(slice(-5, None), fill={"4": "2"})
    check(
        inf,
        {
            "agent_1": [{"4": "2"}, {"4": "2"}, {"a1_i0": 1}, {"a1_i1": 1.1}, {"4": "2"}],
            "agent_2": [{"4": "2"}, {"4": "2"}, {"a2_i0": 2}, {"4": "2"}, {"a2_i2": 2.2}],
            "agent_3": [{"4": "2"}, {"4": "2"}, {"a3_i0": 3}, {"a3_i1": 3.1}, {"4": "2"}],
            "agent_4": [{"4": "2"}, {"4": "2"}, {"4": "2"}, {"a4_i1": 4.1}, {"a4_i2": 4.2}],
        },
    )

    # `fill` (a non-dict, just to check) to look into the future (ts=100 and 101).
    inf = episode.get_infos(slice(100, 102), fill=9.9)
    check(
        inf,
        {
            "agent_1": [9.9, 9.9],
            "agent_2": [9.9, 9.9],
            "agent_3": [9.9, 9.9],
            "agent_4": [9.9, 9.9],
        },
    )

    inf = episode.get_infos(indices=[-2, -1], fill=-10, neg_index_as_lookback=True)
    check(
        inf,
        {
            "agent_1": [{"a1_i0": 1}, {"a1_i1": 1.1}],
            "agent_2": [{"a2_i0": 2}, -10],
            "agent_3": [{"a3_i0": 3}, {"a3_i1": 3.1}],
            "agent_4": [-10, {"a4_i1": 4.1}],
        },
    )
    inf = episode.get_infos(indices=[-2, -1], neg_index_as_lookback=True)
    check(
        inf,
        {
            "agent_1": [{"a1_i0": 1}, {"a1_i1": 1.1}],
            "agent_2": [{"a2_i0": 2}],
            "agent_3": [{"a3_i0": 3}, {"a3_i1": 3.1}],
            "agent_4": [{"a4_i1": 4.1}],
        },
    )

    inf = episode.get_infos(indices=-1, env_steps=False)
    check(
        inf,
        {
            "agent_1": {"a1_i1": 1.1},
            "agent_2": {"a2_i2": 2.2},
            "agent_3": {"a3_i1": 3.1},
            "agent_4": {"a4_i2": 4.2},
        },
    )

    inf = episode.get_infos(-1, env_steps=False, agent_ids="agent_1")
    check(inf, {"agent_1": {"a1_i1": 1.1}})
    inf = episode.get_infos(-1, env_steps=False, agent_ids=["agent_2"])
    check(inf, {"agent_2": {"a2_i2": 2.2}})
    inf = episode.get_infos(-1, env_steps=False, agent_ids=("agent_3",))
    check(inf, {"agent_3": {"a3_i1": 3.1}})
    inf = episode.get_infos(-1, env_steps=False, agent_ids={"agent_4"})
    check(inf, {"agent_4": {"a4_i2": 4.2}})
    inf = episode.get_infos(-1, env_steps=False, agent_ids=["agent_1", "agent_2"])
    check(inf, {"agent_1": {"a1_i1": 1.1}, "agent_2": {"a2_i2": 2.2}})
    inf = episode.get_infos(-2, env_steps=True, agent_ids={"agent_4"})
    check(inf, {"agent_4": {"a4_i1": 4.1}})
    inf = episode.get_infos([-1, -2], env_steps=True, agent_ids={"agent_4"})
    check(inf, {"agent_4": [{"a4_i2": 4.2}, {"a4_i1": 4.1}]})

    inf = episode.get_infos(indices=[-1, -2], env_steps=False)
    check(
        inf,
        {
            "agent_1": [{"a1_i1": 1.1}, {"a1_i0": 1}],
            "agent_2": [{"a2_i2": 2.2}, {"a2_i0": 2}],
            "agent_3": [{"a3_i1": 3.1}, {"a3_i0": 3}],
            "agent_4": [{"a4_i2": 4.2}, {"a4_i1": 4.1}],
        },
    )

    inf = episode.get_infos(return_list=True)
    check(inf, [{"agent_2": {"a2_i2": 2.2}, "agent_4": {"a4_i2": 4.2}}])
    with pytest.raises(ValueError):
        episode.get_infos(env_steps=False, return_list=True)
    inf = episode.get_infos(indices=[-1, -2], return_list=True)
    check(
        inf,
        [
            {"agent_2": {"a2_i2": 2.2}, "agent_4": {"a4_i2": 4.2}},
            {"agent_1": {"a1_i1": 1.1}, "agent_3": {"a3_i1": 3.1}, "agent_4": {"a4_i1": 4.1}},
        ],
    )
    inf = episode.get_infos(slice(-1, 1), return_list=True, fill=-8, neg_index_as_lookback=True)
    check(
        inf,
        [
            {"agent_1": {"a1_i1": 1.1}, "agent_2": -8, "agent_3": {"a3_i1": 3.1}, "agent_4": {"a4_i1": 4.1}},
            {"agent_1": -8, "agent_2": {"a2_i2": 2.2}, "agent_3": -8, "agent_4": {"a4_i2": 4.2}},
        ],
    )

    inf = episode.get_infos(env_steps=False)
    check(
        inf,
        {
            "agent_1": [{"a1_i1": 1.1}],
            "agent_2": [{"a2_i2": 2.2}],
            "agent_3": [{"a3_i1": 3.1}],
            "agent_4": [{"a4_i2": 4.2}],
        },
    )

    # Initial infos only.
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=observations[0], infos=infos[0])
    inf = episode.get_infos()
    for agent_id, agent_inf in infos[0].items():
        check(inf[agent_id][0], agent_inf)
    inf = episode.get_infos(return_list=True)
    for agent_id, agent_inf in infos[0].items():
        check(inf[0][agent_id], agent_inf)
    inf = episode.get_infos(env_steps=False)
    for agent_id, agent_inf in infos[0].items():
        check(inf[agent_id][0], agent_inf)


def test_get_actions() -> None:
    """Tests whether the `MultiAgentEpisode.get_actions()` API works as expected."""
    observations: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},
        {"a0": 1, "a1": 1},
        {"a1": 2},
        {"a1": 3},
        {"a1": 4},
    ]
    actions: list[MultiAgentDict] = [{"a0": 0, "a1": 0}, {"a0": 1, "a1": 1}, {"a1": 2}, {"a1": 3}]
    rewards: list[MultiAgentDict] = [{"a0": 1, "a1": 1}, {"a0": 2, "a1": 2}, {"a1": 3}, {"a1": 4}]
    episode = MultiAgentEpisode(observations=observations, actions=actions, rewards=rewards)
    # Single indices, env steps.
    for i in range(-1, -5, -1):
        act = episode.get_actions(i)
        check(act, actions[i])
    # >=0 integer indices: everything is in the lookback buffer.
    for i in range(0, 5):
        with pytest.raises(IndexError):
            episode.get_actions(i)
    # <= -5: beyond the lookback buffer.
    for i in range(-5, -10, -1):
        with pytest.raises(IndexError):
            episode.get_actions(i)
    act = episode.get_actions([-1, -2])
    check(act, {"a1": [3, 2]})
    act = episode.get_actions([-2, -3])
    check(act, {"a0": [1], "a1": [2, 1]})
    act = episode.get_actions([-3, -4])
    check(act, {"a0": [1, 0], "a1": [1, 0]})
    act = episode.get_actions(slice(-1, -3, -1))
    check(act, {"a1": [3, 2]})
    act = episode.get_actions(slice(-2, -4, -1))
    check(act, {"a0": [1], "a1": [2, 1]})
    act = episode.get_actions(slice(-3, -5, -1))
    check(act, {"a0": [1, 0], "a1": [1, 0]})
    act = episode.get_actions(slice(-3, -6, -1), fill="skip")
    check(act, {"a0": [1, 0, "skip"], "a1": [1, 0, "skip"]})
    act = episode.get_actions(slice(1, -6, -1), fill="s")
    check(act, {"a0": ["s", "s", "s", "s", 1, 0, "s"], "a1": ["s", "s", 3, 2, 1, 0, "s"]})
    act = episode.get_actions(slice(0, -5, -1), fill="s")
    check(act, {"a0": ["s", "s", "s", 1, 0], "a1": ["s", 3, 2, 1, 0]})
    # Single indices, agent steps.
    act = episode.get_actions(-1, env_steps=False)
    check(act, {"a0": 1, "a1": 3})
    act = episode.get_actions(-2, env_steps=False)
    check(act, {"a0": 0, "a1": 2})
    act = episode.get_actions(-3, env_steps=False, agent_ids="a1")
    check(act, {"a1": 1})
    act = episode.get_actions(-3, env_steps=False, fill="skip")
    check(act, {"a0": "skip", "a1": 1})
    act = episode.get_actions(-4, env_steps=False, agent_ids="a1")
    check(act, {"a1": 0})
    act = episode.get_actions(-4, env_steps=False, fill="skip")
    check(act, {"a0": "skip", "a1": 0})

    episode.add_env_step(observations={"a0": 5, "a1": 5}, actions={"a1": 4}, rewards={"a1": 4})
    check(episode.get_actions(0), {"a1": 4})
    check(episode.get_actions(-1), {"a1": 4})
    check(episode.get_actions(-2), {"a1": 3})
    episode.add_env_step(
        observations={"a1": 6},
        actions={"a0": 5, "a1": 5},
        rewards={"a0": 5, "a1": 5},
    )
    check(episode.get_actions(0), {"a1": 4})
    check(episode.get_actions(1), {"a0": 5, "a1": 5})
    check(episode.get_actions(-1), {"a0": 5, "a1": 5})

    # A hanging action at the end.
    observations = [
        {"a0": 0, "a1": 0},
        {"a0": 0, "a1": 1},
        {"a0": 2},
    ]
    actions = [{"a0": 0, "a1": 0}, {"a0": 1, "a1": 1}]
    rewards = [{"a0": 0.0, "a1": 0.0}, {"a0": 0.1, "a1": 0.1}]
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        len_lookback_buffer=0,
    )
    # The hanging action of a1 at the end comes back for idx=-1.
    act = episode.get_actions(-1)
    check(act, {"a0": 1, "a1": 1})
    act = episode.get_actions(-2)
    check(act, {"a0": 0, "a1": 0})
    act = episode.get_actions(0)
    check(act, {"a0": 0, "a1": 0})
    act = episode.get_actions(1)
    check(act, {"a0": 1, "a1": 1})
    with pytest.raises(IndexError):
        episode.get_actions(2)
    with pytest.raises(IndexError):
        episode.get_actions(-3)

    # One agent is done.
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations={"a0": 0, "a1": 0})
    episode.add_env_step(
        observations={"a0": 1, "a1": 1},
        actions={"a0": 0, "a1": 0},
        rewards={"a0": 0.0, "a1": 0.0},
        terminateds={"a1": True},
    )
    episode.add_env_step(observations={"a0": 2}, actions={"a0": 1}, rewards={"a0": 1.0})
    act = episode.get_actions(-1)
    check(act, {"a0": 1})

    (observations, actions, rewards, is_terminateds, is_truncateds, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=is_terminateds,
        truncateds=is_truncateds,
        len_lookback_buffer="auto",  # default: use all data as lookback
    )

    act = episode.get_actions(indices=-1)
    check(act, {"agent_1": 1, "agent_3": 1, "agent_4": 1})
    act = episode.get_actions(indices=[-1, -2])
    check(act, {"agent_1": [1, 0], "agent_2": [0], "agent_3": [1, 0], "agent_4": [1]})
    act = episode.get_actions(slice(-2, None))
    check(act, {"agent_1": [0, 1], "agent_2": [0], "agent_3": [0, 1], "agent_4": [1]})
    act = episode.get_actions(slice(-5, None), fill=-10)
    check(
        act,
        {
            "agent_1": [-10, -10, -10, 0, 1],
            "agent_2": [-10, -10, -10, 0, -10],
            "agent_3": [-10, -10, -10, 0, 1],
            "agent_4": [-10, -10, -10, -10, 1],
        },
    )
    act = episode.get_actions(slice(100, 102), fill=9.9)
    check(
        act,
        {
            "agent_1": [9.9, 9.9],
            "agent_2": [9.9, 9.9],
            "agent_3": [9.9, 9.9],
            "agent_4": [9.9, 9.9],
        },
    )
    act = episode.get_actions(indices=[-2, -1], fill=-10, neg_index_as_lookback=True)
    check(
        act,
        {
            "agent_1": [0, 1],
            "agent_2": [0, -10],
            "agent_3": [0, 1],
            "agent_4": [-10, 1],
        },
    )
    act = episode.get_actions(indices=[-2, -1], neg_index_as_lookback=True)
    check(
        act,
        {
            "agent_1": [0, 1],
            "agent_2": [0],
            "agent_3": [0, 1],
            "agent_4": [1],
        },
    )

    act = episode.get_actions(indices=-1, env_steps=False)
    check(act, {"agent_1": 1, "agent_2": 0, "agent_3": 1, "agent_4": 1})
    act = episode.get_actions(-1, env_steps=False, agent_ids="agent_1")
    check(act, {"agent_1": 1})
    act = episode.get_actions(-1, env_steps=False, agent_ids=["agent_2"])
    check(act, {"agent_2": 0})
    act = episode.get_actions(-1, env_steps=False, agent_ids=("agent_3",))
    check(act, {"agent_3": 1})
    act = episode.get_actions(-1, env_steps=False, agent_ids={"agent_4"})
    check(act, {"agent_4": 1})
    act = episode.get_actions(-1, env_steps=False, agent_ids=["agent_1", "agent_2"])
    check(act, {"agent_1": 1, "agent_2": 0})
    act = episode.get_actions(-2, env_steps=True, agent_ids={"agent_4"})
    check(act, {})
    act = episode.get_actions([-1, -2], env_steps=True, agent_ids={"agent_4"})
    check(act, {"agent_4": [1]})
    # Agent 4 has only acted 2x: no (local) ts=-2 for it.
    with pytest.raises(IndexError):
        episode.get_actions([-1, -2], env_steps=False, agent_ids={"agent_4"})
    act = episode.get_actions([-2], env_steps=False, agent_ids="agent_4", fill=-10)
    check(act, {"agent_4": [-10]})

    # As a list: all actions are in the lookback buffers (lookback="auto").
    act = episode.get_actions(return_list=True)
    assert act == []
    with pytest.raises(ValueError):
        episode.get_actions(env_steps=False, return_list=True)
    act = episode.get_actions(indices=[-1, -2], return_list=True)
    check(act, [actions[-1], actions[-2]])
    act = episode.get_actions(slice(-1, 1), return_list=True, fill=-8, neg_index_as_lookback=True)
    check(
        act,
        [
            {"agent_1": 1, "agent_2": -8, "agent_3": 1, "agent_4": 1},
            {"agent_1": -8, "agent_2": -8, "agent_3": -8, "agent_4": -8},
        ],
    )

    act = episode.get_actions(env_steps=False)
    assert act == {}

    # Initial actions only.
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=observations[0], infos=infos[0])
    act = episode.get_actions()
    check(act, {})
    act = episode.get_actions(return_list=True)
    assert act == []
    act = episode.get_actions(env_steps=False)
    assert act == {}


def test_get_rewards() -> None:
    observations: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},
        {"a0": 1, "a1": 1},
        {"a1": 2},
        {"a1": 3},
        {"a1": 4},
    ]
    actions: list[MultiAgentDict] = [{"a0": 0, "a1": 0}, {"a0": 1, "a1": 1}, {"a1": 2}, {"a1": 3}]
    rewards: list[MultiAgentDict] = [
        {"a0": 0.0, "a1": 0.0},
        {"a0": 1.0, "a1": 1.0},
        {"a1": 2.0},
        {"a1": 3.0},
    ]
    episode = MultiAgentEpisode(observations=observations, actions=actions, rewards=rewards)
    for i in range(-1, -5, -1):
        rew = episode.get_rewards(i)
        check(rew, rewards[i])
    rew = episode.get_rewards([-1, -2])
    check(rew, {"a0": [], "a1": [3, 2]})
    rew = episode.get_rewards([-2, -3])
    check(rew, {"a0": [1], "a1": [2, 1]})
    rew = episode.get_rewards([-3, -4])
    check(rew, {"a0": [1, 0], "a1": [1, 0]})
    rew = episode.get_rewards(slice(-1, -3, -1))
    check(rew, {"a0": [], "a1": [3, 2]})
    rew = episode.get_rewards(slice(-2, -4, -1))
    check(rew, {"a0": [1], "a1": [2, 1]})
    rew = episode.get_rewards(slice(-3, -5, -1))
    check(rew, {"a0": [1, 0], "a1": [1, 0]})
    rew = episode.get_rewards(slice(-3, -6, -1), fill=-10.0)
    check(rew, {"a0": [1, 0, -10.0], "a1": [1, 0, -10.0]})
    rew = episode.get_rewards(slice(1, -6, -1), fill=-1)
    check(rew, {"a0": [-1, -1, -1, -1, 1, 0, -1], "a1": [-1, -1, 3, 2, 1, 0, -1]})
    rew = episode.get_rewards(slice(0, -5, -1), fill=-2)
    check(rew, {"a0": [-2, -2, -2, 1, 0], "a1": [-2, 3, 2, 1, 0]})
    rew = episode.get_rewards(-1, env_steps=False)
    check(rew, {"a0": 1, "a1": 3})
    rew = episode.get_rewards(-2, env_steps=False)
    check(rew, {"a0": 0, "a1": 2})
    rew = episode.get_rewards(-3, env_steps=False, agent_ids="a1")
    check(rew, {"a1": 1})
    rew = episode.get_rewards(-3, env_steps=False, fill=-4)
    check(rew, {"a0": -4, "a1": 1})
    rew = episode.get_rewards(-4, env_steps=False, agent_ids="a1")
    check(rew, {"a1": 0})
    rew = episode.get_rewards(-4, env_steps=False, fill=-5)
    check(rew, {"a0": -5, "a1": 0})

    (observations, actions, rewards, is_terminateds, is_truncateds, infos) = _mock_multi_agent_records()
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        infos=infos,
        terminateds=is_terminateds,
        truncateds=is_truncateds,
        len_lookback_buffer="auto",  # default: use all data as lookback
    )

    rew = episode.get_rewards(indices=-1)
    check(rew, {"agent_1": 1.1, "agent_3": 1.2, "agent_4": 1.3})
    rew = episode.get_rewards(indices=[-1, -2])
    check(rew, {"agent_1": [1.1, 0.5], "agent_2": [0.6], "agent_3": [1.2, 0.7], "agent_4": [1.3]})
    rew = episode.get_rewards(slice(-2, None))
    check(rew, {"agent_1": [0.5, 1.1], "agent_2": [0.6], "agent_3": [0.7, 1.2], "agent_4": [1.3]})
    rew = episode.get_rewards(slice(-5, None), fill=-10)
    check(
        rew,
        {
            "agent_1": [-10, -10, -10, 0.5, 1.1],
            "agent_2": [-10, -10, -10, 0.6, -10],
            "agent_3": [-10, -10, -10, 0.7, 1.2],
            "agent_4": [-10, -10, -10, -10, 1.3],
        },
    )
    rew = episode.get_rewards(slice(100, 102), fill=9.9)
    check(
        rew,
        {
            "agent_1": [9.9, 9.9],
            "agent_2": [9.9, 9.9],
            "agent_3": [9.9, 9.9],
            "agent_4": [9.9, 9.9],
        },
    )
    rew = episode.get_rewards(indices=[-2, -1], fill=-10, neg_index_as_lookback=True)
    check(
        rew,
        {
            "agent_1": [0.5, 1.1],
            "agent_2": [0.6, -10],
            "agent_3": [0.7, 1.2],
            "agent_4": [-10, 1.3],
        },
    )
    # Same, but w/o fill.
    episode.get_rewards(indices=[-2, -1], neg_index_as_lookback=True)

    rew = episode.get_rewards(indices=-1, env_steps=False)
    check(rew, {"agent_1": 1.1, "agent_2": 0.6, "agent_3": 1.2, "agent_4": 1.3})
    rew = episode.get_rewards(-1, env_steps=False, agent_ids="agent_1")
    check(rew, {"agent_1": 1.1})
    rew = episode.get_rewards(-1, env_steps=False, agent_ids=["agent_2"])
    check(rew, {"agent_2": 0.6})
    rew = episode.get_rewards(-1, env_steps=False, agent_ids=("agent_3",))
    check(rew, {"agent_3": 1.2})
    rew = episode.get_rewards(-1, env_steps=False, agent_ids={"agent_4"})
    check(rew, {"agent_4": 1.3})
    rew = episode.get_rewards(-1, env_steps=False, agent_ids=["agent_1", "agent_2"])
    check(rew, {"agent_1": 1.1, "agent_2": 0.6})
    rew = episode.get_rewards(-2, env_steps=True, agent_ids={"agent_3"})
    check(rew, {"agent_3": 0.7})
    rew = episode.get_rewards(-2, env_steps=True, agent_ids={"agent_4"})
    check(rew, {})
    rew = episode.get_rewards([-1, -2], env_steps=True, agent_ids={"agent_3"})
    check(rew, {"agent_3": [1.2, 0.7]})
    rew = episode.get_rewards([-1, -2], env_steps=True, agent_ids={"agent_4"})
    check(rew, {"agent_4": [1.3]})
    # Agent 4 has only acted 2x: no (local) ts=-2 for it.
    with pytest.raises(IndexError):
        episode.get_rewards([-1, -2], env_steps=False, agent_ids={"agent_4"})
    rew = episode.get_rewards([-2], env_steps=False, agent_ids="agent_4", fill=-10)
    check(rew, {"agent_4": [-10]})

    rew = episode.get_rewards(return_list=True)
    assert rew == []
    with pytest.raises(ValueError):
        episode.get_rewards(env_steps=False, return_list=True)
    rew = episode.get_rewards(indices=[-1, -2], return_list=True)
    check(rew, [rewards[-1], rewards[-2]])
    rew = episode.get_rewards(slice(-1, 1), return_list=True, fill=-8, neg_index_as_lookback=True)
    check(
        rew,
        [
            {"agent_1": 1.1, "agent_2": -8, "agent_3": 1.2, "agent_4": 1.3},
            {"agent_1": -8, "agent_2": -8, "agent_3": -8, "agent_4": -8},
        ],
    )

    rew = episode.get_rewards(env_steps=False)
    assert rew == {}

    # Initial rewards only.
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=observations[0], infos=infos[0])
    rew = episode.get_rewards()
    check(rew, {})
    rew = episode.get_rewards(return_list=True)
    assert rew == []
    rew = episode.get_rewards(env_steps=False)
    assert rew == {}


def test_other_getters() -> None:
    """RLlib's test returns on its first line ("Revisit this test"); its dead body is not ported."""
    return


@pytest.mark.xfail(
    strict=True,
    reason="cut() keeps an agent whose action hangs since an observation older than the chunk (to complete it in the "
    "next chunk); RLlib's newer cut(), which this test reads, drops that agent and its action (fails on ray 2.60 too)",
)
def test_cut() -> None:
    # All agents always step.
    episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a0": 1, "a1": 1},
            {"a0": 2, "a1": 2},
        ]
    )
    successor = episode.cut()
    check(len(successor), 0)
    check(successor.env_t_started, 2)
    check(successor.env_t, 2)
    check(successor.env_t_to_agent_t, {"a0": [0], "a1": [0]})
    a0 = successor.agent_episodes["a0"]
    a1 = successor.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 0))
    check((a0.t_started, a1.t_started), (2, 2))
    check((a0.t, a1.t), (2, 2))
    check((a0.observations, a1.observations), ([2], [2]))
    check((a0.actions, a1.actions), ([], []))
    check((a0.rewards, a1.rewards), ([], []))
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {})
    check(successor._hanging_extra_model_outputs_end, {})

    # With a lookback buffer, all agents always step.
    episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a0": 1, "a1": 1},
            {"a0": 2, "a1": 2},
            {"a0": 3, "a1": 3},
        ],
        len_lookback_buffer=2,
    )
    successor = episode.cut()
    check(len(successor), 0)
    check(successor.env_t_started, 1)
    check(successor.env_t, 1)
    check(successor.env_t_to_agent_t, {"a0": [0], "a1": [0]})
    a0 = successor.agent_episodes["a0"]
    a1 = successor.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 0))
    check((a0.t_started, a1.t_started), (1, 1))
    check((a0.t, a1.t), (1, 1))
    check((a0.observations, a1.observations), ([3], [3]))
    check((a0.actions, a1.actions), ([], []))
    check((a0.rewards, a1.rewards), ([], []))
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {})
    check(successor._hanging_extra_model_outputs_end, {})
    # Cut with lookback=2.
    successor = episode.cut(len_lookback_buffer=2)
    check(len(successor), 0)
    check(successor.env_t_started, 1)
    check(successor.env_t, 1)
    check(successor.env_t_to_agent_t["a0"].data, [0, 1, 2])
    check(successor.env_t_to_agent_t["a1"].data, [0, 1, 2])
    check(successor.env_t_to_agent_t["a0"].lookback, 2)
    check(successor.env_t_to_agent_t["a1"].lookback, 2)
    a0 = successor.agent_episodes["a0"]
    a1 = successor.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 0))
    check((a0.t_started, a1.t_started), (1, 1))
    check((a0.t, a1.t), (1, 1))
    check((a0.observations, a1.observations), ([3], [3]))
    check((a0.actions, a1.actions), ([], []))
    check((a0.rewards, a1.rewards), ([], []))
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {})
    check(successor._hanging_extra_model_outputs_end, {})

    # One agent does not act for long, but gets (hanging) rewards meanwhile.
    observations: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},  # 0
        {"a0": 1},  # 1
        {"a0": 2},  # 2
        {"a0": 3},  # 3
    ]
    episode = MultiAgentEpisode(
        observations=observations,
        actions=observations[:-1],
        rewards=[
            {"a0": 0.0, "a1": 0.0},  # 0
            {"a0": 0.1, "a1": 0.1},  # 1
            {"a0": 0.2, "a1": 0.2},  # 2
        ],
        len_lookback_buffer=0,
    )
    successor = episode.cut()
    check(len(successor), 0)
    check(successor.env_t_started, 3)
    check(successor.env_t, 3)
    a0 = successor.agent_episodes["a0"]
    assert "a1" not in successor.agent_episodes
    check(len(a0), 0)
    check(a0.t_started, 3)
    check(a0.t, 3)
    check(a0.observations, [3])
    check(a0.actions, [])
    check(a0.rewards, [])
    check(successor._hanging_rewards_begin, {"a1": 0.3})
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {"a1": 0.0})
    check(successor._hanging_extra_model_outputs_end, {})
    successor.add_env_step(
        observations={"a0": 4},
        actions={"a0": 3},
        rewards={"a0": 0.3, "a1": 0.3},
    )
    check(len(successor), 1)
    check(successor.env_t_started, 3)
    check(successor.env_t, 4)
    # A hanging reward for a1 does not give it an episode in `successor` (no obs yet).
    assert "a1" not in successor.agent_episodes
    check(len(a0), 1)
    check(a0.t_started, 3)
    check(a0.t, 4)
    check(a0.observations, [3, 4])
    check(a0.actions, [3])
    check(a0.rewards, [0.3])
    check(successor._hanging_rewards_begin, {"a1": 0.6})
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {"a1": 0.0})
    check(successor._hanging_extra_model_outputs_end, {})
    # Now a1 does receive its next obs.
    successor.add_env_step(
        observations={"a0": 5, "a1": 5},  # <- a1's 1st obs in this chunk
        actions={"a0": 4},
        rewards={"a0": 0.4, "a1": 0.4},
    )
    check(len(successor), 2)
    check(successor.env_t_started, 3)
    check(successor.env_t, 5)
    a1 = successor.agent_episodes["a1"]
    check((len(a0), len(a1)), (2, 0))
    check((a0.t_started, a1.t_started), (3, 0))
    check((a0.t, a1.t), (5, 0))
    check((a0.observations, a1.observations), ([3, 4, 5], [5]))
    check((a0.actions, a1.actions), ([3, 4], []))
    check((a0.rewards, a1.rewards), ([0.3, 0.4], []))
    check(successor._hanging_rewards_begin, {"a1": 1.0})
    check(successor._hanging_actions_end, {})
    check(successor._hanging_rewards_end, {"a1": 0.0})
    check(successor._hanging_extra_model_outputs_end, {})

    episode_1 = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a1": 1},
            {"a1": 2},
            {"a1": 3},
        ],
        len_lookback_buffer="auto",
    )
    episode_2 = episode_1.cut()
    check(episode_1.id_, episode_2.id_)
    check(len(episode_1), 0)
    check(len(episode_2), 0)
    for agent_id, agent_eps in episode_2.agent_episodes.items():
        check(agent_eps.id_, episode_1.agent_episodes[agent_id].id_)
    check(episode_1.env_t_started, 0)
    check(episode_1.env_t, episode_2.env_t_started)
    check(episode_2.env_t_started, episode_2.env_t)
    # a0's last obs is in its mapping's lookback, so the hanging action can complete later.
    check(episode_2.env_t_to_agent_t["a0"].data, [0, "S", "S", "S"])
    check(episode_2.env_t_to_agent_t["a0"].lookback, 3)
    check(episode_2.env_t_to_agent_t["a1"].data, [0, 1, 2, 3])
    check(episode_2.env_t_to_agent_t["a1"].lookback, 3)
    check(episode_2.agent_episodes["a0"].observations.data, [0])
    check(episode_2.agent_episodes["a0"].observations.lookback, 0)
    check(episode_2.agent_episodes["a0"].actions.data, [])
    check(episode_2.agent_episodes["a0"].actions.lookback, 0)

    check(episode_2.get_observations(-1), {"a1": 3})
    check(episode_2.get_observations(-1, env_steps=False), {"a0": 0, "a1": 3})
    check(episode_2.get_observations([-2, -1]), {"a1": [2, 3]})
    check(episode_2.get_observations(slice(-3, None)), {"a1": [1, 2, 3]})
    check(episode_2.get_observations(slice(-4, None)), {"a0": [0], "a1": [0, 1, 2, 3]})
    # Just cut: no actions yet (only in the lookback buffer).
    check(episode_2.get_actions(), {})
    check(episode_2.get_actions(-1), {"a1": 2})
    check(episode_2.get_actions(-2), {"a1": 1})
    check(episode_2.get_actions([-3]), {"a0": [0], "a1": [0]})
    with pytest.raises(IndexError):
        episode_2.get_actions([-4])
    # No index error for a slice.
    check(episode_2.get_actions(slice(-4, -3)), {})

    episode_2.add_env_step(
        actions={"a1": 4},
        rewards={"a1": 0.4},
        observations={"a0": 1, "a1": 4},
    )
    check(len(episode_2), 1)
    check(episode_2.env_t_to_agent_t["a0"].data, [0, "S", "S", "S", 1])
    check(episode_2.env_t_to_agent_t["a0"].lookback, 3)
    check(episode_2.env_t_to_agent_t["a1"].data, [0, 1, 2, 3, 4])
    check(episode_2.env_t_to_agent_t["a1"].lookback, 3)
    check(episode_2.agent_episodes["a0"].observations.data, [0, 1])
    check(episode_2.agent_episodes["a0"].observations.lookback, 0)
    # The action was logged: the cache is empty.
    check(episode_2.agent_episodes["a0"].actions.data, [0])
    check(episode_2._hanging_actions_end, {})
    check(episode_2.agent_episodes["a0"].actions.lookback, 0)
    check(episode_2.get_observations(-1), {"a0": 1, "a1": 4})
    check(episode_2.get_observations(-1, env_steps=False), {"a0": 1, "a1": 4})
    check(episode_2.get_observations([-2, -1]), {"a0": [1], "a1": [3, 4]})
    check(episode_2.get_observations(slice(-3, None)), {"a0": [1], "a1": [2, 3, 4]})
    check(episode_2.get_observations(slice(-4, None)), {"a0": [1], "a1": [1, 2, 3, 4]})
    check(episode_2.get_actions(), {"a1": [4]})
    check(episode_2.get_actions(-1), {"a1": 4})
    check(episode_2.get_actions(-2), {"a1": 2})
    check(episode_2.get_actions([-3]), {"a1": [1]})
    check(episode_2.get_actions([-4]), {"a0": [0], "a1": [0]})
    with pytest.raises(IndexError):
        episode_2.get_actions([-5])
    check(episode_2.get_actions(slice(-5, -4)), {})

    episode_1, _ = _mock_multi_agent_records_from_env(size=100)
    check(episode_1.env_t, 100)
    episode_2 = episode_1.cut()
    check(episode_1.id_, episode_2.id_)
    check(len(episode_1), 100)
    check(len(episode_2), 0)
    for agent_id, agent_eps in episode_2.agent_episodes.items():
        check(agent_eps.id_, episode_1.agent_episodes[agent_id].id_)
    check(episode_1.env_t_started, 0)
    check(episode_2.env_t, episode_2.env_t_started)
    check(episode_1.env_t, episode_2.env_t_started)

    # Another complex case.
    episode = _create_simple_episode(
        [
            {"a0": 0},
            {"a2": 0},
            {"a2": 1},
            {"a2": 2},
            {"a0": 1},
            {"a2": 3},
            {"a2": 4},
            # <- BUT: actual cut here, b/c of hanging action of a2
            {"a2": 5},
            # <- would expect cut here (b/c of lookback==1)
            {"a0": 2},
            {"a1": 0},
        ],
        len_lookback_buffer=0,
    )
    successor = episode.cut(len_lookback_buffer=1)
    check(len(successor), 0)
    check(successor.env_t, 9)
    check(successor.env_t_started, 9)
    assert all(len(e) == 0 for e in successor.agent_episodes.values())
    assert all(len(e) == 1 for e in successor.env_t_to_agent_t.values())
    assert all(e.lookback == 2 for e in successor.env_t_to_agent_t.values())
    check(successor.env_t_to_agent_t["a0"].data, ["S", 0, "S"])
    check(successor.env_t_to_agent_t["a1"].data, ["S", "S", 0])
    check(successor.env_t_to_agent_t["a2"].data, [0, "S", "S"])

    check(successor.get_observations(0), {"a1": 0})
    with pytest.raises(IndexError):
        successor.get_observations(1)
    check(successor.get_observations(-2), {"a0": 2})
    check(successor.get_observations(-3), {"a2": 5})
    with pytest.raises(IndexError):
        successor.get_observations(-4)
    # RLlib's test returns here ("Revisit this test"); its dead remainder is not ported.


def test_slice() -> None:
    episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a1": 1},
            {"a1": 2},
            {"a0": 3, "a1": 3},
            {"a0": 4},
            {"a0": 5, "a1": 5},
            {"a0": 6, "a1": 6},
            {"a1": 7},
            {"a1": 8},
            {"a0": 9},
        ]
    )
    check(len(episode), 9)

    # Empty slice.
    slice_ = episode[100:100]
    check(len(slice_), 0)
    check(slice_.env_t_started, 9)
    check(slice_.env_t, 9)
    # All-include slices.
    for s in [
        slice(None, None, None),
        slice(-100, None, None),
        slice(None, 1000, None),
        slice(-1000, 1000, None),
    ]:
        slice_ = episode[s]
        check(len(slice_), len(episode))
        check(slice_.env_t_started, 0)
        check(slice_.env_t, 9)
        a0 = slice_.agent_episodes["a0"]
        a1 = slice_.agent_episodes["a1"]
        check((len(a0), len(a1)), (5, 7))
        check((a0.t_started, a1.t_started), (0, 0))
        check((a0.t, a1.t), (5, 7))
        check((a0.observations, a1.observations), ([0, 3, 4, 5, 6, 9], [0, 1, 2, 3, 5, 6, 7, 8]))
        check((a0.actions, a1.actions), ([0, 3, 4, 5, 6], [0, 1, 2, 3, 5, 6, 7]))
        check((a0.rewards, a1.rewards), ([0.0, 0.3, 0.4, 0.5, 0.6], [0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7]))
        check((a0.is_done, a1.is_done), (False, False))
    # From pos start.
    slice_ = episode[2:]
    check(len(slice_), 7)
    check(slice_.env_t_started, 2)
    check(slice_.env_t, 9)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (4, 5))
    check((a0.t_started, a1.t_started), (1, 2))
    check((a0.t, a1.t), (5, 7))
    check((a0.observations, a1.observations), ([3, 4, 5, 6, 9], [2, 3, 5, 6, 7, 8]))
    check((a0.actions, a1.actions), ([3, 4, 5, 6], [2, 3, 5, 6, 7]))
    check((a0.rewards, a1.rewards), ([0.3, 0.4, 0.5, 0.6], [0.2, 0.3, 0.5, 0.6, 0.7]))
    check((a0.is_done, a1.is_done), (False, False))
    # A slice that ends in a "gap" for an agent caches its actions and rewards.
    slice_ = episode[:1]
    check(len(slice_), 1)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 1)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 1))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (0, 1))
    check((a0.observations, a1.observations), ([0], [0, 1]))
    check((a0.actions, a1.actions), ([], [0]))
    check((a0.rewards, a1.rewards), ([], [0.0]))
    check((a0.is_done, a1.is_done), (False, False))
    check(slice_._hanging_actions_end["a0"], 0)
    check(slice_._hanging_rewards_end["a0"], 0.0)
    # To pos stop.
    slice_ = episode[:3]
    check(len(slice_), 3)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 3)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (1, 3))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (1, 3))
    check((a0.observations, a1.observations), ([0, 3], [0, 1, 2, 3]))
    check((a0.actions, a1.actions), ([0], [0, 1, 2]))
    check((a0.rewards, a1.rewards), ([0.0], [0.0, 0.1, 0.2]))
    check((a0.is_done, a1.is_done), (False, False))
    # To neg stop.
    slice_ = episode[:-1]
    check(len(slice_), 8)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (4, 7))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (4, 7))
    check((a0.observations, a1.observations), ([0, 3, 4, 5, 6], [0, 1, 2, 3, 5, 6, 7, 8]))
    check((a0.actions, a1.actions), ([0, 3, 4, 5], [0, 1, 2, 3, 5, 6, 7]))
    check((a0.rewards, a1.rewards), ([0.0, 0.3, 0.4, 0.5], [0.0, 0.1, 0.2, 0.3, 0.5, 0.6, 0.7]))
    check((a0.is_done, a1.is_done), (False, False))
    # The hanging action is in the cache.
    check(slice_._hanging_actions_end["a0"], 6)

    slice_ = episode[:-4]
    check(len(slice_), 5)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 5)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (3, 4))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (3, 4))
    check((a0.observations, a1.observations), ([0, 3, 4, 5], [0, 1, 2, 3, 5]))
    check((a0.actions, a1.actions), ([0, 3, 4], [0, 1, 2, 3]))
    check((a0.rewards, a1.rewards), ([0.0, 0.3, 0.4], [0.0, 0.1, 0.2, 0.3]))
    check((a0.is_done, a1.is_done), (False, False))
    # From neg start.
    slice_ = episode[-2:]
    check(len(slice_), 2)
    check(slice_.env_t_started, 7)
    check(slice_.env_t, 9)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 1))
    check((a0.t_started, a1.t_started), (5, 6))
    check((a0.t, a1.t), (5, 7))
    check((a0.observations, a1.observations), ([9], [7, 8]))
    check((a0.actions, a1.actions), ([], [7]))
    check((a0.rewards, a1.rewards), ([], [0.7]))
    check((a0.is_done, a1.is_done), (False, False))
    slice_ = episode[-3:]
    check(len(slice_), 3)
    check(slice_.env_t_started, 6)
    check(slice_.env_t, 9)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (1, 2))
    check((a0.t_started, a1.t_started), (4, 5))
    check((a0.t, a1.t), (5, 7))
    check((a0.observations, a1.observations), ([6, 9], [6, 7, 8]))
    check((a0.actions, a1.actions), ([6], [6, 7]))
    check((a0.rewards, a1.rewards), ([0.6], [0.6, 0.7]))
    check((a0.is_done, a1.is_done), (False, False))
    slice_ = episode[-5:]
    check(len(slice_), 5)
    check(slice_.env_t_started, 4)
    check(slice_.env_t, 9)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (3, 3))
    check((a0.t_started, a1.t_started), (2, 4))
    check((a0.t, a1.t), (5, 7))
    check((a0.observations, a1.observations), ([4, 5, 6, 9], [5, 6, 7, 8]))
    check((a0.actions, a1.actions), ([4, 5, 6], [5, 6, 7]))
    check((a0.rewards, a1.rewards), ([0.4, 0.5, 0.6], [0.5, 0.6, 0.7]))
    check((a0.is_done, a1.is_done), (False, False))
    # From neg start to neg stop.
    slice_ = episode[-4:-2]
    check(len(slice_), 2)
    check(slice_.env_t_started, 5)
    check(slice_.env_t, 7)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (1, 2))
    check((a0.t_started, a1.t_started), (3, 4))
    check((a0.t, a1.t), (4, 6))
    check((a0.observations, a1.observations), ([5, 6], [5, 6, 7]))
    check((a0.actions, a1.actions), ([5], [5, 6]))
    check((a0.rewards, a1.rewards), ([0.5], [0.5, 0.6]))
    check((a0.is_done, a1.is_done), (False, False))

    # One single-agent episode terminates earlier than the other.
    observations: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},
        {"a0": 1, "a1": 1},
        {"a1": 2},
        {"a1": 3},
    ]
    actions: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},
        {"a1": 1},
        {"a1": 2},
    ]
    rewards = [{aid: a / 10 for aid, a in a.items()} for a in actions]
    episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        terminateds={"a0": True},
        len_lookback_buffer=0,
    )
    slice_ = episode[:1]
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check(len(slice_), 1)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 1)
    check((len(a0), len(a1)), (1, 1))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (1, 1))
    check((a0.observations, a1.observations), ([0, 1], [0, 1]))
    check((a0.actions, a1.actions), ([0], [0]))
    check((a0.rewards, a1.rewards), ([0.0], [0.0]))
    check((a0.is_done, a1.is_done), (True, False))
    slice_ = episode[:2]
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check(len(slice_), 2)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 2)
    check((len(a0), len(a1)), (1, 2))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (1, 2))
    check((a0.observations, a1.observations), ([0, 1], [0, 1, 2]))
    check((a0.actions, a1.actions), ([0], [0, 1]))
    check((a0.rewards, a1.rewards), ([0.0], [0.0, 0.1]))
    check((a0.is_done, a1.is_done), (True, False))
    slice_ = episode[2:]
    assert "a0" not in slice_.agent_episodes
    a1 = slice_.agent_episodes["a1"]
    check(len(slice_), 1)
    check(slice_.env_t_started, 2)
    check(slice_.env_t, 3)
    check(len(a1), 1)
    check(a1.t_started, 2)
    check(a1.t, 3)
    check(a1.observations, [2, 3])
    check(a1.actions, [2])
    check(a1.rewards, [0.2])
    check(a1.is_done, False)

    # With lookback buffers.
    observations = [
        {"a0": 0, "a1": 0},  # lookback -2
        {"a0": 1, "a1": 1},  # lookback -1
        {"a1": 2},  # 0
        {"a1": 3},  # 1
        {"a1": 4},  # 2
        {"a0": 5, "a1": 5},  # 3
        {"a0": 6},  # 4
        {"a0": 7, "a1": 7},  # 5
        {"a0": 8},  # 6
        {"a1": 9},  # 7
    ]
    episode = _create_simple_episode(observations, len_lookback_buffer=2)
    slice_ = episode[1:3]
    check(len(slice_), 2)
    check(slice_.env_t_started, 1)
    check(slice_.env_t, 3)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 2))
    check((a0.t_started, a1.t_started), (2, 3))
    check((a0.t, a1.t), (2, 5))
    check((a0.observations, a1.observations), ([5], [3, 4, 5]))
    check((a0.actions, a1.actions), ([], [3, 4]))
    check((a0.rewards, a1.rewards), ([], [0.3, 0.4]))
    check((a0.is_done, a1.is_done), (False, False))
    slice_ = episode[None:4]
    check(len(slice_), 4)
    check(slice_.env_t_started, 0)
    check(slice_.env_t, 4)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (1, 3))
    check((a0.t_started, a1.t_started), (2, 2))
    check((a0.t, a1.t), (3, 5))
    check((a0.observations, a1.observations), ([5, 6], [2, 3, 4, 5]))
    check((a0.actions, a1.actions), ([5], [2, 3, 4]))
    check((a0.rewards, a1.rewards), ([0.5], [0.2, 0.3, 0.4]))
    check((a0.is_done, a1.is_done), (False, False))
    slice_ = episode[-3:-1]
    check(len(slice_), 2)
    check(slice_.env_t_started, 4)
    check(slice_.env_t, 6)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (2, 0))
    check((a0.t_started, a1.t_started), (3, 6))
    check((a0.t, a1.t), (5, 6))
    check((a0.observations, a1.observations), ([6, 7, 8], [7]))
    check((a0.actions, a1.actions), ([6, 7], []))
    check((a0.rewards, a1.rewards), ([0.6, 0.7], []))
    check((a0.is_done, a1.is_done), (False, False))
    slice_ = episode[-1:None]
    check(len(slice_), 1)
    check(slice_.env_t_started, 6)
    check(slice_.env_t, 7)
    a0 = slice_.agent_episodes["a0"]
    a1 = slice_.agent_episodes["a1"]
    check((len(a0), len(a1)), (0, 0))
    check((a0.t_started, a1.t_started), (5, 7))
    check((a0.t, a1.t), (5, 7))
    check((a0.observations, a1.observations), ([8], [9]))
    check((a0.actions, a1.actions), ([], []))
    check((a0.rewards, a1.rewards), ([], []))
    check((a0.is_done, a1.is_done), (False, False))


def test_concat_episode() -> None:
    base_episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a0": 1, "a1": 1},  # <- split here, then concat
            {"a0": 2, "a1": 2},
        ]
    )
    check(len(base_episode), 2)
    episode_1, episode_2 = base_episode[:1], base_episode[1:]
    check(len(episode_1), 1)
    check(len(episode_2), 1)
    episode_1.concat_episode(episode_2)
    check(len(episode_1), 2)
    check(episode_1.env_t_started, 0)
    check(episode_1.env_t, 2)
    a0 = episode_1.agent_episodes["a0"]
    a1 = episode_1.agent_episodes["a1"]
    check((len(a0), len(a1)), (2, 2))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (2, 2))
    check((a0.observations, a1.observations), ([0, 1, 2], [0, 1, 2]))
    check((a0.actions, a1.actions), ([0, 1], [0, 1]))
    check((a0.rewards, a1.rewards), ([0.0, 0.1], [0.0, 0.1]))
    check((a0.is_done, a1.is_done), (False, False))

    base_episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a0": 1, "a1": 1},
            {"a1": 2},
            {"a1": 3},
            {"a1": 4},  # <- split here, then concat
            {"a0": 5, "a1": 5},
            {"a0": 6},  # <- split here, then concat
            {"a0": 7, "a1": 7},  # <- split here, then concat
            {"a0": 8},  # <- split here, then concat
            {"a1": 9},
        ]
    )
    check(len(base_episode), 9)
    for split_ in [(4, (4, 5)), (6, (6, 3)), (7, (7, 2)), (8, (8, 1))]:
        episode_1, episode_2 = base_episode[: split_[0]], base_episode[split_[0] :]
        check(len(episode_1), split_[1][0])
        check(len(episode_2), split_[1][1])
        episode_1.concat_episode(episode_2)
        check(len(episode_1), 9)
        check(episode_1.env_t_started, 0)
        check(episode_1.env_t, 9)
        a0 = episode_1.agent_episodes["a0"]
        a1 = episode_1.agent_episodes["a1"]
        check((len(a0), len(a1)), (5, 7))
        check((a0.t_started, a1.t_started), (0, 0))
        check((a0.t, a1.t), (5, 7))
        check((a0.observations, a1.observations), ([0, 1, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 7, 9]))
        check((a0.actions, a1.actions), ([0, 1, 5, 6, 7], [0, 1, 2, 3, 4, 5, 7]))
        check((a0.rewards, a1.rewards), ([0, 0.1, 0.5, 0.6, 0.7], [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7]))
        check((a0.is_done, a1.is_done), (False, False))

    # Hanging rewards.
    observations: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},  # 0
        {"a0": 1},  # 1
        {"a0": 2},  # 2  <- split here, then concat
        {"a0": 3},  # 3
        {"a0": 4},  # 4
    ]
    actions = observations[:-1]
    # a1 keeps receiving rewards (along with a0's actions).
    rewards: list[MultiAgentDict] = [
        {"a0": 0.0, "a1": 0.0},  # 0
        {"a0": 0.1, "a1": 1.0},  # 1
        {"a0": 0.2, "a1": 2.0},  # 2
        {"a0": 0.3, "a1": 3.0},  # 3
    ]
    base_episode = MultiAgentEpisode(
        observations=observations,
        actions=actions,
        rewards=rewards,
        len_lookback_buffer=0,
    )
    check(len(base_episode), 4)
    check(base_episode._hanging_rewards_end, {"a1": 6.0})
    episode_1, episode_2 = base_episode[:2], base_episode[2:]
    check(len(episode_1), 2)
    check(len(episode_2), 2)
    episode_1.concat_episode(episode_2)
    check(len(episode_1), 4)
    check(episode_1.env_t_started, 0)
    check(episode_1.env_t, 4)
    a0 = episode_1.agent_episodes["a0"]
    a1 = episode_1.agent_episodes["a1"]
    check((len(a0), len(a1)), (4, 0))
    check((a0.t_started, a1.t_started), (0, 0))
    check((a0.t, a1.t), (4, 0))
    check((a0.observations, a1.observations), ([0, 1, 2, 3, 4], [0]))
    check((a0.actions, a1.actions), ([0, 1, 2, 3], []))
    check((a0.rewards, a1.rewards), ([0, 0.1, 0.2, 0.3], []))
    check(episode_1._hanging_rewards_end, {"a1": 6.0})
    check((a0.is_done, a1.is_done), (False, False))


def test_get_return() -> None:
    episode = MultiAgentEpisode()
    # Sample 100 timesteps.
    episode, _env = _mock_multi_agent_records_from_env()
    ret = episode.get_return()
    assert ret >= 0.0
    agent_returns = sum(agent_eps.get_return() for agent_eps in episode.agent_episodes.values())
    assert ret  # RLlib's assertTrue(ret, agent_returns): the second argument is its message

    buffered_rewards = sum(episode._hanging_rewards_end.values())
    # RLlib's assertTrue(x, msg): the sum is its message.
    assert episode.get_return(include_hanging_rewards=True), f"{agent_returns + buffered_rewards}"


def test_len() -> None:
    episode = MultiAgentEpisode()

    obs: list[MultiAgentDict] = [
        {"a0": 0, "a1": 0},
        {"a1": 1},
        {"a0": 2},
        {"a0": 3, "a1": 3},
    ]
    episode = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=obs[:-1], len_lookback_buffer=0)
    check(len(episode), 3)
    obs.append({"a1": 4})
    episode = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=obs[:-1], len_lookback_buffer=0)
    check(len(episode), 4)
    obs.append({"a0": 5, "a1": 5})
    episode = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=obs[:-1], len_lookback_buffer=0)
    check(len(episode), 5)
    obs.append({"a0": 6})
    episode = MultiAgentEpisode(observations=obs, actions=obs[:-1], rewards=obs[:-1], len_lookback_buffer=0)
    check(len(episode), 6)

    episode, env = _mock_multi_agent_records_from_env()
    check(len(episode), 100)

    successor = episode.cut()
    successor, env = _mock_multi_agent_records_from_env(episode=successor, env=env, init=False)
    assert len(successor)  # RLlib's assertTrue(len(successor), 100): 100 is its message


def test_get_state_and_from_state() -> None:
    episode = _create_simple_episode(
        [
            {"a0": 0, "a1": 0},
            {"a1": 1},
            {"a1": 2},
            {"a0": 3, "a1": 3},
            {"a0": 4},
            {"a0": 5, "a1": 5},
            {"a0": 6, "a1": 6},
            {"a1": 7},
            {"a1": 8},
            {"a0": 9},
        ]
    )

    state = episode.get_state()
    assert state
    episode_2 = MultiAgentEpisode.from_state(state)

    assert episode_2.id_ == episode.id_
    assert episode_2.agent_to_module_mapping_fn == episode.agent_to_module_mapping_fn
    assert type(episode_2.observation_space) is type(episode.observation_space)
    assert type(episode_2.action_space) is type(episode.action_space)
    check(episode_2.env_t_started, episode.env_t_started)
    check(episode_2.env_t, episode.env_t)
    check(episode_2.agent_t_started, episode.agent_t_started)
    assert episode_2.env_t_to_agent_t == episode.env_t_to_agent_t
    for agent_id, env_t_to_agent_t in episode_2.env_t_to_agent_t.items():
        check(env_t_to_agent_t.data, episode.env_t_to_agent_t[agent_id].data)
        check(env_t_to_agent_t.lookback, episode.env_t_to_agent_t[agent_id].lookback)
    check(episode_2._hanging_actions_end, episode._hanging_actions_end)
    check(episode_2._hanging_extra_model_outputs_end, episode._hanging_extra_model_outputs_end)
    check(episode_2._hanging_rewards_end, episode._hanging_rewards_end)
    check(episode_2._hanging_rewards_begin, episode._hanging_rewards_begin)
    check(episode_2.is_terminated, episode.is_terminated)
    check(episode_2.is_truncated, episode.is_truncated)
    assert set(episode_2.agent_episodes.keys()) == set(episode.agent_episodes.keys())
    for agent_id, agent_eps in episode_2.agent_episodes.items():
        assert agent_eps.id_ == episode.agent_episodes[agent_id].id_
    check(episode_2._start_time, episode._start_time)
    check(episode_2._last_step_time, episode._last_step_time)


def test_get_sample_batch() -> None:
    """RLlib's test returns on its first line ("Revisit this test"); its dead body is not ported."""
    return


def _create_simple_episode(obs: list[MultiAgentDict], len_lookback_buffer: int | str = 0) -> MultiAgentEpisode:
    return MultiAgentEpisode(
        observations=obs,
        actions=obs[:-1],
        rewards=[{aid: o / 10 for aid, o in o_dict.items()} for o_dict in obs[:-1]],
        len_lookback_buffer=len_lookback_buffer,
    )


def _mock_multi_agent_records_from_env(
    size: int = 100,
    episode: MultiAgentEpisode | None = None,
    env: MultiAgentTestEnv | None = None,
    init: bool = True,
    truncate: bool = True,
    seed: int | None = 42,
) -> tuple[MultiAgentEpisode, MultiAgentTestEnv]:
    env = env or MultiAgentTestEnv(truncate=truncate)
    episode = MultiAgentEpisode() if episode is None else episode
    if init:
        obs, info = env.reset(seed=seed)
        episode.add_env_reset(observations=obs, infos=info)
    else:
        # At least the last observations for the next actions.
        obs = dict(episode.get_observations(-1))

    done_agents = {aid for aid, t in episode.get_terminateds().items() if t}
    for i in range(env.t, env.t + size):
        action = {agent_id: i + 1 for agent_id in obs if agent_id not in done_agents}
        obs, reward, terminated, truncated, info = env.step(action)
        done_agents |= {a for a, v in terminated.items() if v is True}
        done_agents |= {a for a, v in truncated.items() if v is True}
        episode.add_env_step(
            observations=obs,
            actions=action,
            rewards=reward,
            infos=info,
            terminateds=terminated,
            truncateds=truncated,
            extra_model_outputs={agent_id: {"extra": 10} for agent_id in action},
        )
    return episode, env


def _mock_multi_agent_records() -> tuple[
    list[MultiAgentDict],
    list[MultiAgentDict],
    list[MultiAgentDict],
    MultiAgentDict,
    MultiAgentDict,
    list[MultiAgentDict],
]:
    observations: list[MultiAgentDict] = [
        {"agent_1": 0, "agent_2": 0, "agent_3": 0},
        # Agent 2 steps, but gets no next observation.
        {"agent_1": 1, "agent_3": 1, "agent_4": 1},
        # Agents 1 and 3 stepped, but got no next observation: their actions go into the buffers.
        {"agent_2": 2, "agent_4": 2},
    ]
    actions: list[MultiAgentDict] = [
        # Here agent_2 has to buffer.
        {"agent_1": 0, "agent_2": 0, "agent_3": 0},
        {"agent_1": 1, "agent_3": 1, "agent_4": 1},
    ]
    rewards: list[MultiAgentDict] = [
        # Agent 4 buffers the reward (no action nor observation yet).
        {"agent_1": 0.5, "agent_2": 0.6, "agent_3": 0.7},
        # Agent 4 releases the buffer with reward 1.0 and adds the next reward to it.
        {"agent_1": 1.1, "agent_3": 1.2, "agent_4": 1.3},
    ]
    infos: list[MultiAgentDict] = [
        {"agent_1": {"a1_i0": 1}, "agent_2": {"a2_i0": 2}, "agent_3": {"a3_i0": 3}},
        {"agent_1": {"a1_i1": 1.1}, "agent_3": {"a3_i1": 3.1}, "agent_4": {"a4_i1": 4.1}},
        {"agent_2": {"a2_i2": 2.2}, "agent_4": {"a4_i2": 4.2}},
    ]
    # No agent is terminated or truncated.
    terminateds = {"__all__": False, "agent_1": False, "agent_3": False, "agent_4": False}
    truncateds = {"__all__": False, "agent_1": False, "agent_3": False, "agent_4": False}
    return observations, actions, rewards, terminateds, truncateds, infos


SETTER_PATTERNS: list[tuple[str, dict[str, Any], Any]] = [
    # (description, new_data, indices)
    ("zero index", {"a0": 7353.0, "a1": 8353.0}, 0),
    ("single index", {"a0": 7353.0, "a1": 8353.0}, 2),
    ("negative index", {"a0": 7353.0, "a1": 8353.0}, -1),
    ("short list of indices", {"a0": [7353.0], "a1": [8353.0]}, [1]),
    ("long list of indices", {"a0": [73.0, 53.0, 35.0, 53.0], "a1": [83.0, 63.0, 45.0, 63.0]}, [1, 2, 3, 4]),
    ("short slice", {"a0": [7353.0], "a1": [8353.0]}, slice(2, 3)),
    ("long slice", {"a0": [7.0, 3.0, 5.0, 3.0], "a1": [17.0, 13.0, 15.0, 13.0]}, slice(2, 6)),
]


def test_setters() -> None:
    """Tests whether the MultiAgentEpisode's setter methods work as expected (also numpy'ized episodes)."""
    some_key = "some_key"
    episode = MultiAgentEpisode(
        observations=[
            {"a0": 100, "a1": 200},  # Initial observations
            {"a0": 101, "a1": 201},
            {"a0": 102, "a1": 202},
            {"a0": 103, "a1": 203},
            {"a0": 104, "a1": 204},
            {"a0": 105, "a1": 205},
            {"a0": 106, "a1": 206},
        ],
        actions=[
            {"a0": 1, "a1": 11},
            {"a0": 2, "a1": 12},
            {"a0": 3, "a1": 13},
            {"a0": 4, "a1": 14},
            {"a0": 5, "a1": 15},
            {"a0": 6, "a1": 16},
        ],
        rewards=[
            {"a0": 0.1, "a1": 1.1},
            {"a0": 0.2, "a1": 1.2},
            {"a0": 0.3, "a1": 1.3},
            {"a0": 0.4, "a1": 1.4},
            {"a0": 0.5, "a1": 1.5},
            {"a0": 0.6, "a1": 1.6},
        ],
        extra_model_outputs=[
            {"a0": {some_key: 0.01}, "a1": {some_key: 1.01}},
            {"a0": {some_key: 0.02}, "a1": {some_key: 1.02}},
            {"a0": {some_key: 0.03}, "a1": {some_key: 1.03}},
            {"a0": {some_key: 0.04}, "a1": {some_key: 1.04}},
            {"a0": {some_key: 0.05}, "a1": {some_key: 1.05}},
            {"a0": {some_key: 0.06}, "a1": {some_key: 1.06}},
        ],
        len_lookback_buffer=0,
    )

    numpy_episode = copy.deepcopy(episode).to_numpy()
    for e in [episode, numpy_episode]:
        for desc, new_data, indices in SETTER_PATTERNS:
            expected_data = new_data
            test_new_data: dict[str, Any] = new_data
            # Lists as numpy arrays for numpy episodes.
            if e.is_numpy and isinstance(next(iter(new_data.values())), list):
                test_new_data = {agent_id: np.array(agent_data) for agent_id, agent_data in new_data.items()}

            e.set_observations(new_data=test_new_data, at_indices=indices)
            result = e.get_observations(indices)
            for agent_id in ["a0", "a1"]:
                check(result[agent_id], expected_data[agent_id])

            e.set_actions(new_data=test_new_data, at_indices=indices)
            result = e.get_actions(indices)
            for agent_id in ["a0", "a1"]:
                check(result[agent_id], expected_data[agent_id])

            e.set_rewards(new_data=test_new_data, at_indices=indices)
            result = e.get_rewards(indices)
            for agent_id in ["a0", "a1"]:
                check(result[agent_id], expected_data[agent_id])

            # Checked on the agents' episodes (RLlib's way).
            e.set_extra_model_outputs(key=some_key, new_data=test_new_data, at_indices=indices)
            if desc in ["single index", "zero index"]:
                for agent_id in ["a0", "a1"]:
                    actual_idx = e.agent_episodes[agent_id].t_started + indices
                    if actual_idx < len(e.agent_episodes[agent_id].get_extra_model_outputs(some_key)):
                        check(
                            e.agent_episodes[agent_id].get_extra_model_outputs(some_key)[actual_idx],
                            expected_data[agent_id],
                        )
            elif desc == "negative index":
                for agent_id in ["a0", "a1"]:
                    agent_ep = e.agent_episodes[agent_id]
                    actual_idx = len(agent_ep.get_extra_model_outputs(some_key)) + indices
                    if actual_idx >= 0:
                        check(agent_ep.get_extra_model_outputs(some_key)[actual_idx], expected_data[agent_id])
            elif desc in ["long list of indices", "short list of indices"]:
                for agent_id in ["a0", "a1"]:
                    agent_ep = e.agent_episodes[agent_id]
                    for i, expected_val in enumerate(expected_data[agent_id]):
                        actual_idx = agent_ep.t_started + indices[i]
                        if actual_idx < len(agent_ep.get_extra_model_outputs(some_key)):
                            check(agent_ep.get_extra_model_outputs(some_key)[actual_idx], expected_val)
            elif desc in ["long slice", "short slice"]:
                for agent_id in ["a0", "a1"]:
                    agent_ep = e.agent_episodes[agent_id]
                    slice_indices = list(range(indices.start, indices.stop))
                    for i, expected_val in enumerate(expected_data[agent_id]):
                        actual_idx = agent_ep.t_started + slice_indices[i]
                        if actual_idx < len(agent_ep.get_extra_model_outputs(some_key)):
                            check(agent_ep.get_extra_model_outputs(some_key)[actual_idx], expected_val)
