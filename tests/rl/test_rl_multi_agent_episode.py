"""MultiAgentEpisode recorded RLlib's way: hanging actions and rewards, early rewards, cut, slice, concat (issue 38)."""

from __future__ import annotations

import pytest

from cairn.rl.env.multi_agent_episode import EnvToAgentSteps, MultiAgentEpisode, MultiAgentEpisodeError


def _game() -> MultiAgentEpisode:
    """Agent a acts each step until it hangs; b is rewarded before its first observation, then joins."""
    episode = MultiAgentEpisode("g")
    episode.add_env_reset(observations={"a": 0}, infos={"a": {}})
    episode.add_env_step({"a": 1}, {"a": 0}, {"a": 1.0, "b": 2.0})
    episode.add_env_step({"b": 0}, {"a": 1}, {"a": 0.5})  # a acts and gets no observation: its action hangs
    return episode


def test_hanging_action_and_early_reward_are_recorded_as_rllib_does() -> None:
    episode = _game()
    assert episode.env_t_to_agent_t["a"] == EnvToAgentSteps([0, 1, "S"])
    assert episode.env_t_to_agent_t["b"] == EnvToAgentSteps(["S", "S", 0])
    assert episode._hanging_actions_end == {"a": 1}
    assert episode._hanging_rewards_begin == {"b": 2.0}
    assert len(episode) == 2 and episode.agent_steps() == 1
    assert episode.get_return() == 1.0
    assert episode.get_return(include_hanging_rewards=True) == 3.5
    assert episode.get_observations(-1) == {"b": 0}
    assert episode.get_observations(-1, fill=-1) == {"a": -1, "b": 0}
    assert episode.get_agents_that_stepped() == episode.get_agents_to_act() == {"b"}
    assert episode.agent_episode_ids == {"a": "g-a", "b": "g-b"}


def test_cut_continues_the_game_and_completes_the_hanging_step() -> None:
    game = _game()
    game.custom_data["seen"] = [1]
    chunk = game.cut()
    assert chunk.custom_data == {"seen": [1]} and chunk.custom_data["seen"] is not game.custom_data["seen"]
    assert (chunk.id_, chunk.env_t_started, len(chunk)) == ("g", 2, 0)
    # a's action was chosen one env step back, so the chunk keeps that step as lookback.
    assert chunk.env_t_to_agent_t["a"] == EnvToAgentSteps([0, "S"], lookback=1)  # positions in the chunk's data
    chunk.add_env_step({"a": 2, "b": 1}, {"b": 0}, {"a": 1.0, "b": 1.0}, terminateds={"__all__": True})
    a = chunk.agent_episodes["a"]
    assert (len(a), a.get_actions(-1), a.get_rewards(-1)) == (1, 1, 1.5)  # the hanging reward joins the step
    assert chunk.is_terminated and chunk.get_return() == 2.5
    with pytest.raises(MultiAgentEpisodeError, match="is done"):
        chunk.add_env_step({"a": 3}, {}, {})


def test_refused_steps_name_the_agent() -> None:
    episode = MultiAgentEpisode("g")
    episode.add_env_reset(observations={"a": 0})
    with pytest.raises(MultiAgentEpisodeError, match="'a' acted and got its next observation, but no reward"):
        episode.add_env_step({"a": 1}, {"a": 0}, {})
    with pytest.raises(MultiAgentEpisodeError, match="'c' acted before its first observation"):
        episode.add_env_step({}, {"c": 0}, {})
    with pytest.raises(MultiAgentEpisodeError, match="add_env_reset starts a new one"):
        episode.add_env_reset(observations={"a": 0})


def test_built_from_lists_is_all_lookback_by_default() -> None:
    episode = MultiAgentEpisode(
        observations=[{"a": 0}, {"a": 1}, {"a": 2}],
        actions=[{"a": 0}, {"a": 1}],
        rewards=[{"a": 1.0}, {"a": 1.0}],
        env_t_started=2,
    )
    assert (episode.env_t_started, episode.env_t, len(episode)) == (2, 2, 0)
    assert len(episode.agent_episodes["a"]) == 0 and episode.agent_episodes["a"].t_started == 0  # RLlib's default


def _staggered() -> MultiAgentEpisode:
    """a0 and a1 take turns observing; their actions hang across the gaps (RLlib's slicing test episode)."""
    obs = [{"a0": 0, "a1": 0}, {"a0": 1, "a1": 1}, {"a1": 2}, {"a1": 3}, {"a1": 4}, {"a0": 5, "a1": 5}, {"a0": 6}]
    obs += [{"a0": 7, "a1": 7}, {"a0": 8}, {"a1": 9}]
    rewards = [{agent: o / 10 for agent, o in step.items()} for step in obs[:-1]]
    return MultiAgentEpisode("g", observations=obs, actions=obs[:-1], rewards=rewards, len_lookback_buffer=0)


@pytest.mark.parametrize("split", range(10))
def test_slices_concatenated_give_the_episode_back(split: int) -> None:
    base = _staggered()
    episode = base[:split]
    episode.concat_episode(base[split:])
    for getter in ("get_observations", "get_actions", "get_rewards"):
        for indices in (None, -1, slice(2, 7), [0, 3, 5]):
            assert getattr(episode, getter)(indices, fill=-1) == getattr(base, getter)(indices, fill=-1)
    assert episode.env_t_to_agent_t == base.env_t_to_agent_t
    assert episode._hanging_actions_end == base._hanging_actions_end
    assert episode.get_return() == pytest.approx(base.get_return())


def test_concat_refuses_a_chunk_that_does_not_follow() -> None:
    base = _staggered()
    with pytest.raises(MultiAgentEpisodeError, match="chunks must follow each other"):
        base[:3].concat_episode(base[4:])
    with pytest.raises(MultiAgentEpisodeError, match="cannot take a chunk"):
        base[:3].concat_episode(MultiAgentEpisode("other", observations=[{"a0": 0}], env_t_started=3))


def test_model_outputs_read_per_env_step_with_the_hanging_ones_last() -> None:
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations={"a": 0, "b": 0})
    episode.add_env_step({"a": 1}, {"a": 0, "b": 0}, {"a": 1.0}, extra_model_outputs={"a": {"lp": -1}, "b": {"lp": -2}})
    episode.add_env_step({"a": 2, "b": 2}, {"a": 1}, {"a": 1.0}, extra_model_outputs={"a": {"lp": -3}})
    # b acted at env step 0 and observed at 2: its output belongs to step 0.
    assert episode.get_extra_model_outputs("lp", [-2, -1]) == {"a": [-1, -3], "b": [-2]}
    assert episode.get_extra_model_outputs("lp", -1) == {"a": -3}
    assert episode.get_extra_model_outputs("lp", slice(0, 2), return_list=True) == [{"a": -1, "b": -2}, {"a": -3}]
    episode.add_env_step({"a": 3}, {"a": 2, "b": 2}, {"a": 1.0}, extra_model_outputs={"a": {"lp": -4}, "b": {"lp": -5}})
    # b's latest action hangs (no observation yet): it is the latest value, with its output.
    assert episode.get_extra_model_outputs("lp", -1) == {"a": -4, "b": -5}
    assert episode.get_actions(-1) == {"a": 2, "b": 2}
    assert episode.get_extra_model_outputs("lp", -1, env_steps=False) == {"a": -4, "b": -5}
