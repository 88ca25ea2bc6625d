"""RLlib's ``SingleAgentEnvRunner`` (``ray.rllib.env.single_agent_env_runner``): ``sample()`` returns episodes.

::

    from cairn.rl.algorithms.algorithm_config import AlgorithmConfig
    from cairn.rl.env.single_agent_env_runner import SingleAgentEnvRunner

    config = AlgorithmConfig().environment("CartPole-v1").env_runners(num_envs_per_env_runner=2)
    runner = SingleAgentEnvRunner(config=config)
    episodes = runner.sample(num_timesteps=100, random_actions=True)

cairn's algorithms sample with :class:`cairn.rl.env.env_runner.EnvRunner` (fixed-length,
checkpointed batches); this class is RLlib's interface for driving env copies by hand
(see :mod:`cairn.rl.env.episode_sampling` for what it leaves to the batch sampler).
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.callbacks.callbacks import callbacks_from_config
from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.config.env_creators import live_env_creator
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.rl_module.multi_rl_module import MultiRLModule
from cairn.rl.env.connector_building import build_env_to_module, build_module_to_env
from cairn.rl.env.env_errors import ENV_STEP_FAILURE, StepFailedRecreateEnvError
from cairn.rl.env.episode_sampling import RunnerEpisode, act, build_module_or_none, env_action, sample_plan
from cairn.rl.env.episodes import slot_info, slot_value
from cairn.rl.env.multi_agent_env import make_env as make_gym_env
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger
from cairn.rl.utils.nested import stack_rows

__all__ = ["SingleAgentEnvRunner"]

DEFAULT_MODULE_ID = "default_policy"

logger = logging.getLogger("cairn.rl.env.env_runner")
"""RLlib's env runners log env failures on their base module's logger (``ray.rllib.env.env_runner``); so does
this one, under cairn's name of that module."""

StepResult = tuple[Any, Any, Any, Any, dict[str, Any]]
"""What the vector env's ``step()`` returns: observations, rewards, terminateds, truncateds, infos."""


