"""RLlib's RLModule API on cairn (issue 28 item 3): TorchRLModule, sampling from action_dist_inputs,
ValueFunctionAPI, Columns, DefaultModelConfig, RLModuleSpec.from_module, and parameterless
(heuristic) modules next to trained ones."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_helpers import small_config
from rllib_style_modules import ActorCriticRLModule, VPGTorchRLModule

from cairn.rl import PPO, MultiRLModuleSpec, PPOConfig, RLModule, RLModuleSpec
from cairn.rl.algorithms.ppo.default_ppo_rl_module import DefaultPPORLModule
from cairn.rl.algorithms.results import ResultDict
from cairn.rl.core.columns import Columns
from cairn.rl.core.distribution import TorchCategorical, TorchDiagGaussian
from cairn.rl.core.rl_module.apis import ValueFunctionAPI
from cairn.rl.core.rl_module.default_model_config import DefaultModelConfig
from cairn.rl.core.rl_module.torch import TorchRLModule
from cairn.rl.examples.rl_modules.classes import AlwaysSameHeuristicRLM, RandomRLModule
from cairn.testing import assert_states_equal

CARTPOLE_OBS = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
MODULE_FOLDER = "learner_group/learner/rl_module/default_policy"


def _actor_critic_config(**overrides: Any) -> PPOConfig:
    spec = RLModuleSpec(module_class=ActorCriticRLModule, model_config={"hidden_dim": 8})
    return small_config(rl_module_spec=spec, rollout_length=16, minibatch_size=16, num_epochs=1, **overrides)


def _metrics(result: dict[str, Any]) -> dict[str, Any]:
    flat = result.flatten(wall_clock=False) if isinstance(result, ResultDict) else result
    return {k: v for k, v in flat.items() if "time" not in k}


def test_an_rllib_style_module_trains_checkpoints_rebuilds_and_resumes_exactly(tmp_path: Path) -> None:
    """setup + _forward(ACTION_DIST_INPUTS) + ValueFunctionAPI trains with PPO; save, restore, go on == straight."""
    straight = PPO(_actor_critic_config())
    expected = [_metrics(straight.train()) for _ in range(2)]
    expected_state = straight.get_state(components="learner_group")
    straight.stop()

    first = PPO(_actor_critic_config())
    assert _metrics(first.train()) == expected[0]
    first.save_to_path(tmp_path / "mid")
    first.stop()
    resumed = PPO.from_checkpoint(tmp_path / "mid")
    assert _metrics(resumed.train()) == expected[1]
    assert_states_equal(resumed.get_state(components="learner_group"), expected_state)
    resumed.stop()
    assert math.isfinite(expected[1]["learners/default_policy/total_loss"])

    module = RLModule.from_checkpoint(tmp_path / "mid" / MODULE_FOLDER)
    assert type(module) is ActorCriticRLModule and module.model_config == {"hidden_dim": 8}
    obs = torch.zeros((3, 4))
    out = module.forward_inference({Columns.OBS: obs})
    assert torch.equal(out[Columns.ACTIONS], out[Columns.ACTION_DIST_INPUTS].argmax(-1))


def test_actions_are_sampled_from_action_dist_inputs_with_the_runners_generator() -> None:
    """Categorical over logits, DiagGaussian over mean|log_std: the same generator state gives the same
    actions, logp is the distribution's, inference is greedy, vf_preds come from compute_values."""
    module = ActorCriticRLModule(observation_space=CARTPOLE_OBS, action_space=gym.spaces.Discrete(2))
    obs = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    first = module.forward_exploration({Columns.OBS: obs}, generator=torch.Generator().manual_seed(5))
    again = module.forward_exploration({Columns.OBS: obs}, generator=torch.Generator().manual_seed(5))
    assert torch.equal(first[Columns.ACTIONS], again[Columns.ACTIONS])
    logp = torch.log_softmax(first[Columns.ACTION_DIST_INPUTS], -1).gather(-1, first[Columns.ACTIONS][:, None])[:, 0]
    assert torch.allclose(first[Columns.ACTION_LOGP], logp)
    assert torch.allclose(first[Columns.VF_PREDS], module.vf(obs).squeeze(-1))
    assert not first[Columns.VF_PREDS].requires_grad

    box = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    gauss = ActorCriticRLModule(observation_space=CARTPOLE_OBS, action_space=box)
    out = gauss.forward_exploration({Columns.OBS: obs}, generator=torch.Generator().manual_seed(5))
    mean, log_std = out[Columns.ACTION_DIST_INPUTS].chunk(2, -1)
    normal = torch.distributions.Normal(mean, log_std.exp())
    assert torch.allclose(out[Columns.ACTION_LOGP], normal.log_prob(out[Columns.ACTIONS]).sum(-1), atol=1e-5)
    assert torch.equal(gauss.forward_inference({Columns.OBS: obs})[Columns.ACTIONS], mean)
    with pytest.raises(ValueError, match="even last dimension"):
        TorchDiagGaussian.from_logits(torch.zeros(2, 3))
    dist = TorchCategorical.from_logits(torch.tensor([[0.0, 0.0]]))
    assert torch.allclose(dist.entropy(), torch.tensor([math.log(2.0)]))


