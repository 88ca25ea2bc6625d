"""``cairn train``: train an algorithm of :data:`~cairn.rl.algorithms.catalog.ALGORITHMS`, checkpointing as it goes.

torch and gymnasium are imported when the command runs, not when its parser is
built, so that ``cairn inspect`` and friends stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from cairn._display import safe_text
from cairn._metrics import RETURN_METRIC
from cairn.cli import train_options
from cairn.cli.command import Command, UsageError, require_folder, sibling_hint
from cairn.cli.loading import checkpoint_metadata
from cairn.cli.metrics_log import METRICS_FILE, MetricsLog, TensorBoardLog, jsonable
from cairn.cli.settings import apply_settings, check_env, parse_settings
from cairn.cli.train_options import TrainOptions
from cairn.rl.algorithms.catalog import ALGORITHMS, algorithm_of_class

if TYPE_CHECKING:
    from cairn.manager import CheckpointManager
    from cairn.rl.algorithms.algorithm import Algorithm

__all__ = ["COMMAND", "cmd_train", "parse_settings"]

DEFAULT_ALGORITHM = "ppo"

# Settings that define which run a checkpoint belongs to: --resume refuses to change them.
_RUN_IDENTITY = ("env", "seed", "num_agents", "policies", "policy_mapping")


# ---------------------------------------------------------------------- the algorithm

_NAMES = " or ".join(entry.algorithm for entry in ALGORITHMS.values())


def _build_algorithm(args: argparse.Namespace) -> tuple[Algorithm, str]:
    """A new algorithm (``--algo``), or the latest checkpoint's with ``--resume``; and how it was obtained."""
    algo_cls, config_cls = ALGORITHMS[_algorithm_name(args)].load()
    if args.env is not None:
        check_env(args.env)
    flags = {
        "env": args.env,
        "seed": args.seed,
        "num_env_runners": args.num_env_runners,
        "num_learners": args.num_learners,
        "num_agents": args.num_agents,
    }
    # The flags win over the same names in --set, as the more specific spelling.
    explicit = {**parse_settings(args.set or [], config_cls), **{k: v for k, v in flags.items() if v is not None}}
    if "observation_filter" not in explicit and not (args.resume and args.observation_filter is None):
        explicit["observation_filter"] = _observation_filter(args, config_cls)
    if not args.resume and "num_envs_per_env_runner" not in explicit:
        envs = _num_envs(config_cls)
        if envs is not None:
            explicit["num_envs_per_env_runner"] = envs
    if not args.resume and not config_cls().sample_next_obs:
        # First, so that what --set gives (lr, grad_clip or max_grad_norm) is applied after them and wins.
        explicit = {**TRAIN_ON_POLICY_OPTIMIZER, **explicit}
    if args.resume:
        return _resume(args.checkpoint_dir, algo_cls, explicit)
    if args.checkpoint_dir is not None:
        _refuse_a_second_run(args.checkpoint_dir)
    return algo_cls(apply_settings(config_cls(), explicit)), "started from scratch"


def _check_resume_folder(root: str) -> None:
    """Raise UsageError when ``root`` is missing or holds no checkpoint: a typo must not start a new run."""
    from cairn.manager import CheckpointManager

    new_run = "A new run is started without --resume."
    if "://" not in root and not os.path.isdir(root):
        raise UsageError(f"--resume: there is no folder {root}{sibling_hint(root)}. {new_run}")
    manager = CheckpointManager(root)
    if not manager.checkpoints() and not manager.damaged():
        raise UsageError(f"--resume: {root} holds no checkpoint to resume from. {new_run}")


