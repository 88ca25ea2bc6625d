"""Ray Tune with cairn checkpoints: a PBT run of cairn PPO where one trial's worker is killed and comes back."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.tune", reason="Ray Tune is not installed (pip install 'cairn-rl[tune]')")
pytest.importorskip("gymnasium")

import ray.cloudpickle
from ray import tune
from ray.tune.schedulers import PopulationBasedTraining

from cairn.integrations import tune as cairn_tune

pytestmark = pytest.mark.usefixtures("ray_cluster")

# The Tune workers cannot import this test module: send its functions by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

ITERATIONS = 6
CRASH_AT = 3


def _log(path: str, **event: Any) -> None:
    with open(path, "a") as f:  # one short line per append: lines of the two trials do not mix
        f.write(json.dumps(event) + "\n")


def ppo_trainable(config: dict[str, Any]) -> None:
    """cairn PPO on CartPole; its first worker dies (os._exit) after iteration CRASH_AT, before reporting it."""
    import torch

    from cairn.rl import PPO, PPOConfig

    torch.set_num_threads(1)
    algo = PPO(
        PPOConfig(
            env="CartPole-v1",
            seed=config["seed"],
            lr=config["lr"],
            num_envs_per_env_runner=2,
            rollout_length=32,
            minibatch_size=32,
            num_epochs=1,
            model_config={"hidden_sizes": [16]},
        )
    )
    trial = tune.get_context().get_trial_id()
    restored = cairn_tune.restore(algo)
    if restored is not None:
        _log(config["log"], event="restore", trial=trial, source=restored, iteration=algo.training_iteration)
    while True:
        metrics = algo.train()
        iteration = metrics.pop("training_iteration")
        marker = Path(config["log"]).with_suffix(".crashed")
        if iteration == CRASH_AT and not marker.exists():
            marker.touch()
            _log(config["log"], event="crash", trial=trial, iteration=iteration)
            os._exit(1)  # the worker process dies: no exception, no cleanup, no report
        metrics = {k: v for k, v in metrics.items() if isinstance(v, int | float)}
        cairn_tune.report(algo, {**metrics, "algo_iteration": iteration})


def test_pbt_with_a_killed_trial(tmp_path: Path) -> None:
    log = str(tmp_path / "events.jsonl")
    pbt = PopulationBasedTraining(
        time_attr="training_iteration",
        metric="algo_iteration",  # a score that ties across trials would not say which is better
        mode="max",
        perturbation_interval=2,
        hyperparam_mutations={"lr": [1e-3, 2e-3, 5e-4]},
        quantile_fraction=0.5,
        resample_probability=0.5,
        # Synchronous PBT: at every perturbation point it waits for both trials and then the lower
        # one always exploits the upper one, so the copied-checkpoint restore happens whatever the
        # machine's load (asynchronous PBT may let a trial finish before the other is ranked).
        synch=True,
    )
    tuner = tune.Tuner(
        ppo_trainable,
        param_space={"lr": 1e-3, "seed": tune.grid_search([0, 1]), "log": log},
        tune_config=tune.TuneConfig(scheduler=pbt, num_samples=1, reuse_actors=False),
        run_config=tune.RunConfig(
            name="pbt",
            storage_path=str(tmp_path / "tune"),
            stop={"training_iteration": ITERATIONS},
            failure_config=tune.FailureConfig(max_failures=2),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=3),
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert not results.errors
    assert sorted(r.metrics["training_iteration"] for r in results) == [ITERATIONS, ITERATIONS]
    # Each trial's algorithm counted its own iterations through every restore: no iteration was lost.
    assert sorted(r.metrics["algo_iteration"] for r in results) == [ITERATIONS, ITERATIONS]

    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    crashes = [e for e in events if e["event"] == "crash"]
    assert len(crashes) == 1
    crashed = crashes[0]["trial"]
    after = events[events.index(crashes[0]) + 1 :]
    comeback = [e for e in after if e["event"] == "restore" and e["trial"] == crashed]
    assert comeback, events  # the killed trial came back from a cairn checkpoint ...
    assert 1 <= comeback[0]["iteration"] < CRASH_AT  # ... taken before the crash
    restores = [e for e in events if e["event"] == "restore"]
    assert len(restores) > len(crashes)  # PBT restarted a trial from a (copied) cairn checkpoint too


def test_tuner_restore_resumes_an_errored_trial_from_its_cairn_checkpoint(tmp_path: Path) -> None:
    log = str(tmp_path / "events.jsonl")
    run_config = tune.RunConfig(
        name="restore",
        storage_path=str(tmp_path / "tune"),
        stop={"training_iteration": ITERATIONS},
        failure_config=tune.FailureConfig(max_failures=0),  # the crash ends the experiment's trial
        verbose=0,
    )
    param_space = {"lr": 1e-3, "seed": 0, "log": log}
    first = tune.Tuner(ppo_trainable, param_space=param_space, run_config=run_config).fit()
    assert len(first.errors) == 1

    experiment = str(tmp_path / "tune" / "restore")
    assert tune.Tuner.can_restore(experiment)
    results = tune.Tuner.restore(experiment, trainable=ppo_trainable, resume_errored=True).fit()
    assert not results.errors
    assert results[0].metrics["algo_iteration"] == ITERATIONS
    events = [json.loads(line) for line in Path(log).read_text().splitlines()]
    assert [e["event"] for e in events] == ["crash", "restore"]
    assert events[1]["iteration"] == CRASH_AT - 1  # the last checkpoint reported before the crash
