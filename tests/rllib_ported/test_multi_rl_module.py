"""RLlib 2.60's ``rllib/core/rl_module/tests/test_multi_rl_module.py``, on cairn.

One test per RLlib test, same class, name and steps; written for cairn from RLlib's
(Apache-2.0) with ``ray.rllib`` -> ``cairn.rl`` (RLlib's lambdas as it writes them, issue 39),
and the fixed ``/tmp/test_multi_rl_module`` folder of one
step is pytest's ``tmp_path`` (parallel CI runs). Failures: docs/rllib_parity.md.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gymnasium as gym
import pytest

from cairn.rl.core import DEFAULT_MODULE_ID
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import make_multi_agent
from cairn.rl.examples.rl_modules.classes.vpg_torch_rlm import VPGTorchRLModule
from cairn.rl.utils.test_utils import check


def _vpg(env: object, hidden_dim: int = 32) -> VPGTorchRLModule:
    return VPGTorchRLModule(
        observation_space=env.get_observation_space(0),  # type: ignore[attr-defined]
        action_space=env.get_action_space(0),  # type: ignore[attr-defined]
        model_config={"hidden_dim": hidden_dim},
    )


def _two_agent_cartpole() -> object:
    return make_multi_agent("CartPole-v0")({"num_agents": 2})


class TestMultiRLModule:
    def test_from_config(self) -> None:
        env = _two_agent_cartpole()
        spec = RLModuleSpec(
            module_class=VPGTorchRLModule,
            observation_space=env.get_observation_space(0),  # type: ignore[attr-defined]
            action_space=env.get_action_space(0),  # type: ignore[attr-defined]
            model_config={"hidden_dim": 32},
        )
        multi = MultiRLModule(rl_module_specs={"module1": spec, "module2": spec})
        assert set(multi.keys()) == {"module1", "module2"}
        assert isinstance(multi["module1"], VPGTorchRLModule)
        assert isinstance(multi["module2"], VPGTorchRLModule)

    def test_as_multi_rl_module(self) -> None:
        multi = _vpg(_two_agent_cartpole()).as_multi_rl_module()
        assert not isinstance(multi, VPGTorchRLModule)
        assert isinstance(multi, MultiRLModule)
        assert set(multi.keys()) == {DEFAULT_MODULE_ID}
        assert multi.as_multi_rl_module() is multi

    def test_get_state_and_set_state(self) -> None:
        env = _two_agent_cartpole()
        module = _vpg(env).as_multi_rl_module()
        state = module.get_state()
        assert isinstance(state, dict)
        assert set(state) == set(module.keys())
        assert set(state[DEFAULT_MODULE_ID]) == set(module[DEFAULT_MODULE_ID].get_state())
        module2 = _vpg(env).as_multi_rl_module()
        check(state[DEFAULT_MODULE_ID], module2.get_state()[DEFAULT_MODULE_ID], false=True)
        module2.set_state(state)
        check(state, module2.get_state())

    def test_add_remove_modules(self) -> None:
        env = _two_agent_cartpole()
        module = _vpg(env).as_multi_rl_module()
        module.add_module("test", _vpg(env))
        assert set(module.keys()) == {DEFAULT_MODULE_ID, "test"}
        module.remove_module("test")
        assert set(module.keys()) == {DEFAULT_MODULE_ID}
        with pytest.raises(ValueError):
            module.add_module(DEFAULT_MODULE_ID, _vpg(env))
        module.add_module(DEFAULT_MODULE_ID, _vpg(env), override=True)

    def test_save_to_path_and_from_checkpoint(self, tmp_path: Path) -> None:
        env = _two_agent_cartpole()
        module = _vpg(env).as_multi_rl_module()
        module.add_module("test", _vpg(env))
        module.add_module("test2", _vpg(env, 128))

        def round_trip(folder: str, expected: set[str]) -> None:
            module.save_to_path(folder)
            module2 = MultiRLModule.from_checkpoint(folder)
            check(module.get_state(), module2.get_state())
            assert module.keys() == module2.keys()
            assert set(module.keys()) == expected
            assert module2 is not module

        with tempfile.TemporaryDirectory() as tmpdir:
            round_trip(tmpdir, {"test", "test2", DEFAULT_MODULE_ID})
        module.remove_module("test")
        with tempfile.TemporaryDirectory() as tmpdir:
            round_trip(tmpdir, {"test2", DEFAULT_MODULE_ID})
        module.add_module("test3", _vpg(env, 120))
        round_trip(str(tmp_path / "test_multi_rl_module"), {"test2", "test3", DEFAULT_MODULE_ID})

    @pytest.mark.xfail(
        strict=True,
        reason="an algorithm builds cairn's own MultiRLModule and refuses multi_rl_module_class (spec.build() "
        "honours it), and RLlib's examples.multi_agent.multi_agent_cartpole script path does not exist in cairn",
    )
    def test_model_config_propagation(self) -> None:
        from cairn.rl.examples.multi_agent.multi_agent_cartpole import (  # type: ignore[import-not-found]
            MultiAgentCartPole,
        )

        from cairn.rl.algorithms import DQNConfig
        from cairn.rl.core.rl_module.torch import TorchRLModule
        from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner

        class CustomMultiRLModule(MultiRLModule):
            def setup(self) -> None:
                super().setup()  # type: ignore[misc]
                assert self.model_config is not None  # type: ignore[attr-defined]

        spec = MultiRLModuleSpec(
            multi_rl_module_class=CustomMultiRLModule,  # type: ignore[call-arg]
            rl_module_specs={
                "agent_1": RLModuleSpec(
                    TorchRLModule, observation_space=gym.spaces.Box(0, 1), action_space=gym.spaces.Box(0, 1)
                )
            },
            model_config={"some_config": 1},  # type: ignore[call-arg]
        )
        spec.build()
        config = (
            DQNConfig()
            .environment(MultiAgentCartPole)
            .rl_module(rl_module_spec=spec)
            .multi_agent(policies={"agent_1"}, policy_mapping_fn=lambda agent_id, episode, worker, **kwargs: agent_id)
        )
        MultiAgentEnvRunner(config)


def _shared_spec(**kwargs: object) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=gym.spaces.Box(0, 1, shape=(4,)),
        action_space=gym.spaces.Discrete(2),
        **kwargs,
    )


class TestMultiRLModuleSpecSingleSpec:
    def test_single_shared_spec_construction_does_not_raise(self) -> None:
        shared = _shared_spec(model_config={"hidden_dim": 32})
        assert MultiRLModuleSpec(rl_module_specs=shared).rl_module_specs is shared

    def test_single_shared_spec_inherits_inference_only_flag(self) -> None:
        assert MultiRLModuleSpec(rl_module_specs=_shared_spec(inference_only=True)).inference_only
        assert not MultiRLModuleSpec(rl_module_specs=_shared_spec(inference_only=False)).inference_only

    def test_explicit_inference_only_overrides_shared_spec_default(self) -> None:
        multi = MultiRLModuleSpec(rl_module_specs=_shared_spec(inference_only=True), inference_only=False)
        assert not multi.inference_only

    def test_single_shared_spec_contains_returns_true_for_any_module_id(self) -> None:
        multi = MultiRLModuleSpec(rl_module_specs=_shared_spec())
        assert "player1" in multi and "player2" in multi and DEFAULT_MODULE_ID in multi

    def test_single_shared_spec_getitem_returns_shared_spec(self) -> None:
        shared = _shared_spec()
        multi = MultiRLModuleSpec(rl_module_specs=shared)
        assert multi["player1"] is shared and multi["player2"] is shared

    def test_single_shared_spec_survives_update_with_rl_module_spec(self) -> None:
        multi = MultiRLModuleSpec(rl_module_specs=_shared_spec(inference_only=True))
        multi.update(_shared_spec(inference_only=False))
        assert not multi.inference_only

    def test_from_dict_does_not_misread_module_class_module_id(self) -> None:
        multi = MultiRLModuleSpec(rl_module_specs={"module_class": _shared_spec()})
        serialized = multi.to_dict()
        assert isinstance(serialized["rl_module_specs"]["module_class"], dict)
        restored = MultiRLModuleSpec.from_dict(serialized)
        assert isinstance(restored.rl_module_specs, dict)
        assert "module_class" in restored.rl_module_specs
        assert isinstance(restored.rl_module_specs["module_class"], RLModuleSpec)

    def test_single_shared_spec_round_trips_through_to_dict_from_dict(self) -> None:
        multi = MultiRLModuleSpec(rl_module_specs=_shared_spec(inference_only=False))
        serialized = multi.to_dict()
        assert "module_class" in serialized["rl_module_specs"]
        restored = MultiRLModuleSpec.from_dict(serialized)
        assert isinstance(restored.rl_module_specs, RLModuleSpec)
        assert restored.rl_module_specs.module_class is VPGTorchRLModule
        assert restored.inference_only == multi.inference_only
