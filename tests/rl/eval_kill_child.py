"""A training run that evaluates every iteration, for the SIGKILL test of test_rl_hostile_round4.

``python eval_kill_child.py RUN ITERATIONS [--stall-at K] [--resume]``: trains PPO with
evaluation runners, saves a checkpoint after every iteration (CheckpointManager), and
appends each iteration's evaluation result to ``RUN/evaluation.jsonl``. With
``--stall-at K`` it prints ``evaluating K`` from ``on_evaluate_start`` of iteration K
and waits there to be killed; with ``--resume`` it goes on from the newest checkpoint.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import eval_kill_helpers
from rl_helpers import small_config

import cairn
from cairn.rl import PPO

ITERATION_KEY = "training_iteration"


def main(argv: list[str]) -> int:
    run, iterations = Path(argv[0]), int(argv[1])
    stall_at = int(argv[argv.index("--stall-at") + 1]) if "--stall-at" in argv else 0
    config = small_config(num_envs_per_env_runner=2, rollout_length=16, minibatch_size=16, num_epochs=1)
    config = config.evaluation(evaluation_interval=1, evaluation_duration=2)
    config = config.callbacks(on_evaluate_start="eval_kill_helpers:stall")
    manager = cairn.CheckpointManager(run / "checkpoints", keep_last=3)
    latest = manager.latest() if "--resume" in argv else None
    algo = PPO.from_checkpoint(latest) if latest else PPO(config)
    eval_kill_helpers.STALL_AT = stall_at
    try:
        while algo.training_iteration < iterations:
            result = algo.train()
            flat = result.flatten(wall_clock=False)
            line = {key: value for key, value in flat.items() if key.startswith("evaluation/")}
            line[ITERATION_KEY] = algo.training_iteration
            with (run / "evaluation.jsonl").open("a", encoding="utf-8") as f:
                f.write(json.dumps(line, sort_keys=True) + "\n")
            manager.save(algo, algo.training_iteration)
            print(f"iteration {algo.training_iteration} saved", flush=True)
    finally:
        manager.close()
        algo.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
