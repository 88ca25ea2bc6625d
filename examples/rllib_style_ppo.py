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
from pprint import pprint

from cairn.rl.algorithms.algorithm import Algorithm
from cairn.rl.algorithms.ppo import PPOConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--num-env-runners", type=int, default=2)
    parser.add_argument("--train-batch-size", type=int, default=2000)
    parser.add_argument("--checkpoint-dir", default=None)
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
        pprint({k: v for k, v in ppo.train().flatten().items() if "return" in k or k == "training_iteration"})

    # Save a checkpoint, then restore a new algorithm from it.
    checkpoint_path = ppo.save_to_path(args.checkpoint_dir)
    ppo.stop()
    algo = Algorithm.from_checkpoint(checkpoint_path)
    print(f"restored {type(algo).__name__} at iteration {algo.training_iteration} from {checkpoint_path}")
    algo.train()
    algo.stop()


if __name__ == "__main__":
    main()
