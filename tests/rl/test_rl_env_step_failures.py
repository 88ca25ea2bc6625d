"""RLlib's ``restart_failed_sub_environments`` in ``SingleAgentEnvRunner`` (issue 38 item 2).

An env whose step raises is recreated and new episodes start; ``StepFailedRecreateEnvError`` (the env's
own request) is not logged, any other error is logged with its traceback. Without the setting the
step fails with the env's error as the cause; the algorithm's env runners refuse the setting.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.env.env_errors import ENV_STEP_FAILURE, StepFailedRecreateEnvError
from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner


class FailsEveryNthStep(gym.Env[int, int]):
    """Steps fine, but raises ``env_config["error"]`` on every ``n``-th step of its life."""

    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config: dict[str, Any]) -> None:
        self.error = {"recreate": StepFailedRecreateEnvError, "value": ValueError}[env_config["error"]]
        self.n = int(env_config["n"])
        self.steps = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        self.steps += 1
        if self.steps % self.n == 0:
            raise self.error("the simulator crashed")
        return 1, 1.0, False, self.steps % 3 == 0, {}


def _runner(error: str, n: int, *, restart: bool) -> SingleAgentEnvRunner:
    config = (
        AlgorithmConfig()
        .environment(FailsEveryNthStep, env_config={"error": error, "n": n})
        .env_runners(num_envs_per_env_runner=2)
        .fault_tolerance(restart_failed_sub_environments=restart)
    )
    return SingleAgentEnvRunner(config=config)


def _logged(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == "cairn.rl.env.env_runner" and r.exc_info)


def test_a_failed_step_recreates_the_envs_and_sampling_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    runner = _runner("recreate", 8, restart=True)
    first_env = runner.env
    runner.sample(num_timesteps=10, random_actions=True)  # 5 steps of each copy
    assert runner.env is first_env
    episodes = runner.sample(num_timesteps=10, random_actions=True)  # the 8th step fails: new copies go on
    assert runner.env is not first_env
    assert sum(len(e) for e in episodes) >= 10
    assert _logged(caplog) == 0  # the env asked to be recreated: no error logged

    runner = _runner("value", 5, restart=True)
    runner._try_env_reset()
    assert runner._try_env_step([0, 0]) != ENV_STEP_FAILURE
    for _ in range(3):
        runner._try_env_step([0, 0])
    assert runner._try_env_step([0, 0]) == ENV_STEP_FAILURE
    assert _logged(caplog) == 1


def test_without_the_setting_a_failed_step_fails_and_algorithms_refuse_it(caplog: pytest.LogCaptureFixture) -> None:
    runner = _runner("value", 1, restart=False)
    with pytest.raises(RuntimeError, match="An env step failed: ValueError: the simulator crashed") as info:
        runner.sample(num_timesteps=4, random_actions=True)
    assert isinstance(info.value.__cause__, ValueError) and _logged(caplog) == 1
    config = PPOConfig().environment("CartPole-v1").fault_tolerance(restart_failed_sub_environments=True)
    with pytest.raises(ValueError, match="restart_failed_sub_environments"):
        config.build()
