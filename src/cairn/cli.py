"""The ``cairn`` command line.

Errors print one line on stderr (a traceback only with ``--debug``) and exit
non-zero; ``verify`` and ``diff`` exit 0 when sound/equal, 1 when broken/
different, and 2 when they could not check, as diff(1) does.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from cairn._display import safe_text
from cairn.errors import CheckpointError

RL_COMMANDS = ("train", "evaluate")
PLOT_COMMAND = "plot"


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print the component tree with classes, sizes, versions and tensors."""
    from cairn.tools import inspect_checkpoint

    infos = inspect_checkpoint(args.checkpoint)
    if args.json:
        print(json.dumps([i.to_json() for i in infos], indent=1))
        return 0
    total = sum(i.size for i in infos)
    # Names, classes and versions come from the checkpoint's files: printed through safe_text.
    print(f"{safe_text(args.checkpoint)}  ({_human(total)}, {len(infos)} components)")
    for info in infos:
        depth = 0 if info.path == "." else info.path.count("/") + 1
        name = "." if info.path == "." else info.path.rsplit("/", 1)[-1]
        flags = " PICKLE" if info.uses_pickle else ""
        line = f"{'  ' * depth}{safe_text(name)}  [{safe_text(info.cls)}]  v{safe_text(info.state_version)}"
        print(f"{line}  {_human(info.size)}{flags}")
        if args.tensors:
            for t in info.tensors:
                what = f"{safe_text(t.name)}: {safe_text(t.dtype)}{safe_text(t.shape)}"
                print(f"{'  ' * (depth + 1)}- {what}  {_human(t.nbytes)}")
        elif info.tensors:
            n = sum(t.nbytes for t in info.tensors)
            print(f"{'  ' * (depth + 1)}{len(info.tensors)} tensors, {_human(n)} (--tensors to list)")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every checksum (and, with ``--public-key``, the signature first); exit 1 when something is broken."""
    from cairn.tools import verify_checkpoint

    if args.public_key is not None:
        from cairn.errors import SignatureError
        from cairn.signing import signed_root

        # The signature first, against the manifests: it is cheap, and a checkpoint it refuses is
        # not worth reading further. The bytes are checked against those manifests just below.
        try:
            signed_root(args.checkpoint, args.public_key)
        except SignatureError as err:
            print(f"cairn verify: SIGNATURE FAILED: {safe_text(err)}", file=sys.stderr)
            return 1
        except CheckpointError as err:
            print(f"cairn verify: {safe_text(err)}", file=sys.stderr)
            return 2
    try:
        problems = verify_checkpoint(args.checkpoint, progress=_progress("verifying"))
    except CheckpointError as err:
        print(f"cairn verify: {safe_text(err)}", file=sys.stderr)
        return 2 if not isinstance(err, _corrupt()) else 1
    if problems:
        for p in problems:
            print(f"BROKEN  {safe_text(p)}")
        print(f"{safe_text(args.checkpoint)}: {len(problems)} broken file(s)", file=sys.stderr)
        return 1
    signed = f", signed by {safe_text(args.public_key)}" if args.public_key is not None else ""
    print(f"OK  {safe_text(args.checkpoint)}: every file matches its manifest{signed}")
    return 0


def cmd_sign(args: argparse.Namespace) -> int:
    """Write the checkpoint's signature (model.sig, OpenSSF model-signing format)."""
    from cairn.signing import sign_checkpoint

    where = sign_checkpoint(args.checkpoint, args.key)
    print(
        f"Signed {safe_text(args.checkpoint)}: wrote {safe_text(where)} "
        "(check: cairn verify --public-key, or model_signing verify key)"
    )
    return 0


