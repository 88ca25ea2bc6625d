"""RLlib's example envs SimpleCorridor and RandomEnv (issue 38 item 5): gymnasium-valid, seeded, resumable."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from cairn.rl.env.env_state import get_env_state, set_env_state
from cairn.rl.examples.envs.classes.random_env import RandomEnv
from cairn.rl.examples.envs.classes.simple_corridor import SimpleCorridor


def test_simple_corridor_walks_to_its_end_and_resumes_mid_episode() -> None:
    env = SimpleCorridor({"corridor_length": 3})
    check_env(env, skip_render_check=True)
    env.reset(seed=0)
    assert env.step(0)[0][0] == 0.0  # no step left of the start
    env.step(1)
    state = get_env_state(env)
    obs, reward, terminated, *_ = env.step(1)
    other = SimpleCorridor({"corridor_length": 7})
    set_env_state(other, state)
    assert other.end_pos == 3 and np.array_equal(other.step(1)[0], obs)
    assert env.step(1)[1:3] == (1.0, True) and reward == -0.01 and not terminated
    with pytest.raises(ValueError, match="corridor_length"):
        SimpleCorridor({"corridor_length": 1000})
    with pytest.raises(ValueError, match="tampered"):
        set_env_state(other, {**state, "env": {"position": 5.0, "length": 3}})


def test_random_env_draws_from_its_seed_and_resumes_exactly() -> None:
    config = {
        "observation_space": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
        "action_space": gym.spaces.Discrete(4),
        "p_terminated": 0.2,
        "max_episode_len": 6,
        "check_action_bounds": True,
    }

    def rollout(env: RandomEnv, n: int) -> list[tuple[float, bool, bool]]:
        out = []
        for _ in range(n):
            obs, reward, terminated, truncated, _ = env.step(1)
            out.append((float(obs[0]), float(reward), terminated, truncated))
            if terminated or truncated:
                env.reset()
        return out

    env = RandomEnv(config)
    check_env(env, skip_render_check=True)
    first = RandomEnv(config)
    second = RandomEnv(config)
    first.reset(seed=5)
    second.reset(seed=5)
    assert rollout(first, 20) == rollout(second, 20)  # the seed decides everything
    state = get_env_state(first)
    expected = rollout(first, 15)
    resumed = RandomEnv(config)
    resumed.reset(seed=99)
    set_env_state(resumed, state)
    assert rollout(resumed, 15) == expected
    with pytest.raises(ValueError, match="Illegal action"):
        first.step(7)
    with pytest.raises(ValueError, match="p_terminated"):
        RandomEnv({"p_terminated": 2})
