"""``cairn train`` and ``cairn evaluate``.

:func:`register` only adds argument parsers: torch and gymnasium are imported
inside the handlers, so that ``cairn inspect`` and friends stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import posixpath
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from cairn._display import safe_text
from cairn._metrics_log import METRICS_FILE, MetricsLog, TensorBoardLog, jsonable

if TYPE_CHECKING:
    from cairn.manager import CheckpointInfo, CheckpointManager
    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.rl.connectors.connectors import ConnectorPipeline
    from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["cmd_evaluate", "cmd_train", "register"]

MODULE_PATH = ("learner_group", "learner", "rl_module")

T = TypeVar("T")

ALGORITHMS = {
    "ppo": ("cairn.rl.algorithms.ppo.ppo", "PPO", "PPOConfig"),
    "dqn": ("cairn.rl.algorithms.dqn.dqn", "DQN", "DQNConfig"),
    "sac": ("cairn.rl.algorithms.sac.sac", "SAC", "SACConfig"),
}
"""``--algo`` name -> (module, algorithm class, config class); imported when ``cairn train`` runs."""


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``train`` and ``evaluate`` subcommands to the ``cairn`` parser."""
    p = subparsers.add_parser(
        "train",
        help="train PPO or DQN, checkpointing as it goes",
        description=(
            "Train an algorithm (--algo, default PPO) on a gymnasium environment. "
            "--iterations is the total: with --resume, "
            "training goes on from the latest checkpoint in --checkpoint-dir until "
            "training_iteration reaches it. Each iteration's metrics are appended to "
            "DIR/metrics.jsonl and to TensorBoard event files in DIR (tensorboard --logdir DIR); "
            "a resume drops what a killed run logged after its last checkpoint."
        ),
    )
    p.add_argument(
        "--algo",
        default=None,
        choices=sorted(ALGORITHMS),
        help="the algorithm (default: ppo, or with --resume the checkpoint's)",
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
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=(
            "any field of the algorithm's config (PPOConfig, DQNConfig, SACConfig), e.g. --set lr=1e-3 "
            "--set model_config='{\"hidden_sizes\": [32]}' (repeatable)"
        ),
    )
    p.set_defaults(func=cmd_train)

    p = subparsers.add_parser(
        "evaluate",
        help="run episodes with a checkpoint's policy",
        description=(
            "Load one module of a checkpoint (an algorithm checkpoint, a module folder, or a "
            "checkpoint manager's root, whose latest checkpoint is used), run episodes with "
            "greedy actions and print the mean return."
        ),
    )
    p.add_argument("checkpoint")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--module", default="default_policy", help="module id")
    p.add_argument("--env", default=None, help="environment (default: the checkpoint's)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_evaluate)


# ---------------------------------------------------------------------- train


def parse_settings(pairs: list[str], config_cls: type[Any]) -> dict[str, Any]:
    """Turn ``--set KEY=VALUE`` pairs into config fields.

    VALUE is read as JSON when it parses (``1e-3``, ``true``, ``[64, 64]``,
    ``null``, ``{"agent_0": "p0"}``), else taken as a string; a list becomes a
    tuple where the field holds a tuple, an int a float where it holds a float.

    Raises:
        ValueError: A pair without ``=`` or an unknown field (the message lists them).
    """
    import dataclasses

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


# Settings that define which run a checkpoint belongs to: --resume refuses to change them.
_RUN_IDENTITY = ("env", "seed", "num_agents", "policies", "policy_mapping")


def _build_algorithm(args: argparse.Namespace) -> tuple[Algorithm, str]:
    """A new algorithm (``--algo``), or the latest checkpoint's with ``--resume``; and how it was obtained."""
    import dataclasses
    import importlib

    from cairn.manager import CheckpointManager

    module_name, algo_name, config_name = ALGORITHMS[_algorithm_name(args)]
    algo_module = importlib.import_module(module_name)
    algo_cls: type[Algorithm] = getattr(algo_module, algo_name)
    config_cls: type[Any] = getattr(algo_module, config_name)
    flags = {
        "env": args.env,
        "seed": args.seed,
        "num_env_runners": args.num_env_runners,
        "num_learners": args.num_learners,
        "num_agents": args.num_agents,
    }
    explicit = {**parse_settings(args.set or [], config_cls), **{k: v for k, v in flags.items() if v is not None}}
    if args.resume:
        if args.checkpoint_dir is None:
            raise ValueError("--resume needs --checkpoint-dir (where the checkpoints are).")
        found = _load_newest_sound(CheckpointManager(args.checkpoint_dir), algo_cls.from_checkpoint)
        if found is not None:
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
    elif args.checkpoint_dir is not None:
        existing = CheckpointManager(args.checkpoint_dir).latest(verified=False)
        if existing is not None:
            raise ValueError(
                f"{args.checkpoint_dir} already holds checkpoints (latest {existing}); pass "
                "--resume to continue that run, or choose another --checkpoint-dir."
            )
    return algo_cls(config_cls(**explicit)), "started from scratch"


def _algorithm_name(args: argparse.Namespace) -> str:
    """``--algo``; else, with ``--resume``, the algorithm of the latest checkpoint's recorded class; else ppo."""
    if getattr(args, "algo", None):
        return str(args.algo)
    if args.resume and args.checkpoint_dir is not None:
        from cairn.errors import CheckpointError
        from cairn.manager import CheckpointManager

        for info in reversed(CheckpointManager(args.checkpoint_dir).checkpoints()):
            try:  # a damaged step is skipped here as the resume itself skips it
                metadata = _checkpoint_metadata(info.path) or {}
            except CheckpointError:
                continue
            recorded = str(metadata.get("class", "")).partition(":")[0]
            return next((name for name, (module, _, _) in ALGORITHMS.items() if module == recorded), "ppo")
    return "ppo"


def _load_newest_sound(manager: CheckpointManager, load: Callable[[str], T]) -> tuple[CheckpointInfo, T] | None:
    """``manager.load_latest``, with each damaged checkpoint skipped named on one stderr line."""
    import warnings

    from cairn.manager import DamagedCheckpointWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DamagedCheckpointWarning)
        try:
            return manager.load_latest(lambda info: load(info.path))
        finally:
            for w in caught:
                if issubclass(w.category, DamagedCheckpointWarning):
                    print(f"cairn train: {safe_text(w.message)}", file=sys.stderr, flush=True)
                else:  # not ours to swallow: show it as it would have been shown
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)


