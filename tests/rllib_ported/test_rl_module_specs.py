"""RLlib 2.60's ``rllib/core/rl_module/tests/test_rl_module_specs.py``, on cairn.

One test per RLlib test, same name and steps; written for cairn from RLlib's
(Apache-2.0) with ``ray.rllib`` -> ``cairn.rl``. Failures and their reasons:
docs/rllib_parity.md.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.examples.rl_modules.classes.vpg_torch_rlm import VPGTorchRLModule


def _cartpole_spec(hidden_dim: int) -> RLModuleSpec:
    env = gym.make("CartPole-v1")
    return RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config={"hidden_dim": hidden_dim},
    )


def test_single_agent_spec() -> None:
    assert isinstance(_cartpole_spec(64).build(), VPGTorchRLModule)


def test_multi_agent_spec() -> None:
    spec = MultiRLModuleSpec(rl_module_specs={f"module_{i}": _cartpole_spec(32 * (i + 1)) for i in range(2)})
    assert isinstance(spec.build(), MultiRLModule)


def test_customized_multi_agent_module() -> None:
    from cairn.rl.examples.rl_modules.classes.vpg_using_shared_encoder_rlm import (
        SHARED_ENCODER_ID,
        SharedEncoder,
        VPGMultiRLModuleWithSharedEncoder,
        VPGPolicyAfterSharedEncoder,
    )

    obs_space = gym.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
    act_space = gym.spaces.Discrete(2)
    policy_config = {"embedding_dim": 10, "hidden_dim": 20}
    MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={
            SHARED_ENCODER_ID: RLModuleSpec(
                module_class=SharedEncoder,
                observation_space=obs_space,
                action_space=act_space,
                model_config={"embedding_dim": 10},
            ),
            "agent_1": RLModuleSpec(VPGPolicyAfterSharedEncoder, obs_space, act_space, model_config=policy_config),
            "agent_2": RLModuleSpec(VPGPolicyAfterSharedEncoder, obs_space, act_space, model_config=policy_config),
        },
    ).build()


def test_get_spec_from_module_multi_agent() -> None:
    spec = MultiRLModuleSpec(rl_module_specs={f"module_{i}": _cartpole_spec(32 * (i + 1)) for i in range(2)})
    assert MultiRLModuleSpec.from_module(spec.build()) == spec


def test_get_spec_from_module_single_agent() -> None:
    spec = _cartpole_spec(32)
    assert RLModuleSpec.from_module(spec.build()) == spec


def test_update_specs() -> None:
    env = gym.make("CartPole-v0")
    spec_1 = RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config="Update me!",  # type: ignore[arg-type]
    )
    spec_2 = RLModuleSpec(model_config={"hidden_dim": 32})
    assert spec_1.model_config == "Update me!"
    spec_1.update(spec_2)
    assert spec_1.model_config == {"hidden_dim": 32}


def test_update_specs_multi_agent() -> None:
    from cairn.rl.examples.rl_modules.classes.vpg_using_shared_encoder_rlm import (
        VPGMultiRLModuleWithSharedEncoder,
    )

    env = gym.make("CartPole-v0")

    def first() -> RLModuleSpec:
        return RLModuleSpec(
            module_class=VPGTorchRLModule,
            observation_space="Do not update me!",  # type: ignore[arg-type]
            action_space=env.action_space,
            model_config="Update me!",  # type: ignore[arg-type]
        )

    spec_1 = first()
    spec_2 = RLModuleSpec(model_config={"hidden_dim": 32})
    assert spec_1.model_config == "Update me!"
    spec_1.update(spec_2)
    assert spec_1.module_class is VPGTorchRLModule
    assert spec_1.observation_space == "Do not update me!"
    assert spec_1.action_space == env.action_space
    assert spec_1.model_config == spec_2.model_config

    spec_1 = first()
    multi_1 = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={"agent_1": spec_1},
    )
    multi_2 = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={"agent_1": spec_2},
    )
    assert multi_1.rl_module_specs["agent_1"].model_config == "Update me!"
    multi_1.update(multi_2, override=True)
    assert multi_1.rl_module_specs["agent_1"] == spec_2

    multi_3 = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={"agent_1": spec_1},
    )
    assert multi_3.rl_module_specs["agent_1"].observation_space == "Do not update me!"
    multi_3.update(multi_2, override=False)
    assert multi_3.rl_module_specs["agent_1"].observation_space == "Do not update me!"

    spec_3 = RLModuleSpec(
        module_class=VPGTorchRLModule,
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config="I'm new!",  # type: ignore[arg-type]
    )
    multi_3 = MultiRLModuleSpec(
        multi_rl_module_class=VPGMultiRLModuleWithSharedEncoder,
        rl_module_specs={"agent_2": spec_3},
    )
    assert multi_1.rl_module_specs.get("agent_2") is None
    multi_1.update(multi_3)
    assert multi_1.rl_module_specs["agent_2"].model_config == "I'm new!"
