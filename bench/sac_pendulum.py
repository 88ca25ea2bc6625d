"""SAC on Pendulum-v1: the learning figure of SPEC 10 (``episode_return_mean >= -250`` within 20,000 env steps).

Run by hand (not by pytest), one seed per run, until ``cairn train --algo sac``
is wired into the command line::

    nice -n 10 python bench/sac_pendulum.py --seed 0 --run-dir runs/sac_pendulum_s0
    cairn plot runs/sac_pendulum_s0 -o docs/sac_pendulum_curve.png \
        --metric env_runners/episode_return_mean --metric qf_loss --metric alpha

It writes ``RUN_DIR/metrics.jsonl`` (what ``cairn train`` writes, so ``cairn
plot`` reads it) and prints the first env step at which the mean return of
the last 10 episodes reached the target.
"""

from __future__ import annotations

import argparse
import time

from cairn.cli.metrics_log import MetricsLog, jsonable
from cairn.rl.algorithms.sac.sac import SAC, SACConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-steps", type=int, default=20_000)
    parser.add_argument("--target", type=float, default=-250.0)
    parser.add_argument("--run-dir", required=True)
    args = parser.parse_args()
    # CleanRL's defaults; a 10-episode window so that the mean follows the policy of the moment.
    algo = SAC(SACConfig(env="Pendulum-v1", seed=args.seed, episode_return_window=10))
    log = MetricsLog(args.run_dir, start_iteration=0)
    reached = None
    try:
        while algo.env_runner.num_env_steps_sampled_lifetime < args.env_steps:
            start = time.perf_counter()
            results = algo.train()
            log.append(jsonable(results), iteration_time_s=time.perf_counter() - start)
            steps, ret = results["num_env_steps_sampled_lifetime"], results.get("env_runners/episode_return_mean")
            if reached is None and ret is not None and ret >= args.target:
                reached = steps
            print(f"steps {steps:6d}  episode_return_mean {ret}", flush=True)
    finally:
        log.close()
        algo.stop()
    print(f"seed {args.seed}: {'reached ' + str(args.target) + ' at ' + str(reached) if reached else 'not reached'}")


if __name__ == "__main__":
    main()
