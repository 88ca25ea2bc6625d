"""SAC: DefaultSACRLModule, SACLearner (three named optimizers, target networks), checkpoints and exact resume.

The transitions are real Pendulum-v1 steps under random actions, fed to the
learner directly (the algorithm's off-policy loop lives beside DQN's).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import numpy.typing as npt
import pytest
import torch
from rl_helpers import small_config

from cairn import CheckpointManager
from cairn.errors import IncompatibleCheckpointError
from cairn.rl import DefaultPPORLModule, Learner, PPOLearner, RLModule, RLModuleSpec
from cairn.rl.algorithms.sac.default_sac_rl_module import DefaultSACRLModule
from cairn.rl.algorithms.sac.sac import SAC, SACConfig
from cairn.rl.algorithms.sac.sac_learner import SACLearner
from cairn.testing import CheckpointableContract, assert_states_equal

ENV = gym.make("Pendulum-v1")
OBS, ACT = ENV.observation_space, ENV.action_space
MODEL = {"hidden_sizes": [32, 32]}
SPECS = {"default_policy": RLModuleSpec(DefaultSACRLModule, OBS, ACT, MODEL, seed=0)}


def transitions(n: int, seed: int) -> dict[str, npt.NDArray[np.float32]]:
    """``n`` real Pendulum-v1 transitions under uniformly random actions."""
    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    cols: dict[str, list[object]] = {k: [] for k in ("obs", "actions", "rewards", "next_obs", "terminateds")}
    for _ in range(n):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(cols, (obs, action, reward, next_obs, terminated), strict=True):
            cols[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    out = {k: np.asarray(v, dtype=np.float32) for k, v in cols.items()}
    out["discounts"] = np.full(n, 0.99, dtype=np.float32)  # 1-step transitions (n_step_transitions' column)
    return out


def config(**kwargs: object) -> SACConfig:
    return SACConfig(minibatch_size=32, seed=0, **kwargs)  # type: ignore[arg-type]


def make_learner(**kwargs: object) -> SACLearner:
    return SACLearner(config(**kwargs), SPECS)


def train(learner: Learner, updates: int, first: int) -> None:
    for i in range(first, first + updates):
        learner.update({"default_policy": transitions(32, seed=i)})


class TestSACLearnerContract(CheckpointableContract):
    def make(self) -> SACLearner:
        return make_learner()

    def mutate(self, obj: SACLearner) -> None:  # type: ignore[override]
        train(obj, 1, 0)


def test_module_actions_lie_in_the_bounds_and_inference_is_the_squashed_mean() -> None:
    module = SPECS["default_policy"].build()
    obs = torch.as_tensor(transitions(64, seed=0)["obs"])
    greedy = module.forward_inference({"obs": obs})["actions"]
    assert greedy.shape == (64, 1) and bool((greedy.abs() <= 2.0).all())
    assert isinstance(module, DefaultSACRLModule)
    mean = module.pi(obs)[:, :1]
    torch.testing.assert_close(greedy, 2.0 * torch.tanh(mean))
    out1 = module.forward_exploration({"obs": obs}, generator=torch.Generator().manual_seed(3))
    out2 = module.forward_exploration({"obs": obs}, generator=torch.Generator().manual_seed(3))
    assert_states_equal(out1, out2)  # sampling uses only the runner's generator
    assert bool((out1["actions"].abs() <= 2.0).all()) and out1["action_logp"].shape == (64,)


def test_log_probability_is_the_squashed_gaussian_density() -> None:
    module = SPECS["default_policy"].build()
    assert isinstance(module, DefaultSACRLModule)
    obs = torch.as_tensor(transitions(16, seed=1)["obs"])
    actions, logp = module.sample_actions(obs, generator=torch.Generator().manual_seed(0))
    mean, log_std = module._mean_log_std(obs)
    pre_tanh = torch.atanh((actions / 2.0).clamp(-1 + 1e-6, 1 - 1e-6))
    ref = torch.distributions.Normal(mean, log_std.exp()).log_prob(pre_tanh).sum(-1)
    ref = ref - torch.log(2.0 * (1 - (actions / 2.0).pow(2)) + 1e-6).sum(-1)
    torch.testing.assert_close(logp, ref, atol=1e-3, rtol=1e-3)


def test_module_refuses_discrete_and_unbounded_actions() -> None:
    with pytest.raises(ValueError, match="one-dimensional Box with finite bounds"):
        DefaultSACRLModule(OBS, gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="finite bounds"):
        DefaultSACRLModule(OBS, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32))
    with pytest.raises(ValueError, match="Unknown model_config keys"):
        DefaultSACRLModule(OBS, ACT, {"activation": "tanh"})


def test_update_trains_q_policy_and_alpha_and_moves_targets_by_tau() -> None:
    learner = make_learner(tau=0.25)
    module = learner.module["default_policy"]
    assert isinstance(module, DefaultSACRLModule)
    before = module.get_state()
    assert_states_equal(learner.target_module["default_policy"].get_state(), before)
    metrics = learner.update({"default_policy": transitions(32, seed=0)})
    after = module.get_state()
    for name in ("pi.0.weight", "qf1.0.weight", "qf2.2.bias", "log_alpha"):
        assert not torch.equal(before[name], after[name]), name
    target = learner.target_module["default_policy"].get_state()
    torch.testing.assert_close(target["qf2.0.weight"], 0.75 * before["qf2.0.weight"] + 0.25 * after["qf2.0.weight"])
    for name in ("qf_loss", "policy_loss", "alpha_loss", "entropy", "alpha", "qf1_mean"):
        assert f"learners/default_policy/{name}" in metrics
    assert metrics["learners/default_policy/alpha"] == 1.0  # alpha of before the step: CleanRL's start
    assert set(learner.named_optimizers["default_policy"]) == {"qf", "policy", "alpha"}
    assert learner.optimizers == {}  # no default optimizer: the PPO-shaped view is empty


def test_alpha_falls_when_the_policy_is_more_random_than_the_target_entropy() -> None:
    # A policy starts wide (log std ~ -1.5 on average), far above -|A| = -1: alpha must fall.
    learner = make_learner()
    train(learner, 5, 0)
    module = learner.module["default_policy"]
    assert isinstance(module, DefaultSACRLModule)
    assert float(module.alpha[0]) < 1.0


def test_fixed_alpha_has_no_alpha_optimizer() -> None:
    learner = SACLearner(
        config(autotune_alpha=False),
        {"default_policy": RLModuleSpec(DefaultSACRLModule, OBS, ACT, {**MODEL, "initial_alpha": 0.2}, seed=0)},
    )
    train(learner, 1, 0)
    module = learner.module["default_policy"]
    assert isinstance(module, DefaultSACRLModule)
    assert set(learner.named_optimizers["default_policy"]) == {"qf", "policy"}
    assert math.isclose(float(module.alpha[0]), 0.2, rel_tol=1e-6)


def test_checkpoint_holds_each_named_optimizer_and_the_targets(tmp_path: Path) -> None:
    learner = make_learner()
    train(learner, 2, 0)
    path = Path(learner.save_to_path(tmp_path / "learner"))
    state = Learner.from_checkpoint(path).get_state()
    assert set(state["optimizers"]["default_policy"]) == {"qf", "policy", "alpha"}
    assert int(state["optimizers"]["default_policy"]["alpha"]["state"][0]["step"]) == 2
    module = RLModule.from_checkpoint(path / "rl_module" / "default_policy")
    assert isinstance(module, DefaultSACRLModule)
    assert_states_equal(module.get_state(), learner.module["default_policy"].get_state())
    target = RLModule.from_checkpoint(path / "target_rl_module" / "default_policy")
    assert_states_equal(target.get_state(), learner.target_module["default_policy"].get_state())


def test_a_ppo_learner_checkpoint_does_not_load_into_sac(tmp_path: Path) -> None:
    ppo = PPOLearner(small_config(), {"default_policy": RLModuleSpec(DefaultPPORLModule, OBS, ACT, {}, seed=0)})
    path = ppo.save_to_path(tmp_path / "ppo")
    sac = make_learner()
    with pytest.raises(IncompatibleCheckpointError, match="another algorithm's learner"):
        sac.set_state({"optimizers": Learner.from_checkpoint(path).get_state()["optimizers"]})


_RESUME = """
import sys
sys.path.insert(0, {tests!r})
from cairn.rl import Learner
from test_rl_sac import train
learner = Learner.from_checkpoint({path!r})
train(learner, 3, 2)
learner.save_to_path({out!r})
"""


def test_exact_resume_in_a_new_process(tmp_path: Path) -> None:
    """2 updates + save + from_checkpoint in a new process + 3 == 5 updates, bit for bit
    (weights, target weights, log_alpha, all three optimizers, the sampling RNG, counters)."""
    straight = make_learner()
    train(straight, 5, 0)
    first = make_learner()
    train(first, 2, 0)
    path = first.save_to_path(tmp_path / "n")
    out = tmp_path / "n_plus_m"
    script = _RESUME.format(tests=str(Path(__file__).parent), path=str(path), out=str(out))
    subprocess.run([sys.executable, "-c", script], check=True)
    assert_states_equal(Learner.from_checkpoint(out).get_state(), straight.get_state())


# The SAC algorithm: N iterations, save, from_checkpoint in a new process, M more == N + M straight.
_ALGO = r"""
import json, sys
from cairn.rl.algorithms.sac.sac import SAC, SACConfig

