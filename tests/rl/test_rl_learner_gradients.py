"""RLlib's gradient-level Learner API (compute/postprocess/apply), build_learner and add_module(module_spec=)."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.columns import Columns
from cairn.rl.core.learner.building import build_learner
from cairn.rl.core.testing.testing_learner import BaseTestingAlgorithmConfig

ENV = gym.make("CartPole-v1")


def test_postprocess_clips_each_optimizers_gradients_to_max_grad_norm() -> None:
    learner = BaseTestingAlgorithmConfig().training(grad_clip=0.5).build_learner(env=ENV)
    params = learner.get_parameters(learner.module[DEFAULT_MODULE_ID])
    grads = {learner.get_param_ref(p): torch.ones_like(p) for p in params}
    clipped = learner.postprocess_gradients(grads)
    norm = torch.stack([g.norm() for g in clipped.values() if g is not None]).norm()
    assert torch.isclose(norm, torch.tensor(0.5), atol=1e-4)


def test_compute_then_apply_gradients_trains_and_update_still_works() -> None:
    learner = BaseTestingAlgorithmConfig().training(lr=1e-2).build_learner(env=ENV)
    obs = torch.zeros((8, 4))
    actions = torch.zeros(8, dtype=torch.long)
    module = learner.module[DEFAULT_MODULE_ID]

    def loss() -> torch.Tensor:
        logits = module.forward_train({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        return torch.nn.functional.cross_entropy(logits, actions)

    before = float(loss().detach())
    for _ in range(5):
        learner.apply_gradients(learner.compute_gradients({DEFAULT_MODULE_ID: loss()}))
    assert float(loss().detach()) < before
    assert learner._module_optimizers == {DEFAULT_MODULE_ID: ["default"]}
    assert set(learner._get_optimizer_state()) == {f"{DEFAULT_MODULE_ID}_default"}


def test_refusals() -> None:
    config = BaseTestingAlgorithmConfig()
    with pytest.raises(ValueError, match="has no spaces"):
        build_learner(config)
    with pytest.raises(ValueError, match="not both"):
        build_learner(config, env=ENV, spaces=(ENV.observation_space, ENV.action_space))
    learner = build_learner(config, spaces=(ENV.observation_space, ENV.action_space))
    with pytest.raises(ValueError, match="gradient_tape"):
        learner.compute_gradients({}, gradient_tape=object())
    spec = config.get_default_rl_module_spec()
    with pytest.raises(ValueError, match="one of them"):
        learner.add_module("x")
    with pytest.raises(ValueError, match="one of them"):
        learner.add_module("x", spec, module_spec=spec)


def test_build_learner_group_fills_specs_as_an_algorithm_does() -> None:
    from cairn.rl.algorithms.ppo import PPOConfig
    from cairn.rl.core.learner.building import build_learner_group

    config = PPOConfig().rl_module(model_config={"fcnet_hiddens": [8]})
    group = build_learner_group(config, env=ENV)
    module = group.get_module(DEFAULT_MODULE_ID)
    # RLlib's fcnet_hiddens is cairn's hidden_sizes; the env's spaces fill the spec.
    assert module.spec.observation_space == ENV.observation_space and module.spec.model_config["hidden_sizes"] == [8]
    group = BaseTestingAlgorithmConfig().build_learner_group(env=ENV)
    assert type(group.get_module(DEFAULT_MODULE_ID)).__name__ == "DiscreteBCTorchModule"
