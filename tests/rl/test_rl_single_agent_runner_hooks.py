"""RLlib's episode and sample hooks in ``SingleAgentEnvRunner.sample()`` (RLlib's API)."""

from __future__ import annotations

from typing import Any

from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner


class Counting(RLlibCallback):
    calls: list[tuple[str, str, int]] = []

    def on_episode_created(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        Counting.calls.append(("created", episode.id_, env_index))

    def on_episode_start(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        assert Counting.calls[-1] == ("created", episode.id_, env_index)  # created just before it starts
        Counting.calls.append(("start", episode.id_, env_index))

    def on_episode_step(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        Counting.calls.append(("step", episode.id_, env_index))

    def on_episode_end(self, *, episode: Any, env_index: int, **kwargs: Any) -> None:
        assert episode.is_done
        Counting.calls.append(("end", episode.id_, env_index))

    def on_sample_end(self, *, samples: Any, **kwargs: Any) -> None:
        Counting.calls.append(("sample_end", str(len(samples)), -1))


def test_episode_hooks_and_on_sample_end_fire_per_episode_and_step() -> None:
    Counting.calls = []
    config = AlgorithmConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2).callbacks(Counting)
    runner = SingleAgentEnvRunner(config=config)
    episodes = runner.sample(num_timesteps=60, random_actions=True)
    kinds = [kind for kind, _, _ in Counting.calls]
    done = [e for e in episodes if e.is_done]
    assert kinds.count("step") == sum(len(e) for e in episodes)  # one per env step of every copy
    assert kinds.count("end") == len(done) >= 1  # 60 random CartPole steps end an episode
    assert kinds.count("start") == len(done) + 2  # each copy's first episode, then one after each end
    assert kinds.count("created") == kinds.count("start")
    assert Counting.calls[-1] == ("sample_end", str(len(episodes)), -1)
    ends = {(episode_id, env_index) for kind, episode_id, env_index in Counting.calls if kind == "end"}
    assert ends == {(e.id_, e.env_index) for e in done}  # each end names its episode and env copy
    runner.stop()


def test_sampling_episodes_starts_no_episode_after_the_last_one_wanted() -> None:
    Counting.calls = []
    config = AlgorithmConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=1).callbacks(Counting)
    runner = SingleAgentEnvRunner(config=config)
    for repeat in range(1, 3):
        episodes = runner.sample(num_episodes=3, random_actions=True)
        assert len(episodes) == 3 and all(e.is_done for e in episodes)
        kinds = [kind for kind, _, _ in Counting.calls]
        assert kinds.count("start") == kinds.count("end") == 3 * repeat  # RLlib's newer rule (2.60 starts one more)
    assert runner.sample(num_timesteps=4, random_actions=True)[0].t_started == 0  # timesteps start from a reset
    runner.stop()
