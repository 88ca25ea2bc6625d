"""RLlib's spec and multi-module APIs (issue 38 item 4): shared specs through an algorithm, dict forms, updates."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
from rl_helpers import small_config

import cairn
from cairn._ctor_bounds import FolderSizes
from cairn.registry import Unrecorded
from cairn.rl import PPO, PPOConfig
from cairn.rl.core import DEFAULT_MODULE_ID, Columns
from cairn.rl.core.columns import Columns as HomeColumns
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import MultiAgentSingleEnvCopies, make_multi_agent
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole
from cairn.rl.examples.rl_modules.classes.vpg_torch_rlm import VPGTorchRLModule

BOX = gym.spaces.Box(-1.0, 1.0, (4,))


def test_make_multi_agent_returns_a_recordable_class_for_known_ids() -> None:
    assert make_multi_agent("CartPole-v1") is MultiAgentCartPole  # recorded by reference in configs
    made = make_multi_agent("Acrobot-v1")
    assert made is make_multi_agent("Acrobot-v1") and issubclass(made, MultiAgentSingleEnvCopies)
    env = made({"num_agents": 3})
    observations, _ = env.reset(seed=1)
    assert sorted(observations) == [0, 1, 2] and env.get_action_space(2) == gym.spaces.Discrete(3)
    # RLlib's make_multi_agent(creator): copies made by the creator (without num_agents), and a config keeps
    # the class as it keeps a lambda creator (issue 39): recorded only as existing, asked for by a new process.
    seen: list[dict[str, Any]] = []
    by_creator = make_multi_agent(lambda config: seen.append(config) or gym.make("Acrobot-v1"))
    env = by_creator({"num_agents": 2, "difficulty": 1})
    assert sorted(env.reset(seed=1)[0]) == [0, 1] and seen == [{"difficulty": 1}] * 2
    kept = PPOConfig().environment(by_creator).env_creator
    assert isinstance(kept, Unrecorded) and kept.role == "env" and kept.fn is by_creator
    assert kept.qualname.startswith("make_multi_agent.<locals>.MultiAgent")
    with pytest.raises(TypeError, match="gymnasium id or a creator function"):
        make_multi_agent(3)  # type: ignore[arg-type]
    with pytest.raises(gym.error.Error):
        make_multi_agent("NoSuchEnv-v0")
    assert Columns is HomeColumns and DEFAULT_MODULE_ID == "default_policy"


def test_spec_update_inference_only_and_dict_round_trip() -> None:
    spec = RLModuleSpec(module_class=VPGTorchRLModule, observation_space=BOX, action_space=gym.spaces.Discrete(2))
    spec.update(RLModuleSpec(model_config={"hidden_dim": 8}, inference_only=True))
    assert spec.model_config == {"hidden_dim": 8} and spec.inference_only and spec.module_class is VPGTorchRLModule
    spec.update(RLModuleSpec(model_config={"hidden_dim": 99}, seed=4), override=False)
    assert spec.model_config == {"hidden_dim": 8} and spec.seed == 4  # only what was None is filled in
    module = spec.build()
    assert module.inference_only and RLModuleSpec.from_module(module) == spec
    data = json.loads(json.dumps(spec.to_dict()))  # plain JSON data
    assert RLModuleSpec.from_dict(data) == spec
    with pytest.raises(cairn.CheckpointError, match=r"a module class is a subclass of .*RLModule, and it is not"):
        RLModuleSpec.from_dict({**data, "module_class": "cairn.rl.core.rl_module.rl_module:RLModuleSpec"})
    with pytest.raises(cairn.CheckpointError, match="module_class"):
        RLModuleSpec.from_dict({**data, "module_class": "os:system"})  # never imported, never called


def test_a_shared_spec_builds_one_module_per_policy_and_checkpoints(tmp_path: Path) -> None:
    shared = MultiRLModuleSpec(rl_module_specs=RLModuleSpec(model_config={"hidden_sizes": [8]}))
    assert "p0" in shared and shared["anything"] is shared.rl_module_specs
    with pytest.raises(ValueError, match="per_module"):
        shared.build()
    config = dataclasses.replace(
        small_config(env="multi:CartPole-v1"),
        policies=("p0", "p1"),
        policy_mapping={"agent_0": "p0", "agent_1": "p1"},
        rl_module_spec=shared,
    )
    algo = PPO(config)
    try:
        modules = algo.learner_group.learner.module
        assert isinstance(modules, MultiRLModule) and modules.keys() == ["p0", "p1"]
        assert all(modules[m].model_config["hidden_sizes"] == [8] for m in ("p0", "p1"))
        algo.train()
        path = algo.save_to_path(tmp_path / "ck")
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        assert isinstance(restored.config.rl_module_spec, MultiRLModuleSpec)
        assert isinstance(restored.config.rl_module_spec.rl_module_specs, RLModuleSpec)
    finally:
        restored.stop()


def test_a_shared_specs_model_config_counts_in_the_bounds_of_a_checkpoint() -> None:
    """A checkpoint's config whose shared spec asks for huge layers is refused before anything is allocated."""
    huge = MultiRLModuleSpec(rl_module_specs=RLModuleSpec(model_config={"hidden_sizes": [1 << 15] * 4}))
    config = dataclasses.replace(small_config(env="multi:CartPole-v1"), policies=("p0", "p1"), rl_module_spec=huge)
    folder = FolderSizes(files={}, components=(), tree_bytes=1_000_000)
    assert PPO.ctor_args_problem((config,), {}, folder) is not None
    small = dataclasses.replace(
        config, rl_module_spec=MultiRLModuleSpec(RLModuleSpec(model_config={"hidden_sizes": [8]}))
    )
    assert PPO.ctor_args_problem((small,), {}, folder) is None


