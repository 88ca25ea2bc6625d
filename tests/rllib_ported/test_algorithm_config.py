"""RLlib's ``rllib/algorithms/tests/test_algorithm_config.py`` on cairn (issue 38, item 7).

Same test names, cases and expected values; ``ray.rllib`` -> ``cairn.rl``. The tests RLlib
added after 2.60 (connector-pipeline builders, ``to_dict`` round trips with Tune search
spaces, one small batch over several learners, a shared module) are not ported. RLlib's
``ray.init()`` set-up is dropped. ``AlgorithmConfig(algo_class=PPO)`` makes a ``PPOConfig``.
Two tests fail on cairn, each for the reason its mark gives (docs/rllib_parity.md):
per-worker fragment lengths and ``is_atari``, which cairn's configs do not have.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.algorithms.ppo import PPO, PPOConfig
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule, MultiRLModuleSpec
from cairn.rl.core.rl_module.rl_module import RLModule, RLModuleSpec
from cairn.rl.utils.test_utils import check


def test_running_specific_algo_with_generic_config() -> None:
    """Tests, whether some algo can be run with the generic AlgorithmConfig."""
    config = (
        AlgorithmConfig(algo_class=PPO)
        .environment("CartPole-v0")
        .training(lr=0.12345, train_batch_size=3000, minibatch_size=300)
    )
    algo = config.build()
    assert algo.config.lr == 0.12345
    assert algo.config.train_batch_size == 3000
    algo.train()
    algo.stop()


def test_freezing_of_algo_config() -> None:
    """Tests, whether freezing an AlgorithmConfig actually works as expected."""
    config = (
        AlgorithmConfig()
        .environment("CartPole-v0")
        .training(lr=0.12345, train_batch_size=3000)
        .multi_agent(
            policies={"pol1": (None, None, None, AlgorithmConfig.overrides(lr=0.001))},
            policy_mapping_fn=lambda agent_id, episode, worker, **kw: "pol1",
        )
    )
    config.freeze()

    def set_lr(config: Any) -> None:
        config.lr = 0.01

    with pytest.raises(AttributeError, match=r"Cannot set attribute.+of an already frozen AlgorithmConfig"):
        set_lr(config)


@pytest.mark.xfail(
    strict=True,
    reason="get_rollout_fragment_length(worker_index=) gives what cairn's runners take: RLlib gives the first "
    "runners one step more than the others (2,456 over 4 x 3 envs: 205 for runners 0-3, 204 for runner 4, 2,457 "
    "in all), cairn samples one rollout_length in every env of every runner (205 each, 2,460 in all); making "
    "them differ per runner changes how cairn samples, in the multi-agent runner too",
)
def test_rollout_fragment_length() -> None:
    """Tests the proper auto-computation of the `rollout_fragment_length`."""
    config = (
        AlgorithmConfig()
        .env_runners(
            num_env_runners=4,
            num_envs_per_env_runner=3,
            rollout_fragment_length="auto",
        )
        .training(train_batch_size=2456)
    )
    # 2456 / (3 * 4) -> 204.666 -> 204 or 205 (depending on worker index).
    # Actual train batch size: 2457 (off by only 1).
    assert config.get_rollout_fragment_length(worker_index=0) == 205  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=1) == 205  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=2) == 205  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=3) == 205  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=4) == 204  # type: ignore[attr-defined]

    config = (
        AlgorithmConfig()
        .env_runners(
            num_env_runners=3,
            num_envs_per_env_runner=2,
            rollout_fragment_length="auto",
        )
        .training(train_batch_size=4000)
    )
    # 4000 / 6 -> 666.66 -> 666 or 667 (depending on worker index)
    # Actual train batch size: 4000 (perfect match)
    assert config.get_rollout_fragment_length(worker_index=0) == 667  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=1) == 667  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=2) == 667  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=3) == 666  # type: ignore[attr-defined]

    config = (
        AlgorithmConfig()
        .env_runners(
            num_env_runners=12,
            rollout_fragment_length="auto",
        )
        .training(train_batch_size=1342)
    )
    # 1342 / 12 -> 111.83 -> 111 or 112 (depending on worker index)
    # Actual train batch size: 1342 (perfect match)
    for i in range(11):
        assert config.get_rollout_fragment_length(worker_index=i) == 112  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=11) == 111  # type: ignore[attr-defined]
    assert config.get_rollout_fragment_length(worker_index=12) == 111  # type: ignore[attr-defined]


@pytest.mark.xfail(
    strict=True,
    reason="Atari is out of scope (issue 38): configs have no is_atari, and an 'ale_py:ALE/...' id names a module "
    "this process has not imported, which cairn refuses",
)
def test_detect_atari_env() -> None:
    """Tests that we can properly detect Atari envs."""
    config = AlgorithmConfig().environment(env="ale_py:ALE/Breakout-v5", env_config={"frameskip": 1})
    assert config.is_atari  # type: ignore[attr-defined]

    config = AlgorithmConfig().environment(env="ale_py:ALE/Pong-v5")
    assert config.is_atari  # type: ignore[attr-defined]

    config = AlgorithmConfig().environment(env="CartPole-v1")
    # We do not auto-detect callable env makers for Atari envs.
    assert not config.is_atari  # type: ignore[attr-defined]

    config = AlgorithmConfig().environment(
        env=lambda ctx: gym.make(
            "ale_py:ALE/Breakout-v5",
            frameskip=1,
        )
    )
    # We do not auto-detect callable env makers for Atari envs.
    assert not config.is_atari  # type: ignore[attr-defined]

    config = AlgorithmConfig().environment(env="NotAtari")
    assert not config.is_atari  # type: ignore[attr-defined]


def test_rl_module_api() -> None:
    from cairn.rl.algorithms.ppo.torch.ppo_torch_rl_module import PPOTorchRLModule

    config = PPOConfig().environment("CartPole-v1").framework("torch")

    assert config.rl_module_spec.module_class == PPOTorchRLModule

    class A:
        pass

    config = config.rl_module(rl_module_spec=RLModuleSpec(A))
    assert config.rl_module_spec.module_class == A


def test_config_per_module() -> None:
    """Tests, whether per-module config overrides (multi-agent) work as expected."""

    # Compile individual agents' PPO configs from a config object.
    config = (
        PPOConfig()
        .training(kl_coeff=0.5)
        .multi_agent(
            policies={"module_1", "module_2", "module_3"},
            # Override config settings fro `module_1` and `module_2`.
            algorithm_config_overrides_per_module={
                "module_1": PPOConfig.overrides(lr=0.01, kl_coeff=0.1),
                "module_2": PPOConfig.overrides(grad_clip=100.0),
            },
        )
    )

    # Check default config.
    check(config.lr, 0.00005)
    check(config.grad_clip, None)  # type: ignore[attr-defined]
    check(config.grad_clip_by, "global_norm")  # type: ignore[attr-defined]
    check(config.kl_coeff, 0.5)  # type: ignore[attr-defined]

    # `module_1` overrides.
    config_1 = config.get_config_for_module("module_1")
    check(config_1.lr, 0.01)
    check(config_1.grad_clip, None)  # type: ignore[attr-defined]
    check(config_1.grad_clip_by, "global_norm")  # type: ignore[attr-defined]
    check(config_1.kl_coeff, 0.1)  # type: ignore[attr-defined]

    # `module_2` overrides.
    config_2 = config.get_config_for_module("module_2")
    check(config_2.lr, 0.00005)
    check(config_2.grad_clip, 100.0)  # type: ignore[attr-defined]
    check(config_2.grad_clip_by, "global_norm")  # type: ignore[attr-defined]
    check(config_2.kl_coeff, 0.5)  # type: ignore[attr-defined]

    # No `module_3` overrides (b/c module_3 uses the top-level config
    # object directly).
    assert "module_3" not in config._per_module_overrides  # type: ignore[attr-defined]
    config_3 = config.get_config_for_module("module_3")
    assert config_3 is config


def test_learner_api() -> None:
    from cairn.rl.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

    config = PPOConfig().environment("CartPole-v1")

    assert config.learner_class == PPOTorchLearner


def _assert_equal_marl_specs(spec1: Any, spec2: Any) -> None:
    """RLlib's ``_assertEqualMARLSpecs``."""
    assert spec1.multi_rl_module_class == spec2.multi_rl_module_class

    assert set(spec1.module_specs.keys()) == set(spec2.module_specs.keys())
    for k, module_spec1 in spec1.module_specs.items():
        module_spec2 = spec2.module_specs[k]

        assert module_spec1.module_class == module_spec2.module_class
        assert module_spec1.observation_space == module_spec2.observation_space
        assert module_spec1.action_space == module_spec2.action_space
        assert module_spec1.model_config_dict == module_spec2.model_config_dict


