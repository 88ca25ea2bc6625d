"""Env steps per CPU second of ``EnvRunner.sample_batches()`` on CartPole-v1 through connector pipelines.

The sampling loop runs the env-to-module pipeline once per step (and once more for a
truncated episode's final observation) and the module-to-env pipeline once per step, so a
change of the connector contract shows here first. Three pipelines: ``filter`` (the
``MeanStdFilter`` ``cairn train`` turns on for PPO), ``stack`` (frame stacking, then the
filter) and ``none`` (no connector: the runner's own cost).

Two ways to run it:

* ``python -m bench --only sampling [--before main]``: the suite's case. It exports the
  ``src`` of the ref ``--before`` (``git archive``) and times this checkout and that one
  in child processes, interleaved round by round, and reports this checkout's env steps
  per CPU second over the ref's, per pipeline (target >= 0.95: no regression beyond noise);
  and the same ratio of the runner's env-to-module call alone (``EnvRunner._to_module``, the
  connectors' per-step hot path without the module and the environments).
* ``python -m bench.sampling_cpu [N] [--json]``: one checkout (the ``cairn`` on
  ``PYTHONPATH``), ``N`` ``sample_batches()`` calls per pipeline after a warm-up one; prints each
  pipeline's rate and its ratio to ``none`` (the pipelines' own cost), or with ``--json``
  one line the suite's case reads.

CPU time of one torch thread, not wall time: it does not swing with the load of other processes
as wall time does on the shared machine (it still moves by a few per cent: compare medians).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
from typing import Any

import numpy as np
import torch

PIPELINES = ("none", "filter", "stack")
TARGET = 0.95  # this checkout's rate over the ref's; CPU time still moves by a few per cent between runs


def _runner(pipeline: str) -> Any:
    from cairn.rl import PPOConfig
    from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule
    from cairn.rl.env.env_runner import EnvRunner

    config = PPOConfig(env="CartPole-v1", seed=0).env_runners(
        num_envs_per_env_runner=4, observation_filter=None if pipeline == "none" else "MeanStdFilter"
    )
    if pipeline == "stack":
        config = config.env_runners(env_to_module_connector=functools.partial(FrameStackingEnvToModule, num_frames=4))
    return EnvRunner(config)


CALLS, REPEATS = 2000, 15
"""Env-to-module calls timed alone per pipeline: the fastest of ``REPEATS`` runs of ``CALLS`` calls
(``calls/s`` figures; the fastest run is the one the other processes on the machine disturbed least)."""


def measure(samples: int) -> dict[str, float]:
    """Env steps per CPU second of ``samples`` ``sample_batches()`` calls (after one warm-up call), per pipeline
    (key: the pipeline's name); and CPU calls per second of the runner's env-to-module call alone
    (``EnvRunner._to_module``: the pipeline on one step's observations, statistics updated), the
    connectors' hot path without the module and the environments (key: ``<pipeline> calls/s``)."""
    torch.set_num_threads(1)  # CPU time of one thread: comparable across loads and runs
    rates: dict[str, float] = {}
    for pipeline in PIPELINES:
        runner = _runner(pipeline)
        # A ref --before the batch sampler's rename (sample() -> sample_batches()) is timed by this code too.
        sample = getattr(runner, "sample_batches", None) or runner.sample
        sample()
        before = runner.num_env_steps_sampled_lifetime
        c0 = time.process_time()
        for _ in range(samples):
            sample()
        cpu = time.process_time() - c0
        rates[pipeline] = (runner.num_env_steps_sampled_lifetime - before) / cpu
        obs, slots = runner._obs, np.arange(runner.num_slots)
        starts = np.zeros(runner.num_slots, dtype=np.bool_)
        call = functools.partial(runner._to_module, obs, slots, update=True, starts=starts)
        fastest = min(timeit.repeat(call, number=CALLS, repeat=REPEATS, timer=time.process_time))
        rates[f"{pipeline} calls/s"] = CALLS / fastest
    return rates


def main() -> None:
    """Measure the ``cairn`` on the path; print a table (or one JSON line with ``--json``)."""
    ap = argparse.ArgumentParser(prog="python -m bench.sampling_cpu", description=__doc__)
    ap.add_argument("samples", type=int, nargs="?", default=40, help="sample() calls per pipeline")
    ap.add_argument("--json", action="store_true", help="print one JSON line: cairn's path and the rates")
    args = ap.parse_args()
    rates = measure(args.samples)
    if args.json:
        import cairn

        print(json.dumps({"cairn": cairn.__file__, "rates": rates}))
        return
    for pipeline in PIPELINES:
        rate, calls = rates[pipeline], rates[f"{pipeline} calls/s"]
        print(
            f"{pipeline:7s} {rate:9,.0f} env steps per CPU s  x{rate / rates['none']:.3f} of none   "
            f"env-to-module {calls:9,.0f} calls per CPU s"
        )


# ----------------------------------------------------------------------------- the suite's case


def _child(src: str, samples: int, repo: str) -> dict[str, float]:
    """Rates measured in a fresh process whose ``cairn`` is the one under ``src``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, repo]))
    out = subprocess.run(
        [sys.executable, "-m", "bench.sampling_cpu", str(samples), "--json"],
        capture_output=True, text=True, check=True, env=env, cwd=repo,
    ).stdout  # fmt: skip
    report = json.loads(out.strip().splitlines()[-1])
    if not os.path.abspath(report["cairn"]).startswith(os.path.abspath(src) + os.sep):
        raise RuntimeError(f"the child imported cairn from {report['cairn']}, not from {src}")
    rates: dict[str, float] = report["rates"]
    return rates


def case_sampling(ctx: Any) -> None:
    """Env steps per CPU second of PPO CartPole sampling through connector pipelines: this checkout vs --before."""
    from bench.suite import REPO, Row

    ref = ctx.args.before
    before_src = ctx.path("sampling", "before", "src")
    os.makedirs(before_src, exist_ok=True)
    archive = subprocess.run(["git", "archive", ref, "src"], capture_output=True, check=True, cwd=REPO).stdout
    subprocess.run(["tar", "-x", "-C", os.path.dirname(before_src)], input=archive, check=True)
    rev = subprocess.run(["git", "rev-parse", "--short", ref], capture_output=True, text=True, cwd=REPO).stdout.strip()
    checkouts = {"before": before_src, "after": os.path.join(REPO, "src")}
    samples = 15 if ctx.quick else 40
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(ctx.reps):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            runs[name].append(_child(checkouts[name], samples, REPO))
            ctx.log(f"    round {r + 1}: {name:6s} " + "  ".join(f"{p} {v:,.0f}" for p, v in runs[name][-1].items()))
    ctx.raw["sampling"] = {"before_ref": f"{ref} ({rev})", "samples": samples, "runs": runs}
    figures = [(p, "EnvRunner.sample_batches() env steps per CPU s", "steps/s") for p in PIPELINES]
    figures += [(p, "env-to-module calls (_to_module) per CPU s", "calls/s") for p in PIPELINES]
    for pipeline, what, unit in figures:
        key = pipeline if unit == "steps/s" else f"{pipeline} calls/s"
        before = statistics.median(run[key] for run in runs["before"])
        after = statistics.median(run[key] for run in runs["after"])
        best = max(run[key] for run in runs["after"]) / max(run[key] for run in runs["before"])
        ctx.add(
            Row("sampling", f"{what}, pipeline {pipeline!r}", f"{after:,.0f} {unit}",
                f"{ref} ({rev}) {before:,.0f} {unit}", after / before, target=f">= {TARGET}",
                ok=after / before >= TARGET, data={"before": before, "after": after}, best=best)
        )  # fmt: skip


if __name__ == "__main__":
    main()