def _progress(what: str) -> Callable[[int, int], None] | None:
    """A one-line progress display on stderr, only when it is a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        end = "\n" if done >= total else ""
        print(f"\r{what} {_human(done)} / {_human(total)} ({pct:5.1f}%)", end=end, file=sys.stderr, flush=True)

    return show


def _corrupt() -> type[Exception]:
    from cairn.errors import CorruptCheckpointError

    return CorruptCheckpointError


def cmd_diff(args: argparse.Namespace) -> int:
    """Components and tensors that differ; exit 0 equal, 1 different, 2 error."""
    from cairn.tools import diff_checkpoints

    try:
        diffs = diff_checkpoints(args.a, args.b)
    except CheckpointError as err:
        print(f"cairn diff: {safe_text(err)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"equal": not diffs, "differences": [d.to_json() for d in diffs]}, indent=1))
    elif not diffs:
        print("The checkpoints hold equal states.")
    else:
        for d in diffs:
            extra = f"  max|a-b|={d.max_abs_diff:.6g}" if d.max_abs_diff is not None else ""
            key = f" {safe_text(d.key)}" if d.key else ""
            print(f"{safe_text(d.kind):<9} {safe_text(d.component)}:{key}  {safe_text(d.detail)}{extra}")
    return 1 if diffs else 0


def cmd_extract(args: argparse.Namespace) -> int:
    """Write a standalone checkpoint of one component."""
    from cairn.tools import extract_component

    out = extract_component(args.checkpoint, args.component, args.out)
    print(f"Extracted {safe_text(args.component)} to {safe_text(out)} (verified)")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    """List a manager's checkpoints; with ``--verify``, check each and exit 1 when one is damaged."""
    from cairn._reader import resolve_user_link
    from cairn.errors import CheckpointNotFoundError
    from cairn.manager import CheckpointManager
    from cairn.retention import best_steps
    from cairn.storage.resolve import resolve_storage

    storage, root = resolve_storage(args.root)
    if not storage.isdir(resolve_user_link(storage, root)):  # the root the user typed may be a link
        raise CheckpointNotFoundError(f"No checkpoint folder at {args.root}.")
    mgr = CheckpointManager(args.root, metric=args.metric, mode=args.mode)
    infos = mgr.checkpoints()
    # Without --verify only manifests and metadata are read (cheap); with it every file is,
    # and "latest" and "best" are among the checkpoints that verify ("latest": the one a
    # resume would use).
    problems: dict[int, list[str]] = {}
    if args.verify:
        for info in infos:
            problems[info.step] = mgr.verify(info)
    sound = [i for i in infos if not problems.get(i.step)]
    latest = sound[-1].step if sound else None
    best = best_steps([(i.step, i.metrics) for i in sound], args.metric, args.mode, 1) if args.metric else []
    rows: list[dict[str, Any]] = []
    for info in infos:
        rows.append(
            {
                "step": info.step,
                "path": info.path,
                "created": info.created,
                "size": _folder_size(info.path),
                "metrics": info.metrics,
                "latest": info.step == latest,
                "best": info.step in best,
                "verified": (not problems[info.step]) if args.verify else None,
                "problems": problems.get(info.step, []),
            }
        )
    if args.verify:
        # Step folders whose root manifest or metadata is damaged are no checkpoints to list,
        # but they are damage a check must report.
        for step, path, why in mgr.damaged():
            row = {"step": step, "path": path, "created": "", "size": None, "metrics": {}}
            rows.append({**row, "latest": False, "best": False, "verified": False, "problems": [why]})
        rows.sort(key=lambda r: int(r["step"]))
    damaged = [r for r in rows if r["verified"] is False]
    if damaged:
        names = ", ".join(safe_text(r["path"]) for r in damaged)
        print(
            f"cairn ls: {len(damaged)} of {len(rows)} checkpoints are damaged: {names} "
            "(cairn verify PATH names the broken files).",
            file=sys.stderr,
        )
    status = 1 if damaged else 0
    if args.json:
        print(json.dumps(rows, indent=1))
        return status
    if not rows:
        print(f"No committed checkpoints under {safe_text(args.root)}.")
        return status
    keys = [args.metric] if args.metric else sorted({k for r in rows for k in r["metrics"]})[:4]
    header = f"{'step':>10}  {'created':<25}  {'size':>9}  " + "  ".join(f"{safe_text(k)[-24:]:>24}" for k in keys)
    print(header)
    for r in rows:
        marks = ("DAMAGED " if r["verified"] is False else "") + ("latest " if r["latest"] else "")
        marks += "best" if r["best"] else ""
        size = "?" if r["size"] is None else _human(r["size"])
        vals = "  ".join(f"{_fmt(r['metrics'].get(k)):>24}" for k in keys)
        print(f"{r['step']:>10}  {safe_text(r['created']):<25}  {size:>9}  {vals}  {marks}".rstrip())
    return status


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "-" if v is None else safe_text(v)