def _get_expected_marl_spec(
    config: AlgorithmConfig,
    expected_module_class: type[RLModule],
    passed_module_class: type[RLModule] | None = None,
    expected_multi_rl_module_class: type[MultiRLModule] | None = None,
) -> tuple[Any, Any]:
    """RLlib's ``_get_expected_marl_spec``: the spec ``get_multi_rl_module_spec()`` returns, and the expected one."""
    from cairn.rl.policy.policy import PolicySpec

    if expected_multi_rl_module_class is None:
        expected_multi_rl_module_class = MultiRLModule

    env = gym.make("CartPole-v1")
    policy_spec_ph = PolicySpec(
        observation_space=env.observation_space,
        action_space=env.action_space,
        config=AlgorithmConfig(),
    )

    marl_spec = config.get_multi_rl_module_spec(  # type: ignore[attr-defined]
        policy_dict={"p1": policy_spec_ph, "p2": policy_spec_ph},
        single_agent_rl_module_spec=RLModuleSpec(module_class=passed_module_class) if passed_module_class else None,
    )

    expected_marl_spec = MultiRLModuleSpec(
        multi_rl_module_class=expected_multi_rl_module_class,
        rl_module_specs={
            "p1": RLModuleSpec(
                module_class=expected_module_class,
                observation_space=env.observation_space,
                action_space=env.action_space,
            ),
            "p2": RLModuleSpec(
                module_class=expected_module_class,
                observation_space=env.observation_space,
                action_space=env.action_space,
            ),
        },
    )

    return marl_spec, expected_marl_spec


