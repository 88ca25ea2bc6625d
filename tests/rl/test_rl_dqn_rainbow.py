"""DQN with RLlib's cartpole_dqn settings: prioritized replay, dueling heads, an n_step range; exact resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.rl import DQN, DQNConfig
from cairn.rl.algorithms.dqn.default_dqn_rl_module import DefaultDQNRLModule
from cairn.rl.algorithms.off_policy import n_step_transitions
from cairn.rl.algorithms.sac.sac import SAC, SACConfig
from cairn.rl.utils.replay_buffers import PrioritizedMultiAgentReplayBuffer, PrioritizedReplayBuffer
from cairn.testing import assert_states_equal

SRC = str(Path(__file__).resolve().parents[2] / "src")

SETTINGS: dict[str, Any] = {
    "env": "CartPole-v1",
    "seed": 4,
    "num_envs_per_env_runner": 2,
    "rollout_length": 16,
    "replay_buffer_capacity": 256,  # the ring wraps within the test
    "replay_buffer_chunk_rows": 64,
    "num_steps_sampled_before_learning_starts": 64,
    "train_frequency": 4,
    "target_network_update_freq": 40,
    "minibatch_size": 16,
    "epsilon_timesteps": 200,
    "replay_buffer_class": PrioritizedMultiAgentReplayBuffer,
    "prioritized_replay_alpha": 0.6,
    "prioritized_replay_beta": 0.4,
    "n_step": (2, 5),
    "dueling": True,
    "model_config": {"hidden_sizes": [16], "head_fcnet_hiddens": [8]},
}


def test_the_dueling_head_is_value_plus_centred_advantage() -> None:
    obs_space, act_space = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3)
    module = DefaultDQNRLModule(
        obs_space, act_space, {"dueling": True, "hidden_sizes": [8], "fcnet_bias_initializer": "zeros_"}
    )
    obs = torch.randn(6, 4)
    features = module.encoder(obs)
    value, advantage = module.value_head(features), module.advantage_head(features)
    q = module.forward_train({"obs": obs})["q_values"]
    torch.testing.assert_close(q, value + advantage - advantage.mean(-1, keepdim=True))
    torch.testing.assert_close(q.mean(-1, keepdim=True), value)  # the centred advantages leave V as the mean
    assert not module.encoder[0].bias.any()
    plain = DefaultDQNRLModule(obs_space, act_space, {"hidden_sizes": [8]})
    assert [k for k in plain.state_dict() if k != "epsilon"] == [
        "q_net.0.weight",
        "q_net.0.bias",
        "q_net.2.weight",
        "q_net.2.bias",
    ]
    with pytest.raises(ValueError, match="'zeros_'"):
        DefaultDQNRLModule(obs_space, act_space, {"fcnet_bias_initializer": "ones_"})


def test_an_n_step_range_sums_each_transitions_own_n() -> None:
    rng = np.random.default_rng(0)
    horizon, envs = 12, 3
    batch = {
        "obs": rng.standard_normal((horizon, envs, 2)).astype(np.float32),
        "next_obs": rng.standard_normal((horizon, envs, 2)).astype(np.float32),
        "actions": rng.integers(0, 2, (horizon, envs)),
        "rewards": rng.standard_normal((horizon, envs)),
        "terminateds": rng.random((horizon, envs)) < 0.1,
        "truncateds": rng.random((horizon, envs)) < 0.05,
    }
    n = rng.integers(2, 5, (horizon, envs))
    mixed = n_step_transitions(batch, gamma=0.9, n_step=n)
    for k in (2, 3, 4):
        fixed = n_step_transitions(batch, gamma=0.9, n_step=k)
        rows = (n == k).reshape(-1)
        for name in fixed:
            np.testing.assert_array_equal(mixed[name][rows], fixed[name][rows])


MULTI = {"env": "multi:CartPole-v1", "policies": ("p0", "p1"), "policy_mapping": {"agent_0": "p0", "agent_1": "p1"}}


@pytest.mark.parametrize("extra", [{}, MULTI], ids=["single", "multi-agent"])
def test_prioritized_dqn_updates_priorities_per_module(extra: dict[str, Any], tmp_path: Path) -> None:
    algo = DQN(DQNConfig(**{**SETTINGS, **extra}))
    try:
        for _ in range(4):
            result = algo.train().flatten(wall_clock=False)
        assert result["num_gradient_steps"] == 8
        for module_id in algo.replay_buffer:
            buffer = algo.replay_buffer[module_id]
            assert isinstance(buffer, PrioritizedReplayBuffer) and buffer.alpha == 0.6
            assert result[f"learners/{module_id}/num_module_steps_trained"] == 8 * 16
            held = buffer.priorities[: len(buffer)]
            # The TD errors set priorities: they are no longer all the first max priority (1.0).
            assert len(np.unique(held)) > 10 and buffer.max_priority > 1.0
            np.testing.assert_allclose(buffer._trees.total, held.sum())
            # Every n came from [2, 5): discounts are gamma^n, n in {2, 3, 4}, or fewer at episode ends.
            n = np.round(np.log(buffer.columns["discounts"][: len(buffer)]) / np.log(0.99)).astype(int)
            assert set(n.tolist()) <= {1, 2, 3, 4} and {2, 3, 4} <= set(n.tolist())
        # In-process resume of every module's priorities (the new-process test below is single-agent).
        again = DQN.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
        try:
            assert again.train().flatten(wall_clock=False) == algo.train().flatten(wall_clock=False)
            for module_id in algo.replay_buffer:
                np.testing.assert_array_equal(
                    again.replay_buffer[module_id]._trees.sum, algo.replay_buffer[module_id]._trees.sum
                )
        finally:
            again.stop()
    finally:
        algo.stop()


def test_prioritized_replay_is_refused_where_td_errors_cannot_come_back() -> None:
    with pytest.raises(ValueError, match="SAC's does not yet"):
        SAC(SACConfig(env="Pendulum-v1", replay_buffer_class=PrioritizedMultiAgentReplayBuffer))
    with pytest.raises(ValueError, match="num_learners=2 runs data-parallel learners"):
        DQN(DQNConfig(**{**SETTINGS, "num_learners": 2}))
    with pytest.raises(ValueError, match="the two disagree"):
        DQN(DQNConfig(**{**SETTINGS, "model_config": {"dueling": False}}))


# fresh: train N (save "mid"), M more, save "final". resume: from_checkpoint("mid") in a new process, M more.
SCRIPT = r"""
import json, sys
from cairn.rl import DQN, DQNConfig
from cairn.rl.utils.replay_buffers import PrioritizedMultiAgentReplayBuffer

