"""A PPO restore from local disk reads weights and Adam moments straight into the live tensors."""

from __future__ import annotations

from pathlib import Path

import torch

from cairn.rl import PPO, PPOConfig
from cairn.testing import assert_states_equal


def _config(seed: int) -> PPOConfig:
    return PPOConfig(env="CartPole-v1", seed=seed, num_envs_per_env_runner=2, rollout_length=32, minibatch_size=32,
                     num_epochs=1, model_config={"hidden_sizes": [16]})  # fmt: skip


def test_restore_reuses_live_parameter_and_optimizer_tensors(tmp_path: Path) -> None:
    src = PPO(_config(0))
    src.train()
    path = src.save_to_path(tmp_path / "ck")

    dst = PPO(_config(1))
    dst.train()  # the optimizer now has state tensors of its own
    learner = dst.learner_group.learner
    opt = learner.optimizers["default_policy"]
    moments_before = [s["exp_avg"] for s in opt.state.values()]
    params_before = [p for p in learner.module["default_policy"].parameters()]
    data_ptrs = [p.data_ptr() for p in params_before]

    dst.restore_from_path(path)

    moments_after = [s["exp_avg"] for s in opt.state.values()]
    assert moments_after and all(a is b for a, b in zip(moments_after, moments_before, strict=True))
    assert [p.data_ptr() for p in learner.module["default_policy"].parameters()] == data_ptrs
    assert_states_equal(src.get_state(components="learner_group"), dst.get_state(components="learner_group"))
    r1, r2 = src.train(), dst.train()
    assert r1["training_iteration"] == r2["training_iteration"] == 2
    assert torch.equal(
        torch.nn.utils.parameters_to_vector(src.learner_group.learner.module["default_policy"].parameters()),
        torch.nn.utils.parameters_to_vector(learner.module["default_policy"].parameters()),
    )


def test_mean_std_filter_restores_into_its_live_statistics(tmp_path: Path) -> None:
    """The observation filter offers its buffers: a restore reads into its arrays, not new ones."""
    import numpy as np

    from cairn.rl.connectors.connectors import MeanStdFilter

    src = MeanStdFilter(shape=(3,))
    src.update(np.arange(12, dtype=np.float64).reshape(4, 3))
    path = src.save_to_path(tmp_path / "filter")
    dst = MeanStdFilter(shape=(3,))
    dst.update(np.ones((2, 3)))
    mean, m2 = dst.mean, dst.m2
    dst.restore_from_path(path)
    assert dst.mean is mean and dst.m2 is m2
    assert dst.count == src.count == 4
    np.testing.assert_array_equal(dst.mean, src.mean)
    np.testing.assert_array_equal(dst.m2, src.m2)
    looks = [f(rl_module=None, batch={"obs": np.ones((1, 3))}, episodes=None, update=False)["obs"] for f in (dst, src)]
    np.testing.assert_array_equal(*looks)