def _resume(root: str | None, algo_cls: type[Algorithm], explicit: dict[str, Any]) -> tuple[Algorithm, str]:
    """The newest sound checkpoint under ``root``, with the ``explicit`` settings applied.

    Raises:
        UsageError: No ``--checkpoint-dir``, or a folder that is missing or holds no checkpoint.
        ValueError: ``explicit`` changes a setting of :data:`_RUN_IDENTITY`.
    """
    from cairn.manager import CheckpointManager

    if root is None:
        raise UsageError("--resume needs --checkpoint-dir (the folder of the run to continue).")
    _check_resume_folder(root)
    loader = _loader(algo_cls, explicit)
    found = CheckpointManager(root).load_latest(lambda info: loader(info.path))
    if found is None:  # every checkpoint went away since the check above (another process's retention)
        raise UsageError(f"--resume: {root} holds no checkpoint to resume from. A new run is started without --resume.")
    latest, algo = found[0].path, found[1]
    config = algo.config
    try:
        wanted = apply_settings(config, explicit)
        for key in _RUN_IDENTITY:
            if getattr(wanted, key) != getattr(config, key):
                raise ValueError(
                    f"{key}={getattr(wanted, key)!r} differs from the checkpoint's {key}="
                    f"{getattr(config, key)!r} ({latest}); drop it to resume, or start a new run "
                    "in another --checkpoint-dir."
                )
    except BaseException:
        algo.stop()
        raise
    changes = {
        f.name: getattr(wanted, f.name)
        for f in dataclasses.fields(config)
        if f.init and getattr(wanted, f.name) != getattr(config, f.name)
    }
    if changes:
        # Other settings (learning rate, number of runners or learners, ...) may change
        # on resume: the checkpoint restores into an algorithm built with them.
        algo.stop()
        with _asked_for_code(latest, algo_cls):
            algo = algo_cls.from_checkpoint(latest, config=wanted)
    changed = f", with {', '.join(f'{k}={v!r}' for k, v in changes.items())}" if changes else ""
    return algo, f"resumed from {latest} (iteration {algo.training_iteration}){changed}"


TRAIN_FILTER = "MeanStdFilter"
"""``cairn train``'s observation filter for on-policy algorithms (PPO) when ``--observation-filter`` is not
given. The configs follow RLlib (no filter); the command keeps the filter it always trained PPO with, and
says so when it starts. Off-policy algorithms train without one (their replay buffers hold raw observations)."""


TRAIN_NUM_ENVS = 4
"""``cairn train``'s envs per env runner for on-policy algorithms (PPO) when ``--set num_envs_per_env_runner=``
is not given. The configs follow RLlib (1); the command keeps the 4 its quick start always sampled with
(about 4x the env steps per second of one env, same batch per iteration). Off-policy algorithms keep their 1."""


TRAIN_ON_POLICY_OPTIMIZER: dict[str, Any] = {"lr": 2.5e-4, "max_grad_norm": 0.5}
"""``cairn train``'s learning rate and gradient clipping for on-policy algorithms (PPO) when ``--set`` does not
give them: CleanRL's, which its quick start always trained with. PPOConfig's defaults are RLlib's (``lr=5e-5``,
no clipping), which need several times the iterations on CartPole. Off-policy algorithms keep their config's."""


def _num_envs(config_cls: type[Any]) -> int | None:
    """:data:`TRAIN_NUM_ENVS` for on-policy algorithms, None (the config's default) for off-policy ones."""
    return None if config_cls().sample_next_obs else TRAIN_NUM_ENVS


def _observation_filter(args: argparse.Namespace, config_cls: type[Any]) -> str | None:
    """``--observation-filter`` (``none``: no filter), else :data:`TRAIN_FILTER` for on-policy algorithms."""
    if args.observation_filter is not None:
        return None if args.observation_filter == "none" else str(args.observation_filter)
    return None if config_cls().sample_next_obs else TRAIN_FILTER


