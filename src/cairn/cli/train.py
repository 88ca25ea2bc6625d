"""``cairn train``: train an algorithm of :data:`~cairn.rl.algorithms.catalog.ALGORITHMS`, checkpointing as it goes.

torch and gymnasium are imported when the command runs, not when its parser is
built, so that ``cairn inspect`` and friends stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from cairn._display import safe_text
from cairn.cli.command import Command
from cairn.cli.loading import checkpoint_metadata, load_newest_sound
from cairn.cli.metrics_log import METRICS_FILE, MetricsLog, TensorBoardLog, jsonable
from cairn.rl.algorithms.catalog import ALGORITHMS, algorithm_of_class

if TYPE_CHECKING:
    from cairn.manager import CheckpointManager
    from cairn.rl.algorithms.algorithm import Algorithm

__all__ = ["COMMAND", "cmd_train", "parse_settings"]

DEFAULT_ALGORITHM = "ppo"

# Settings that define which run a checkpoint belongs to: --resume refuses to change them.
_RUN_IDENTITY = ("env", "seed", "num_agents", "policies", "policy_mapping")


def parse_settings(pairs: list[str], config_cls: type[Any]) -> dict[str, Any]:
    """Turn ``--set KEY=VALUE`` pairs into config fields.

    VALUE is read as JSON when it parses (``1e-3``, ``true``, ``[64, 64]``,
    ``null``, ``{"agent_0": "p0"}``), else taken as a string; a list becomes a
    tuple where the field holds a tuple, an int a float where it holds a float.

    Raises:
        ValueError: A pair without ``=`` or an unknown field (the message lists them).
    """
    defaults = config_cls()
    names = [f.name for f in dataclasses.fields(config_cls) if f.init]
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in names:
            raise ValueError(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(names)}.")
        try:
            value: Any = json.loads(text)
        except json.JSONDecodeError:
            value = text
        except (RecursionError, ValueError) as err:  # nested too deeply; an integer of too many digits
            raise ValueError(f"--set {key}: the value cannot be read ({type(err).__name__}: {err}).") from err
        default = getattr(defaults, key)
        if isinstance(default, tuple) and isinstance(value, list):
            value = tuple(value)
        elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        out[key] = value
    return out


# ---------------------------------------------------------------------- the algorithm

_NAMES = " or ".join(entry.algorithm for entry in ALGORITHMS.values())


def _build_algorithm(args: argparse.Namespace) -> tuple[Algorithm, str]:
    """A new algorithm (``--algo``), or the latest checkpoint's with ``--resume``; and how it was obtained."""
    algo_cls, config_cls = ALGORITHMS[_algorithm_name(args)].load()
    flags = {
        "env": args.env,
        "seed": args.seed,
        "num_env_runners": args.num_env_runners,
        "num_learners": args.num_learners,
        "num_agents": args.num_agents,
    }
    explicit = {**parse_settings(args.set or [], config_cls), **{k: v for k, v in flags.items() if v is not None}}
    if "observation_filter" not in explicit and not (args.resume and args.observation_filter is None):
        explicit["observation_filter"] = _observation_filter(args, config_cls)
    if args.resume:
        if args.checkpoint_dir is None:
            raise ValueError("--resume needs --checkpoint-dir (where the checkpoints are).")
        resumed = _resume(args.checkpoint_dir, algo_cls, explicit)
        if resumed is not None:
            return resumed
    elif args.checkpoint_dir is not None:
        _refuse_a_second_run(args.checkpoint_dir)
    return algo_cls(config_cls(**explicit)), "started from scratch"


def _resume(root: str, algo_cls: type[Algorithm], explicit: dict[str, Any]) -> tuple[Algorithm, str] | None:
    """The newest sound checkpoint under ``root`` with the ``explicit`` settings applied, or None when there is none.

    Raises:
        ValueError: ``explicit`` changes a setting of :data:`_RUN_IDENTITY`.
    """
    from cairn.manager import CheckpointManager

    found = load_newest_sound(CheckpointManager(root), algo_cls.from_checkpoint, command="train")
    if found is None:
        return None
    latest, algo = found[0].path, found[1]
    config = algo.config
    for key in _RUN_IDENTITY:
        if key in explicit and explicit[key] != getattr(config, key):
            raise ValueError(
                f"{key}={explicit[key]!r} differs from the checkpoint's {key}="
                f"{getattr(config, key)!r} ({latest}); drop it to resume, or start a new run "
                "in another --checkpoint-dir."
            )
    changes = {k: v for k, v in explicit.items() if getattr(config, k) != v}
    if changes:
        # Other settings (learning rate, number of runners or learners, ...) may change
        # on resume: the checkpoint restores into an algorithm built with them.
        algo.stop()
        algo = algo_cls.from_checkpoint(latest, config=dataclasses.replace(config, **changes))
    changed = f", with {', '.join(f'{k}={v!r}' for k, v in changes.items())}" if changes else ""
    return algo, f"resumed from {latest} (iteration {algo.training_iteration}){changed}"


