"""MultiAgentEnv environments (issue 14 item 4): TicTacToe, the MultiAgentEnvRunner, policy mapping, resume."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn.rl.env.games
from cairn.errors import UnsafeCheckpointError
from cairn.registry import Unrecorded
from cairn.rl import PPO, PPOConfig
from cairn.rl.env.env_state import get_env_state, set_env_state
from cairn.rl.env.games import TicTacToe
from cairn.rl.env.multi_agent_env import EpisodeInfo, register_policy_mapping_fn
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.testing import assert_states_equal

TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"

CALLS: list[tuple[str, str]] = []


def random_side_mapping(agent_id: str, episode: EpisodeInfo) -> str:
    """``"learner"`` on one side, ``"frozen"`` on the other, drawn per episode; records each call."""
    CALLS.append((episode.id_, agent_id))
    side = int(np.random.default_rng(episode.seed).integers(2))
    return "learner" if agent_id.endswith(str(side)) else "frozen"


register_policy_mapping_fn("random_side", random_side_mapping)


def config(**overrides: Any) -> PPOConfig:
    base = PPOConfig(
        env=TICTACTOE,
        seed=5,
        num_envs_per_env_runner=3,
        rollout_length=7,  # 21 env steps: iterations end mid-game
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [16]},
        policies=("learner", "frozen"),
        policy_mapping_fn=random_side_mapping,
        policies_to_train=("learner",),
    )
    return dataclasses.replace(base, **overrides)


# ---------------------------------------------------------------------- the game


def play(env: TicTacToe, cells: list[int]) -> tuple[dict[str, Any], ...]:
    out: tuple[dict[str, Any], ...] = ()
    for cell in cells:
        out = env.step({env.possible_agents[env.to_move]: cell})
    return out


def test_tictactoe_is_played_in_turns_and_scored_zero_sum() -> None:
    env = TicTacToe()
    obs, _ = env.reset(seed=0)
    assert len(obs) == 1 and next(iter(obs)) == env.possible_agents[env.to_move]
    first = env.possible_agents[env.to_move]
    obs, rewards, terminateds, _, _ = play(env, [0])
    assert first not in obs and terminateds == {"__all__": False}
    obs, rewards, terminateds, truncateds, _ = play(env, [3, 1, 4, 2])  # first player completes the top row
    assert rewards[first] == 1.0 and sum(rewards.values()) == 0.0
    assert terminateds["__all__"] and not truncateds["__all__"] and set(obs) == set(env.possible_agents)

    env.reset(seed=1)
    mover = env.possible_agents[env.to_move]
    play(env, [4])
    _, rewards, terminateds, _, _ = play(env, [4])  # an occupied cell loses at once
    assert terminateds["__all__"] and rewards[mover] == 1.0 and sum(rewards.values()) == 0.0


def test_tictactoe_state_round_trips_and_a_foreign_state_is_refused() -> None:
    env = TicTacToe()
    env.reset(seed=3)
    play(env, [0, 4])
    state = get_env_state(env)
    assert state is not None
    other = TicTacToe()
    other.reset(seed=99)
    set_env_state(other, state)
    assert np.array_equal(other.board, env.board) and other.to_move == env.to_move
    assert np.array_equal(
        other.reset()[0][other.possible_agents[other.to_move]], env.reset()[0][env.possible_agents[env.to_move]]
    )
    bad = dict(state, env={**state["env"], "render_mode": "human"})
    with pytest.raises(ValueError, match="exactly board, to_move and agents"):
        set_env_state(other, bad)


# ---------------------------------------------------------------------- the runner


def test_mapping_is_called_once_per_agent_per_episode_and_trajectories_are_per_agent() -> None:
    runner = MultiAgentEnvRunner(config(rollout_length=40, policies_to_train=None))
    CALLS.clear()
    batches = runner.sample_batches()
    assert len(CALLS) == len(set(CALLS))  # never twice for one agent of one episode
    episodes = {episode for episode, _ in CALLS}
    assert all(sum(1 for e, _ in CALLS if e == episode) <= 2 for episode in episodes)
    finished = runner.get_metrics()["num_episodes"]
    assert finished >= 2 * 10  # agent episodes: two per game, several games per env copy

    rows = 0
    for module_id, batch in batches.items():
        assert module_id in ("learner", "frozen")
        length = batch["obs"].shape[0]
        assert batch["obs"].shape == (length, 1, 27) and batch["actions"].shape == (length, 1)
        # A trajectory ends in the batch: terminated (game over) or cut (it goes on next call).
        assert batch["terminateds"][-1, 0] or batch["truncateds"][-1, 0]
        # Rewards come only when a game ends, and each is +-1 or 0 for that agent.
        assert set(np.unique(batch["rewards"][~batch["terminateds"]])) <= {0.0}
        rows += length
    open_transitions = sum(len(p) for p in runner._pending)
    assert rows + open_transitions == runner.num_agent_steps_sampled_lifetime


def test_modules_outside_policies_to_train_act_but_do_not_learn() -> None:
    algo = PPO(config())
    frozen_before = algo.get_module("frozen").get_state()
    learner_before = algo.get_module("learner").get_state()
    results = algo.train()
    assert_states_equal(algo.get_module("frozen").get_state(), frozen_before)
    with pytest.raises(AssertionError):
        assert_states_equal(algo.get_module("learner").get_state(), learner_before)
    assert "learners/learner/total_loss" in results and "frozen" not in results["learners"]
    assert "env_runners/module_episode_returns_mean/frozen" in results  # it played
    algo.stop()


def test_a_checkpoint_taken_mid_game_resumes_exactly(tmp_path: Path) -> None:
    algo = PPO(config())
    for _ in range(2):
        algo.train()
    assert any(algo.env_runner._pending), "the test wants open transitions at the save"
    path = algo.save_to_path(tmp_path / "ckpt")
    restored = PPO.from_checkpoint(path)
    assert not restored.env_runner.episodes_restarted
    for _ in range(2):
        a = algo.train().flatten(wall_clock=False)
        b = restored.train().flatten(wall_clock=False)
        assert a == b
    assert_states_equal(algo.get_state(), restored.get_state())
    algo.stop()
    restored.stop()


def test_add_module_maps_new_episodes_and_the_checkpoint_rebuilds_it(tmp_path: Path) -> None:
    from cairn.rl import RLModuleSpec

    algo = PPO(config(policies=("learner",), policy_mapping_fn=None, policies_to_train=None))
    algo.train()
    algo.add_module(
        "frozen",
        RLModuleSpec(),
        new_agent_to_module_mapping_fn="random_side",
        new_should_module_be_updated=("learner",),
    )
    assert algo.config.policy_mapping_fn == "random_side"
    results = algo.train()
    assert "env_runners/module_episode_returns_mean/frozen" in results
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert restored.config.policies == ("learner", "frozen") and restored.config.policies_to_train == ("learner",)
    a = algo.train().flatten(wall_clock=False)
    b = restored.train().flatten(wall_clock=False)
    assert a == b
    algo.stop()
    restored.stop()


def learner_only_mapping(agent_id: str, episode: EpisodeInfo) -> str:
    """Every agent plays ``"learner"``."""
    return "learner"


def test_remove_module_while_its_games_run_remaps_them_and_resumes_exactly(tmp_path: Path) -> None:
    algo = PPO(config())
    algo.train()  # 21 env steps over 3 copies: games are in flight
    runner = algo.env_runner
    in_flight = {
        (e, agent) for e, mapping in enumerate(runner._mappings) for agent, m in mapping.items() if m == "frozen"
    }
    assert any(agent in runner._pending[e] for e, agent in in_flight), "the test wants frozen's open transitions"
    returns, steps = [dict(r) for r in runner._agent_returns], [dict(n) for n in runner._agent_steps]
    with pytest.raises(ValueError, match="must be re-mapped"):
        algo.remove_module("frozen")  # the mapping in effect still maps those agents to "frozen"
    assert "frozen" in runner.module and algo.config.policies == ("learner", "frozen")

    algo.remove_module("frozen", new_agent_to_module_mapping_fn=learner_only_mapping)
    assert list(runner.module.keys()) == ["learner"] and algo.config.policies == ("learner",)
    assert all(m == "learner" for mapping in runner._mappings for m in mapping.values())
    assert not any(agent in runner._pending[e] for e, agent in in_flight)  # collected with "frozen": dropped
    assert runner._agent_returns == returns and runner._agent_steps == steps  # the games' bookkeeping goes on

    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert not restored.env_runner.episodes_restarted
    for _ in range(2):
        a = algo.train().flatten(wall_clock=False)
        b = restored.train().flatten(wall_clock=False)
        assert a == b
        assert not any("/frozen/" in key for key in a)
    assert_states_equal(algo.get_state(), restored.get_state())
    algo.stop()
    restored.stop()


# ---------------------------------------------------------------------- refusals


def test_mapping_functions_are_recorded_by_reference_or_kept_live() -> None:
    kept = config(policy_mapping_fn=lambda agent_id, episode: "learner").policy_mapping_fn  # issue 39: kept live
    assert isinstance(kept, Unrecorded) and kept("agent_0", None) == "learner"
    assert config().policy_mapping_fn == f"{__name__}:random_side_mapping"
    with pytest.raises(ValueError, match="not registered"):
        MultiAgentEnvRunner(config(policy_mapping_fn="no_such_mapping"))
    # A resealed config cannot make cairn import a module, or call os.system or shutil.rmtree: none is allowed.
    for ref in ("not_imported_module_xyz:fn", "os:system", "shutil:rmtree"):
        with pytest.raises(UnsafeCheckpointError, match=f"'{ref}', which is not on cairn's allow-list"):
            MultiAgentEnvRunner(config(policy_mapping_fn=ref))
    assert "not_imported_module_xyz" not in sys.modules
    with pytest.raises(ValueError, match="not one of the modules"):
        MultiAgentEnvRunner(config(policies=("learner", "other"), policies_to_train=None)).sample_batches()


def test_an_env_path_into_a_module_not_imported_is_refused() -> None:
    with pytest.raises(ValueError, match="has not imported"):
        config(env="some_module_never_imported:TicTacToe")