def _loader(algo_cls: type[Algorithm], explicit: dict[str, Any]) -> Callable[[str], Algorithm]:
    """``from_checkpoint``, with the machine-bounded settings the user gave (``--num-env-runners``,
    ``--set num_learners=...``) applied before the algorithm is built: they are the user's explicit
    override of the bound a checkpoint's counts meet (SPEC 8); the checkpoint's other counts stay bounded.
    """
    from cairn.errors import UnsafeCheckpointError
    from cairn.rl.algorithms.algorithm import recorded_config
    from cairn.rl.algorithms.config_bounds import MACHINE_FIELDS, machine_problem

    chosen = {k: v for k, v in explicit.items() if k in MACHINE_FIELDS}

    def load(path: str) -> Algorithm:
        with _asked_for_code(path, algo_cls):
            if not chosen:
                return algo_cls.from_checkpoint(path)
            recorded = recorded_config(path)
            problem = machine_problem(recorded, overridden=chosen)
            if problem is not None:
                raise UnsafeCheckpointError(f"{path}: not resumed: {problem}.")
            return algo_cls.from_checkpoint(path, config=apply_settings(recorded, chosen))

    return load


@contextlib.contextmanager
def _asked_for_code(path: str, algo_cls: type[Algorithm]) -> Iterator[None]:
    """Re-raise a load's :class:`~cairn.errors.MissingCallableError` with what a command line can do.

    A run saved with lambdas or closures (issue 39) resumes only where they are passed again:
    in a script. The error keeps the load's words (each callable by name, the line that passes
    them) and adds the checkpoint and that ``cairn train`` holds no code.
    """
    from cairn.errors import MissingCallableError

    try:
        yield
    except MissingCallableError as err:
        raise MissingCallableError(
            f"--resume: {safe_text(path)}: {err} cairn train takes no code, so it cannot pass them: continue the "
            f"run from your script with that load ({algo_cls.__name__}.from_checkpoint of this checkpoint), then "
            "algo.train()."
        ) from None