def cmd_train(args: argparse.Namespace) -> int:
    """Handler of ``cairn train``; returns the exit status."""
    if args.iterations < 0 or args.checkpoint_every < 1:
        raise ValueError("--iterations must be >= 0 and --checkpoint-every >= 1.")
    from cairn.manager import CheckpointManager

    algo, how = _build_algorithm(args)
    # The env id and paths may come from a checkpoint (--resume): printed through safe_text.
    print(f"cairn train: {safe_text(algo.config.env)}, {safe_text(how)}", file=sys.stderr)
    manager = None
    log: MetricsLog | None = None
    board: TensorBoardLog | None = None
    bar: Any = None
    results: dict[str, Any] = {}
    start = time.perf_counter()
    try:
        if args.checkpoint_dir is not None:
            manager = CheckpointManager(
                args.checkpoint_dir,
                keep_last=args.keep_last,
                keep_best=1,
                metric="episode_return_mean",
                mode="max",
                async_save=True,
            )
            if "://" in str(args.checkpoint_dir):
                print(
                    f"cairn train: no {METRICS_FILE} or TensorBoard events: they are written only when "
                    "--checkpoint-dir is a local folder.",
                    file=sys.stderr,
                )
            else:
                log = MetricsLog(args.checkpoint_dir, start_iteration=algo.training_iteration)
                board = TensorBoardLog.open(args.checkpoint_dir, start_iteration=algo.training_iteration)
        use_bar = sys.stderr.isatty()
        if use_bar:
            from tqdm import tqdm

            bar = tqdm(
                total=args.iterations,
                initial=min(algo.training_iteration, args.iterations),
                unit="it",
                file=sys.stderr,
                dynamic_ncols=True,
            )
        while algo.training_iteration < args.iterations:
            began = time.perf_counter()
            results = algo.train()
            iteration = int(results["training_iteration"])
            if log is not None:
                row = log.append(results, iteration_time_s=time.perf_counter() - began)
                if board is not None:
                    board.append(row)
            line = (
                f"iter {iteration}/{args.iterations}  "
                f"steps {results['num_env_steps_sampled_lifetime']}  "
                f"{results['perf/env_steps_per_second']:.0f} steps/s  "
                f"return {results['episode_return_mean']:.1f}"
            )
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(line.split("  ", 2)[2])
            else:
                print(safe_text(line), file=sys.stderr, flush=True)
            if manager is not None and (iteration % args.checkpoint_every == 0 or iteration == args.iterations):
                manager.save(algo, iteration, metrics=jsonable(results))
        if manager is not None:
            manager.wait()
    finally:
        if bar is not None:
            bar.close()
        if manager is not None:
            manager.close()
        if log is not None:
            log.close()
        if board is not None:
            board.close()
        algo.stop()
    elapsed = time.perf_counter() - start
    summary = f"cairn train: iteration {algo.training_iteration}"
    if results:
        summary += f", episode_return_mean {results['episode_return_mean']:.1f}"
    summary += f", {elapsed:.1f} s"
    if manager is not None:
        summary += f", latest checkpoint {manager.latest(verified=False)}"
    print(safe_text(summary))
    return 0


