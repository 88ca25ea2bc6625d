"""RLlib's ``rllib/algorithms/tests/test_algorithm.py`` on cairn (issue 38, item 7): its new-API-stack tests.

Same test names, cases and expected values; ``ray.rllib`` -> ``cairn.rl`` (``ray.tune.register_env``
-> ``cairn.rl.env.multi_agent_env.register_env``); RLlib's lambdas as RLlib writes them (issue 39).
RLlib's ``ray.init(local_mode=True)`` set-up is dropped (cairn starts Ray itself when a config
asks for remote runners). ``test_add_policy_and_remove_policy`` is RLlib's old API stack
(``@OldAPIStack``) and not ported. What fails on cairn is marked ``xfail(strict=True)`` with the
reason (docs/rllib_parity.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from random import choice
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import cairn.rl.algorithms.dqn as dqn
import cairn.rl.algorithms.ppo as ppo
from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.env.multi_agent_env import register_env
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole
from cairn.rl.examples.evaluation.evaluation_parallel_to_training import AssertEvalCallback
from cairn.rl.utils.framework import convert_to_tensor
from cairn.rl.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, EVALUATION_RESULTS, LEARNER_RESULTS
from cairn.rl.utils.test_utils import check

register_env("multi_cart", lambda cfg: MultiAgentCartPole(cfg))


@pytest.mark.xfail(
    run=False,  # it starts Ray evaluation runners to fail at its first check
    reason="RLlib's _assert_modules_added calls EnvRunnerGroup.foreach_worker, which RLlib 2.60 no longer has "
    "(foreach_env_runner): the test fails on RLlib 2.60 as well; cairn also has no learner_group._learner and "
    "keeps policy_mapping_fn by reference in the config (the same flow, translated: "
    "tests/rl/rllib_parity/test_parity_algorithm.py)",
)
def test_add_module_and_remove_module() -> None:
    config = (
        ppo.PPOConfig()
        .api_stack(
            enable_rl_module_and_learner=True,
            enable_env_runner_and_connector_v2=True,
        )
        .environment(
            env="multi_cart",
            env_config={"num_agents": 4},
        )
        .env_runners(num_cpus_per_env_runner=0.1)
        .training(
            train_batch_size=100,
            minibatch_size=50,
            num_epochs=1,
        )
        .rl_module(
            model_config_dict={
                "fcnet_hiddens": [5],
                "fcnet_activation": "linear",
            },
        )
        .multi_agent(
            # Start with a single policy.
            policies={"p0"},
            policy_mapping_fn=lambda *a, **kw: "p0",
        )
        .evaluation(
            evaluation_num_env_runners=1,
            evaluation_config=ppo.PPOConfig.overrides(num_cpus_per_env_runner=0.1),
        )
    )

    # Construct the Algorithm with a single policy in it.
    algo = config.build()
    mod0 = algo.get_module("p0")
    r = algo.train()
    assert "p0" in r[LEARNER_RESULTS]
    for i in range(1, 3):

        def new_mapping_fn(agent_id: Any, episode: Any, i: int = i, **kwargs: Any) -> str:
            return f"p{choice([i, i - 1])}"

        # Add a new RLModule by class (and options).
        mid = f"p{i}"
        print(f"Adding new RLModule {mid} ...")
        new_marl_spec = algo.add_module(
            module_id=mid,
            module_spec=RLModuleSpec.from_module(mod0),
            # Test changing the mapping fn.
            new_agent_to_module_mapping_fn=new_mapping_fn,
            # Change the list of modules to train.
            new_should_module_be_updated=[f"p{i}", f"p{i - 1}"],
        )
        new_module = algo.get_module(mid)
        _assert_modules_added(
            algo=algo,
            marl_spec=new_marl_spec,
            mids=[0, i],
            trainable=[i, i - 1],
            mapped=[i, i - 1],
            not_mapped=[i - 2],
        )

        # Assert new policy is part of local worker (eval worker set does NOT
        # have a local worker, only the main EnvRunnerGroup does).
        multi_rl_module = algo.env_runner.module
        assert new_module is not mod0
        for j in range(i + 1):
            assert f"p{j}" in multi_rl_module
        assert len(multi_rl_module) == i + 1
        algo.train()
        checkpoint = algo.save_to_path()

        # Test restoring from the checkpoint (which has more policies
        # than what's defined in the config dict).
        test = Algorithm.from_checkpoint(checkpoint)
        _assert_modules_added(
            algo=test,
            marl_spec=None,
            mids=[0, i - 1, i],
            trainable=[i - 1, i],
            mapped=[i - 1, i],
            not_mapped=[i - 2],
        )
        # Make sure algorithm can continue training the restored policy.
        test.train()
        # Test creating an inference action with the added (and restored) RLModule.
        mod0 = test.get_module("p0")
        out = mod0.forward_inference(
            {
                Columns.OBS: convert_to_tensor(
                    np.expand_dims(mod0.config.observation_space.sample(), 0),
                    framework=mod0.framework,
                ),
            },
        )
        action_dist_inputs = out[Columns.ACTION_DIST_INPUTS]
        assert action_dist_inputs.shape == (1, 2)
        test.stop()

        # After having added 2 Modules, try to restore the Algorithm,
        # but only with 1 of the originally added Modules (plus the initial
        # p0).
        if i == 2:

            def new_mapping_fn(agent_id: Any, episode: Any, **kwargs: Any) -> str:  # type: ignore[misc]
                return f"p{choice([0, 2])}"

            test2 = Algorithm.from_checkpoint(path=checkpoint)
            test2.remove_module(
                module_id="p1",
                new_agent_to_module_mapping_fn=new_mapping_fn,
                new_should_module_be_updated=["p0"],
            )
            _assert_modules_added(
                algo=test2,
                marl_spec=None,
                mids=[0, 2],
                trainable=[0],
                mapped=[0, 2],
                not_mapped=[1, 4, 5, 6],
            )
            # Make sure algorithm can continue training the restored policy.
            mod2 = test2.get_module("p2")
            test2.train()
            # Test creating an inference action with the added (and restored)
            # RLModule.
            out = mod2.forward_exploration(
                {
                    Columns.OBS: convert_to_tensor(
                        np.expand_dims(mod0.config.observation_space.sample(), 0),
                        framework=mod0.framework,
                    ),
                },
            )
            action_dist_inputs = out[Columns.ACTION_DIST_INPUTS]
            assert action_dist_inputs.shape == (1, 2)
            test2.stop()

    # Delete all added modules again from Algorithm.
    for i in range(2, 0, -1):
        mid = f"p{i}"
        marl_spec = algo.remove_module(
            mid,
            # Note that the complete signature of a policy_mapping_fn
            # is: `agent_id, episode, worker, **kwargs`.
            new_agent_to_module_mapping_fn=(lambda agent_id, episode, i=i, **kwargs: f"p{i - 1}"),
            # Update list of policies to train.
            new_should_module_be_updated=[f"p{i - 1}"],
        )
        _assert_modules_added(
            algo=algo,
            marl_spec=marl_spec,
            mids=[0, i - 1],
            trainable=[i - 1],
            mapped=[i - 1],
            not_mapped=[i, i + 1],
        )

    algo.stop()


def test_evaluation_option() -> None:
    # Use a custom callback that asserts that we are running the
    # configured exact number of episodes per evaluation.
    config = (
        dqn.DQNConfig()
        .environment(env="CartPole-v1")
        .evaluation(
            evaluation_interval=2,
            evaluation_duration=2,
            evaluation_duration_unit="episodes",
            evaluation_config=dqn.DQNConfig.overrides(gamma=0.98),
        )
        .callbacks(callbacks_class=AssertEvalCallback)
    )

    algo = config.build()
    # Given evaluation_interval=2, r0, r2, r4 should not contain
    # evaluation metrics, while r1, r3 should.
    r0 = algo.train()
    print(r0)
    r1 = algo.train()
    print(r1)
    r2 = algo.train()
    print(r2)
    r3 = algo.train()
    print(r3)
    algo.stop()

    assert EVALUATION_RESULTS not in r0
    assert EVALUATION_RESULTS in r1
    assert EVALUATION_RESULTS not in r2
    assert EVALUATION_RESULTS in r3
    assert ENV_RUNNER_RESULTS in r1[EVALUATION_RESULTS]
    assert EPISODE_RETURN_MEAN in r1[EVALUATION_RESULTS][ENV_RUNNER_RESULTS]
    assert r1[EVALUATION_RESULTS] != r3[EVALUATION_RESULTS]


def test_evaluation_option_always_attach_eval_metrics() -> None:
    # Use a custom callback that asserts that we are running the
    # configured exact number of episodes per evaluation.
    config = (
        dqn.DQNConfig()
        .environment(env="CartPole-v1")
        .evaluation(
            evaluation_interval=2,
            evaluation_duration=2,
            evaluation_duration_unit="episodes",
            evaluation_config=dqn.DQNConfig.overrides(gamma=0.98),
        )
        .reporting(min_sample_timesteps_per_iteration=100)
        .callbacks(callbacks_class=AssertEvalCallback)
    )
    algo = config.build()
    # Should only see eval results, when eval actually ran.
    r0 = algo.train()
    r1 = algo.train()
    r2 = algo.train()
    r3 = algo.train()
    algo.stop()

    # Eval results are not available at step 0.
    # But step 3 should still have it, even though no eval was
    # run during that step.
    assert EVALUATION_RESULTS not in r0
    assert EVALUATION_RESULTS in r1
    assert EVALUATION_RESULTS not in r2
    assert EVALUATION_RESULTS in r3


@pytest.mark.xfail(
    strict=True,
    reason="fails on RLlib 2.60 as well (its new-stack evaluate() without evaluation runners evaluates on the "
    "local runner instead of raising); cairn raises its own ValueError and has no create_env_on_local_worker",
)
def test_evaluation_wo_evaluation_env_runner_group() -> None:
    # Use a custom callback that asserts that we are running the
    # configured exact number of episodes per evaluation.
    config = ppo.PPOConfig().environment(env="CartPole-v1").callbacks(callbacks_class=AssertEvalCallback)

    # Setup algorithm w/o evaluation worker set and still call
    # evaluate() -> Expect error.
    algo_wo_env_on_local_worker = config.build()
    with pytest.raises(ValueError, match="Can't evaluate on a local worker"):
        algo_wo_env_on_local_worker.evaluate()
    algo_wo_env_on_local_worker.stop()

    # Try again using `create_env_on_driver=True`.
    # This force-adds the env on the local-worker, so this Algorithm
    # can `evaluate` even though it doesn't have an evaluation-worker
    # set.
    config.create_env_on_local_worker = True
    algo_w_env_on_local_worker = config.build()
    results = algo_w_env_on_local_worker.evaluate()
    assert ENV_RUNNER_RESULTS in results and EPISODE_RETURN_MEAN in results[ENV_RUNNER_RESULTS]
    algo_w_env_on_local_worker.stop()
    config.create_env_on_local_worker = False


@pytest.mark.xfail(
    strict=True,
    reason="env_runners(validate_env_runners_after_construction=False) is refused and configs have no "
    "create_env_on_local_worker",
)
@pytest.mark.wall_clock
def test_space_inference_from_remote_workers() -> None:
    # Expect to not do space inference if the learner has an env.

    env = gym.make("CartPole-v1")

    config = (
        ppo.PPOConfig()
        .env_runners(num_env_runners=1, validate_env_runners_after_construction=False)
        .environment(env="CartPole-v1")
    )

    # No env on driver -> expect longer build time due to space
    # lookup from remote worker.
    t0 = time.time()
    algo = config.build()
    w_lookup = time.time() - t0
    print(f"No env on learner: {w_lookup}sec")
    algo.stop()

    # Env on driver -> expect shorted build time due to no space
    # lookup required from remote worker.
    config.create_env_on_local_worker = True
    t0 = time.time()
    algo = config.build()
    wo_lookup = time.time() - t0
    print(f"Env on learner: {wo_lookup}sec")
    assert wo_lookup < w_lookup
    algo.stop()

    # Spaces given -> expect shorter build time due to no space
    # lookup required from remote worker.
    config.create_env_on_local_worker = False
    config.environment(
        observation_space=env.observation_space,
        action_space=env.action_space,
    )
    t0 = time.time()
    algo = config.build()
    wo_lookup = time.time() - t0
    print(f"Spaces given manually in config: {wo_lookup}sec")
    assert wo_lookup < w_lookup
    algo.stop()


@pytest.mark.wall_clock
def test_worker_validation_time() -> None:
    """Tests the time taken by `validate_env_runners_after_construction=True`."""
    config = ppo.PPOConfig().environment(env="CartPole-v1")
    config.validate_env_runners_after_construction = True

    # Test, whether validating one worker takes just as long as validating
    # >> 1 workers.
    config.num_env_runners = 1
    t0 = time.time()
    algo = config.build()
    total_time_1 = time.time() - t0
    print(f"Validating w/ 1 worker: {total_time_1}sec")
    algo.stop()

    config.num_env_runners = 5
    t0 = time.time()
    algo = config.build()
    total_time_5 = time.time() - t0
    print(f"Validating w/ 5 workers: {total_time_5}sec")
    algo.stop()

    check(total_time_5 / total_time_1, 1.0, atol=1.0)


@pytest.mark.xfail(
    run=False,  # it would fail at the import
    reason="offline RL (BC, offline_data(input_=...), RLlib's tests/data/cartpole/small.json) is out of scope for "
    "issue 38: cairn has no BCConfig",
)
def test_no_env_but_eval_workers_do_have_env() -> None:
    """Tests whether no env on workers, but env on eval workers works ok."""
    from cairn.rl.algorithms.bc import BCConfig  # type: ignore[import-not-found]

    script_path = Path(__file__)
    input_file = os.path.join(script_path.parent.parent.parent, "tests/data/cartpole/small.json")

    env = gym.make("CartPole-v1")

    offline_rl_config = (
        BCConfig()
        .environment(observation_space=env.observation_space, action_space=env.action_space)
        .evaluation(
            evaluation_interval=1,
            evaluation_num_env_runners=1,
            evaluation_config=BCConfig.overrides(
                env="CartPole-v1",
                input_="sampler",
                observation_space=None,  # Test, whether this is inferred.
                action_space=None,  # Test, whether this is inferred.
            ),
        )
        .offline_data(input_=[input_file])
    )

    bc = offline_rl_config.build()
    bc.train()
    bc.stop()


@pytest.mark.xfail(
    strict=True,
    reason="fails on RLlib 2.60 as well (Algorithm.__getstate__ raises RuntimeError on the new API stack: "
    "'use get_state()'); cairn has no algo._counters, step() or __getstate__ (the same check with get_state/"
    "set_state: tests/rl/rllib_parity/test_parity_algorithm.py::test_counters_after_checkpoint)",
)
def test_counters_after_checkpoint() -> None:
    # We expect algorithm to no start counters from zero after loading a
    # checkpoint on a fresh Algorithm instance
    config = ppo.PPOConfig().environment(env="CartPole-v1")
    algo = config.build()

    assert all(c == 0 for c in algo._counters.values())
    algo.step()
    assert all(c != 0 for c in algo._counters.values())
    counter_values = list(algo._counters.values())
    state = algo.__getstate__()
    algo.stop()

    algo2 = config.build()
    assert all(c == 0 for c in algo2._counters.values())
    algo2.__setstate__(state)
    counter_values2 = list(algo2._counters.values())
    assert counter_values == counter_values2


def _assert_modules_added(
    *,
    algo: Any,
    marl_spec: Any,
    mids: list[int],
    trainable: list[int],
    mapped: list[int],
    not_mapped: list[int],
) -> None:
    # Make sure Learner has the correct `should_module_be_updated` list.
    assert set(algo.learner_group._learner.config.policies_to_train) == {f"p{i}" for i in trainable}
    # Make sure mids are all in marl_spec.
    if marl_spec is not None:
        assert all(f"p{m}" in marl_spec for m in mids)
    # Make sure module is part of remote EnvRunners in the
    # EnvRunnerGroup and the eval EnvRunnerGroup.
    assert all(algo.env_runner_group.foreach_worker(lambda w, mids=mids: all(f"p{i}" in w.module for i in mids)))
    assert all(algo.eval_env_runner_group.foreach_worker(lambda w, mids=mids: all(f"p{i}" in w.module for i in mids)))
    # Make sure that EnvRunners have received the correct mapping fn.
    mapped_pols = [algo.env_runner.config.policy_mapping_fn(0, None) for _ in range(100)]
    assert all(f"p{i}" in mapped_pols for i in mapped)
    assert not any(f"p{i}" in mapped_pols for i in not_mapped)
