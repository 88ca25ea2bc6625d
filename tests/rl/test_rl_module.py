"""RLModule: forward passes on Discrete and Box spaces, and checkpointing."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from cairn.errors import IncompatibleCheckpointError
from cairn.rl import DefaultPPORLModule as RLModule
from cairn.testing import CheckpointableContract, assert_states_equal

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def perturb(module: RLModule) -> None:
    with torch.no_grad():
        for i, p in enumerate(module.parameters()):
            p.add_(0.01 * (i + 1))


class TestDiscreteModuleContract(CheckpointableContract):
    def make(self) -> RLModule:
        return RLModule(OBS, DISCRETE, {"hidden_sizes": [8]}, seed=1)

    def mutate(self, obj: RLModule) -> None:  # type: ignore[override]
        perturb(obj)


class TestBoxModuleContract(CheckpointableContract):
    def make(self) -> RLModule:
        return RLModule(OBS, BOX, {"hidden_sizes": [8], "activation": "relu"}, seed=1)

    def mutate(self, obj: RLModule) -> None:  # type: ignore[override]
        perturb(obj)


@pytest.mark.parametrize("action_space", [DISCRETE, BOX], ids=["discrete", "box"])
def test_forward_passes(action_space: gym.Space) -> None:  # type: ignore[type-arg]
    module = RLModule(OBS, action_space, seed=0)
    obs = torch.randn(5, 4)
    greedy = module.forward_inference({"obs": obs})["actions"]
    gen = torch.Generator().manual_seed(0)
    explore = module.forward_exploration({"obs": obs}, generator=gen)
    train = module.forward_train({"obs": obs, "actions": explore["actions"]})
    if isinstance(action_space, gym.spaces.Discrete):
        assert greedy.shape == (5,) and greedy.dtype == torch.int64
        assert set(explore["actions"].tolist()) <= {0, 1, 2}
    else:
        assert greedy.shape == (5, 2) and greedy.dtype == torch.float32
    assert set(explore) >= {"actions", "action_logp", "vf_preds"}
    assert explore["action_logp"].shape == (5,) and explore["vf_preds"].shape == (5,)
    # forward_train recomputes the sampling-time log-probs and values exactly.
    torch.testing.assert_close(train["action_logp"], explore["action_logp"])
    torch.testing.assert_close(train["vf_preds"], explore["vf_preds"])
    assert train["action_logp"].requires_grad and train["entropy"].shape == (5,)


def test_exploration_is_reproducible_with_a_generator() -> None:
    module = RLModule(OBS, DISCRETE, seed=0)
    obs = torch.randn(64, 4)
    a = module.forward_exploration({"obs": obs}, generator=torch.Generator().manual_seed(7))
    b = module.forward_exploration({"obs": obs}, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a["actions"], b["actions"])


def test_seed_fixes_initial_weights() -> None:
    a, b = RLModule(OBS, BOX, seed=5), RLModule(OBS, BOX, seed=5)
    assert_states_equal(a.get_state(), b.get_state())
    assert not torch.equal(RLModule(OBS, BOX, seed=6).pi[0].weight, a.pi[0].weight)


def test_from_checkpoint_acts_identically(tmp_path: Path) -> None:
    module = RLModule(OBS, BOX, {"hidden_sizes": [8, 8]}, seed=2)
    perturb(module)
    path = module.save_to_path(tmp_path / "m")
    loaded = RLModule.from_checkpoint(path)
    assert loaded.model_config == module.model_config
    obs = torch.randn(10, 4)
    assert torch.equal(
        loaded.forward_inference({"obs": obs})["actions"],
        module.forward_inference({"obs": obs})["actions"],
    )


def test_restore_into_other_shapes_is_incompatible(tmp_path: Path) -> None:
    path = RLModule(OBS, DISCRETE, seed=0).save_to_path(tmp_path / "m")
    other = RLModule(gym.spaces.Box(-1, 1, (6,), np.float32), DISCRETE, seed=0)
    with pytest.raises(IncompatibleCheckpointError, match="shape"):
        other.restore_from_path(path)
    with pytest.raises(IncompatibleCheckpointError, match=r"\[.log_std.*are in the checkpoint but not in the module"):
        RLModule(OBS, DISCRETE, {"hidden_sizes": [64]}).set_state(RLModule(OBS, BOX).get_state())


def test_bad_spaces_and_config() -> None:
    with pytest.raises(ValueError, match="observation space"):
        RLModule(gym.spaces.Discrete(3), DISCRETE)
    with pytest.raises(ValueError, match="action spaces"):
        RLModule(OBS, gym.spaces.MultiBinary(3))
    with pytest.raises(ValueError, match="Unknown model_config"):
        RLModule(OBS, DISCRETE, {"hidden": [3]})


def test_set_state_leaves_missing_parameters() -> None:
    module = RLModule(OBS, DISCRETE, seed=0)
    before = module.get_state()
    module.set_state({"pi.0.bias": torch.ones(64)})
    after = module.get_state()
    assert torch.equal(after["pi.0.bias"], torch.ones(64))
    assert torch.equal(after["vf.0.weight"], before["vf.0.weight"])


@pytest.mark.parametrize("module_class", ["DefaultPPORLModule", "DefaultDQNRLModule", "DefaultSACRLModule"])
def test_default_modules_refuse_observations_that_are_not_box(module_class: str) -> None:
    """One check (``box_observation_size``) for every default module, naming the module and the way out."""
    import cairn.rl

    cls = getattr(cairn.rl, module_class)
    action_space = BOX if module_class == "DefaultSACRLModule" else DISCRETE
    with pytest.raises(ValueError, match=rf"{module_class} needs a Box observation space.*FlattenObservation"):
        cls(gym.spaces.Discrete(5), action_space, {"hidden_sizes": [8]}, seed=0)
    assert cls(gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32), action_space, {"hidden_sizes": [8]}, seed=0).obs_dim == 6