def _folder_size(path: str) -> int | None:
    """The bytes a checkpoint's manifests record, or None when they cannot be read (damage)."""
    from cairn.tools import inspect_checkpoint

    try:
        return sum(i.size for i in inspect_checkpoint(path))
    except CheckpointError:
        return None


def cmd_upgrade(args: argparse.Namespace) -> int:
    """Bring every component to its current STATE_VERSION."""
    from cairn.tools import upgrade_checkpoint

    if not args.dry_run and not args.out:
        print("cairn upgrade: OUT is required unless --dry-run is given.", file=sys.stderr)
        return 2
    # An upgrade calls each component class's upgrade_state, and classes are found only in modules
    # already imported (SPEC 8). cairn's own RL components are known code, so the command imports
    # them up front, whatever the checkpoint names; other packages come in through --import.
    with contextlib.suppress(ImportError):
        importlib.import_module("cairn.rl.algorithms.ppo.ppo")
    from cairn.manifest import FORMAT_VERSION
    from cairn.tools import format_version_of

    changes = upgrade_checkpoint(args.checkpoint, args.out, dry_run=args.dry_run)
    for comp, cls, old, new in changes:
        status = "unchanged" if old == new else f"v{old} -> v{new}"
        print(f"{safe_text(comp):<50} {safe_text(cls):<50} {safe_text(status)}")
    fmt = format_version_of(args.checkpoint)
    if fmt != FORMAT_VERSION:
        print(f"checkpoint format {fmt} -> {FORMAT_VERSION} (SHA-256 digests; CRC-32 guards against accidents only)")
    else:
        print(f"checkpoint format {fmt} (current)")
    if args.dry_run:
        n = sum(1 for c in changes if c[2] != c[3])
        print(f"dry run: {n} component(s) would change; nothing was written.")
    else:
        print(f"Wrote the upgraded checkpoint to {safe_text(args.out)} (verified).")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Turn another framework's checkpoint into a cairn checkpoint (RLlib for now)."""
    import time

    from cairn.integrations.rllib import convert_checkpoint  # imports ray; names the extra when missing
    from cairn.tools import inspect_checkpoint

    start = time.perf_counter()
    out = convert_checkpoint(args.src, args.dst, allow_pickle=args.allow_pickle)
    seconds = time.perf_counter() - start
    infos = inspect_checkpoint(out)
    print(
        f"Converted the RLlib checkpoint {safe_text(args.src)} to {safe_text(out)}: {len(infos)} components, "
        f"{_human(sum(i.size for i in infos))}, {seconds:.2f} s, no pickle."
    )
    for info in infos:
        unrecorded = info.metadata.get("rllib_unrecorded") or []
        if unrecorded:
            print(
                f"  {safe_text(info.path)}: not recorded without pickle (pass config= to from_checkpoint): "
                + safe_text(", ".join(map(str, unrecorded)))
            )
    return 0


