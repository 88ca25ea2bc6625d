"""CPU seconds of PPO training iterations on CartPole-v1, to compare two checkouts of cairn.

Wall time on a shared 2-core machine swings by 2x with the load of other processes; the
process's CPU time (one torch thread) does not, so this is the figure to compare a change
of the RL stack against its parent. Run it interleaved, several rounds, on each checkout::

    git archive <parent> src bench | tar -x -C /tmp/before
    for r in 1 2 3 4 5; do
      (cd /tmp/before && PYTHONPATH=src python -m bench.ppo_cpu 30)
      PYTHONPATH=src python -m bench.ppo_cpu 30
    done

It prints the CPU and wall seconds of ``N`` ``train()`` calls after one warm-up call, the
env steps they sampled and the env steps per CPU second.
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    """Time ``N`` iterations of PPO on CartPole-v1 (4 envs x 128 steps, seed 0) after a warm-up one."""
    ap = argparse.ArgumentParser(prog="python -m bench.ppo_cpu", description=__doc__)
    ap.add_argument("iterations", type=int, nargs="?", default=30)
    args = ap.parse_args()
    torch.set_num_threads(1)  # CPU time of one thread: comparable across loads and runs
    from cairn.rl import PPO, PPOConfig

    # 4 envs pinned: the default became 1 (RLlib's) in issue 38, and checkouts on both sides must do the same work.
    algo = PPO(PPOConfig(env="CartPole-v1", seed=0, num_envs_per_env_runner=4))
    first = algo.train()
    before = int(first["num_env_steps_sampled_lifetime"])
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(args.iterations):
        result = algo.train()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    steps = int(result["num_env_steps_sampled_lifetime"]) - before
    print(f"cpu {cpu:.3f} s  wall {wall:.3f} s  env steps {steps}  {steps / cpu:,.0f} env steps per CPU second")


if __name__ == "__main__":
    main()