def test_a_module_with_continuous_actions_trains_with_ppo() -> None:
    """A Box action space: the runner samples DiagGaussian actions, PPO's learner takes logp and entropy from it."""
    algo = PPO(_actor_critic_config(env="Pendulum-v1"))
    try:
        result = algo.train()
        assert math.isfinite(result["learners/default_policy/total_loss"])
        assert math.isfinite(result["learners/default_policy/entropy"])
    finally:
        algo.stop()


def test_vpg_without_value_function_is_refused_by_ppo_with_what_to_do() -> None:
    """RLlib's VPG module has no ValueFunctionAPI: PPO says so (no KeyError deep inside)."""
    spec = RLModuleSpec(module_class=VPGTorchRLModule, model_config={"hidden_dim": 8})
    module = spec.with_defaults(
        module_class=VPGTorchRLModule,
        observation_space=CARTPOLE_OBS,
        action_space=gym.spaces.Discrete(2),
        model_config={},
        seed=0,
    ).build()
    out = module.forward_exploration({Columns.OBS: torch.zeros(2, 4)}, generator=torch.Generator())
    assert set(out) == {Columns.ACTION_DIST_INPUTS, Columns.ACTIONS, Columns.ACTION_LOGP}
    with pytest.raises(ValueError, match="ValueFunctionAPI"):
        PPO(small_config(rl_module_spec=spec, rollout_length=16, minibatch_size=16)).train()


def test_torch_rl_module_takes_rllibs_keywords_and_refuses_what_it_cannot_do() -> None:
    module = VPGTorchRLModule(
        observation_space=CARTPOLE_OBS,
        action_space=gym.spaces.Discrete(2),
        inference_only=False,
        model_config={"hidden_dim": 4},
        catalog_class=None,
    )
    assert module.model_config == {"hidden_dim": 4} and isinstance(module, RLModule)
    with pytest.raises(ValueError, match="catalog"):
        VPGTorchRLModule(observation_space=CARTPOLE_OBS, action_space=gym.spaces.Discrete(2), catalog_class=object)
    with pytest.raises(TypeError, match="unknown keyword"):
        VPGTorchRLModule(CARTPOLE_OBS, gym.spaces.Discrete(2), {"hidden_dim": 4}, framework="tf2")

    class Forgetful(TorchRLModule, ValueFunctionAPI):
        pass

    with pytest.raises(TypeError, match="compute_values"):
        Forgetful(observation_space=CARTPOLE_OBS, action_space=gym.spaces.Discrete(2))

    class Empty(TorchRLModule):
        pass

    with pytest.raises(NotImplementedError, match="implement _forward"):
        Empty(CARTPOLE_OBS, gym.spaces.Discrete(2)).forward_inference({Columns.OBS: torch.zeros(1, 4)})
    frozen = VPGTorchRLModule(CARTPOLE_OBS, gym.spaces.Discrete(2), {"hidden_dim": 4}, inference_only=True)
    assert frozen.get_ctor_args_and_kwargs()[1]["inference_only"] is True
    with pytest.raises(RuntimeError, match="inference_only"):
        frozen.forward_train({Columns.OBS: torch.zeros(1, 4)})


def test_columns_are_the_keys_of_cairns_batches() -> None:
    algo = PPO(small_config(rollout_length=8))
    try:
        batch = algo.env_runner.sample_batches()["default_policy"]
    finally:
        algo.stop()
    for column in (Columns.OBS, Columns.ACTIONS, Columns.ACTION_LOGP, Columns.VF_PREDS, Columns.REWARDS):
        assert column in batch
    assert (Columns.TERMINATEDS, Columns.TRUNCATEDS) == ("terminateds", "truncateds")
    assert Columns.ACTION_DIST_INPUTS == "action_dist_inputs" and Columns.NEXT_OBS == "next_obs"


def test_default_model_config_in_specs_and_the_builder() -> None:
    """DefaultModelConfig and RLlib's key names work in an RLModuleSpec and in rl_module(); the rest is refused."""
    spec = RLModuleSpec(model_config=DefaultModelConfig(fcnet_hiddens=[8], fcnet_activation="relu"))
    assert spec.model_config == {"fcnet_hiddens": [8], "fcnet_activation": "relu"}  # recorded as a plain dict
    module = spec.with_defaults(
        module_class=DefaultPPORLModule,
        observation_space=CARTPOLE_OBS,
        action_space=gym.spaces.Discrete(2),
        model_config={},
        seed=0,
    ).build()
    assert module.model_config["hidden_sizes"] == [8] and module.model_config["activation"] == "relu"
    by_name = RLModuleSpec(DefaultPPORLModule, CARTPOLE_OBS, gym.spaces.Discrete(2), {"fcnet_hiddens": [4]}).build()
    assert by_name.model_config["hidden_sizes"] == [4]
    config = PPOConfig().rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[6]))
    assert config.model_config == {"hidden_sizes": [6]}

    with pytest.raises(ValueError, match="vf_share_layers=False is refused"):
        DefaultModelConfig(use_lstm=True, vf_share_layers=False)  # cairn builds no separate value LSTM
    with pytest.raises(ValueError, match="conv_filters"):
        DefaultModelConfig(conv_filters=[[16, 4, 2]])
    with pytest.raises(ValueError, match="fcnet_activation"):
        DefaultModelConfig(fcnet_activation="gelu")
    with pytest.raises(ValueError, match="both"):
        RLModuleSpec(
            DefaultPPORLModule, CARTPOLE_OBS, gym.spaces.Discrete(2), {"fcnet_hiddens": [4], "hidden_sizes": [4]}
        ).build()