def build_parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The argument parser (RL commands are registered only when used, to keep startup light)."""
    parser = argparse.ArgumentParser(prog="cairn", description="Safe, verified checkpoints for RL.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (the package of your own components, for from_checkpoint and upgrade)",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    wanted = next((a for a in argv if not a.startswith("-")), None)
    if wanted in RL_COMMANDS:
        from cairn._rl_cli import register

        register(sub)
    else:
        sub.add_parser("train", help="train PPO with checkpoints (cairn train --help)", add_help=False)
        sub.add_parser("evaluate", help="run episodes with a checkpoint's policy", add_help=False)
    if wanted == PLOT_COMMAND:
        from cairn._plot import register as register_plot

        register_plot(sub)
    else:
        sub.add_parser(PLOT_COMMAND, help="plot learning curves of training runs", add_help=False)

    p = sub.add_parser("inspect", help="show the component tree: classes, sizes, versions")
    p.add_argument("checkpoint")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tensors", action="store_true", help="list every tensor with dtype and shape")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("verify", help="check every checksum (exit 1 when broken, 2 on error)")
    p.add_argument("checkpoint")
    p.add_argument(
        "--public-key",
        metavar="KEY.pub",
        help="also check the checkpoint's signature (model.sig) with this PEM public key; exit 1 when it is "
        "missing or wrong",
    )
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("sign", help="sign a checkpoint (model.sig, OpenSSF model-signing format)")
    p.add_argument("checkpoint")
    p.add_argument("--key", required=True, metavar="KEY.pem", help="elliptic-curve private key (P-256/384/521) in PEM")
    p.set_defaults(func=cmd_sign)

    p = sub.add_parser("diff", help="components and tensors that differ (exit 0 equal, 1 different)")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("extract", help="write a standalone checkpoint of one component")
    p.add_argument("checkpoint")
    p.add_argument("component", help="a /-joined component path, e.g. learner_group/learner/rl_module/default_policy")
    p.add_argument("out")
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("ls", help="list a manager's checkpoints with steps and metrics")
    p.add_argument("root")
    p.add_argument("--json", action="store_true")
    p.add_argument("--metric", default="episode_return_mean", help="metric that marks the best")
    p.add_argument("--mode", choices=("max", "min"), default="max")
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every checkpoint's checksums, mark the damaged ones (exit 1 if any); "
        "latest is then the newest that verifies",
    )
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("upgrade", help="bring every component to its current STATE_VERSION")
    p.add_argument("checkpoint")
    p.add_argument("out", nargs="?")
    p.add_argument("--dry-run", action="store_true", help="list what would change, write nothing")
    p.set_defaults(func=cmd_upgrade)

    p = sub.add_parser("convert", help="turn an RLlib checkpoint folder into a cairn checkpoint")
    p.add_argument("framework", choices=["rllib"], help="the framework that wrote SRC")
    p.add_argument("src", help="the RLlib checkpoint folder (Algorithm.save_to_path)")
    p.add_argument("dst", help="where to write the cairn checkpoint (local path or URI)")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="required: RLlib's checkpoints are pickles, and reading them runs code; only for checkpoints you trust",
    )
    p.set_defaults(func=cmd_convert)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cairn`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.error(f"the {args.command} command is not available in this installation")
    try:
        for module in args.imports:
            importlib.import_module(module)
        return func(args)
    except KeyboardInterrupt:
        print("cairn: interrupted", file=sys.stderr)
        return 130
    except ImportError as err:
        if args.debug:
            raise
        print(
            f"cairn {args.command}: error: cannot import {safe_text(err.name or err)}: {safe_text(err)}",
            file=sys.stderr,
        )
        return 2 if args.command in ("verify", "diff") else 1
    except (CheckpointError, OSError, ValueError, RecursionError) as err:
        # RecursionError: the last net under every reader of user input (each names its
        # file and line itself); never a traceback without --debug (SPEC 7).
        if args.debug:
            raise
        print(f"cairn {args.command}: error: {safe_text(err)}", file=sys.stderr)
        return 2 if args.command in ("verify", "diff") else 1


def console_main() -> NoReturn:
    """The ``cairn`` executable and ``python -m cairn``: :func:`main`, then exit with its status.

    Before exiting, every object alive is moved out of the garbage collector's reach
    (``gc.freeze``). With torch loaded, the interpreter's last collections walk its
    hundreds of thousands of objects: 0.4-0.8 s of a ~2 s ``cairn evaluate`` (0.8-1 s after
    ``cairn train``) on a busy 2-core machine, 0.1-0.25 s frozen. Nothing else of the exit
    changes: atexit handlers (Ray's shutdown), the joining of non-daemon threads and the
    flushing of stdout and stderr still run, and the files cairn writes were closed
    explicitly before :func:`main` returned. Only for a process that ends here: called
    in-process (tests, other programs), use :func:`main`.
    """
    status = main()
    gc.freeze()
    sys.exit(status)


if __name__ == "__main__":  # pragma: no cover
    console_main()