class SingleAgentEnvRunner:
    """Samples episodes from ``num_envs_per_env_runner`` copies of a single-agent env (RLlib's API).

    Args:
        config: The config (``env``, ``env_config``, ``num_envs_per_env_runner``,
            ``rollout_length`` (RLlib's ``rollout_fragment_length``), ``seed``, ``explore``;
            the algorithm's module, if the config has one).
        worker_index: The runner's index (seeds differ per index).
    """

    def __init__(self, config: AlgorithmConfig, *, worker_index: int = 0) -> None:
        self.config = config
        self.worker_index = int(worker_index)
        self.num_envs = int(config.num_envs_per_env_runner)
        if self.num_envs < 1:
            raise ValueError(f"num_envs_per_env_runner must be >= 1, got {self.num_envs}.")
        seeds = np.random.SeedSequence([int(config.seed), 7919, self.worker_index]).generate_state(3)
        self._env_seed = int(seeds[0])
        self._generator = torch.Generator().manual_seed(int(seeds[1]))
        self._action_seed = int(seeds[2])
        self.metrics = MetricsLogger()
        self.callbacks = callbacks_from_config(config)
        self.env: gym.vector.VectorWrapper | None = None
        self._episodes: list[RunnerEpisode] = []
        self._needs_reset = True
        self._episode_count = 0
        self.make_env()
        assert self.env is not None  # make_env built it
        # RLlib's connector pipelines: the user's pieces (then the config's filter / action clipping). The
        # module is built for what the env-to-module pipeline outputs, as the algorithms' runners build it.
        single_obs, single_act = self.env.single_observation_space, self.env.single_action_space
        pipeline, module_obs = build_env_to_module(config, single_obs, single_act, env=self.env)
        self.env_to_module: ConnectorPipeline = pipeline
        self.module_to_env: ConnectorPipeline = build_module_to_env(config, single_obs, single_act, env=self.env)
        self.module: MultiRLModule | None = build_module_or_none(config, module_obs, single_act)
        self._to_module: Any = None  # the env-to-module output for the next action, one row per env copy

    def make_env(self) -> None:
        """(Re)build the env copies as a ``SyncVectorEnv`` (``runner.env.env``); episodes start anew."""
        if self.env is not None:
            self.env.close()
        factory = functools.partial(
            make_gym_env, self.config.env, dict(self.config.env_config), live_env_creator(self.config)
        )
        vector = gym.vector.SyncVectorEnv([factory] * self.num_envs, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        self.env = gym.vector.VectorWrapper(vector)
        self.env.single_action_space.seed(self._action_seed)
        self._needs_reset = True

    def get_spaces(self) -> dict[str, tuple[gym.Space[Any], gym.Space[Any]]]:
        """``"__env__"``: the vector env's spaces; ``"__env_single__"``: one copy's; module id: the module's."""
        env = self._live_env()
        spaces: dict[str, tuple[gym.Space[Any], gym.Space[Any]]] = {
            "__env__": (env.observation_space, env.action_space),
            "__env_single__": (env.single_observation_space, env.single_action_space),
        }
        if self.module is not None:
            for module_id in self.module:
                rl_module = self.module[module_id]
                spaces[module_id] = (rl_module.observation_space, rl_module.action_space)
        return spaces

    def assert_healthy(self) -> None:
        """Check that the runner has its env copies (and its module, if the config names one).

        Raises:
            RuntimeError: It has none (it was stopped).
        """
        if self.env is None:
            raise RuntimeError("SingleAgentEnvRunner has no env (stop() closed it); call make_env() to rebuild it.")

    def stop(self) -> None:
        """Close the env copies."""
        if self.env is not None:
            self.env.close()
            self.env = None

    def _live_env(self) -> gym.vector.VectorWrapper:
        self.assert_healthy()
        assert self.env is not None
        return self.env

    def _new_episode(self, slot: int, observation: Any, info: dict[str, Any], t_started: int = 0) -> RunnerEpisode:
        self._episode_count += 1
        return RunnerEpisode(
            f"{self.worker_index}-{slot}-{self._episode_count}",
            observation=observation,
            info=info,
            t_started=t_started,
            env_index=slot,
            module_id=DEFAULT_MODULE_ID,
        )

    def _try_env_reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
        """Reset the env copies (RLlib's); with ``restart_failed_sub_environments`` a reset that raises is
        logged, the envs are recreated and the reset is tried again.

        Raises:
            Exception: What the reset raised, without ``restart_failed_sub_environments``.
        """
        while True:
            try:
                return self._live_env().reset(seed=seed, options=options)
            except Exception as error:
                if not self.config.restart_failed_sub_environments:
                    raise
                logger.exception("Resetting the env resulted in an error; recreating the env: %s", error)
                self.make_env()

    def _try_env_step(self, actions: Any) -> StepResult | str:
        """Step the env copies (RLlib's); the step's results, or :data:`ENV_STEP_FAILURE` when it raised and
        ``restart_failed_sub_environments`` had the envs recreated (the caller starts new episodes).

        A :class:`StepFailedRecreateEnvError` is the env's own request to be recreated and is not logged;
        any other error is logged with its traceback.

        Raises:
            RuntimeError: The step raised and ``restart_failed_sub_environments`` is off (the error is the cause).
        """
        try:
            obs, rewards, terminateds, truncateds, infos = self._live_env().step(actions)
        except Exception as error:
            if self.config.restart_failed_sub_environments:
                if not isinstance(error, StepFailedRecreateEnvError):
                    logger.exception("SingleAgentEnvRunner: an env step failed; recreating the env copies: %s", error)
                self.make_env()
                return ENV_STEP_FAILURE
            logger.exception(
                "SingleAgentEnvRunner: an env step failed and restart_failed_sub_environments is off, so the env "
                "is not recreated (fault_tolerance(restart_failed_sub_environments=True) would): %s",
                error,
            )
            raise RuntimeError(f"An env step failed: {type(error).__name__}: {error}") from error
        return obs, rewards, terminateds, truncateds, infos

    def _reset(self, *, explore: bool) -> None:
        obs, infos = self._try_env_reset(seed=self._env_seed)
        self._env_seed += self.num_envs  # the next reset of all copies plays new episodes
        self._episodes = [self._new_episode(i, slot_value(obs, i), slot_info(infos, i)) for i in range(self.num_envs)]
        self._needs_reset = False
        for episode in self._episodes:
            self._episode_hook("on_episode_start", episode)
        self._run_env_to_module(np.ones(self.num_envs, dtype=bool), explore=explore)

    def _episode_hook(self, hook: str, episode: RunnerEpisode) -> None:
        """Call the config's callbacks' ``hook`` for ``episode`` with RLlib's arguments."""
        if hook == "on_episode_start":  # the episode object comes with its first observation: created now
            self._episode_hook("on_episode_created", episode)
        getattr(self.callbacks, hook)(
            episode=episode,
            env_runner=self,
            metrics_logger=self.metrics,
            env=self.env,
            env_index=episode.env_index,
            rl_module=self.module,
        )

    def _run_env_to_module(self, starts: np.ndarray[Any, np.dtype[np.bool_]], *, explore: bool) -> None:
        """Run the episodes' last observations through the env-to-module pipeline (RLlib runs it after every
        reset and step, also for random actions); ``starts`` marks the copies whose episode begins with it."""
        rows = [episode.get_observations(-1) for episode in self._episodes]
        # gymnasium's batched layout: a dict/tuple of stacked leaves for Dict/Tuple spaces, else one array.
        observations = (
            stack_rows(rows) if isinstance(rows[0], dict | tuple) else np.stack([np.asarray(r) for r in rows])
        )
        self._to_module = self.env_to_module(
            rl_module=self.module,
            batch={"obs": observations},
            episodes=self._episodes,
            explore=explore,
            metrics=self.metrics,
            update=True,
            slots=np.arange(self.num_envs),
            episode_starts=starts,
        )["obs"]

    def sample(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool | None = None,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[RunnerEpisode]:
        """Step the env copies and return the episodes (RLlib's ``sample``).

        Args:
            num_timesteps: At least this many env steps (over all copies; at most one step per copy
                more); episodes in flight go on from the last call unless ``force_reset``.
            num_episodes: Exactly this many finished episodes, all started anew.
            explore: Sample actions (True) or take the greedy ones; default: the config's ``explore``.
            random_actions: Draw actions from the action space instead of the module.
            force_reset: Start new episodes in every copy first.

        The config's callbacks get RLlib's ``on_episode_created`` and ``on_episode_start`` (after a reset),
        ``on_episode_step`` and ``on_episode_end`` per episode and env copy, and ``on_sample_end`` with the
        returned episodes.

        Returns:
            Finished episodes, then the chunks of the episodes still running (``t_started`` > 0 for a
            chunk that continues an earlier one).

        Raises:
            SampleRequestError: Both counts given.
            ValueError: No module to act (a config without an algorithm) and ``random_actions=False``.
        """
        env = self._live_env()
        steps, episodes_wanted = sample_plan(self.config, self.num_envs, num_timesteps, num_episodes)
        if not random_actions and self.module is None:
            raise ValueError(
                f"{type(self.config).__name__} names no module to act with: sample(random_actions=True), or use an "
                "algorithm's config (PPOConfig, ...) or give rl_module_spec."
            )
        explore = bool(self.config.explore) if explore is None else bool(explore)
        if episodes_wanted is not None or force_reset or self._needs_reset:
            self._reset(explore=explore)
        done: list[RunnerEpisode] = []
        taken = 0
        while (episodes_wanted is None and taken < int(steps or 0)) or (
            episodes_wanted is not None and len(done) < episodes_wanted
        ):
            if self._step(env, done, explore=explore, random_actions=random_actions, episodes_wanted=episodes_wanted):
                taken += self.num_envs
            else:  # the envs were recreated (RLlib: the episodes in flight are dropped, the count starts again)
                env = self._live_env()
                self._reset(explore=explore)
                taken = 0
        if episodes_wanted is not None:
            self._needs_reset = True  # RLlib: timesteps after episodes start from a reset
            samples = done[:episodes_wanted]
        else:
            samples = done + [episode for episode in self._episodes if len(episode) > 0]
            # The chunk that goes on keeps its episode's id (RLlib's episode.cut()): ids name episodes, not chunks.
            self._episodes = [e.successor(e.id_) if len(e) else e for e in self._episodes]
        self.callbacks.on_sample_end(env_runner=self, metrics_logger=self.metrics, samples=samples)
        return samples

    def _step(
        self,
        env: gym.vector.VectorWrapper,
        done: list[RunnerEpisode],
        *,
        explore: bool,
        random_actions: bool,
        episodes_wanted: int | None = None,
    ) -> bool:
        """Step every copy once, recording the step in its episode; False if the step failed and the envs were
        recreated (nothing recorded). Once ``episodes_wanted`` episodes are done, a copy whose episode ends
        starts no new one (RLlib's rule: it would never be used; the next ``sample()`` resets)."""
        space = env.single_action_space
        if random_actions or self.module is None:  # RLlib: no module, so no module-to-env pipeline either
            actions = [space.sample() for _ in range(self.num_envs)]
            outputs: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        else:
            if not isinstance(self._to_module, np.ndarray):
                raise ValueError(
                    "The RLlib-API sample() feeds modules array observations only, and the env-to-module pipeline "
                    f"gives {type(self._to_module).__name__}s: add FlattenObservations() to env_to_module_connector, "
                    "or train with the algorithm, whose runners feed Dict/Tuple observations."
                )
            batch_actions, outputs = act(
                self.module, DEFAULT_MODULE_ID, list(self._to_module), explore=explore, generator=self._generator
            )
            actions = list(
                self.module_to_env(
                    rl_module=self.module,
                    batch={"actions": batch_actions},
                    episodes=self._episodes,
                    explore=explore,
                    metrics=self.metrics,
                    slots=np.arange(self.num_envs),
                )["actions"]
            )
        results = self._try_env_step(np.stack([env_action(space, a) for a in actions]))
        if isinstance(results, str):
            return False
        obs, rewards, terminateds, truncateds, infos = results
        for i, episode in enumerate(self._episodes):
            ended = bool(terminateds[i] or truncateds[i])
            next_obs = slot_value(infos["final_obs"], i) if ended else slot_value(obs, i)
            info = slot_info(infos["final_info"], i) if ended else slot_info(infos, i)
            episode.record(
                next_obs,
                actions[i],
                float(rewards[i]),
                info,
                terminated=bool(terminateds[i]),
                truncated=bool(truncateds[i]),
                outputs=outputs[i],
            )
            self._episode_hook("on_episode_step", episode)
            if ended:
                self._episode_hook("on_episode_end", episode)
                done.append(episode)
                if episodes_wanted is None or len(done) < episodes_wanted:
                    self._episodes[i] = self._new_episode(i, slot_value(obs, i), slot_info(infos, i))
                    self._episode_hook("on_episode_start", self._episodes[i])
        self._run_env_to_module(np.asarray(terminateds) | np.asarray(truncateds), explore=explore)
        return True