def _refuse_a_second_run(root: str) -> None:
    """Raise UsageError when ``root`` already holds checkpoints: a new run there would mix two runs."""
    from cairn.manager import CheckpointManager

    existing = CheckpointManager(root).latest(verified=False)
    if existing is not None:
        raise UsageError(
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

        if "://" not in args.checkpoint_dir and not os.path.isdir(args.checkpoint_dir):
            return DEFAULT_ALGORITHM  # the resume refuses the missing folder, with its own words
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


def _open_manager(args: argparse.Namespace, options: TrainOptions) -> CheckpointManager | None:
    """The manager of ``--checkpoint-dir`` (keeping the last ``keep_last`` and the best), or None without one."""
    from cairn.manager import CheckpointManager

    if args.checkpoint_dir is None:
        return None
    return CheckpointManager(
        args.checkpoint_dir,
        keep_last=options.keep_last,
        keep_best=1,
        metric=RETURN_METRIC,
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
        """Write one iteration's row to both, each value once under RLlib's names
        (``env_runners/episode_return_mean``, ``learners/<module>/entropy``), as RLlib's own
        TensorBoard logging does."""
        self._board.append(self._log.append(results, iteration_time_s=iteration_time_s))

    def close(self) -> None:
        """Close both files."""
        try:
            self._log.close()
        finally:
            self._board.close()


class _Interrupt:
    """Ctrl-C during training: the first finishes the iteration and saves, the second stops at once.

    Installed for the training loop only, in the main thread (the only one Python delivers
    signals to); elsewhere, and outside the loop, SIGINT keeps its handler. A second Ctrl-C
    raises ``KeyboardInterrupt`` where the program is: the manager's commits are atomic, so
    a save it cuts short is never a checkpoint (nothing half-written is read back).
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\ncairn train: Ctrl-C: finishing this iteration, then saving a checkpoint "
            "(press Ctrl-C again to stop at once, losing the iteration)",
            file=sys.stderr,
            flush=True,
        )


class _Outcome:
    """How training ended: the last results, the latest checkpoint, whether Ctrl-C stopped it."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.latest: str | None = None
        self.interrupted = False


def _train(algo: Algorithm, args: argparse.Namespace, options: TrainOptions, stack: contextlib.ExitStack) -> _Outcome:
    """Train up to ``options.iterations``, recording and checkpointing, until done or Ctrl-C.

    Everything opened here is closed by ``stack``, also when training fails.
    """
    manager = _open_manager(args, options)
    if manager is not None:
        stack.callback(manager.close)
    records = _RunRecords.open(args, algo.training_iteration)
    if records is not None:
        stack.callback(records.close)
    total = options.iterations
    shown = _Progress(total=total, initial=min(algo.training_iteration, total))
    stack.callback(shown.close)
    trackers = _open_trackers(algo, args, stack)
    interrupt = stack.enter_context(_Interrupt())
    outcome = _Outcome()
    while algo.training_iteration < total and not interrupt.requested:
        began = time.perf_counter()
        results = outcome.results = algo.train()
        iteration = int(results["training_iteration"])
        if records is not None:
            records.append(results, iteration_time_s=time.perf_counter() - began)
        shown.show(
            f"iter {iteration}/{total}  "
            f"steps {results['num_env_steps_sampled_lifetime']}  "
            f"{results['perf/env_steps_per_second']:.0f} steps/s  "
            f"return {results[RETURN_METRIC]:.1f}"
        )
        for tracker in trackers:
            tracker.log_result(results, step=iteration)
        due = iteration % options.checkpoint_every == 0 or iteration == total or interrupt.requested
        if manager is not None and due:
            path = manager.save(algo, iteration, metrics=jsonable(results))
            if args.log_checkpoints and trackers:
                manager.wait()  # an artifact is the committed folder, not a save in flight
                for tracker in trackers:
                    tracker.log_checkpoint(path, step=iteration)
    outcome.interrupted = interrupt.requested and algo.training_iteration < total
    if manager is not None:
        manager.wait()
        outcome.latest = manager.latest(verified=False)
    return outcome


def _open_trackers(algo: Algorithm, args: argparse.Namespace, stack: contextlib.ExitStack) -> list[Any]:
    """The runs of ``--log-to`` (each closed by ``stack``), named after the run folder."""
    if not args.log_to:
        return []
    from cairn.integrations.trackers import open_tracker

    name = os.path.basename(os.path.normpath(args.checkpoint_dir)) if args.checkpoint_dir else None
    trackers = []
    for kind in dict.fromkeys(args.log_to):  # each tracker once, in the order given
        tracker = open_tracker(kind, name=name or f"cairn-{algo.config.env}", config=algo.config.to_dict())
        stack.callback(tracker.close)
        trackers.append(tracker)
    return trackers


def _run_options(args: argparse.Namespace) -> TrainOptions:
    """The run's options: those given, else (with ``--resume``) those the run recorded, else the defaults."""
    given = {"iterations": args.iterations, "checkpoint_every": args.checkpoint_every, "keep_last": args.keep_last}
    options, _ = train_options.resolve(given, None)
    train_options.check(options, where="cairn train")  # the options given, before anything loads
    local = args.checkpoint_dir is not None and "://" not in args.checkpoint_dir
    if not (args.resume and local and os.path.isdir(args.checkpoint_dir)):
        return options
    options, kept = train_options.resolve(given, train_options.read_options(args.checkpoint_dir))
    # Said only where it differs from what the same command line starts a new run with.
    kept = [name for name in kept if getattr(options, name) != getattr(train_options.DEFAULTS, name)]
    if kept:
        said = ", ".join(f"--{name.replace('_', '-')} {getattr(options, name)}" for name in kept)
        print(f"cairn train: the run's own {said} (give them again to change them)", file=sys.stderr)
    return options


def _resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run (the options are recorded in the run folder)."""
    words = ["cairn"]
    for module in args.imports:
        words += ["--import", module]
    words += ["train", "--checkpoint-dir", str(args.checkpoint_dir), "--resume"]
    return shlex.join(words)


def cmd_train(args: argparse.Namespace) -> int:
    """Handler of ``cairn train``; returns the exit status (130 when Ctrl-C stopped it)."""
    if args.checkpoint_dir is not None:
        require_folder(args.checkpoint_dir, what="run folder (--checkpoint-dir)")
    options = _run_options(args)
    if args.log_checkpoints and (not args.log_to or args.checkpoint_dir is None or "://" in args.checkpoint_dir):
        raise UsageError("--log-checkpoints needs --log-to and a local --checkpoint-dir (the folders it logs).")
    algo, how = _build_algorithm(args)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.callback(algo.stop)  # registered first: runs last, after the logs and the manager are closed
        restored = algo.training_iteration
        if restored > options.iterations:
            raise UsageError(
                f"--iterations {options.iterations} is below the iteration the run resumes at ({restored}): "
                f"--iterations is the total; give more than {restored} to train further."
            )
        # The env id and paths may come from a checkpoint (--resume): printed through safe_text.
        print(f"cairn train: {safe_text(algo.config.env)}, {safe_text(how)}", file=sys.stderr)
        print(
            f"cairn train: observation filter {algo.config.observation_filter or 'none'} "
            "(--observation-filter MeanStdFilter|none; a deployed module needs the same: docs/deploy.md)",
            file=sys.stderr,
        )
        if restored == options.iterations and args.resume:
            print(
                f"cairn train: the run is at iteration {restored}, which --iterations {options.iterations} asks "
                f"for: nothing to train (give more than {restored} to go on).",
                file=sys.stderr,
            )
        if args.checkpoint_dir is not None and "://" not in args.checkpoint_dir:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            train_options.write_options(args.checkpoint_dir, options)
        outcome = _train(algo, args, options, stack)
    summary = f"cairn train: iteration {algo.training_iteration}"
    if outcome.results:
        summary += f", {RETURN_METRIC} {outcome.results[RETURN_METRIC]:.1f}"
    summary += f", {time.perf_counter() - start:.1f} s"
    if outcome.latest is not None:
        summary += f", latest checkpoint {outcome.latest}"
    print(safe_text(summary))
    if not outcome.interrupted:
        return 0
    if outcome.latest is None:
        print("cairn train: stopped by Ctrl-C; nothing was saved (no --checkpoint-dir).", file=sys.stderr)
    else:
        print(
            f"cairn train: stopped by Ctrl-C at iteration {algo.training_iteration}; "
            f"saved {safe_text(outcome.latest)}.\nTo go on: {safe_text(_resume_command(args))}",
            file=sys.stderr,
        )
    return 130


def _train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--algo",
        default=None,
        type=str.lower,  # --algo PPO as the help and RLlib spell it
        choices=sorted(ALGORITHMS),
        help=f"the algorithm, e.g. --algo dqn (default: {DEFAULT_ALGORITHM}, or with --resume the checkpoint's)",
    )
    p.add_argument(
        "--env",
        default=None,
        metavar="ID",
        help="a gymnasium id, multi:<id> for several agents, or module:Env with --import module, "
        "e.g. --env Pendulum-v1 (default: CartPole-v1, or with --resume the checkpoint's)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="N",
        help="the total of training iterations to reach, e.g. --iterations 40 (default: "
        f"{train_options.DEFAULTS.iterations}, or with --resume the run's own)",
    )
    p.add_argument(
        "--checkpoint-dir",
        default=None,
        metavar="DIR",
        help="folder (or fsspec URI, e.g. s3://bucket/run) for checkpoints, metrics.jsonl and TensorBoard "
        "events, e.g. --checkpoint-dir runs/cartpole (default: none, nothing is saved)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        metavar="K",
        help="save every K iterations and at the last, e.g. --checkpoint-every 5 (default: "
        f"{train_options.DEFAULTS.checkpoint_every}, or with --resume the run's own)",
    )
    p.add_argument(
        "--keep-last",
        type=int,
        default=None,
        metavar="N",
        help="checkpoints to keep, plus the best by env_runners/episode_return_mean, e.g. --keep-last 5 (default: "
        f"{train_options.DEFAULTS.keep_last}, or with --resume the run's own)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --checkpoint-dir from its newest sound checkpoint, with the options it was "
        "started with unless given again, e.g. --checkpoint-dir runs/cartpole --resume --iterations 80",
    )
    _config_arguments(p)
    _tracker_arguments(p)


def _config_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that set the algorithm's config (recorded in every checkpoint)."""
    p.add_argument("--seed", type=int, default=None, help="seed of the run, e.g. --seed 3 (default: 0)")
    p.add_argument(
        "--num-env-runners",
        type=int,
        default=None,
        metavar="N",
        help="remote env runners on Ray, e.g. --num-env-runners 2 (default: 0, sampling in this process; "
        "above 0 needs cairn-rl[ray])",
    )
    p.add_argument(
        "--num-learners",
        type=int,
        default=None,
        metavar="N",
        help="data-parallel learners on Ray, e.g. --num-learners 2 (default: 0, learning in this process; "
        "above 1 needs cairn-rl[ray])",
    )
    p.add_argument(
        "--num-agents",
        type=int,
        default=None,
        metavar="N",
        help="agents of a multi:<id> env, e.g. --env multi:CartPole-v1 --num-agents 2 (default: 2)",
    )
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
            f"a setting of the algorithm's config ({configs}) under RLlib's name or cairn's field name, "
            "VALUE as JSON, e.g. --set lr=1e-3 --set train_batch_size_per_learner=1024 "
            "--set model_config='{\"fcnet_hiddens\": [32]}' (repeatable; the fields: "
            "python -c 'import cairn.rl as r; print(r.PPOConfig())'). PPO trains with lr=2.5e-4 and "
            "grad_clip=0.5 unless --set gives them (the config's defaults are RLlib's: 5e-5, no clipping)"
        ),
    )


