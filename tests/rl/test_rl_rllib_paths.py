"""RLlib's import paths and aliases (issue 38 item 5): scripts written for RLlib 2.60 import them unchanged."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.rl.algorithms import DQN, PPO, SAC, Algorithm, AlgorithmConfig, DQNConfig, PPOConfig, SACConfig
from cairn.rl.algorithms.callbacks import DefaultCallbacks
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.config.algorithm_config import AlgorithmConfig as HomeAlgorithmConfig
from cairn.rl.policy.policy import PolicySpec
from cairn.rl.utils.framework import convert_to_tensor, try_import_torch

OBS = gym.spaces.Box(-1.0, 1.0, (4,))


def test_the_algorithms_package_exports_rllibs_names() -> None:
    for algo, config in ((PPO, PPOConfig), (DQN, DQNConfig), (SAC, SACConfig)):
        assert issubclass(algo, Algorithm) and issubclass(config, AlgorithmConfig)
        assert algo.__module__ == config.__module__  # recorded at their own modules, not the package
    assert AlgorithmConfig is HomeAlgorithmConfig
    assert DefaultCallbacks is RLlibCallback


def test_policy_spec_names_a_module_and_refuses_old_stack_settings() -> None:
    config = PPOConfig().environment("CartPole-v1").multi_agent(policies={"p1": PolicySpec(), "p0": None})
    assert config.policies == ("p1", "p0")
    # A spec (or RLlib's 4-tuple) that sets only a config gives that module's settings.
    tupled = PPOConfig().multi_agent(policies={"p0": PolicySpec(config={"lr": 1e-3}), "p1": (None, None, None, {})})
    assert tupled.policies == ("p0", "p1") and tupled.algorithm_config_overrides_per_module == {
        "p0": {"lr": 1e-3},
        "p1": {},
    }
    assert tupled.get_config_for_module("p0").lr == 1e-3
    with pytest.raises(ValueError, match=r"gives specs for \['p0'\].*rl_module_spec=MultiRLModuleSpec"):
        PPOConfig().multi_agent(policies={"p0": PolicySpec(observation_space=OBS)})


def test_a_frozen_config_refuses_changes_and_its_unfrozen_copy_takes_them() -> None:
    config = PPOConfig().training(lr=1e-3)
    config.freeze()
    with pytest.raises(AttributeError, match=r"Cannot set attribute \(lr\) of an already frozen PPOConfig"):
        config.lr = 5e-4
    with pytest.raises(AttributeError, match=r"Cannot set attribute \(settings\) of an already frozen PPOConfig"):
        config.training(lr=5e-4)
    assert config.lr == 1e-3 and config.is_frozen and config.copy().is_frozen
    assert config.copy(copy_frozen=False).training(lr=5e-4).lr == 5e-4


def test_framework_helpers() -> None:
    assert try_import_torch() == (torch, torch.nn)
    out = convert_to_tensor({"obs": np.ones((2, 3), np.float32), "rest": (1, [2.5])})
    assert out["obs"].shape == (2, 3) and out["obs"].dtype == torch.float32
    assert isinstance(out["rest"], tuple) and out["rest"][1][0].item() == 2.5
    with pytest.raises(ValueError, match="torch only"):
        convert_to_tensor([1], framework="tf2")


def test_generic_config_with_algo_class_and_the_train_batch_size() -> None:
    """RLlib's ``AlgorithmConfig(algo_class=X)`` makes X's config; ``train_batch_size`` reads the batch back."""
    assert type(AlgorithmConfig(algo_class=DQN)) is DQNConfig and type(AlgorithmConfig(algo_class=SAC)) is SACConfig
    ppo = AlgorithmConfig(algo_class=PPO, lr=1e-3).env_runners(num_envs_per_env_runner=3)
    assert type(ppo) is PPOConfig and ppo.lr == 1e-3
    assert ppo.training(train_batch_size=300).train_batch_size == 300  # 3 envs x 100 steps
    assert DQNConfig().training(train_batch_size=64).train_batch_size == 64  # off-policy: one gradient step's rows
    with pytest.raises(ValueError, match=r"PPOConfig\(algo_class='DQN'\): give a cairn algorithm class"):
        PPOConfig(algo_class=DQN)


def test_ppo_torch_paths_name_cairns_ppo_learner_and_module() -> None:
    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from cairn.rl.algorithms.ppo.ppo_learner import PPOLearner
    from cairn.rl.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
    from cairn.rl.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    assert PPOTorchLearner is PPOLearner and DefaultPPOTorchRLModule is DefaultPPORLModule
    assert PPOConfig().get_default_learner_class() is PPOTorchLearner


def test_no_filter_keeps_arrays_and_structures_and_makes_arrays_of_the_rest() -> None:
    from cairn.rl.utils.filter import NoFilter

    f = NoFilter()
    arr, struct = np.zeros(2), {"a": 1}
    assert f(arr) is arr and f(struct) is struct and f.copy() is f
    out = f([1.0, 2.0])
    assert isinstance(out, np.ndarray) and out.tolist() == [1.0, 2.0]
