"""PPO: the checkpoint tree, component checkpoints, partial restores, multi-agent."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from rl_helpers import small_config

from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError
from cairn.rl import PPO, PPOConfig, RLModule
from cairn.testing import CheckpointableContract, assert_states_equal, states_equal

MODULE = ("learner_group", "learner", "rl_module", "default_policy")


def multi_agent_config(**overrides: object) -> PPOConfig:
    return small_config(
        env="multi:CartPole-v1",
        num_agents=2,
        policies=("p0", "p1"),
        policy_mapping={"agent_0": "p0", "agent_1": "p1"},
        **overrides,
    )


def without_perf(results: dict) -> dict:  # type: ignore[type-arg]
    return results.flatten(wall_clock=False)


class TestPPOContract(CheckpointableContract):
    def make(self) -> PPO:
        return PPO(small_config())

    def mutate(self, obj: PPO) -> None:  # type: ignore[override]
        obj.train()


def test_train_metrics() -> None:
    algo = PPO(small_config())
    results = algo.train()
    assert results["training_iteration"] == 1
    assert results["num_env_steps_sampled_lifetime"] == 64
    assert "env_runners/episode_return_mean" in results and "episode_return_mean" not in results
    for name in ("policy_loss", "vf_loss", "entropy", "approx_kl"):
        assert f"learners/default_policy/{name}" in results
    assert algo.train()["num_env_steps_sampled_lifetime"] == 128


def test_checkpoint_tree_is_rllibs(tmp_path: Path) -> None:
    algo = PPO(small_config())
    algo.train()
    root = Path(algo.save_to_path(tmp_path / "ckpt"))
    folders = {p.parent.relative_to(root).as_posix() for p in root.rglob("metadata.json")}
    assert folders == {
        ".",
        "env_runner",
        "env_runner/env_to_module_connector",
        "env_runner/env_to_module_connector/MeanStdFilter",
        "env_runner/module_to_env_connector",
        "learner_group",
        "learner_group/learner",
        "learner_group/learner/rl_module",
        "learner_group/learner/rl_module/default_policy",
    }
    metadata = json.loads((root / "metadata.json").read_text())
    assert metadata["class"] == "cairn.rl.algorithms.ppo.ppo:PPO"
    assert metadata["episodes_restart_on_restore"] is False
    assert not list(root.rglob("*.pkl"))


def test_module_from_algorithm_checkpoint_acts_identically(tmp_path: Path) -> None:
    algo = PPO(small_config())
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    module = RLModule.from_checkpoint(Path(path, *MODULE))
    obs = torch.randn(32, 4)
    expected = algo.get_module().forward_inference({"obs": obs})["actions"]
    assert torch.equal(module.forward_inference({"obs": obs})["actions"], expected)
    assert_states_equal(module.get_state(), algo.get_module().get_state())
    with pytest.raises(IncompatibleCheckpointError):
        RLModule.from_checkpoint(path)


def test_in_process_resume_is_exact(tmp_path: Path) -> None:
    straight = PPO(small_config())
    first = PPO(small_config())
    for _ in range(2):
        straight.train()
        first.train()
    path = first.save_to_path(tmp_path / "ckpt")
    resumed = PPO.from_checkpoint(path)
    for _ in range(2):
        a, b = straight.train(), resumed.train()
        assert_states_equal(without_perf(a), without_perf(b))
    assert_states_equal(straight.get_state(), resumed.get_state())


def test_from_checkpoint_with_other_number_of_runners_and_learners(tmp_path: Path) -> None:
    algo = PPO(small_config())
    algo.train()
    path = algo.save_to_path(tmp_path / "ckpt")
    # num_learners=1 is one local learner too; scales with Ray actors: tests/distributed.
    config = dataclasses.replace(algo.config, num_learners=1)
    other = PPO.from_checkpoint(path, config=config)
    assert other.config.num_learners == 1
    assert_states_equal(other.get_state(), algo.get_state())
    assert_states_equal(without_perf(other.train()), without_perf(algo.train()))


def test_rollback_puts_the_env_runners_on_the_restored_weights(tmp_path: Path) -> None:
    algo = PPO(small_config())
    algo.train()
    old = algo.save_to_path(tmp_path / "old")
    old_weights = algo.get_module().get_state()
    algo.train()
    algo.restore_from_path(old)
    assert algo.training_iteration == 1
    assert_states_equal(algo.env_runner.module["default_policy"].get_state(), old_weights)


def test_ray_only_settings_name_the_extra_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import cairn.rl.distributed._ray as ray_support

    monkeypatch.setattr(ray_support, "ray_available", lambda: False)
    with pytest.raises(ValueError, match=r"pip install 'cairn-rl\[ray\]'"):
        PPO(small_config(num_env_runners=2))
    with pytest.raises(ValueError, match=r"pip install 'cairn-rl\[ray\]'"):
        PPO(small_config(num_learners=4))
    with pytest.raises(ValueError, match="minibatch_size"):
        PPO(small_config(minibatch_size=0))


def test_box_actions_train_and_restore(tmp_path: Path) -> None:
    algo = PPO(small_config(env="Pendulum-v1"))
    algo.train()
    restored = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ckpt"))
    assert_states_equal(without_perf(algo.train()), without_perf(restored.train()))


# ---------------------------------------------------------------------- multi-agent


def test_multi_agent_trains_each_policy() -> None:
    algo = PPO(multi_agent_config())
    results = algo.train()
    for module_id in ("p0", "p1"):
        assert results[f"learners/{module_id}/num_module_steps_trained"] == 64
        assert f"env_runners/module_episode_returns_mean/{module_id}" in results
    # One env step of a 2-agent env is 2 agent steps.
    assert results["env_runners/num_agent_steps_sampled_lifetime"] == 2 * results["num_env_steps_sampled_lifetime"]


def test_multi_agent_mapping_errors() -> None:
    with pytest.raises(ValueError, match="policy_mapping"):
        PPO(small_config(env="multi:CartPole-v1", policies=("p0", "p1")))
    with pytest.raises(ValueError, match="not in"):
        PPO(small_config(env="multi:CartPole-v1", policies=("p0",), policy_mapping={"agent_0": "p0", "agent_1": "x"}))


def test_partial_restore_of_one_policy_acts_at_once(tmp_path: Path) -> None:
    source = PPO(multi_agent_config())
    source.train()
    ckpt = source.save_to_path(tmp_path / "ckpt")
    p0_weights = source.get_module("p0").get_state()

    target = PPO(multi_agent_config(seed=11))
    target.train()
    p0_before = target.get_module("p0").get_state()
    filter_before = target.env_runner.env_to_module.get_state()
    iteration_before = target.training_iteration

    target.restore_from_path(
        f"{ckpt}/learner_group/learner/rl_module/p0",
        component="learner_group/learner/rl_module/p1",
    )
    # The learner's p1 now holds the checkpoint's p0 ...
    assert_states_equal(target.get_module("p1").get_state(), p0_weights)
    # ... and so do the env runners, before any train() call.
    runner_module = target.env_runner.module["p1"]
    assert_states_equal(runner_module.get_state(), p0_weights)
    obs = torch.randn(16, 4)
    assert torch.equal(
        runner_module.forward_inference({"obs": obs})["actions"],
        source.get_module("p0").forward_inference({"obs": obs})["actions"],
    )
    # The rest is untouched.
    assert_states_equal(target.get_module("p0").get_state(), p0_before)
    assert_states_equal(target.env_runner.env_to_module.get_state(), filter_before)
    assert target.training_iteration == iteration_before
    target.train()


def test_restore_policies_into_an_algorithm_with_fewer_policies(tmp_path: Path) -> None:
    source = PPO(multi_agent_config())
    source.train()
    ckpt = source.save_to_path(tmp_path / "ckpt")
    single = PPO(small_config(env="multi:CartPole-v1", num_agents=2, policies=("p0",), seed=5))
    single.restore_from_path(f"{ckpt}/learner_group/learner/rl_module", component="learner_group/learner/rl_module")
    assert_states_equal(single.get_module("p0").get_state(), source.get_module("p0").get_state())
    assert_states_equal(single.env_runner.module["p0"].get_state(), source.get_module("p0").get_state())
    assert not states_equal(single.get_state(), source.get_state())


def test_component_selection_paths() -> None:
    algo = PPO(multi_agent_config())
    state = algo.get_state(components="learner_group/learner/rl_module/p1")
    modules = state["learner_group"]["learner"]["rl_module"]
    assert list(modules) == ["p1"]
    assert "env_runner" not in state
    state = algo.get_state(not_components=["learner_group/learner/rl_module/p0"])
    assert list(state["learner_group"]["learner"]["rl_module"]) == ["p1"]


# ---------------------------------------------------------------------- RLlib's PPO defaults (issue 38)


def test_rllibs_kl_penalty_adapts_and_the_coefficient_resumes_exactly(tmp_path: Path) -> None:
    """use_kl_loss: kl_coeff moves by RLlib's rule after each update and is learner state (restored to
    every digit, refused when corrupt); RLlib's other defaults (torch's initializers, advantages
    standardized over the batch) train and resume alike."""
    built = PPOConfig().training(use_kl_loss=True, kl_coeff=0.3, kl_target=0.02)
    assert (built.use_kl_loss, built.kl_coeff, built.kl_target) == (True, 0.3, 0.02)
    # A tiny target: every update's KL is above 2 x target, so the coefficient grows by 1.5 each time.
    config = small_config(
        use_kl_loss=True,
        kl_coeff=0.2,
        kl_target=1e-12,
        advantage_normalization="batch",
        model_config={"hidden_sizes": [16, 16], "initializer": "torch"},
    )
    straight, first = PPO(config), PPO(config)
    for _ in range(2):
        result = straight.train()
        first.train()
    assert result["learners/default_policy/mean_kl_loss"] > 0.0
    assert result["learners/default_policy/curr_kl_coeff"] == pytest.approx(0.2 * 1.5**2)
    path = first.save_to_path(tmp_path / "ckpt")
    resumed = PPO.from_checkpoint(path)
    assert resumed.get_state()["learner_group"]["learner"]["kl_coeffs"] == {"default_policy": pytest.approx(0.45)}
    a, b = straight.train(), resumed.train()
    assert_states_equal(without_perf(a), without_perf(b))
    assert_states_equal(straight.get_state(), resumed.get_state())
    # A large target: the KL is below target / 2, so the coefficient halves.
    loose = PPO(dataclasses.replace(config, kl_target=1e6))
    assert loose.train()["learners/default_policy/curr_kl_coeff"] == pytest.approx(0.1)
    # A corrupt coefficient is refused before anything changes.
    state = resumed.get_state()
    state["learner_group"]["learner"]["kl_coeffs"] = {"default_policy": -1.0}
    with pytest.raises(CorruptCheckpointError, match="kl_coeffs/default_policy"):
        resumed.set_state(state)
    assert_states_equal(resumed.get_state()["learner_group"], straight.get_state()["learner_group"])
    # A state written before kl_coeffs existed (the golden checkpoints) restores; the coefficient stays.
    del state["learner_group"]["learner"]["kl_coeffs"]
    resumed.set_state(state)
    assert resumed.learner_group.learner.curr_kl_coeffs == {"default_policy": pytest.approx(0.2 * 1.5**3)}
    with pytest.raises(ValueError, match="advantage_normalization"):
        PPO(small_config(advantage_normalization="episode"))


def test_torch_initializer_is_rllibs_default_module() -> None:
    """model_config initializer="torch": nn.Linear's own initialization in every layer (RLlib's default
    PPO module), reproducible from the seed; cairn's default keeps the orthogonal one."""
    from gymnasium.spaces import Box, Discrete

    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule

    obs, act = Box(-1.0, 1.0, (4,)), Discrete(2)
    torch_init = DefaultPPORLModule(obs, act, {"hidden_sizes": [64, 64], "initializer": "torch"}, seed=0)
    again = DefaultPPORLModule(obs, act, {"hidden_sizes": [64, 64], "initializer": "torch"}, seed=0)
    orthogonal = DefaultPPORLModule(obs, act, {"hidden_sizes": [64, 64]}, seed=0)
    assert_states_equal(torch_init.get_state(), again.get_state())
    out = torch_init.pi[-1]
    bound = 1.0 / 64**0.5
    largest = float(out.weight.detach().abs().max())
    assert 0.5 * bound < largest <= bound
    assert float(out.bias.detach().abs().max()) > 0.0  # torch's biases are not zero
    assert float(orthogonal.pi[-1].weight.detach().abs().max()) < 0.05
    assert float(orthogonal.pi[-1].bias.detach().abs().max()) == 0.0
    with pytest.raises(ValueError, match="initializer"):
        DefaultPPORLModule(obs, act, {"initializer": "xavier"}, seed=0)


