"""RLlib's ``rllib/callbacks/tests/test_multicallback.py`` on cairn (issue 38, item 7).

Same test names, cases and expected values; ``ray.rllib`` -> ``cairn.rl``. RLlib's two
callback classes defined inside the test are top-level classes here (cairn records a
callbacks class by reference, so a class defined in a function is refused, as lambdas
once were); the callback function stays where RLlib has it. RLlib's ``ray.init()``
set-up is dropped: nothing here runs on Ray.
"""

from __future__ import annotations

from typing import Any

import pytest

from cairn.rl.algorithms import PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback


class TestRLlibCallback1(RLlibCallback):
    __test__ = False  # a callbacks class, not a pytest test class

    def on_episode_step(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: Any,
        rl_module: Any = None,
        worker: Any = None,
        base_env: Any = None,
        policies: Any = None,
        **kwargs: Any,
    ) -> None:
        metrics_logger.log_value("callback_1", 1, reduce="mean", clear_on_reduce=True)


class TestRLlibCallback2(RLlibCallback):
    __test__ = False

    def on_episode_step(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: Any,
        rl_module: Any = None,
        worker: Any = None,
        base_env: Any = None,
        policies: Any = None,
        **kwargs: Any,
    ) -> None:
        metrics_logger.log_value("callback_2", 2, reduce="mean", clear_on_reduce=True)


def test_multicallback_with_custom_callback_function() -> None:
    """Tests if callbacks in `MultiCallback` get executed.

    This also tests, if multiple callbacks from different sources, i.e.
    `callback_class` and `on_episode_step` run correctly.
    """

    # Define a custom callback function.
    def custom_on_episode_step_callback(
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        env: Any = None,
        env_index: Any = None,
        rl_module: Any = None,
        worker: Any = None,
        base_env: Any = None,
        policies: Any = None,
        **kwargs: Any,
    ) -> None:
        metrics_logger.log_value("custom_callback", 3, reduce="mean", clear_on_reduce=True)

    # Configure the algorithm.
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .api_stack(
            enable_env_runner_and_connector_v2=True,
            enable_rl_module_and_learner=True,
        )
        # Use the callbacks and callback function.
        .callbacks(
            callbacks_class=[TestRLlibCallback1, TestRLlibCallback2],
            on_episode_step=custom_on_episode_step_callback,
        )
    )

    # Build the algorithm. At this stage, callbacks get already validated.
    algo = config.build()

    # Run 10 training iteration and check, if the metrics defined in the
    # callbacks made it into the results. Furthermore, check, if the values are correct.
    for _ in range(10):
        results = algo.train()
        assert "callback_1" in results["env_runners"]
        assert "callback_2" in results["env_runners"]
        assert "custom_callback" in results["env_runners"]
        assert results["env_runners"]["callback_1"] == pytest.approx(1)
        assert results["env_runners"]["callback_2"] == pytest.approx(2)
        assert results["env_runners"]["custom_callback"] == pytest.approx(3)

    algo.stop()


def test_multicallback_validation_error() -> None:
    """Check, if the validation safeguard catches wrong `MultiCallback`s."""
    with pytest.raises(ValueError):
        (
            PPOConfig()
            .environment("CartPole-v1")
            .api_stack(
                enable_env_runner_and_connector_v2=True,
                enable_rl_module_and_learner=True,
            )
            # This is wrong b/c it needs callables.
            .callbacks(callbacks_class=["TestRLlibCallback1", "TestRLlibCallback2"])
        )


def test_single_callback_validation_error() -> None:
    """Tests if the validation safeguard catches wrong `RLlibCallback`s."""
    with pytest.raises(ValueError):
        (
            PPOConfig()
            .environment("CartPole-v1")
            .api_stack(
                enable_env_runner_and_connector_v2=True,
                enable_rl_module_and_learner=True,
            )
            # This is wrong b/c it needs callables.
            .callbacks(callbacks_class="TestRLlibCallback")
        )
