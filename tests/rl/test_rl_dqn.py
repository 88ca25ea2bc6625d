"""DQN and the off-policy scaffolding: n-step transitions, next_obs, exact resume, partial restores, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from cairn import CheckpointManager
from cairn.rl import DQN, DQNConfig, EnvRunner, RLModule
from cairn.rl.algorithms.off_policy import n_step_transitions
from cairn.rl.utils.replay_buffers import MultiAgentReplayBuffer, ReplayBuffer
from cairn.testing import assert_states_equal

SRC = str(Path(__file__).resolve().parents[2] / "src")


def tiny(**overrides: Any) -> DQNConfig:
    """A DQN that learns from its 64th env step on: a few hundred steps exercise everything."""
    settings: dict[str, Any] = {
        "seed": 3,
        "num_envs_per_env_runner": 2,
        "rollout_length": 16,
        "replay_buffer_capacity": 200,  # the ring wraps within the test
        "replay_buffer_chunk_rows": 64,
        "num_steps_sampled_before_learning_starts": 64,
        "train_frequency": 4,
        "target_network_update_freq": 40,  # every 10 gradient steps
        "minibatch_size": 16,
        "epsilon_timesteps": 200,
        "n_step": 3,
        "model_config": {"hidden_sizes": [16]},
    }
    settings.update(overrides)
    return DQNConfig(**settings)


def _metrics(algo: DQN, n: int) -> list[dict[str, Any]]:
    return [algo.train().flatten(wall_clock=False) for _ in range(n)]


def test_n_step_transitions_stop_at_episode_and_rollout_ends() -> None:
    # One sub-environment, 4 steps; the episode terminates at step 1.
    batch = {
        "obs": np.arange(4, dtype=np.float32).reshape(4, 1, 1),
        "next_obs": np.arange(1, 5, dtype=np.float32).reshape(4, 1, 1) * 10,
        "actions": np.zeros((4, 1), dtype=np.int64),
        "rewards": np.array([[1.0], [2.0], [3.0], [4.0]]),
        "terminateds": np.array([[False], [True], [False], [False]]),
        "truncateds": np.zeros((4, 1), dtype=np.bool_),
    }
    out = n_step_transitions(batch, gamma=0.5, n_step=3)
    np.testing.assert_allclose(out["rewards"], [1 + 0.5 * 2, 2, 3 + 0.5 * 4, 4])
    np.testing.assert_array_equal(out["next_obs"][:, 0], [20, 20, 40, 40])  # next_obs of the last step summed
    np.testing.assert_array_equal(out["terminateds"], [True, True, False, False])
    np.testing.assert_allclose(out["discounts"], [0.25, 0.5, 0.25, 0.5])
    one = n_step_transitions(batch, gamma=0.5, n_step=1)
    np.testing.assert_allclose(one["rewards"], [1, 2, 3, 4])
    np.testing.assert_allclose(one["discounts"], [0.5] * 4)


def test_next_obs_is_final_obs_where_episodes_end() -> None:
    runner = EnvRunner(tiny(rollout_length=60, num_envs_per_env_runner=1))
    batch = runner.sample_batches()["default_policy"]
    obs, next_obs = batch["obs"][:, 0], batch["next_obs"][:, 0]
    done = batch["terminateds"][:, 0] | batch["truncateds"][:, 0]
    assert done.any(), "a random CartPole policy ends an episode within 60 steps"
    for t in range(len(obs) - 1):
        if done[t]:  # the final observation, not the next episode's first (same-step autoreset)
            assert not np.array_equal(next_obs[t], obs[t + 1])
            assert np.abs(next_obs[t]).max() > 0.2  # CartPole ends far from its reset range (|x| <= 0.05)
        else:
            np.testing.assert_array_equal(next_obs[t], obs[t + 1])
    runner.close()


def test_ppo_batches_have_no_next_obs() -> None:
    from cairn.rl import PPOConfig

    runner = EnvRunner(PPOConfig(rollout_length=4, num_envs_per_env_runner=1))
    assert "next_obs" not in runner.sample_batches()["default_policy"]
    runner.close()


def test_dqn_learns_the_buffer_and_target_network_are_in_the_checkpoint(tmp_path: Path) -> None:
    algo = DQN(tiny())
    results = _metrics(algo, 8)
    assert results[0]["num_gradient_steps"] == 0  # 32 steps < learning starts
    assert results[-1]["num_gradient_steps"] == 8  # 32 env steps, one gradient step per 4
    assert results[-1]["replay_buffer/default_policy/size"] == 200
    assert results[-1]["epsilon"] < results[0]["epsilon"]
    path = Path(algo.save_to_path(tmp_path / "ckpt"))
    assert (path / "replay_buffer" / "default_policy").is_dir()
    target = path / "learner_group" / "learner" / "target_rl_module" / "default_policy"
    assert target.is_dir()
    # The target network lags behind the online one, and is exactly what the learner held.
    learner = algo.learner_group.learner
    online = learner.module["default_policy"].get_state()
    assert any(not torch.equal(v, learner.target_module["default_policy"].get_state()[k]) for k, v in online.items())
    assert_states_equal(
        RLModule.from_checkpoint(target).get_state(), learner.target_module["default_policy"].get_state()
    )
    # The env runners act with the scheduled epsilon; a module from the checkpoint acts greedily.
    assert float(algo.env_runner.module["default_policy"].epsilon) == pytest.approx(algo.epsilon)
    module = RLModule.from_checkpoint(path / "learner_group" / "learner" / "rl_module" / "default_policy")
    assert module.forward_inference({"obs": torch.zeros(3, 4)})["actions"].shape == (3,)
    algo.stop()


SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[5])
from test_rl_dqn import tiny
from cairn.rl import DQN

mode, n, m, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
extra = json.loads(sys.argv[6])
if mode == "fresh":
    algo = DQN(tiny(**extra))
    for _ in range(n):
        algo.train()
    algo.save_to_path(out + "/mid")
else:
    algo = DQN.from_checkpoint(mode)
metrics = [algo.train() for _ in range(m)]
algo.save_to_path(out + "/final")
algo.stop()
with open(out + "/metrics.json", "w") as f:
    json.dump([r.flatten(wall_clock=False) for r in metrics], f)
"""


