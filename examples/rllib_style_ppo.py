"""RLlib's quickstart, as an RLlib user writes it; only the imports are changed.

RLlib (https://docs.ray.io/en/latest/rllib/getting-started.html)::

    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.algorithms.ppo import PPOConfig

cairn::

    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.rl.algorithms.ppo import PPOConfig

Run it (``--num-env-runners 0`` samples in this process, without Ray)::

    python examples/rllib_style_ppo.py --iterations 2 --num-env-runners 0

The checkpoint is cairn's (verified, atomic, no pickle); ``Algorithm.from_checkpoint``
builds the PPO it recorded, and training goes on exactly where it stopped.
docs/rllib_parity.md lists every RLlib setting the builders take, translate or refuse.
"""

from __future__ import annotations

import argparse
import tempfile

from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo import PPOConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--num-env-runners", type=int, default=2)
    parser.add_argument("--train-batch-size", type=int, default=2000)
    parser.add_argument("--checkpoint-dir", default=None, help="where to save (default: a temporary folder, removed)")
    args = parser.parse_args(argv)

    # From here on: RLlib's quickstart, word for word (with the arguments above).
    config = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=args.num_env_runners)
        .training(
            lr=0.0002,
            train_batch_size_per_learner=args.train_batch_size,
            num_epochs=10,
        )
    )

    # Build the Algorithm (PPO).
    ppo = config.build_algo()

    # Train for a few iterations, print the results.
    for _ in range(args.iterations):
        result = ppo.train()  # cairn: one line per iteration instead of RLlib's pprint of the whole result
        print(f"iteration {result['training_iteration']}: return {result['env_runners']['episode_return_mean']:.2f}")

    # Save a checkpoint, then restore a new algorithm from it.
    # cairn: without --checkpoint-dir, a temporary folder that is removed at the end.
    scratch = None if args.checkpoint_dir else tempfile.TemporaryDirectory(prefix="cairn_rllib_style_ppo_")
    checkpoint_path = ppo.save_to_path(args.checkpoint_dir or scratch.name)
    ppo.stop()
    algo = Algorithm.from_checkpoint(checkpoint_path)
    print(f"restored {type(algo).__name__} at iteration {algo.training_iteration} from {checkpoint_path}")
    algo.train()
    algo.stop()
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()
