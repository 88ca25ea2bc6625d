"""Custom metrics with callbacks: lifetime sums that survive a restart, exactly.

A callback (``cairn.rl.callbacks.callbacks.RLlibCallback``, RLlib's name) counts
the episodes whose return exceeds ``--threshold`` and sums the rewards of every
episode, as lifetime sums of the env runners' metrics logger. ``train()``
reports them under ``env_runners/``; they are part of the checkpoint (the
algorithm's and the env runners' state), so a run stopped and resumed with
``--resume`` prints the same numbers as a run that never stopped.

    python examples/custom_metrics.py --checkpoint-dir runs/metrics --iterations 6
    python examples/custom_metrics.py --checkpoint-dir runs/metrics --iterations 6 --resume

Each iteration prints one line (the iteration, the mean return and the two lifetime sums);
``--metrics-out FILE`` appends each iteration's env runner metrics to FILE as a JSON line.

Checkpoints record the callback class by its path (``"custom_metrics:
LongEpisodes"``), and loading one never imports a module and builds only what
the program allows: ``@cairn.register`` on the class allows it in every program
that imports this module (SPEC 8). A script's own classes live in
``__main__``, which cairn never loads from, so this script imports itself as
the module ``custom_metrics`` (see the end of the file) and its classes are
recorded under that name.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import cairn
from cairn.rl import PPO, PPOConfig
from cairn.rl.callbacks.callbacks import RLlibCallback
from cairn.rl.env.episodes import Episode
from cairn.rl.utils.metrics.metrics_logger import MetricsLogger

LONG_EPISODE_RETURN = 20.0
"""An episode whose return exceeds this counts as long (CartPole: +1 per step)."""


@cairn.register
class LongEpisodes(RLlibCallback):
    """Counts long episodes and sums every episode's rewards: two lifetime sums."""

    def on_episode_end(self, *, episode: Episode, metrics_logger: MetricsLogger, **kwargs: Any) -> None:
        """Log the lifetime sums, and the mean return of the last 10 episodes."""
        metrics_logger.log_value(
            "num_long_episodes", int(episode.get_return() > LONG_EPISODE_RETURN), reduce="lifetime_sum"
        )
        metrics_logger.log_value("reward_sum", episode.get_return(), reduce="lifetime_sum")
        metrics_logger.log_value("return_last_10", episode.get_return(), reduce="mean", window=10)

    def on_train_result(
        self, *, algorithm: Any, metrics_logger: MetricsLogger, result: dict[str, Any], **kwargs: Any
    ) -> None:
        """Add the share of long episodes so far to the result."""
        episodes = result["env_runners/num_episodes_lifetime"]
        result["long_episode_share"] = result.get("env_runners/num_long_episodes", 0) / episodes if episodes else 0.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", required=True, help="the CheckpointManager's root (local path or URI)")
    p.add_argument("--iterations", type=int, default=6, help="total iterations (also with --resume)")
    p.add_argument("--stop-after", type=int, default=None, help="stop after this iteration (to resume later)")
    p.add_argument("--resume", action="store_true", help="go on from the latest checkpoint")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-env-runners", type=int, default=0, help="remote env runners (needs Ray)")
    p.add_argument("--metrics-out", help="append each iteration's env runner metrics here (JSON lines)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    manager = cairn.CheckpointManager(args.checkpoint_dir, keep_last=2, async_save=False)
    latest = manager.latest() if args.resume else None
    if latest is not None:
        algo = PPO.from_checkpoint(latest)  # finds LongEpisodes: this module registers it
        print(f"resumed from iteration {algo.training_iteration}")
    else:
        algo = PPO(
            PPOConfig(
                env="CartPole-v1",
                seed=args.seed,
                num_envs_per_env_runner=2,
                rollout_length=64,
                minibatch_size=64,
                num_epochs=2,
                lr=2.5e-4,  # CleanRL's lr and clipping, which this example always trained with (PPOConfig: RLlib's)
                max_grad_norm=0.5,
                num_env_runners=args.num_env_runners,
                callbacks_class=LongEpisodes,
            )
        )
    try:
        last = args.iterations if args.stop_after is None else min(args.stop_after, args.iterations)
        while algo.training_iteration < last:
            result = algo.train()
            manager.save(algo, result["training_iteration"])
            runners = result["env_runners"]
            print(
                f"iteration {result['training_iteration']:>3}  return {runners['episode_return_mean']:7.2f}  "
                f"long episodes {runners['num_long_episodes']:>4}  reward sum {runners['reward_sum']:9.1f}",
                flush=True,
            )
            if args.metrics_out:
                shown = {
                    k: v
                    for k, v in result.flatten().items()
                    if k.startswith("env_runners/") or k == "long_episode_share"
                }
                with open(args.metrics_out, "a") as f:
                    f.write(
                        json.dumps({"training_iteration": result["training_iteration"], **shown}, sort_keys=True) + "\n"
                    )
    finally:
        algo.stop()


if __name__ == "__main__":
    # Run the module, not __main__: checkpoints then record "custom_metrics:LongEpisodes",
    # which a later run (this script with --resume, or a program that imports it) can load.
    import custom_metrics

    custom_metrics.main()
