"""Env steps PPO needs to reach a return of 450 on CartPole-v1: cairn against RLlib, same settings.

The settings of issue 38: one env copy sampled in-process, batch 4,096, minibatch 128, 10 epochs,
lr 3e-4 (constant), no observation filter, no entropy bonus, 64x64 tanh MLPs, global-norm gradient
clipping at 0.5. Everything else is each library's default (cairn's ``cairn`` preset); cairn's ``rllib`` preset
sets cairn's remaining settings to RLlib's defaults as well (GAE lambda 1.0, clip 0.3, RLlib's value
loss and its clipping at 10, the adaptive KL penalty, torch's default initializers, one encoder
shared by the policy and value heads, advantages standardized over the whole batch). Both presets
run by default, so the table reads: RLlib, cairn as it is, cairn with RLlib's defaults::

    PYTHONPATH=src nice -n 10 python -m bench.ppo_sample_efficiency             # 3 seeds each
    PYTHONPATH=src python -m bench.ppo_sample_efficiency --lib cairn --cairn-preset cairn --seeds 0

Three returns are read at the end of every iteration, and the first iteration at which each is
>= 450 gives "env steps to 450":

- ``reported``: the library's own ``env_runners/episode_return_mean``. RLlib's is not a mean over
  its 100-episode window at that step (see below), so the two libraries' figures measure different
  things; the bench prints them, but compares on the next two.
- ``last100``: the mean return of the last 100 episodes the env finished, recorded by a wrapper
  around the env that both libraries sample from, so it is computed in one way for both.
- ``iteration``: the mean return of the episodes that finished during the iteration (about 8 once
  the policy is good), from the same wrapper: RLlib 2.60's ``reported`` behaves as this one does.

RLlib runs in the interpreter that imports ``ray.rllib`` (this one, or ``--rllib-python``,
default ``/work/main/.venv-rllib/bin/python``); each run is a child process of its own, one at a
time (never two trainings at once), seed by seed: RLlib, then each cairn preset, on seed 0, then
seed 1, ... Each run stops once all three returns crossed 450, or at ``--max-steps`` (reported as
``>max``). It prints per seed, the medians and the ratio cairn / RLlib of the medians measured in
this run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

ENV_ID = "CairnBenchRecordedCartPole-v1"
TARGET = 450.0
WINDOW = 100
BATCH = 4096
METRICS = ("last100", "iteration", "reported")
RETURNS: list[float] = []
"""Returns of the episodes the env finished, in order (the env is sampled in this process)."""


class RecordReturns(gym.Wrapper[Any, Any, Any, Any]):
    """Appends each finished episode's return to :data:`RETURNS`."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self._return = 0.0

    def reset(self, **kwargs: Any) -> Any:
        self._return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        if terminated or truncated:
            RETURNS.append(self._return)
            self._return = 0.0
        return obs, reward, terminated, truncated, info


def _make_env(**kwargs: Any) -> gym.Env[Any, Any]:
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv
    from gymnasium.wrappers import TimeLimit

    return RecordReturns(TimeLimit(CartPoleEnv(**kwargs), max_episode_steps=500))


def _register() -> None:
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point=_make_env, max_episode_steps=None)


def _last100() -> float:
    return float(np.mean(RETURNS[-WINDOW:])) if RETURNS else float("nan")