mode, env, n, m, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if mode == "fresh":
    algo = SAC(SACConfig(env=env, seed=3, num_agents=2, rollout_length=20, minibatch_size=16,
                         replay_buffer_capacity=64, replay_buffer_chunk_rows=16,
                         num_steps_sampled_before_learning_starts=30, model_config={"hidden_sizes": [16]}))
    for _ in range(n):
        algo.train()
    algo.save_to_path(out + "/mid")
else:
    algo = SAC.from_checkpoint(mode)
metrics = [algo.train() for _ in range(m)]
algo.save_to_path(out + "/final")
with open(out + "/metrics.json", "w") as f:
    json.dump([r.flatten(wall_clock=False) for r in metrics], f)
"""


def run_sac(out: Path, mode: str, env: str, n: int, m: int) -> Path:
    out.mkdir()
    subprocess.run([sys.executable, "-c", _ALGO, mode, env, str(n), str(m), str(out)], check=True, timeout=300)
    return out


@pytest.mark.parametrize("env", ["Pendulum-v1", "multi:Pendulum-v1"])
def test_sac_resumes_in_a_new_process_bit_for_bit(env: str, tmp_path: Path) -> None:
    """Weights, target weights, log_alpha, the three optimizers, the buffer (which has wrapped
    around: 64 rows, 100+ transitions), its sampling RNG, env state and metrics."""
    n, m = 2, 3
    straight = run_sac(tmp_path / "straight", "fresh", env, n, m)
    resumed = run_sac(tmp_path / "resumed", str(straight / "mid"), env, n, m)
    straight_metrics = json.loads((straight / "metrics.json").read_text())
    assert straight_metrics == json.loads((resumed / "metrics.json").read_text())
    assert straight_metrics[-1]["num_gradient_steps"] > 0 and straight_metrics[0]["training_iteration"] == n + 1
    a = SAC.from_checkpoint(straight / "final")
    b = SAC.from_checkpoint(resumed / "final")
    state = a.get_state()
    module_ids = set(state["learner_group"]["learner"]["optimizers"])
    for module_id in module_ids:
        assert set(state["learner_group"]["learner"]["optimizers"][module_id]) == {"qf", "policy", "alpha"}
        assert "log_alpha" in state["learner_group"]["learner"]["target_rl_module"][module_id]
    assert_states_equal(state, b.get_state())
    a.stop()
    b.stop()


def test_cairn_train_algo_sac_and_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    common = [sys.executable, "-m", "cairn", "train", "--checkpoint-dir", str(run_dir)]
    settings = [
        *("--set", "rollout_length=16", "--set", "num_steps_sampled_before_learning_starts=16"),
        *("--set", "minibatch_size=8", "--set", "replay_buffer_capacity=64"),
        *("--set", 'model_config={"hidden_sizes": [8]}'),
    ]
    first = [*common, "--algo", "sac", "--iterations", "2", "--checkpoint-every", "2", *settings]
    subprocess.run(first, check=True, timeout=300)
    # --resume without --algo takes the checkpoint's algorithm.
    subprocess.run([*common, "--iterations", "3", "--checkpoint-every", "3", "--resume"], check=True, timeout=300)
    latest = CheckpointManager(run_dir).latest()
    assert latest is not None
    algo = SAC.from_checkpoint(latest)
    assert algo.training_iteration == 3 and len(algo.replay_buffer["default_policy"]) == 3 * 16
    assert set(algo.learner_group.learner.named_optimizers["default_policy"]) == {"qf", "policy", "alpha"}
    algo.stop()
