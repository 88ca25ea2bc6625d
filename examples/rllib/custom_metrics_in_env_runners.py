"""RLlib's ``rllib/examples/metrics/custom_metrics_in_env_runners.py``, ported to cairn.

RLlib's example tracks Ms. Pac-Man's position in every episode with a callback (in
the episode's ``custom_data`` / temporary timestep data), and at the episode's end logs
a position heatmap and the distances Pac-Man travelled, with several MetricsLogger
options (an EMA, windows, a lifetime sum, lists). This port does the same on CartPole:
the cart's position stands in for Pac-Man's, the pole's angle for the number of lives.

Every line that differs from RLlib's, and why:

* ``ALE/MsPacman-v5`` with ``wrap_atari_for_new_api_stack(..., framestack=4)`` and
  ``env.render()`` + ``resize`` + a yellow-pixel search -> ``CartPole-v1`` and the cart's
  position read from the episode's last observation (``episode.get_observations(-1)[0]``):
  Atari is not a test dependency, and a classic-control env keeps the run CI-sized.
* The 64x64 heatmap array logged with ``reduce=None`` -> a histogram of the cart's
  positions over 8 bins, logged with ``log_dict(..., reduce="sum", clear_on_reduce=True)``
  (per-iteration counts): cairn's MetricsLogger holds numbers, not arrays.
* ``MsPacmanHeatmapCallback(env_runner_indices=...)`` is given to the config as
  ``functools.partial(CartPositionCallback, env_runner_indices=[0, 1])`` (RLlib's way to
  pass constructor arguments; cairn records the class path and the arguments).
* The episode's ``custom_data`` holds the positions (RLlib: temporary timestep data or
  ``custom_data``); cairn keeps both, and every episode in flight keeps them in the
  checkpoint too: :func:`main` saves mid-episode and checks that the restored run logs the
  same numbers as the one that went on (issue 27 item 6).
* ``add_rllib_example_script_args`` / ``run_rllib_example_script_experiment`` / Tune ->
  ``main(iterations=...)``; the WandB logger config is dropped.

Run it::

    python examples/rllib/custom_metrics_in_env_runners.py
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo import PPO, PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback

BINS = np.linspace(-2.4, 2.4, 9)
"""Edges of the 8 position bins (CartPole's track)."""


class CartPositionCallback(RLlibCallback):
    """Tracks the cart's position in every episode; logs a heatmap and distance metrics at its end.

    Args:
        env_runner_indices: Log only on these env runners (``None``: every runner), as RLlib's.
    """

    def __init__(self, env_runner_indices: Sequence[int] | None = None) -> None:
        super().__init__()
        self._env_runner_indices = None if env_runner_indices is None else list(env_runner_indices)

    def _active(self, env_runner: Any) -> bool:
        return self._env_runner_indices is None or env_runner.worker_index in self._env_runner_indices

    def on_episode_start(self, *, episode: Any, env_runner: Any, **kwargs: Any) -> None:
        if self._active(env_runner):
            episode.custom_data["cart_x"] = [float(episode.get_observations(-1)[0])]

    def on_episode_step(self, *, episode: Any, env_runner: Any, metrics_logger: Any, **kwargs: Any) -> None:
        if not self._active(env_runner):
            return
        obs = episode.get_observations(-1)
        episode.custom_data["cart_x"].append(float(obs[0]))
        # RLlib logs an EMA-smoothed number of lives at each timestep; here: the pole's angle.
        metrics_logger.log_value("pole_angle", float(abs(obs[2])), ema_coeff=0.01)

    def on_episode_end(self, *, episode: Any, env_runner: Any, metrics_logger: Any, **kwargs: Any) -> None:
        if not self._active(env_runner):
            return
        positions = np.asarray(episode.custom_data["cart_x"])
        counts, _ = np.histogram(positions, bins=BINS)
        metrics_logger.log_dict(
            {f"bin_{i}": int(c) for i, c in enumerate(counts)}, key="cart_heatmap", reduce="sum", clear_on_reduce=True
        )
        distances = np.abs(positions - positions[0])
        metrics_logger.log_value("cart_max_distance_travelled", float(distances.max()), reduce="max", window=10)
        metrics_logger.log_value("cart_mean_distance_travelled", float(distances.mean()), reduce="mean", window=10)
        metrics_logger.log_value("cart_lifetime_distance_travelled", float(distances.sum()), reduce="sum")
        metrics_logger.log_value("episode_lengths", len(episode), reduce=None, window=20, percentiles=[50, 90])


def _train(algo: Algorithm, iterations: int) -> list[dict[str, Any]]:
    keys = ("cart_", "pole_angle", "episode_lengths", "training_iteration")
    return [
        {
            k: v
            for k, v in algo.train().flatten(wall_clock=False).items()
            if any(key in k for key in keys) and "timers" not in k
        }
        for _ in range(iterations)
    ]


def main(iterations: int = 2, checkpoint_dir: str | None = None) -> dict[str, Any]:
    """Train ``iterations`` times, save mid-episode, and go on both in this run and in a restored one.

    Returns the last result and whether the restored run logged exactly what the one that went on did.
    """
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=128, minibatch_size=64, num_epochs=2)
        .rl_module(model_config={"fcnet_hiddens": [16]})
        .callbacks(functools.partial(CartPositionCallback, env_runner_indices=[0, 1]))
    )
    algo = config.build_algo()
    folder = checkpoint_dir or tempfile.mkdtemp()
    try:
        results = _train(algo, iterations)
        path = algo.save_to_path(folder)
        went_on = _train(algo, 1)
    finally:
        algo.stop()
    restored = PPO.from_checkpoint(path)
    try:
        resumed = _train(restored, 1)
    finally:
        restored.stop()
    print(results[-1])
    return {"last_result": results[-1], "went_on": went_on[0], "resumed": resumed[0], "exact": went_on == resumed}


if __name__ == "__main__":
    import custom_metrics_in_env_runners  # run the module, not __main__ (the callback is recorded by reference)

    custom_metrics_in_env_runners.main()