def test_get_multi_rl_module_spec() -> None:
    """Tests whether the get_multi_rl_module_spec() method works properly."""
    from cairn.rl.examples.rl_modules.classes.vpg_torch_rlm import VPGTorchRLModule

    class CustomRLModule1(VPGTorchRLModule):
        pass

    class CustomRLModule2(VPGTorchRLModule):
        pass

    class CustomRLModule3(VPGTorchRLModule):
        pass

    class CustomMultiRLModule1(MultiRLModule):
        pass

    # single agent
    class SingleAgentAlgoConfig(AlgorithmConfig):
        def get_default_rl_module_spec(self) -> Any:
            return RLModuleSpec(module_class=VPGTorchRLModule)

    # multi-agent
    class MultiAgentAlgoConfigWithNoSingleAgentSpec(AlgorithmConfig):
        def get_default_rl_module_spec(self) -> Any:
            return MultiRLModuleSpec(multi_rl_module_class=CustomMultiRLModule1)

    # This is the simplest case where we have to construct the MultiRLModule based
    # on the default specs only.
    config = SingleAgentAlgoConfig().api_stack(
        enable_rl_module_and_learner=True,
        enable_env_runner_and_connector_v2=True,
    )

    spec, expected = _get_expected_marl_spec(config, VPGTorchRLModule)
    _assert_equal_marl_specs(spec, expected)

    # expected module should become the passed module if we pass it in.
    spec, expected = _get_expected_marl_spec(config, CustomRLModule2, passed_module_class=CustomRLModule2)
    _assert_equal_marl_specs(spec, expected)

    # This is the case where we pass in a `MultiRLModuleSpec` that asks the
    # algorithm to assign a specific type of RLModule class to certain module_ids.
    config = (
        SingleAgentAlgoConfig()
        .api_stack(
            enable_rl_module_and_learner=True,
            enable_env_runner_and_connector_v2=True,
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                rl_module_specs={
                    "p1": RLModuleSpec(module_class=CustomRLModule1),
                    "p2": RLModuleSpec(module_class=CustomRLModule1),
                },
            ),
        )
    )

    spec, expected = _get_expected_marl_spec(config, CustomRLModule1)
    _assert_equal_marl_specs(spec, expected)

    # This is the case where we ask the algorithm to assign a specific type of
    # RLModule class to ALL module_ids.
    config = (
        SingleAgentAlgoConfig()
        .api_stack(
            enable_rl_module_and_learner=True,
            enable_env_runner_and_connector_v2=True,
        )
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=CustomRLModule1),
        )
    )

    spec, expected = _get_expected_marl_spec(config, CustomRLModule1)
    _assert_equal_marl_specs(spec, expected)

    # expected module should become the passed module if we pass it in.
    spec, expected = _get_expected_marl_spec(config, CustomRLModule2, passed_module_class=CustomRLModule2)
    _assert_equal_marl_specs(spec, expected)

    # This is not only assigning a specific type of RLModule class to EACH
    # module_id, but also defining a new custom MultiRLModule class to be used
    # in the multi-agent scenario.
    config = (
        SingleAgentAlgoConfig()
        .api_stack(
            enable_rl_module_and_learner=True,
            enable_env_runner_and_connector_v2=True,
        )
        .rl_module(
            rl_module_spec=MultiRLModuleSpec(
                multi_rl_module_class=CustomMultiRLModule1,
                rl_module_specs={
                    "p1": RLModuleSpec(module_class=CustomRLModule1),
                    "p2": RLModuleSpec(module_class=CustomRLModule1),
                },
            ),
        )
    )

    spec, expected = _get_expected_marl_spec(
        config, CustomRLModule1, expected_multi_rl_module_class=CustomMultiRLModule1
    )
    _assert_equal_marl_specs(spec, expected)

    # This is expected to return CustomRLModule1 instead of CustomRLModule3 which
    # is passed in. Because the default for p1, p2 is to use CustomRLModule1. The
    # passed module_spec only sets a default to fall back onto in case the
    # module_id is not specified in the original MultiRLModuleSpec. Since P1
    # and P2 are both assigned to CustomeRLModule1, the passed module_spec will not
    # be used. This is the expected behavior for adding a new modules to a
    # `MultiRLModule` that is not defined in the original MultiRLModuleSpec.
    spec, expected = _get_expected_marl_spec(
        config,
        CustomRLModule1,
        passed_module_class=CustomRLModule3,
        expected_multi_rl_module_class=CustomMultiRLModule1,
    )
    _assert_equal_marl_specs(spec, expected)

    # This is the case where we ask the algorithm to use its default
    # MultiRLModuleSpec, but the MultiRLModuleSpec has not defined its
    # RLModuleSpecs.
    config = MultiAgentAlgoConfigWithNoSingleAgentSpec().api_stack(
        enable_rl_module_and_learner=True,
        enable_env_runner_and_connector_v2=True,
    )

    with pytest.raises(ValueError, match="must be a dict"):
        config.rl_module_spec  # noqa: B018
