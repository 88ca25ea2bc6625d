"""Self-play PPO on tic-tac-toe: the main policy against frozen copies of itself.

Every ``--freeze-every`` iterations the module ``"main"`` is frozen into a new
opponent module (``"main_v1"``, ``"main_v2"``, ...: ``Algorithm.add_module``
with the same mapping function and ``policies_to_train=("main",)``, then the
main weights copied in). Each episode, ``self_play_policy_mapping`` draws the
side ``"main"`` plays and the frozen copy it plays against. A
``CheckpointManager`` saves a verified checkpoint every iteration; stop the
run at any point and start it again with ``--resume``: ``PPO.from_checkpoint``
rebuilds exactly the modules of the checkpoint (with the mapping and the
trainable set it recorded) and the run goes on bit for bit.

    python examples/self_play.py --checkpoint-dir runs/self_play --iterations 30
    python examples/self_play.py --checkpoint-dir runs/self_play --iterations 40 --resume
    cairn ls runs/self_play
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import cairn
import cairn.rl.env.games  # a config names the env by path: its module must be imported (SPEC 8)
from cairn.rl import PPO, PPOConfig, RLModuleSpec
from cairn.rl.env.games import FROZEN_PREFIX, MAIN_MODULE_ID, self_play_policy_mapping


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--iterations", type=int, default=30, help="total iterations (also with --resume)")
    p.add_argument("--freeze-every", type=int, default=5, help="freeze main into a new opponent every K iterations")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--rollout-length", type=int, default=64)
    p.add_argument("--resume", action="store_true", help="go on from the latest checkpoint, if there is one")
    p.add_argument("--metrics-out", help="write each iteration's metrics here (JSON lines)")
    return p.parse_args(argv)


def build(args: argparse.Namespace) -> PPO:
    """A new self-play run: one module, "main", playing both sides until the first freeze."""
    config = PPOConfig(
        env=f"{cairn.rl.env.games.__name__}:TicTacToe",
        seed=args.seed,
        num_envs_per_env_runner=args.num_envs,
        rollout_length=args.rollout_length,
        minibatch_size=128,
        num_epochs=2,
        lr=1e-3,
        max_grad_norm=0.5,  # CleanRL's clipping, which this example always trained with (PPOConfig: RLlib's, none)
        lr_anneal_timesteps=None,
        observation_filter=None,  # one-hot boards need no normalization
        policies=(MAIN_MODULE_ID,),
        policy_mapping_fn=self_play_policy_mapping,
        policies_to_train=(MAIN_MODULE_ID,),
        model_config={"hidden_sizes": [64, 64]},
    )
    return PPO(config)


def freeze_main(algo: PPO) -> str:
    """Add a frozen copy of "main" as a new opponent module; returns its id."""
    frozen = [m for m in algo.config.policies if m.startswith(FROZEN_PREFIX)]
    module_id = f"{FROZEN_PREFIX}{len(frozen) + 1}"
    algo.add_module(
        module_id,
        RLModuleSpec(),  # the default module, with the env's spaces, like "main"
        new_agent_to_module_mapping_fn=self_play_policy_mapping,
        new_should_module_be_updated=(MAIN_MODULE_ID,),
    )
    main_weights = algo.get_module(MAIN_MODULE_ID).get_state()
    algo.set_state({"learner_group": {"learner": {"rl_module": {module_id: main_weights}}}})
    return module_id


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    args = parse_args(argv)
    manager = cairn.CheckpointManager(args.checkpoint_dir, keep_last=3)
    latest = manager.latest() if args.resume else None
    algo = PPO.from_checkpoint(latest) if latest is not None else build(args)
    if latest is not None:
        print(f"resumed at iteration {algo.training_iteration} with modules {list(algo.config.policies)}", flush=True)
    history: list[dict[str, Any]] = []
    while algo.training_iteration < args.iterations:
        results = algo.train()
        if algo.training_iteration % args.freeze_every == 0:
            print(f"iteration {algo.training_iteration}: froze main into {freeze_main(algo)}", flush=True)
        row = results.flatten(wall_clock=False)
        history.append(row)
        print(
            f"iteration {row['training_iteration']}: main's return "
            f"{row.get(f'env_runners/module_episode_returns_mean/{MAIN_MODULE_ID}', float('nan')):+.3f}",
            flush=True,
        )
        manager.save(algo, algo.training_iteration, metrics=row)
        if args.metrics_out:
            with open(args.metrics_out, "a") as f:
                f.write(json.dumps(row) + "\n")
    manager.close()
    algo.stop()
    return history


if __name__ == "__main__":
    main()
