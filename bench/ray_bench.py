"""Save and restore of a Ray setup (remote env runners + data-parallel learners) against the same state locally.

``python -m bench.ray_bench [--hidden 1024] [--runners 2] [--learners 2] [--rounds 5]``

Three ways to checkpoint the same PPO state (CartPole, an MLP of two
``--hidden``-wide layers per network, Adam state included):

- ``local``: ``num_env_runners=0, num_learners=0`` (everything in this process);
- ``remote``: the Ray setup with cairn's parallel checkpointing: the env runner
  actor and learner 0 write their own folders straight to disk while the driver
  writes the rest, and commits the manifests last; on restore every actor reads
  its folder itself;
- ``via driver``: the same Ray setup, but the state is gathered into the driver
  (``get_state`` pulls it from the actors) and written by it, the way a
  checkpoint manager or RLlib does it.

Each figure is the median of ``--rounds`` runs, interleaved (the page cache is not dropped:
the files are small next to memory; the restore times include verifying every
byte). Ratios are against ``local``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any


def _interleaved_medians(methods: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median time of each method; each round runs them all, in an order that rotates per round.

    Interleaving matters here: fsync times on a VM disk drift with what was written
    just before, so timing one method's rounds after another's would favour one of them.
    """
    times: dict[str, list[float]] = {name: [] for name in methods}
    names = list(methods)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            methods[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.ray_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=1024, help="width of the two hidden layers")
    parser.add_argument("--runners", type=int, default=2, help="remote env runners")
    parser.add_argument("--learners", type=int, default=2, help="remote learners (> 1)")
    parser.add_argument("--rounds", type=int, default=5, help="runs per figure (median)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args(argv)

    import ray
    import torch

    from cairn._reader import open_checkpoint
    from cairn._restore import LoadedFolder, load_folder
    from cairn._tree import ComponentNode
    from cairn.rl import PPO, PPOConfig

    torch.set_num_threads(1)
    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    workdir = tempfile.mkdtemp(prefix="cairn-ray-bench-", dir=args.dir)
    try:
        config = PPOConfig(
            env="CartPole-v1",
            seed=0,
            num_envs_per_env_runner=2,
            rollout_length=32,
            minibatch_size=64,
            num_epochs=1,
            model_config={"hidden_sizes": [args.hidden, args.hidden]},
            num_env_runners=args.runners,
            num_learners=args.learners,
        )
        remote = PPO(config)
        remote.train()  # Adam state exists from here on
        remote_path = remote.save_to_path(os.path.join(workdir, "remote"))
        local = PPO.from_checkpoint(remote_path, config=dataclasses.replace(config, num_env_runners=0, num_learners=0))
        local_path = os.path.join(workdir, "local")
        driver_path = os.path.join(workdir, "via_driver")

        def via_driver_save() -> None:
            # The whole state gathered in the driver (get_state fetches the actors' parts).
            remote.save_to_path(driver_path, state=remote.get_state())

        def via_driver_restore() -> None:
            # What a driver-side restore does: read and verify everything here, then push
            # the state to the actors (set_state) and resync the runners.
            reader = open_checkpoint(driver_path, None)
            loaded = load_folder(ComponentNode(remote), reader, allow_pickle=False, in_place=False)

            def nested(folder: LoadedFolder) -> dict[str, Any]:
                return {**folder.state, **{name: nested(child) for name, child in folder.children.items()}}

            remote.set_state(nested(loaded))

        saves = _interleaved_medians(
            {
                "local": lambda: local.save_to_path(local_path),
                "remote": lambda: remote.save_to_path(remote_path),
                "via driver": via_driver_save,
            },
            args.rounds,
        )
        restores = _interleaved_medians(
            {
                "local": lambda: local.restore_from_path(local_path),
                "remote": lambda: remote.restore_from_path(remote_path),
                "via driver": via_driver_restore,
            },
            args.rounds,
        )
        figures = {name: (saves[name], restores[name]) for name in saves}
        size = _dir_size(local_path)
        print(
            f"PPO CartPole, hidden {args.hidden}x2, checkpoint {size / 1e6:.1f} MB; "
            f"remote: {args.runners} env runners + {args.learners} learners on Ray; "
            f"median of {args.rounds}, {os.cpu_count()} CPUs"
        )
        base_save, base_restore = figures["local"]
        print(f"{'setup':<12}{'save s':>10}{'x local':>9}{'restore s':>12}{'x local':>9}")
        for name, (save_s, restore_s) in figures.items():
            print(
                f"{name:<12}{save_s:>10.3f}{save_s / base_save:>9.2f}{restore_s:>12.3f}{restore_s / base_restore:>9.2f}"
            )
        remote.stop()
        local.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        ray.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