mode, n, m, out, settings = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
if mode == "fresh":
    settings.update(replay_buffer_class=PrioritizedMultiAgentReplayBuffer, n_step=tuple(settings["n_step"]))
    algo = DQN(DQNConfig(**settings))
    for _ in range(n):
        algo.train()
    algo.save_to_path(out + "/mid")
else:
    algo = DQN.from_checkpoint(mode)
metrics = [algo.train().flatten(wall_clock=False) for _ in range(m)]
algo.save_to_path(out + "/final")
with open(out + "/metrics.json", "w") as f:
    json.dump(metrics, f)
"""


def _run(out: Path, mode: str, n: int, m: int) -> Path:
    out.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    settings = {k: v for k, v in SETTINGS.items() if k != "replay_buffer_class"}
    subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, str(n), str(m), str(out), json.dumps(settings)],
        check=True,
        env=env,
        timeout=300,
    )
    return out


def test_resume_in_a_new_process_is_bit_for_bit(tmp_path: Path) -> None:
    n, m = 4, 3
    straight = _run(tmp_path / "straight", "fresh", n, m)
    resumed = _run(tmp_path / "resumed", str(straight / "mid"), n, m)
    a_metrics = json.loads((straight / "metrics.json").read_text())
    b_metrics = json.loads((resumed / "metrics.json").read_text())
    assert b_metrics[0]["training_iteration"] == n + 1 and a_metrics[-1]["num_gradient_steps"] > 0
    assert a_metrics == b_metrics
    a, b = DQN.from_checkpoint(straight / "final"), DQN.from_checkpoint(resumed / "final")
    try:
        # Weights, target network, optimizer, priorities (pages), RNGs (sampling and n draws), counters.
        assert_states_equal(a.get_state(), b.get_state())
        pa, pb = a.replay_buffer["default_policy"], b.replay_buffer["default_policy"]
        np.testing.assert_array_equal(pa._trees.sum, pb._trees.sum)
        assert pa.max_priority == pb.max_priority > 1.0
    finally:
        a.stop()
        b.stop()


def test_recorded_head_widths_and_page_counts_are_bounded_before_anything_is_built(tmp_path: Path) -> None:
    from cairn import CorruptCheckpointError
    from cairn._ctor_bounds import FolderSizes, check_ctor_args

    def sizes(folder: Path) -> FolderSizes:
        manifest = json.loads((folder / "manifest.json").read_text())
        files = {name: (folder / name).stat().st_size for name in manifest["files"] if "/" not in name}
        tree = sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(folder) for f in names)
        return FolderSizes(files=files, components=tuple(manifest["components"]), tree_bytes=tree)

    module = DefaultDQNRLModule(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), {"dueling": True}, seed=0)
    folder = Path(module.save_to_path(tmp_path / "module"))
    args, kwargs = module.get_ctor_args_and_kwargs()
    check_ctor_args(DefaultDQNRLModule, args, kwargs, sizes(folder), where="module")  # what it recorded fits
    hostile = {**kwargs, "model_config": {**kwargs["model_config"], "head_fcnet_hiddens": [6144] * 4}}
    with pytest.raises(CorruptCheckpointError, match=r"head_fcnet_hiddens.*bytes of parameters.*nothing was built"):
        check_ctor_args(DefaultDQNRLModule, args, hostile, sizes(folder), where="module")
    buffer = PrioritizedReplayBuffer(64, {"obs": ((4,), "float32")}, chunk_rows=16, priority_page_rows=16)
    buffer.add({"obs": np.ones((20, 4), np.float32)})
    folder = Path(buffer.save_to_path(tmp_path / "buffer"))
    args, kwargs = buffer.get_ctor_args_and_kwargs()
    check_ctor_args(PrioritizedReplayBuffer, args, kwargs, sizes(folder), where="buffer")
    with pytest.raises(CorruptCheckpointError, match=r"priority pages of 1 rows make 3000000 page objects"):
        check_ctor_args(
            PrioritizedReplayBuffer,
            (3_000_000, *args[1:]),
            {**kwargs, "priority_page_rows": 1, "chunk_rows": 3_000_000},
            sizes(folder),
            where="buffer",
        )
