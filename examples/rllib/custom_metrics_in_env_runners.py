"""RLlib's ``rllib/examples/metrics/custom_metrics_in_env_runners.py``, ported to cairn.

RLlib's example tracks Ms. Pac-Man's position in every episode with a callback (in
the episode's ``custom_data`` / temporary timestep data), and at the episode's end logs
a position heatmap and the distances Pac-Man travelled, with several MetricsLogger
options (an EMA, windows, percentiles of a list). This port does the same on CartPole:
the cart's position stands in for Pac-Man's, the pole's angle for the number of lives.
Ported from ray-project/ray at commit 14e600aca159c6df251cb8c171485ffe038060d8.

Every line that differs from RLlib's, and why:

* ``ALE/MsPacman-v5`` with ``wrap_atari_for_new_api_stack(..., framestack=4)`` and
  ``env.render()`` + ``resize`` + a yellow-pixel search -> ``CartPole-v1`` and the cart's
  position read from the episode's last observation (``episode.get_observations(-1)[0]``):
  Atari is not a test dependency, and a classic-control env keeps the run CI-sized.
* The 80x100 heatmap image logged with ``reduce=None, window=10`` (matplotlib colour map)
  -> a histogram of the cart's positions over 8 bins, logged with
  ``log_dict(..., reduce="sum", clear_on_reduce=True)`` (per-iteration counts): cairn's
  MetricsLogger holds numbers, not arrays.
* ``self._episode_start_position[episode.id_]`` (a dict on the callback object) ->
  ``episode.custom_data["start_x"]``: cairn does not checkpoint callback objects, and an
  episode in flight at a save would find no start position after the restore.
* Pac-Man's lives from ``episode.get_infos(-1)["lives"]`` -> the pole's last angle (same
  EMA settings); the ``(-1, -1)`` "not found" position is gone (the cart is always found).
* ``MsPacmanHeatmapCallback(env_runner_indices=...)`` is given to the config as
  ``functools.partial(CartPositionCallback, env_runner_indices=[0, 1])`` (RLlib's way to
  pass constructor arguments; cairn records the class path and the arguments).
* Every episode in flight keeps its ``custom_data`` in the checkpoint: :func:`main` saves
  mid-episode and checks that the restored run logs the same numbers as the one that went
  on (issue 27 item 6).
* ``result["env_runners"]["pacman_max_dist_travelled"]`` in ``on_train_result`` -> the
  flat keys ``env_runners/cart_max_dist_travelled/<percentile>`` of cairn's result.
* The ``rl_module(model_config_dict=...)`` CNN settings and the batch sizes -> a small MLP
  and CI-sized batches.
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

import cairn
from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo import PPO, PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback

BINS = np.linspace(-2.4, 2.4, 9)
"""Edges of the 8 position bins (CartPole's track)."""


@cairn.register
class CartPositionCallback(RLlibCallback):
    """Logs, per episode: a heatmap of the cart's positions, the max and mean distance it travelled
    (from its start position), and the pole's angle EMA-smoothed over time (RLlib: Pac-Man's lives).

    Args:
        env_runner_indices: Log only on these env runners (``None``: every runner), as RLlib's.
    """

    def __init__(self, env_runner_indices: Sequence[int] | None = None) -> None:
        super().__init__()
        self._env_runner_indices = None if env_runner_indices is None else list(env_runner_indices)

    def _skip(self, env_runner: Any) -> bool:
        return self._env_runner_indices is not None and env_runner.worker_index not in self._env_runner_indices

    def on_episode_start(self, *, episode: Any, env_runner: Any, **kwargs: Any) -> None:
        if self._skip(env_runner):
            return
        # RLlib keeps the start position in a dict on the callback object, by episode.id_; cairn does not
        # checkpoint callback objects, so it goes into custom_data, which an episode in flight keeps.
        episode.custom_data["start_x"] = float(episode.get_observations(-1)[0])
        episode.custom_data["cart_x"] = []
        episode.custom_data["dist_travelled"] = []

    def on_episode_step(self, *, episode: Any, env_runner: Any, **kwargs: Any) -> None:
        if self._skip(env_runner):
            return
        x = float(episode.get_observations(-1)[0])
        episode.custom_data["cart_x"].append(x)
        episode.custom_data["dist_travelled"].append(abs(x - episode.custom_data["start_x"]))

    def on_episode_end(self, *, episode: Any, env_runner: Any, metrics_logger: Any, **kwargs: Any) -> None:
        if self._skip(env_runner) or not episode.custom_data["cart_x"]:
            return
        counts, _ = np.histogram(episode.custom_data["cart_x"], bins=BINS)
        metrics_logger.log_dict(
            {f"bin_{i}": int(c) for i, c in enumerate(counts)}, key="cart_heatmap", reduce="sum", clear_on_reduce=True
        )
        dist_travelled = float(np.max(episode.custom_data["dist_travelled"]))
        metrics_logger.log_value(
            "cart_max_dist_travelled",
            dist_travelled,
            reduce="percentiles",
            window=100,
            percentiles=[75, 95, 99],
        )
        metrics_logger.log_value("cart_mean_dist_travelled", dist_travelled, reduce="mean", window=200)
        metrics_logger.log_value(
            "pole_angle", float(abs(episode.get_observations(-1)[2])), reduce="ema", ema_coeff=0.01
        )

    def on_train_result(self, *, result: dict[str, Any], **kwargs: Any) -> None:
        # cairn: one line of numbers (RLlib printed the dict, whose "a/b" keys a nested result does not have).
        percentiles = result.get("env_runners/cart_max_dist_travelled") or {}
        shown = ", ".join(f"{p}%: {v:.2f}" if isinstance(v, float) else f"{p}%: {v}" for p, v in percentiles.items())
        print(f"Max distance travelled per episode (percentiles) for this training iteration: {shown or '-'}")


def _train(algo: Algorithm, iterations: int) -> list[dict[str, Any]]:
    keys = ("cart_", "pole_angle", "training_iteration")
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
    # cairn: a temporary folder only without checkpoint_dir, removed before main returns
    scratch = None if checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_custom_metrics_in_env_runners_")
    folder = checkpoint_dir or scratch.name
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
    last = results[-1]
    print(
        f"iteration {last['training_iteration']}: mean distance {last['env_runners/cart_mean_dist_travelled']:.3f}, "
        f"pole angle {last['env_runners/pole_angle']:.3f}; the restored run logged the same: {went_on == resumed}"
    )
    if scratch is not None:
        scratch.cleanup()
    return {"last_result": results[-1], "went_on": went_on[0], "resumed": resumed[0], "exact": went_on == resumed}


if __name__ == "__main__":
    import custom_metrics_in_env_runners  # run the module, not __main__ (the callback is recorded by reference)

    custom_metrics_in_env_runners.main()