def run(out: Path, mode: str, n: int, m: int, extra: dict[str, Any]) -> Path:
    out.mkdir()
    env_vars = dict(os.environ)
    env_vars["PYTHONPATH"] = SRC + os.pathsep + env_vars.get("PYTHONPATH", "")
    subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(n), str(m), str(out), str(Path(__file__).parent), json.dumps(extra)],
        check=True,
        env=env_vars,
        timeout=300,
    )
    return out


@pytest.mark.parametrize(
    "extra",
    [{}, {"env": "multi:CartPole-v1", "policies": ["p0", "p1"], "policy_mapping": {"agent_0": "p0", "agent_1": "p1"}}],
    ids=["single", "multi-agent"],
)
def test_resume_in_a_new_process_is_bit_for_bit(extra: dict[str, Any], tmp_path: Path) -> None:
    n, m = 5, 4  # learning starts in iteration 2; the buffer wraps after iteration 7
    straight = run(tmp_path / "straight", "fresh", n, m, extra)
    resumed = run(tmp_path / "resumed", str(straight / "mid"), n, m, extra)
    straight_metrics = json.loads((straight / "metrics.json").read_text())
    assert straight_metrics[-1]["num_gradient_steps"] > 0
    assert json.loads((resumed / "metrics.json").read_text()) == straight_metrics
    # Weights, target weights, optimizer states, buffers (contents, RNG, cursor), runners, metrics.
    a = DQN.from_checkpoint(straight / "final")
    b = DQN.from_checkpoint(resumed / "final")
    state_a, state_b = a.get_state(), b.get_state()
    assert set(state_a["replay_buffer"]) >= set(a.config.policies)
    assert_states_equal(state_a, state_b)
    a.stop()
    b.stop()


def test_partial_restores_of_the_buffer_and_of_one_module(tmp_path: Path) -> None:
    config = tiny(env="multi:CartPole-v1", policies=("p0", "p1"), policy_mapping={"agent_0": "p0", "agent_1": "p1"})
    trained = DQN(config)
    _metrics(trained, 6)
    path = Path(trained.save_to_path(tmp_path / "ckpt"))

    fresh = DQN(config)
    before = fresh.get_state()
    fresh.restore_from_path(path / "replay_buffer", component="replay_buffer")
    after = fresh.get_state()
    assert_states_equal(after["replay_buffer"], trained.get_state()["replay_buffer"])
    assert_states_equal(after["learner_group"], before["learner_group"])  # the modules are untouched
    assert len(fresh.replay_buffer["p0"]) == len(trained.replay_buffer["p0"]) > 0

    other = DQN(config)
    other.restore_from_path(path / "learner_group/learner/rl_module/p1", component="learner_group/learner/rl_module/p1")
    assert_states_equal(other.get_module("p1").get_state(), trained.get_module("p1").get_state())
    assert not torch.equal(other.get_module("p0").q_net[0].weight, trained.get_module("p0").q_net[0].weight)
    assert len(other.replay_buffer) == 0
    # The env runners act with the restored module at once.
    assert_states_equal(
        {k: v for k, v in other.env_runner.module["p1"].get_state().items() if k != "epsilon"},
        {k: v for k, v in trained.get_module("p1").get_state().items() if k != "epsilon"},
    )
    for algo in (trained, fresh, other):
        algo.stop()