def test_from_module_and_the_default_spec() -> None:
    module = RLModuleSpec(ActorCriticRLModule, CARTPOLE_OBS, gym.spaces.Discrete(2), {"hidden_dim": 4}, seed=3).build()
    spec = RLModuleSpec.from_module(module)
    assert (spec.module_class, spec.model_config, spec.seed) == (ActorCriticRLModule, {"hidden_dim": 4}, 3)
    assert_states_equal(spec.build().get_state(), module.get_state())  # the same seed builds the same weights
    with pytest.raises(TypeError, match="MultiRLModuleSpec"):
        RLModuleSpec.from_module(object())  # type: ignore[arg-type]
    default = PPOConfig().get_default_rl_module_spec()
    assert isinstance(default, RLModuleSpec) and default.module_class is DefaultPPORLModule


def _heuristic_config(**overrides: Any) -> PPOConfig:
    return small_config(
        env="multi:CartPole-v1",
        num_agents=2,
        policies=("learned", "random"),
        policy_mapping={"agent_0": "learned", "agent_1": "random"},
        policies_to_train=("learned",),
        rl_module_spec=MultiRLModuleSpec(
            rl_module_specs={"learned": RLModuleSpec(), "random": RLModuleSpec(module_class=RandomRLModule)}
        ),
        rollout_length=16,
        minibatch_size=16,
        num_epochs=1,
        **overrides,
    )


def test_a_parameterless_module_acts_next_to_a_trained_one_and_resumes_exactly(tmp_path: Path) -> None:
    """RandomRLModule (no parameters, actions only) gets no optimizer, owes no logp/values, and its draws
    come from the runner's checkpointed RNG: N + M == N, save, restore, M."""
    straight = PPO(_heuristic_config())
    expected = [_metrics(straight.train()) for _ in range(2)]
    learner = straight.learner_group.learner
    assert learner.named_optimizers["random"] == {} and "random" not in learner.optimizers
    state = straight.get_state(components="learner_group")
    assert "random" not in state["learner_group"]["learner"]["optimizers"]
    with pytest.raises(ValueError, match="no trainable parameters"):
        learner.update({"random": {"obs": np.zeros((4, 4), np.float32)}})
    straight.stop()

    first = PPO(_heuristic_config())
    assert _metrics(first.train()) == expected[0]
    first.save_to_path(tmp_path / "mid")
    first.stop()
    resumed = PPO.from_checkpoint(tmp_path / "mid")
    assert _metrics(resumed.train()) == expected[1]
    assert_states_equal(resumed.get_state(components="learner_group"), state)
    resumed.stop()
    assert not any(key.startswith("learners/random/") for key in expected[1])


def test_heuristic_modules_act_as_written() -> None:
    space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    same = AlwaysSameHeuristicRLM(observation_space=space, action_space=gym.spaces.Discrete(3))
    assert list(same.parameters()) == []
    out = same.forward_exploration({Columns.OBS: torch.eye(3)}, generator=torch.Generator())
    assert out[Columns.ACTIONS].tolist() == [0, 0, 0] and Columns.ACTION_LOGP not in out
    rand = RandomRLModule(observation_space=space, action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    drawn = rand.forward_exploration({Columns.OBS: torch.zeros(5, 3)}, generator=torch.Generator().manual_seed(1))
    again = rand.forward_exploration({Columns.OBS: torch.zeros(5, 3)}, generator=torch.Generator().manual_seed(1))
    assert torch.equal(drawn[Columns.ACTIONS], again[Columns.ACTIONS])
    assert drawn[Columns.ACTIONS].shape == (5, 2) and bool((drawn[Columns.ACTIONS].abs() <= 1.0).all())
    with pytest.raises(NotImplementedError, match="Should not be trained"):
        rand.forward_train({Columns.OBS: torch.zeros(1, 3)})
    with pytest.raises(ValueError, match="Discrete or bounded Box"):
        RandomRLModule(observation_space=space, action_space=gym.spaces.MultiBinary(2))
    assert dataclasses.is_dataclass(RLModuleSpec.from_module(rand))