def test_a_multi_rl_module_class_wires_a_shared_encoder_and_checkpoints(tmp_path: Path) -> None:
    from cairn.rl.examples.rl_modules.classes.vpg_using_shared_encoder_rlm import (
        SHARED_ENCODER_ID,
        SharedEncoder,
        VPGMultiRLModuleWithSharedEncoder,
        VPGPolicyAfterSharedEncoder,
    )

    act = gym.spaces.Discrete(2)
    head = {"embedding_dim": 6, "hidden_dim": 5}
    spec = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={
            SHARED_ENCODER_ID: RLModuleSpec(SharedEncoder, BOX, act, model_config={"embedding_dim": 6}),
            "a": RLModuleSpec(VPGPolicyAfterSharedEncoder, BOX, act, model_config=head),
            "b": RLModuleSpec(VPGPolicyAfterSharedEncoder, BOX, act, model_config=head),
        },
        model_config={"note": 1},
    )
    multi = spec.build()
    assert isinstance(multi, VPGMultiRLModuleWithSharedEncoder) and multi.model_config == {"note": 1}
    obs = torch.zeros((3, 4))
    actions = multi.forward_inference({"a": {Columns.OBS: obs}, "b": {Columns.OBS: obs}})
    assert set(actions) == {"a", "b"} and actions["a"][Columns.ACTIONS].shape == (3,)
    assert MultiRLModuleSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    multi.save_to_path(tmp_path / "m")
    again = MultiRLModule.from_checkpoint(tmp_path / "m")
    assert type(again) is VPGMultiRLModuleWithSharedEncoder and again.model_config == {"note": 1}
    with pytest.raises(ValueError, match="needs a module 'encoder'"):
        dataclasses.replace(spec, rl_module_specs={"a": spec["a"]}).build()
    config = dataclasses.replace(small_config(env="multi:CartPole-v1"), policies=("a",), rl_module_spec=spec)
    with pytest.raises(ValueError, match="multi_rl_module_class"):
        PPO(config)


def test_get_multi_rl_module_spec_takes_spaces_the_shared_form_and_refuses_what_it_cannot_compile() -> None:
    """RLlib's ``get_multi_rl_module_spec`` beyond its own test: ``spaces=``, cairn's shared form, the refusals."""
    config = PPOConfig(policies=("a", "b"), model_config={"hidden_sizes": [8]})
    config = config.rl_module(rl_module_spec=MultiRLModuleSpec(RLModuleSpec(model_config={"vf_share_layers": True})))
    spec = config.get_multi_rl_module_spec(spaces={"a": (BOX, gym.spaces.Discrete(2)), "b": (BOX, BOX)})
    assert spec.multi_rl_module_class is MultiRLModule and sorted(spec.rl_module_specs) == ["a", "b"]
    assert spec["b"].action_space == BOX and spec["a"].module_class is config.get_default_rl_module_class()
    # RLlib merges the config's model_config under the spec's own.
    assert spec["a"].model_config == {"hidden_sizes": [8], "vf_share_layers": True}
    assert spec["a"] is not spec["b"] and spec.module_specs is spec.rl_module_specs
    assert spec["a"].model_config_dict is None
    with pytest.raises(ValueError, match="must be a dict"):
        MultiRLModuleSpec(multi_rl_module_class=MultiRLModule)

    class NoSingleSpec(PPOConfig):
        def get_default_rl_module_spec(self) -> Any:
            return MultiRLModuleSpec({"a": RLModuleSpec(module_class=VPGTorchRLModule)})

    with pytest.raises(ValueError, match="single_agent_rl_module_spec"):
        NoSingleSpec().get_multi_rl_module_spec(policy_dict={"a": None})
    made = NoSingleSpec().get_multi_rl_module_spec(
        policy_dict={"a": None}, single_agent_rl_module_spec=RLModuleSpec(), inference_only=True
    )
    assert made["a"].module_class is VPGTorchRLModule and made["a"].inference_only


def test_a_spec_takes_only_the_catalog_its_module_builds_from() -> None:
    import gymnasium as gym
    import pytest

    from cairn.rl.algorithms.ppo.ppo_catalog import PPOCatalog
    from cairn.rl.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
    from cairn.rl.core.distribution.torch_distribution import TorchCategorical
    from cairn.rl.core.rl_module.rl_module import RLModuleSpec

    env = gym.make("CartPole-v1")
    plain = RLModuleSpec(DefaultPPOTorchRLModule, env.observation_space, env.action_space, seed=3)
    with_catalog = RLModuleSpec(
        DefaultPPOTorchRLModule, env.observation_space, env.action_space, seed=3, catalog_class=PPOCatalog
    )
    # The default catalog changes nothing: the same spec, the same recorded form and weights.
    assert with_catalog == plain and with_catalog.to_dict() == plain.to_dict()
    built, want = with_catalog.build().state_dict(), plain.build().state_dict()
    assert built.keys() == want.keys() and all((built[k] == want[k]).all() for k in built)
    assert PPOCatalog(env.observation_space, env.action_space, {}).get_action_dist_cls() is TorchCategorical

    class MyCatalog(PPOCatalog):
        pass

    with pytest.raises(ValueError, match="builds from anyway"):
        RLModuleSpec(DefaultPPOTorchRLModule, catalog_class=MyCatalog)
    with pytest.raises(ValueError, match="none for this class"):
        RLModuleSpec(catalog_class=PPOCatalog)