TRAIN_FILTER = "MeanStdFilter"
"""``cairn train``'s observation filter for on-policy algorithms (PPO) when ``--observation-filter`` is not
given. The configs follow RLlib (no filter); the command keeps the filter it always trained PPO with, and
says so when it starts. Off-policy algorithms train without one (their replay buffers hold raw observations)."""


def _observation_filter(args: argparse.Namespace, config_cls: type[Any]) -> str | None:
    """``--observation-filter`` (``none``: no filter), else :data:`TRAIN_FILTER` for on-policy algorithms."""
    if args.observation_filter is not None:
        return None if args.observation_filter == "none" else str(args.observation_filter)
    return None if config_cls().sample_next_obs else TRAIN_FILTER


def _refuse_a_second_run(root: str) -> None:
    """Raise ValueError when ``root`` already holds checkpoints: a new run there would mix two runs."""
    from cairn.manager import CheckpointManager

    existing = CheckpointManager(root).latest(verified=False)
    if existing is not None:
        raise ValueError(
            f"{root} already holds checkpoints (latest {existing}); pass "
            "--resume to continue that run, or choose another --checkpoint-dir."
        )


def _algorithm_name(args: argparse.Namespace) -> str:
    """``--algo``; else, with ``--resume``, the algorithm of the latest checkpoint's recorded class; else ppo."""
    if args.algo:
        return str(args.algo)
    if args.resume and args.checkpoint_dir is not None:
        from cairn.errors import CheckpointError
        from cairn.manager import CheckpointManager

        for info in reversed(CheckpointManager(args.checkpoint_dir).checkpoints()):
            try:  # a damaged step is skipped here as the resume itself skips it
                metadata = checkpoint_metadata(info.path) or {}
            except CheckpointError:
                continue
            entry = algorithm_of_class(str(metadata.get("class", "")))
            return entry.name if entry is not None else DEFAULT_ALGORITHM
    return DEFAULT_ALGORITHM


# ---------------------------------------------------------------------- the run


class _Progress:
    """Each iteration's line: the postfix of a tqdm bar when stderr is a terminal, else a line on stderr."""

    def __init__(self, *, total: int, initial: int) -> None:
        self._bar: Any = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="it", file=sys.stderr, dynamic_ncols=True)

    def show(self, line: str) -> None:
        """Show one iteration's line (iteration, steps, throughput, return)."""
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix_str(line.split("  ", 2)[2])
        else:
            print(safe_text(line), file=sys.stderr, flush=True)

    def close(self) -> None:
        """Close the bar, if any."""
        if self._bar is not None:
            self._bar.close()


def _open_manager(args: argparse.Namespace) -> CheckpointManager | None:
    """The manager of ``--checkpoint-dir`` (keeping the last ``--keep-last`` and the best), or None without one."""
    from cairn.manager import CheckpointManager

    if args.checkpoint_dir is None:
        return None
    return CheckpointManager(
        args.checkpoint_dir,
        keep_last=args.keep_last,
        keep_best=1,
        metric="episode_return_mean",
        mode="max",
        async_save=True,
    )


class _RunRecords:
    """The run's ``metrics.jsonl`` and TensorBoard events, one row of each per iteration.

    Args:
        folder: The local ``--checkpoint-dir``.
        start_iteration: The iteration training starts from (see :class:`MetricsLog`).
    """

    def __init__(self, folder: str, *, start_iteration: int) -> None:
        self._log = MetricsLog(folder, start_iteration=start_iteration)
        try:
            self._board = TensorBoardLog.open(folder, start_iteration=start_iteration)
        except BaseException:
            self._log.close()
            raise

    @classmethod
    def open(cls, args: argparse.Namespace, start_iteration: int) -> _RunRecords | None:
        """The records of ``--checkpoint-dir``, or None: they are written only into a local folder."""
        if args.checkpoint_dir is None:
            return None
        if "://" in str(args.checkpoint_dir):
            print(
                f"cairn train: no {METRICS_FILE} or TensorBoard events: they are written only when "
                "--checkpoint-dir is a local folder.",
                file=sys.stderr,
            )
            return None
        return cls(args.checkpoint_dir, start_iteration=start_iteration)

    def append(self, results: dict[str, Any], *, iteration_time_s: float) -> None:
        """Write one iteration's row to both (the events get the row as the metrics file has it)."""
        self._board.append(self._log.append(results, iteration_time_s=iteration_time_s))

    def close(self) -> None:
        """Close both files."""
        try:
            self._log.close()
        finally:
            self._board.close()