def test_a_manager_save_writes_only_the_buffer_chunks_that_changed(tmp_path: Path) -> None:
    from pack_helpers import tensor_file  # here: this module is imported by its child processes too

    algo = DQN(
        tiny(replay_buffer_capacity=10_000, replay_buffer_chunk_rows=64, num_steps_sampled_before_learning_starts=10**6)
    )
    manager = CheckpointManager(tmp_path / "run", async_save=False)
    _metrics(algo, 8)  # 256 rows: chunks 0..3 full
    manager.save(algo, 1)
    _metrics(algo, 1)  # 32 more rows, into chunk 4
    manager.save(algo, 2)
    step1, step2 = (Path(c.path) / "replay_buffer" / "default_policy" for c in manager.checkpoints())
    chunks = sorted(p.name for p in step2.iterdir() if p.name.startswith("chunk_"))
    assert len(chunks) == 5
    shared = [
        c
        for c in chunks
        if (step1 / c).exists() and tensor_file(step1 / c).stat().st_ino == tensor_file(step2 / c).stat().st_ino
    ]
    assert len(shared) == 4  # linked, not written again
    algo.stop()


def test_dqn_refuses_a_continuous_action_space() -> None:
    with pytest.raises(ValueError, match="Discrete action space"):
        DQN(tiny(env="Pendulum-v1"))


def test_cairn_train_algo_dqn_and_resume(tmp_path: Path) -> None:
    env_vars = dict(os.environ)
    env_vars["PYTHONPATH"] = SRC + os.pathsep + env_vars.get("PYTHONPATH", "")
    run_dir = tmp_path / "run"
    common = [sys.executable, "-m", "cairn", "train", "--algo", "dqn", "--checkpoint-dir", str(run_dir)]
    settings = ["--set", "rollout_length=16", "--set", "num_steps_sampled_before_learning_starts=32"]
    subprocess.run(
        [*common, "--iterations", "3", "--checkpoint-every", "3", *settings], check=True, env=env_vars, timeout=300
    )
    subprocess.run(
        # no --algo: a resume takes the checkpoint's algorithm
        [sys.executable, "-m", "cairn", "train", "--checkpoint-dir", str(run_dir), "--resume", "--iterations", "5"],
        check=True,
        env=env_vars,
        timeout=300,
    )
    latest = CheckpointManager(run_dir).latest()
    assert latest is not None
    algo = DQN.from_checkpoint(latest)
    assert algo.training_iteration == 5 and len(algo.replay_buffer["default_policy"]) == 5 * 16
    algo.stop()


class _CountingBuffer(ReplayBuffer):
    """A per-module buffer that counts the rows it was given (a user's own buffer)."""

    def add(self, batch: Any) -> None:
        self.rows_added = getattr(self, "rows_added", 0) + len(next(iter(batch.values())))
        super().add(batch)


class CountingMultiBuffer(MultiAgentReplayBuffer):
    """The algorithm's buffer with :class:`_CountingBuffer` per module."""

    buffer_class = _CountingBuffer


def test_replay_buffer_class_builds_the_configured_buffer_and_from_checkpoint_rebuilds_it(tmp_path: Path) -> None:
    algo = DQN(tiny(replay_buffer_class=CountingMultiBuffer))
    try:
        algo.train()
        assert type(algo.replay_buffer) is CountingMultiBuffer
        buffer = algo.replay_buffer["default_policy"]
        assert type(buffer) is _CountingBuffer and buffer.rows_added == len(buffer) > 0
        path = algo.save_to_path(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    restored = DQN.from_checkpoint(path)
    try:
        assert restored.config.replay_buffer_class is CountingMultiBuffer  # recorded by reference
        assert type(restored.replay_buffer["default_policy"]) is _CountingBuffer
        assert len(restored.replay_buffer) == len(buffer)
    finally:
        restored.stop()


def test_replay_buffer_class_must_be_the_multi_agent_buffer_or_a_subclass() -> None:
    with pytest.raises(ValueError, match="replay_buffer_class must be"):
        DQN(tiny(replay_buffer_class=ReplayBuffer))  # a per-module buffer is not the algorithm's buffer