def _tracker_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments that send the run to experiment trackers."""
    p.add_argument(
        "--log-to",
        action="append",
        choices=("wandb", "mlflow"),
        default=None,
        help="also log each iteration's metrics (RLlib's names) to Weights & Biases or MLflow, repeatable, "
        "e.g. --log-to wandb (settings from WANDB_PROJECT, WANDB_MODE, MLFLOW_TRACKING_URI, ...; needs "
        "cairn-rl[wandb] or cairn-rl[mlflow]; give it again on --resume)",
    )
    p.add_argument(
        "--log-checkpoints",
        action="store_true",
        help="with --log-to, also log each checkpoint folder as an artifact, e.g. --log-to mlflow --log-checkpoints",
    )


COMMAND = Command(
    "train",
    f"train {_NAMES} with checkpoints (--algo)",
    _train_arguments,
    cmd_train,
    description=(
        "Train an algorithm (--algo, default PPO) on a gymnasium environment. "
        "--iterations is the total: with --resume, "
        "training goes on from the newest sound checkpoint in --checkpoint-dir until "
        "training_iteration reaches it, with the run's own --iterations, --checkpoint-every and "
        "--keep-last unless given again (DIR/train_options.json). Each iteration's metrics are appended to "
        "DIR/metrics.jsonl and to TensorBoard event files in DIR (tensorboard --logdir DIR); "
        "a resume drops what a killed run logged after its last checkpoint."
        "\n\n"
        "Ctrl-C finishes the iteration, saves a checkpoint and prints the command that goes on; "
        "a second Ctrl-C stops at once (nothing half-written is ever read back)."
    ),
    examples=(
        "cairn train --env CartPole-v1 --iterations 40 --checkpoint-dir runs/cartpole",
        "cairn train --checkpoint-dir runs/cartpole --resume --iterations 80   # on to 80",
        "cairn train --algo dqn --env CartPole-v1 --set lr=5e-4 --checkpoint-dir runs/dqn",
        "cairn train --env Pendulum-v1 --set train_batch_size_per_learner=2048 --set lambda_=0.95",
        'cairn train --env multi:CartPole-v1 --num-agents 2 --set \'policies=["p0", "p1"]\' '
        '--set \'policy_mapping={"agent_0": "p0", "agent_1": "p1"}\'',
    ),
)
"""The ``train`` command."""