def _cairn_run(seed: int, max_steps: int, preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    from cairn.rl import PPO, PPOConfig

    settings: dict[str, Any] = {
        "env": ENV_ID,
        "seed": seed,
        "num_env_runners": 0,
        "num_envs_per_env_runner": 1,
        "rollout_length": BATCH,
        "minibatch_size": 128,
        "num_epochs": 10,
        "lr": 3e-4,
        "lr_anneal_timesteps": None,
        "observation_filter": None,
        "entropy_coeff": 0.0,
        "max_grad_norm": 0.5,
        "model_config": {"hidden_sizes": [64, 64], "activation": "tanh"},
    }
    if preset == "rllib":
        settings.update(_CAIRN_AS_RLLIB)
        settings["model_config"] = {**settings["model_config"], **_RLLIB_MODEL}
    settings.update(overrides)
    algo = PPO(PPOConfig(**settings))
    return _loop(algo.train, max_steps)


_CAIRN_AS_RLLIB: dict[str, Any] = {
    "gae_lambda": 1.0,
    "clip_param": 0.3,
    "vf_loss_coeff": 2.0,  # cairn's value loss has a factor 0.5, RLlib's none: 2 x 0.5 = RLlib's 1.0
    "vf_clip_param": 10.0,
    "use_kl_loss": True,
    "kl_coeff": 0.2,
    "kl_target": 0.01,
    "advantage_normalization": "batch",
}
"""cairn's settings that differ from RLlib 2.60's PPO defaults, at RLlib's values (and the model's
initializers, :data:`_RLLIB_MODEL`). Not matched: Adam's eps (cairn 1e-5, RLlib torch's 1e-8)."""

_RLLIB_MODEL = {"initializer": "torch", "vf_share_layers": True}
"""RLlib 2.60's default PPO module initializes every layer as torch does, and its
``DefaultModelConfig`` shares the encoder between the policy and value heads."""


def _rllib_run(seed: int, max_steps: int, preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if not ray.is_initialized():
        # address="local": a cluster of its own, never one another process on this machine started.
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = (
        PPOConfig()
        .environment(ENV_ID)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1)
        .learners(num_learners=0)
        .training(
            train_batch_size_per_learner=BATCH,
            minibatch_size=128,
            num_epochs=10,
            lr=3e-4,
            entropy_coeff=0.0,
            grad_clip=0.5,
            grad_clip_by="global_norm",
        )
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh"))
        .debugging(seed=seed)
    )
    algo = config.build_algo()
    try:
        return _loop(algo.train, max_steps)
    finally:
        algo.stop()


def _loop(train: Any, max_steps: int) -> dict[str, Any]:
    """Train until both returns crossed 450 or ``max_steps``; the first step at which each did."""
    import torch

    torch.set_num_threads(1)
    RETURNS.clear()
    first: dict[str, int | None] = {name: None for name in METRICS}
    steps = 0
    trace: list[tuple[Any, ...]] = []
    cpu0 = time.process_time()
    while steps < max_steps and None in first.values():
        done_before = len(RETURNS)
        result = train()
        steps = int(result["num_env_steps_sampled_lifetime"])
        reported = float(result["env_runners"].get("episode_return_mean", float("nan")))
        this_iter = float(np.mean(RETURNS[done_before:])) if len(RETURNS) > done_before else float("nan")
        values = {"last100": _last100(), "iteration": this_iter, "reported": reported}
        trace.append((steps, *(round(values[name], 1) for name in METRICS), len(RETURNS)))
        for name, value in values.items():
            if first[name] is None and value >= TARGET:
                first[name] = steps
    cpu = time.process_time() - cpu0
    return {**first, "steps": steps, "episodes": len(RETURNS), "cpu_s": cpu, "trace": trace}


def _child(lib: str, seeds: list[int], max_steps: int, preset: str, overrides: dict[str, Any]) -> None:
    _register()
    run = _cairn_run if lib == "cairn" else _rllib_run
    for seed in seeds:
        print(json.dumps({"lib": lib, "seed": seed, **run(seed, max_steps, preset, overrides)}), flush=True)


def _rllib_python(given: str | None) -> str | None:
    try:
        import ray.rllib  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    path = given or "/work/main/.venv-rllib/bin/python"
    return path if os.path.exists(path) else None


def _fmt(value: int | None, max_steps: int) -> str:
    return f">{max_steps:,}" if value is None else f"{value:,}"


def _median(values: list[int | None], max_steps: int) -> float:
    """The median, a run that never crossed counting as ``max_steps`` (a lower bound then)."""
    return float(statistics.median(max_steps if v is None else v for v in values))


def main() -> None:
    """Run RLlib and each cairn preset asked for, one child process each, and print the table."""
    ap = argparse.ArgumentParser(prog="python -m bench.ppo_sample_efficiency", description=__doc__)
    ap.add_argument("--lib", choices=("both", "cairn", "rllib"), default="both")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-steps", type=int, default=150_000)
    ap.add_argument("--cairn-preset", choices=("cairn", "rllib"), nargs="+", default=["cairn", "rllib"])
    ap.add_argument("--rllib-python", default=None)
    ap.add_argument(
        "--cairn-set", default="{}", help="JSON of PPOConfig settings over the preset, e.g. '{\"use_kl_loss\": false}'"
    )
    ap.add_argument("--trace", help="append each run's per iteration (steps, the returns, episodes) here")
    ap.add_argument("--child", choices=("cairn", "rllib"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.seeds, args.max_steps, args.cairn_preset[0], json.loads(args.cairn_set))
        return
    runs: list[tuple[str, str, str]] = []  # (label, lib, preset)
    if args.lib in ("both", "rllib"):
        runs.append(("rllib 2.60", "rllib", "cairn"))
    if args.lib in ("both", "cairn"):
        extra = "" if args.cairn_set == "{}" else f" + {args.cairn_set}"
        runs += [(f"cairn ({preset} preset{extra})", "cairn", preset) for preset in args.cairn_preset]
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in runs}
    # Seed by seed, every library on it before the next: a run stopped early leaves paired seeds.
    for seed, (label, lib, preset) in ((seed, run) for seed in args.seeds for run in runs):
        python = sys.executable if lib == "cairn" else _rllib_python(args.rllib_python)
        if python is None:
            print("rllib: skipped (ray.rllib does not import here and no --rllib-python)")
            continue
        cmd = [python, "-m", "bench.ppo_sample_efficiency", "--child", lib, "--max-steps", str(args.max_steps)]
        cmd += ["--cairn-preset", preset, "--cairn-set", args.cairn_set, "--seeds", str(seed)]
        mine = rows[label]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("{"):
                    row = json.loads(line)
                    mine.append(row)
                    if args.trace:
                        with open(args.trace, "a") as f:
                            f.write(json.dumps({**row, "label": label}) + "\n")
                    found = "  ".join(f"{m} {_fmt(row[m], args.max_steps):>9}" for m in METRICS)
                    print(
                        f"{label}, seed {row['seed']}: {found}  ({row['episodes']} episodes, {row['cpu_s']:.0f} CPU s)",
                        flush=True,
                    )
        if proc.returncode != 0:  # the other runs still go; the table shows what this one finished
            print(f"{label}: child failed with exit code {proc.returncode} on seed {seed}", flush=True)
    print(f"\nenv steps to a return of {TARGET:.0f} (cap {args.max_steps:,}; '>cap': not reached, counted as the cap)")
    medians: dict[tuple[str, str], float] = {}
    for metric in METRICS:
        print(f"\n{metric}:")
        print(f"{'':32}" + "".join(f"{'seed ' + str(seed):>10}" for seed in args.seeds) + f"{'median':>10}")
        for label, mine in rows.items():
            if not mine:
                continue
            by_seed = {r["seed"]: r[metric] for r in mine}
            medians[label, metric] = _median(list(by_seed.values()), args.max_steps)
            cells = "".join(f"{_fmt(by_seed.get(seed), args.max_steps):>10}" for seed in args.seeds)
            print(f"{label:32}{cells}{medians[label, metric]:>10,.0f}")
    baseline = "rllib 2.60"
    if any(key[0] == baseline for key in medians):
        print(f"\nratio of medians, cairn / {baseline} (measured in this run):")
        for label in rows:
            if label == baseline or (label, METRICS[0]) not in medians:
                continue
            ratios = "  ".join(f"{m} {medians[label, m] / medians[baseline, m]:.2f}" for m in METRICS)
            print(f"{label:32}{ratios}")


if __name__ == "__main__":
    main()