# ---------------------------------------------------------------------- evaluate


def _join(base: str, *parts: str) -> str:
    if "://" in base:
        return posixpath.join(base, *parts)
    return os.path.join(base, *parts)


def _checkpoint_metadata(path: str) -> dict[str, Any] | None:
    """The verified ``metadata.json`` of the checkpoint at ``path``, or None when there is none.

    Read through the engine's reader, like any load: manifest first, sizes and checksums checked,
    bounded, regular files only. Damage raises (a damaged checkpoint is not "no checkpoint").
    """
    from cairn._reader import open_checkpoint
    from cairn.errors import CheckpointNotFoundError

    try:
        return open_checkpoint(path, None).metadata
    except CheckpointNotFoundError:
        return None


class _Evaluated(NamedTuple):
    module_folder: str
    algo_root: str | None
    algo_metadata: dict[str, Any] | None
    module: RLModule


def _load_for_evaluation(checkpoint: str, module_id: str) -> _Evaluated:
    """The module ``cairn evaluate CKPT`` runs, with where it came from.

    CKPT is an algorithm checkpoint, a module folder, a MultiRLModule folder, or a manager's
    root: there the newest checkpoint that loads is used, as ``--resume`` does (damaged ones are
    skipped with a warning).
    """
    from cairn.errors import CheckpointNotFoundError
    from cairn.manager import CheckpointManager

    metadata = _checkpoint_metadata(checkpoint)
    if metadata is not None:
        with _single_threaded():
            return _load_module(checkpoint.rstrip("/"), metadata, module_id)
    with _single_threaded():
        found = _load_newest_sound(CheckpointManager(checkpoint), lambda path: _load_module(path, None, module_id))
    if found is None:
        raise CheckpointNotFoundError(
            f"No checkpoint at {checkpoint}: expected an algorithm checkpoint, a module folder, "
            "or a checkpoint manager's root with step_* checkpoints."
        )
    return found[1]