def _train(algo: Algorithm, args: argparse.Namespace, stack: contextlib.ExitStack) -> tuple[dict[str, Any], str | None]:
    """Train up to ``--iterations``, recording and checkpointing; the last results and the latest checkpoint.

    Everything opened here is closed by ``stack``, also when training fails.
    """
    manager = _open_manager(args)
    if manager is not None:
        stack.callback(manager.close)
    records = _RunRecords.open(args, algo.training_iteration)
    if records is not None:
        stack.callback(records.close)
    shown = _Progress(total=args.iterations, initial=min(algo.training_iteration, args.iterations))
    stack.callback(shown.close)
    results: dict[str, Any] = {}
    while algo.training_iteration < args.iterations:
        began = time.perf_counter()
        results = algo.train()
        iteration = int(results["training_iteration"])
        if records is not None:
            records.append(results, iteration_time_s=time.perf_counter() - began)
        shown.show(
            f"iter {iteration}/{args.iterations}  "
            f"steps {results['num_env_steps_sampled_lifetime']}  "
            f"{results['perf/env_steps_per_second']:.0f} steps/s  "
            f"return {results['episode_return_mean']:.1f}"
        )
        if manager is not None and (iteration % args.checkpoint_every == 0 or iteration == args.iterations):
            manager.save(algo, iteration, metrics=jsonable(results))
    if manager is None:
        return results, None
    manager.wait()
    return results, manager.latest(verified=False)


def cmd_train(args: argparse.Namespace) -> int:
    """Handler of ``cairn train``; returns the exit status."""
    if args.iterations < 0 or args.checkpoint_every < 1:
        raise ValueError("--iterations must be >= 0 and --checkpoint-every >= 1.")
    algo, how = _build_algorithm(args)
    # The env id and paths may come from a checkpoint (--resume): printed through safe_text.
    print(f"cairn train: {safe_text(algo.config.env)}, {safe_text(how)}", file=sys.stderr)
    print(
        f"cairn train: observation filter {algo.config.observation_filter or 'none'} "
        "(--observation-filter MeanStdFilter|none; a deployed module needs the same: docs/deploy.md)",
        file=sys.stderr,
    )
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.callback(algo.stop)  # registered first: runs last, after the logs and the manager are closed
        results, latest = _train(algo, args, stack)
    summary = f"cairn train: iteration {algo.training_iteration}"
    if results:
        summary += f", episode_return_mean {results['episode_return_mean']:.1f}"
    summary += f", {time.perf_counter() - start:.1f} s"
    if latest is not None:
        summary += f", latest checkpoint {latest}"
    print(safe_text(summary))
    return 0


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--algo",
        default=None,
        choices=sorted(ALGORITHMS),
        help=f"the algorithm (default: {DEFAULT_ALGORITHM}, or with --resume the checkpoint's)",
    )
    p.add_argument("--env", default=None, help="gymnasium id or multi:<id> (default CartPole-v1)")
    p.add_argument("--iterations", type=int, default=100, help="total training iterations")
    p.add_argument("--checkpoint-dir", default=None, help="folder (or fsspec URI) for checkpoints")
    p.add_argument("--checkpoint-every", type=int, default=10, help="save every K iterations")
    p.add_argument("--keep-last", type=int, default=3, help="checkpoints to keep (plus the best)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint")
    p.add_argument("--seed", type=int, default=None, help="seed (default 0)")
    p.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        help="remote env runners on Ray (0: sample in this process; needs cairn-rl[ray] above 0)",
    )
    p.add_argument(
        "--num-learners",
        type=int,
        default=None,
        help="data-parallel learners on Ray (0 or 1: learn in this process; needs cairn-rl[ray] above 1)",
    )
    p.add_argument("--num-agents", type=int, default=None, help="agents of a multi:<id> env")
    p.add_argument(
        "--observation-filter",
        default=None,
        choices=["MeanStdFilter", "none"],
        help=f"the env runners' observation filter (default: {TRAIN_FILTER} for PPO, none for DQN and SAC; "
        "with --resume, the checkpoint's)",
    )
    configs = ", ".join(entry.config for entry in ALGORITHMS.values())
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=(
            f"any field of the algorithm's config ({configs}), e.g. --set lr=1e-3 "
            "--set model_config='{\"hidden_sizes\": [32]}' (repeatable)"
        ),
    )


COMMAND = Command(
    "train",
    f"train {_NAMES} with checkpoints (--algo)",
    _train_arguments,
    cmd_train,
    description=(
        "Train an algorithm (--algo, default PPO) on a gymnasium environment. "
        "--iterations is the total: with --resume, "
        "training goes on from the latest checkpoint in --checkpoint-dir until "
        "training_iteration reaches it. Each iteration's metrics are appended to "
        "DIR/metrics.jsonl and to TensorBoard event files in DIR (tensorboard --logdir DIR); "
        "a resume drops what a killed run logged after its last checkpoint."
    ),
)
"""The ``train`` command."""
