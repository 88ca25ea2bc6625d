"""``on_environment_created`` (RLlib's callback hook; issue 38): each env runner calls it once it built its envs."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.env_context import EnvContext
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.multi_agent_env import MultiAgentEnv
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.rl.examples.envs.classes.multi_agent import MultiAgentCartPole

CALLS: list[tuple[str, Any, EnvContext]] = []


class RecordEnvironmentCreated(RLlibCallback):
    """Records each call: (who, env, env_context), and logs a count in the runner's logger."""

    def on_environment_created(
        self, *, env_runner: Any, metrics_logger: Any, env: Any, env_context: Any, **kwargs: Any
    ) -> None:
        CALLS.append(("class", env, env_context))
        metrics_logger.log_value("envs_created", 1, reduce="sum")


def record_environment_created(*, env_runner: Any, env: Any, env_context: Any, **kwargs: Any) -> None:
    """The function form (``callbacks(on_environment_created=fn)``), called after the classes' hooks."""
    CALLS.append(("function", env, env_context))


def test_the_single_agent_runner_calls_it_once_with_its_vector_env() -> None:
    CALLS.clear()
    config = (
        PPOConfig()
        .environment("CartPole-v1", env_config={"render_mode": None})
        .env_runners(num_envs_per_env_runner=2)
        .callbacks(RecordEnvironmentCreated, on_environment_created=record_environment_created)
    )
    runner = EnvRunner(config)
    assert [who for who, _, _ in CALLS] == ["class", "function"]
    for _, env, context in CALLS:
        assert env is runner.env and isinstance(env, gym.vector.VectorEnv)
        assert isinstance(context, EnvContext) and dict(context) == {"render_mode": None}
        assert (context.worker_index, context.num_workers, context.vector_index, context.remote) == (0, 0, 0, False)
    assert runner.metrics.peek("envs_created") == 1


def test_the_multi_agent_runner_calls_it_once_per_env_copy() -> None:
    CALLS.clear()
    config = (
        PPOConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .env_runners(num_envs_per_env_runner=3)
        .multi_agent(policies={"p0"})
        .callbacks(RecordEnvironmentCreated)
    )
    runner = MultiAgentEnvRunner(config, worker_index=2)
    assert [env for _, env, _ in CALLS] == runner.envs
    assert all(isinstance(env, MultiAgentEnv) for _, env, _ in CALLS)
    assert [context.vector_index for _, _, context in CALLS] == [0, 1, 2]
    assert all(context.worker_index == 2 and context.remote for _, _, context in CALLS)
    assert runner.metrics.peek("envs_created") == 3


def test_a_runner_without_the_hook_builds_no_context() -> None:
    CALLS.clear()
    EnvRunner(PPOConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=1))
    assert CALLS == []