@contextlib.contextmanager
def _single_threaded() -> Iterator[None]:
    """Run the block with one torch intra-op thread, then restore the caller's setting.

    Building a module initialises weights that the restore then overwrites, and that
    initialisation (an orthogonal init's QR decomposition) is the first parallel call:
    it starts the OpenMP/MKL thread team, 0.2-0.5 s of wall time on a busy 2-core machine,
    for nothing. One thread computes it in a millisecond. The module's forward passes then
    run with the user's thread count; batch-of-one inference on small networks never starts
    the team, and a network large enough to use it starts it on its first forward as before.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _load_module(root: str, metadata: dict[str, Any] | None, module_id: str) -> _Evaluated:
    import cairn.rl.algorithms.dqn.default_dqn_rl_module
    import cairn.rl.algorithms.sac.default_sac_rl_module
    import cairn.rl.core.rl_module.multi_rl_module  # noqa: F401 - registers PPO's default module (0.1 paths too)
    from cairn._reader import open_checkpoint
    from cairn.errors import CheckpointNotFoundError
    from cairn.rl.core.rl_module.rl_module import RLModule

    if metadata is None:
        metadata = open_checkpoint(root, None).metadata
    cls = str(metadata.get("class", ""))
    algo_root: str | None = None
    algo_metadata: dict[str, Any] | None = None
    if "num_parameters" in metadata:  # RLModule.get_metadata's key: a module of any class
        # A module folder; its algorithm (for the env and the observation filter) may be above.
        module_folder = root
        parts = root.split("/")
        if len(parts) > 4 and tuple(parts[-4:-1]) == MODULE_PATH:
            algo_root = "/".join(parts[:-4])
            algo_metadata = _checkpoint_metadata(algo_root)
            algo_root = algo_root if algo_metadata is not None else None
    elif cls.endswith(":MultiRLModule"):
        module_folder = f"{root}/{module_id}"
    else:
        module_folder = "/".join([root, *MODULE_PATH, module_id])
        algo_root, algo_metadata = root, metadata
        if _checkpoint_metadata(module_folder) is None:
            multi = _checkpoint_metadata("/".join([root, *MODULE_PATH]))
            modules = (multi or metadata).get("module_ids")
            raise CheckpointNotFoundError(
                f"The checkpoint {root} has no module {module_id!r}"
                + (f"; its modules are {modules}." if modules else ".")
            )
    return _Evaluated(module_folder, algo_root, algo_metadata, RLModule.from_checkpoint(module_folder))


def _load_filter(algo_root: str | None) -> ConnectorPipeline | None:
    if algo_root is None:
        return None
    from cairn.errors import CheckpointNotFoundError
    from cairn.rl.connectors.connectors import ConnectorPipeline

    try:
        return ConnectorPipeline.from_checkpoint(_join(algo_root, "env_runner", "env_to_module_connector"))
    except CheckpointNotFoundError:
        return None


def evaluate_module(
    module: RLModule,
    env_id: str,
    *,
    episodes: int,
    seed: int,
    obs_filter: ConnectorPipeline | None = None,
) -> list[float]:
    """Run ``episodes`` greedy episodes of ``module`` on ``env_id``; returns their returns."""
    import gymnasium as gym
    import numpy as np
    import torch

    from cairn.rl.env.multi_agent_env import check_env_id, make_env

    check_env_id(env_id)  # the id may come from a checkpoint's metadata: never import what it names
    env = make_env(env_id, {})
    returns: list[float] = []
    try:
        for episode in range(episodes):
            obs, _ = env.reset(seed=seed + episode)
            total, done = 0.0, False
            while not done:
                batch = np.asarray(obs)[None]
                if obs_filter is not None:
                    batch = obs_filter(batch, update=False)
                action = module.forward_inference({"obs": torch.as_tensor(batch)})["actions"][0]
                env_action: Any = action.numpy()
                if isinstance(env.action_space, gym.spaces.Box):
                    env_action = np.clip(env_action, env.action_space.low, env.action_space.high)
                else:
                    env_action = int(env_action)
                obs, reward, terminated, truncated, _ = env.step(env_action)
                total += float(reward)
                done = bool(terminated or truncated)
            returns.append(total)
    finally:
        env.close()
    return returns


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Handler of ``cairn evaluate``; returns the exit status."""
    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1.")
    module_folder, algo_root, algo_metadata, module = _load_for_evaluation(args.checkpoint, args.module)
    env_id = args.env
    if env_id is None and algo_metadata is not None:
        env_id = algo_metadata.get("env")
    if env_id is None:
        raise ValueError(
            f"{module_folder} is a module checkpoint without its algorithm; pass --env to say "
            "which environment to run it in."
        )
    obs_filter = _load_filter(algo_root)
    returns = evaluate_module(module, str(env_id), episodes=args.episodes, seed=args.seed, obs_filter=obs_filter)
    mean = sum(returns) / len(returns)
    print(
        f"cairn evaluate: {safe_text(module_folder)} on {safe_text(env_id)}"
        + (" (with the checkpoint's observation filter)" if obs_filter is not None else ""),
        file=sys.stderr,
    )
    print(f"mean return over {len(returns)} episodes: {mean:.2f}")
    return 0
