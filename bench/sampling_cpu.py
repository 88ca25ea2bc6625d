"""CPU seconds of ``EnvRunner.sample()`` on CartPole-v1 through connector pipelines, to compare two checkouts.

The sampling loop runs the env-to-module pipeline once per step (and once more for a
truncated episode's final observation) and the module-to-env pipeline once per step, so a
change of the connector contract shows here first. Three pipelines: ``filter`` (the
``MeanStdFilter`` ``cairn train`` turns on for PPO), ``stack`` (frame stacking, then the
filter) and ``none`` (no connector: the runner's own cost). Each line also prints the
ratio of its env steps per CPU second to ``none`` measured in the same run, so the
pipelines' cost reads without another checkout. Compare a change against its parent
interleaved, on the same machine::

    git archive <parent> src bench | tar -x -C /tmp/before
    for r in 1 2 3; do
      (cd /tmp/before && PYTHONPATH=src python -m bench.sampling_cpu)
      PYTHONPATH=src python -m bench.sampling_cpu
    done

CPU time of one torch thread, not wall time: it does not swing with the load of other processes.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch

PIPELINES = ("none", "filter", "stack")


def _runner(pipeline: str) -> object:
    from cairn.rl import PPOConfig
    from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule
    from cairn.rl.env.env_runner import EnvRunner

    config = PPOConfig(env="CartPole-v1", seed=0).env_runners(
        num_envs_per_env_runner=4, observation_filter=None if pipeline == "none" else "MeanStdFilter"
    )
    if pipeline == "stack":
        config = config.env_runners(env_to_module_connector=functools.partial(FrameStackingEnvToModule, num_frames=4))
    return EnvRunner(config)


def main() -> None:
    """Time ``N`` ``sample()`` calls of each pipeline after one warm-up call; print env steps per CPU second."""
    ap = argparse.ArgumentParser(prog="python -m bench.sampling_cpu", description=__doc__)
    ap.add_argument("samples", type=int, nargs="?", default=40, help="sample() calls per pipeline")
    args = ap.parse_args()
    torch.set_num_threads(1)  # CPU time of one thread: comparable across loads and runs
    rates: dict[str, float] = {}
    for pipeline in PIPELINES:
        runner = _runner(pipeline)
        runner.sample()  # type: ignore[attr-defined]
        before = runner.num_env_steps_sampled_lifetime  # type: ignore[attr-defined]
        c0 = time.process_time()
        for _ in range(args.samples):
            runner.sample()  # type: ignore[attr-defined]
        cpu = time.process_time() - c0
        steps = runner.num_env_steps_sampled_lifetime - before  # type: ignore[attr-defined]
        rates[pipeline] = steps / cpu
        ratio = rates[pipeline] / rates["none"]
        print(
            f"{pipeline:7s} cpu {cpu:7.3f} s  env steps {steps}  {rates[pipeline]:9,.0f} per CPU s  "
            f"x{ratio:.3f} of none"
        )


if __name__ == "__main__":
    main()