def test_free_log_std_false_is_rllibs_state_dependent_gaussian() -> None:
    """free_log_std=False (RLlib's default): the policy outputs means and log stds, clamped at
    log_std_clip_param; a DefaultModelConfig takes it; True on Discrete and bad values are refused."""
    from gymnasium.spaces import Box, Discrete

    from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
    from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig

    obs_space, act = Box(-1.0, 1.0, (3,)), Box(-1.0, 1.0, (2,))
    rllib_like = DefaultModelConfig(fcnet_hiddens=[8], free_log_std=False, log_std_clip_param=0.5).to_dict()
    module = DefaultPPORLModule(obs_space, act, rllib_like, seed=0)
    assert not hasattr(module, "log_std") and module.pi[-1].out_features == 4
    with torch.no_grad():  # outputs far from 0: the log stds are clamped at +-0.5
        module.pi[-1].bias.copy_(torch.tensor([0.1, -0.2, 3.0, -3.0]))
    obs = {"obs": torch.zeros((5, 3))}
    inputs = module.forward_inference(obs)["action_dist_inputs"]
    assert torch.allclose(inputs[:, 2:], torch.tensor([0.5, -0.5]).expand(5, 2))
    explored = module.forward_exploration(obs, generator=torch.Generator().manual_seed(0))
    assert explored["actions"].shape == (5, 2) and torch.equal(explored["action_dist_inputs"], inputs)
    train = module.forward_train({"obs": obs["obs"], "actions": explored["actions"]})
    assert torch.allclose(train["action_logp"], explored["action_logp"])
    assert torch.allclose(train["entropy"], torch.full((5,), 2 * (0.5 + 0.5 * math.log(2 * math.pi))))
    # Left out, cairn's free log_std (a parameter), unclamped; recorded as before.
    assert DefaultPPORLModule(obs_space, act, {"hidden_sizes": [8]}, seed=0).log_std.shape == (2,)
    for bad, match in [
        ({"free_log_std": "no"}, "free_log_std"),
        ({"free_log_std": False, "log_std_init": -1.0}, "log_std_init"),
        ({"log_std_clip_param": 0.0}, "log_std_clip_param"),
    ]:
        with pytest.raises(ValueError, match=match):
            DefaultPPORLModule(obs_space, act, bad, seed=0)
    with pytest.raises(ValueError, match="Discrete"):
        DefaultPPORLModule(obs_space, Discrete(2), {"free_log_std": True}, seed=0)
    assert DefaultPPORLModule(obs_space, Discrete(2), {"free_log_std": False}, seed=0).pi[-1].out_features == 2
