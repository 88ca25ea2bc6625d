"""Agents with different spaces, int agent ids, register_env and environment(EnvClass) for single-agent envs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from agent_spaces_helpers import SpacesEnv
from cairn.rl import PPO, PPOConfig
from cairn.rl.core.rl_module.rl_module import RLModule
from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import (
    EpisodeInfo,
    register_env,
    register_policy_mapping_fn,
)
from cairn.testing import assert_states_equal

# ---------------------------------------------------------------------- environments


SPACES_ENV = f"{SpacesEnv.__module__}:SpacesEnv"  # a module Ray workers find too (tests/)


class Corridor(gym.Env[np.ndarray, int]):  # type: ignore[type-arg]
    """A single-agent gymnasium Env built as ``Corridor(env_config)`` (RLlib's SimpleCorridor, shortened)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.end = int((config or {}).get("corridor_length", 4))
        self.pos = 0
        self.observation_space = gym.spaces.Box(0.0, float(self.end), (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, Any]:
        super().reset(seed=seed)
        self.pos = 0
        return np.array([self.pos], np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        terminated = self.pos >= self.end
        reward = float(self.np_random.uniform(0.5, 1.5)) if terminated else -0.01
        return np.array([self.pos], np.float32), reward, terminated, False, {}


register_env_state_handler(Corridor, lambda env: {"pos": env.pos}, lambda env, s: setattr(env, "pos", int(s["pos"])))


# ---------------------------------------------------------------------- mapping functions


def map_by_name(agent_id: Any, episode: EpisodeInfo) -> str:
    """``a0`` -> ``m0``, ``a1`` -> ``m1`` (RLlib's example: ``f"main{aid[-1]}"``)."""
    return f"m{str(agent_id)[-1]}"


def map_a1_wrongly_in_real_episodes(agent_id: Any, episode: EpisodeInfo) -> str:
    """Right for the space inference's dummy episode, wrong (``a1`` -> ``m0``) once episodes run."""
    if episode.id_ == "space-inference":
        return map_by_name(agent_id, episode)
    return "m0"


def all_to_m0(agent_id: Any, episode: EpisodeInfo) -> str:
    return "m0"


register_policy_mapping_fn("tests_agent_spaces_all_to_m0", all_to_m0)

SEEN_IDS: list[Any] = []


def map_by_id_type(agent_id: Any, episode: EpisodeInfo) -> str:
    """Int ids to ``ints``, str ids to ``strs``: the function must get the ids as the env gives them."""
    SEEN_IDS.append(agent_id)
    return "ints" if isinstance(agent_id, int) else "strs"


# ---------------------------------------------------------------------- helpers


def spaces_config(**overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=SPACES_ENV,
        seed=3,
        num_envs_per_env_runner=2,
        rollout_length=8,  # episodes of 6 steps: iterations end mid-episode
        minibatch_size=8,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("m0", "m1"),
        policy_mapping={"a0": "m0", "a1": "m1"},
        observation_filter="MeanStdFilter",  # each module's filter is what these tests follow
    )
    return dataclasses.replace(base, **overrides)


def train_results(algo: PPO, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def assert_resumes_exactly(algo: PPO, tmp_path: Path) -> PPO:
    """Save ``algo``, rebuild it from the checkpoint, and check that both go on bit for bit."""
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert not restored.env_runner.episodes_restarted
    assert train_results(algo, 2) == train_results(restored, 2)
    assert_states_equal(algo.get_state(), restored.get_state())
    return restored


# ---------------------------------------------------------------------- different spaces


@pytest.mark.parametrize("mapping", ["static", "function"])
def test_each_module_gets_its_agents_spaces_through_training_and_a_checkpoint(mapping: str, tmp_path: Path) -> None:
    """RLlib's different_spaces_for_agents: each module has the spaces of its agents (a static mapping, or
    inferred through the mapping function), its own filter, and a checkpoint rebuilds each with its spaces."""
    overrides: dict[str, Any] = {}
    if mapping == "function":
        overrides = {"policy_mapping": None, "policy_mapping_fn": map_by_name}
    algo = PPO(spaces_config(**overrides))
    train_results(algo, 1)
    restored = assert_resumes_exactly(algo, tmp_path)
    for algorithm in (algo, restored):
        for module_id, dim, actions in (("m0", 3, 2), ("m1", 5, 3)):
            module = algorithm.get_module(module_id)
            assert module.observation_space.shape == (dim,)
            assert module.action_space == gym.spaces.Discrete(actions)
            assert algorithm.env_runner.env_to_module[module_id]["MeanStdFilter"].shape == (dim,)
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "env_runner" / "env_to_module_connector" / "m1" / "MeanStdFilter").is_dir()
    alone = RLModule.from_checkpoint(ckpt / "learner_group" / "learner" / "rl_module" / "m1")
    assert alone.observation_space.shape == (5,) and alone.action_space == gym.spaces.Discrete(3)
    algo.stop()
    restored.stop()


def test_agents_of_other_spaces_mapped_to_one_module_are_refused_before_training() -> None:
    with pytest.raises(ValueError, match=r"agent 'a1' \(Box.*\(5,\).*agent 'a0' \(Box.*\(3,\).*module 'm0'"):
        PPO(spaces_config(policy_mapping={"a0": "m0", "a1": "m0"}))
    with pytest.raises(ValueError, match=r"both map to module 'm0'"):
        PPO(spaces_config(policy_mapping=None, policy_mapping_fn="tests_agent_spaces_all_to_m0"))


def test_a_mapping_function_that_maps_an_agent_to_a_module_of_other_spaces_is_refused_when_it_does() -> None:
    algo = PPO(spaces_config(policy_mapping=None, policy_mapping_fn=map_a1_wrongly_in_real_episodes))
    with pytest.raises(ValueError) as caught:
        algo.train()
    message = str(caught.value)
    assert "agent 'a1'" in message and "module 'm0'" in message and "(5,)" in message and "(3,)" in message
    assert "policy_mapping_fn" in message and "modules of their own" in message  # what to do
    algo.stop()


def test_an_old_shared_filter_state_goes_into_every_modules_filter() -> None:
    """Checkpoints before per-module pipelines kept one filter at env_to_module_connector/MeanStdFilter/."""
    algo = PPO(spaces_config(env_config={"dims": [4, 4], "actions": [2, 2]}))
    shared = {"count": 7, "mean": np.arange(4.0), "m2": np.ones(4) * 3.0}
    algo.env_runner.env_to_module.set_state({"MeanStdFilter": shared})
    for module_id in ("m0", "m1"):
        state = algo.env_runner.env_to_module[module_id]["MeanStdFilter"].get_state()
        assert state["count"] == 7 and np.array_equal(state["mean"], shared["mean"])
    algo.stop()


# ---------------------------------------------------------------------- agent ids


def test_int_agent_ids_reach_the_mapping_and_come_back_from_a_checkpoint_as_ints(tmp_path: Path) -> None:
    """RLlib's make_multi_agent numbers agents 0..n-1; 1 and "1" are two agents, never one."""
    SEEN_IDS.clear()
    ids: list[Any] = [0, 1, "1"]
    algo = PPO(
        spaces_config(
            env_config={"ids": ids, "dims": [3, 3, 3], "actions": [2, 2, 2]},
            policies=("ints", "strs"),
            policy_mapping=None,
            policy_mapping_fn=map_by_id_type,
        )
    )
    train_results(algo, 1)
    assert {(type(a), a) for a in SEEN_IDS} == {(int, 0), (int, 1), (str, "1")}
    episode = algo.env_runner.get_state()["env"]["episodes"][0]
    assert episode["mapping"] == {0: "ints", 1: "ints", "1": "strs"} and episode["pending"]  # in flight
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    restored_episode = restored.env_runner.get_state()["env"]["episodes"][0]
    assert {(type(a), a) for a in restored_episode["mapping"]} == {(int, 0), (int, 1), (str, "1")}
    assert {(type(a), a) for a in restored_episode["pending"]} == {(int, 0), (int, 1), (str, "1")}
    assert train_results(algo, 2) == train_results(restored, 2)  # the episodes in flight go on exactly
    assert_states_equal(algo.get_state(), restored.get_state())
    algo.stop()
    restored.stop()


def test_a_static_mapping_with_int_ids_is_recorded_with_int_ids(tmp_path: Path) -> None:
    config = spaces_config(
        env_config={"ids": [0, 1], "dims": [3, 5], "actions": [2, 3]}, policy_mapping={0: "m0", 1: "m1"}
    )
    algo = PPO(config)
    restored = assert_resumes_exactly(algo, tmp_path)
    assert restored.config.policy_mapping == {0: "m0", 1: "m1"}
    assert all(type(agent) is int for agent in restored.config.policy_mapping)
    algo.stop()
    restored.stop()


def test_agent_ids_of_other_types_are_refused() -> None:
    with pytest.raises(ValueError, match=r"agent id \('a', 0\) \(tuple\).*str or int"):
        PPO(spaces_config(env_config={"ids": [("a", 0), "b"]}, policy_mapping=None, policies=("m0",)))
    with pytest.raises(ValueError, match=r"agent id True \(bool\)"):
        PPO(spaces_config(env_config={"ids": [True, "b"]}, policy_mapping=None, policies=("m0",)))


# ---------------------------------------------------------------------- single-agent envs by name or class


register_env("tests-agent-spaces-corridor", lambda config: Corridor(config))


@pytest.mark.parametrize("how", ["register_env", "class"])
def test_a_single_agent_env_by_registered_name_or_class_trains_and_resumes_exactly(how: str, tmp_path: Path) -> None:
    env: Any = "tests-agent-spaces-corridor" if how == "register_env" else Corridor
    config = (
        PPOConfig()
        .environment(env, env_config={"corridor_length": 3})
        .env_runners(num_envs_per_env_runner=2, rollout_fragment_length=8)
        .training(minibatch_size=8, num_epochs=1)
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .debugging(seed=1)
    )
    assert config.env == ("tests-agent-spaces-corridor" if how == "register_env" else f"{__name__}:Corridor")
    algo = config.build_algo()
    assert type(algo.env_runner).__name__ == "EnvRunner"  # the single-agent runner
    assert isinstance(algo.env_runner.env.envs[0], Corridor)
    train_results(algo, 1)
    restored = assert_resumes_exactly(algo, tmp_path)
    assert restored.config.env == config.env
    algo.stop()
    restored.stop()


def test_an_env_creator_function_or_a_local_class_is_kept_as_the_config_creator() -> None:
    """RLlib's environment(lambda cfg: ...) and a class no path names: kept, never recorded (issue 39)."""
    config = PPOConfig().environment(lambda config: Corridor(config))
    assert config.env == config.env_creator.qualname and config.env.endswith("<locals>.<lambda>")

    class Local(Corridor):
        pass

    assert PPOConfig().environment(Local).env_creator.fn is Local
    assert PPOConfig().environment(Local).environment("CartPole-v1").env_creator is None
    with pytest.raises(ValueError, match=r"no gymnasium\.Env"):
        PPOConfig().environment(dict)


def test_saved_episodes_of_str_ids_do_not_resume_in_an_env_whose_ids_are_ints(tmp_path: Path) -> None:
    """ "0" is not 0: a checkpoint taken before an env switched to int ids restarts its episodes."""
    as_str = spaces_config(env_config={"ids": ["0", "1"]}, policy_mapping={"0": "m0", "1": "m1"})
    algo = PPO(as_str)
    train_results(algo, 1)
    path = algo.save_to_path(tmp_path / "ckpt")
    same = PPO.from_checkpoint(path)
    assert not same.env_runner.episodes_restarted
    as_int = dataclasses.replace(as_str, env_config={"ids": [0, 1]}, policy_mapping={0: "m0", 1: "m1"})
    switched = PPO.from_checkpoint(path, config=as_int)
    assert switched.env_runner.episodes_restarted
    train_results(switched, 1)  # its own episodes, with int ids
    for a in (algo, same, switched):
        a.stop()


def test_filter_deltas_merge_module_by_module_across_runners() -> None:
    """What a group does with remote runners: each runner's deltas go into the same module's filter."""
    from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner

    config = spaces_config()
    local = MultiAgentEnvRunner(config, worker_index=0)
    remotes = [MultiAgentEnvRunner(config, worker_index=i) for i in (1, 2)]
    for runner in remotes:
        runner.sample_batches()
        local.absorb_sample_report(runner.sample_report())
    for module_id, dim in (("m0", 3), ("m1", 5)):
        merged = local.env_to_module[module_id]["MeanStdFilter"]
        seen = [r.env_to_module[module_id]["MeanStdFilter"].get_state() for r in remotes]
        expected = merged.merge_states(seen)
        assert merged.count == expected["count"] == 2 * 2 * 8  # 2 runners x 2 env copies x 8 steps, one agent
        assert merged.mean.shape == (dim,) and np.allclose(merged.mean, expected["mean"])
    remotes[0].set_synced_connector_states(local.get_connector_states())
    assert remotes[0].env_to_module["m1"]["MeanStdFilter"].count == 2 * 2 * 8
    for runner in (local, *remotes):
        runner.close()


def test_gymnasium_classes_and_wrappers_are_not_built_from_a_recorded_class_path() -> None:
    """A checkpoint may name any imported class: only env classes written for env_config are built by path."""
    from cairn.rl.env.multi_agent_env import single_agent_env_creator

    assert single_agent_env_creator(f"{__name__}:Corridor") is Corridor
    assert single_agent_env_creator("gymnasium.envs.classic_control.cartpole:CartPoleEnv") is None
    assert single_agent_env_creator("gymnasium.wrappers:TimeLimit") is None
    assert single_agent_env_creator("CartPole-v1") is None
