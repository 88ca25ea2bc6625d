"""The checkpoint tools of ``cairn``: inspect, verify, sign, diff, extract, ls, upgrade, convert.

Each handler prints names, paths and messages that come from checkpoint files
through :func:`~cairn._display.safe_text`, and returns the exit status; errors
it does not handle itself are printed as one line by :func:`cairn.cli.main`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
from typing import Any

from cairn._display import safe_text
from cairn._metrics import RETURN_METRIC
from cairn.cli.command import Command, UsageError, did_you_mean, require_folder
from cairn.cli.display import format_value, human_size, progress
from cairn.errors import CheckpointError

__all__ = [
    "COMMANDS",
    "cmd_convert",
    "cmd_diff",
    "cmd_extract",
    "cmd_inspect",
    "cmd_ls",
    "cmd_sign",
    "cmd_upgrade",
    "cmd_verify",
]


_CHECKPOINT_HELP = "a checkpoint folder (cairn train saves DIR/step_NNNNNNNNN), e.g. runs/cartpole/step_000000040"

# ---------------------------------------------------------------------- inspect


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print the component tree with classes, sizes, versions and tensors."""
    from cairn.tools import inspect_checkpoint

    require_folder(args.checkpoint)
    infos = inspect_checkpoint(args.checkpoint)
    if args.json:
        print(json.dumps([i.to_json() for i in infos], indent=1))
        return 0
    total = sum(i.size for i in infos)
    # Names, classes and versions come from the checkpoint's files: printed through safe_text.
    print(f"{safe_text(args.checkpoint)}  ({human_size(total)}, {len(infos)} components)")
    for info in infos:
        depth = 0 if info.path == "." else info.path.count("/") + 1
        name = "." if info.path == "." else info.path.rsplit("/", 1)[-1]
        flags = " PICKLE" if info.uses_pickle else ""
        line = f"{'  ' * depth}{safe_text(name)}  [{safe_text(info.cls)}]  v{safe_text(info.state_version)}"
        print(f"{line}  {human_size(info.size)}{flags}")
        if args.tensors:
            for t in info.tensors:
                what = f"{safe_text(t.name)}: {safe_text(t.dtype)}{safe_text(t.shape)}"
                print(f"{'  ' * (depth + 1)}- {what}  {human_size(t.nbytes)}")
        elif info.tensors:
            n = sum(t.nbytes for t in info.tensors)
            print(f"{'  ' * (depth + 1)}{len(info.tensors)} tensors, {human_size(n)} (--tensors to list)")
    return 0


def _inspect_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tensors", action="store_true", help="list every tensor with dtype and shape")


# ---------------------------------------------------------------------- verify, sign


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every checksum (and, with ``--public-key``, the signature first); exit 1 when something is broken."""
    from cairn.errors import CorruptCheckpointError
    from cairn.tools import verify_checkpoint

    require_folder(args.checkpoint)  # a file is a usage error (exit 2), not a broken checkpoint (exit 1)
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
        problems = verify_checkpoint(args.checkpoint, progress=progress("verifying"))
    except CheckpointError as err:
        print(f"cairn verify: {safe_text(err)}", file=sys.stderr)
        return 1 if isinstance(err, CorruptCheckpointError) else 2
    if problems:
        for p in problems:
            print(f"BROKEN  {safe_text(p)}")
        print(f"{safe_text(args.checkpoint)}: {len(problems)} broken file(s)", file=sys.stderr)
        return 1
    signed = f", signed by {safe_text(args.public_key)}" if args.public_key is not None else ""
    print(f"OK  {safe_text(args.checkpoint)}: every file matches its manifest{signed}")
    return 0


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument(
        "--public-key",
        metavar="KEY.pub",
        help="also check the checkpoint's signature (model.sig) with this PEM public key; exit 1 when it is "
        "missing or wrong",
    )


def cmd_sign(args: argparse.Namespace) -> int:
    """Write the checkpoint's signature (model.sig, OpenSSF model-signing format)."""
    from cairn.signing import sign_checkpoint

    require_folder(args.checkpoint)
    where = sign_checkpoint(args.checkpoint, args.key)
    print(
        f"Signed {safe_text(args.checkpoint)}: wrote {safe_text(where)} "
        "(check: cairn verify --public-key, or model_signing verify key)"
    )
    return 0


def _sign_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument(
        "--key",
        required=True,
        metavar="KEY.pem",
        help="elliptic-curve private key (P-256/384/521) in PEM, e.g. --key signing.pem "
        "(openssl ecparam -name prime256v1 -genkey -noout -out signing.pem)",
    )


# ---------------------------------------------------------------------- diff, extract


def cmd_diff(args: argparse.Namespace) -> int:
    """Components and tensors that differ; exit 0 equal, 1 different, 2 error."""
    from cairn.tools import diff_checkpoints

    require_folder(args.a)
    require_folder(args.b)
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


def _diff_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="a checkpoint folder, e.g. runs/a/step_000000040")
    p.add_argument("b", help="the checkpoint folder to compare it with, e.g. runs/b/step_000000040")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def cmd_extract(args: argparse.Namespace) -> int:
    """Write a standalone checkpoint of one component."""
    from cairn.tools import extract_component

    require_folder(args.checkpoint)
    out = extract_component(args.checkpoint, args.component, args.out)
    print(f"Extracted {safe_text(args.component)} to {safe_text(out)} (verified)")
    if "://" not in str(args.checkpoint):
        from cairn.rl.utils.companions import connectors_note

        note = connectors_note(f"{str(args.checkpoint).rstrip('/')}/{str(args.component).strip('/')}")
        if note is not None:  # a module leaves its observation filter behind: say so, with the line that applies it
            print(f"cairn extract: {safe_text(note)}", file=sys.stderr)
    return 0


def _extract_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument(
        "component",
        help="a /-joined component path (cairn inspect lists them), "
        "e.g. learner_group/learner/rl_module/default_policy",
    )
    p.add_argument("out", help="the folder to write, e.g. policy_only (it must not exist)")


# ---------------------------------------------------------------------- ls

DEFAULT_METRIC = RETURN_METRIC
"""The metric ``cairn ls`` ranks by when the checkpoints record it (``cairn train``'s)."""


def cmd_ls(args: argparse.Namespace) -> int:
    """List a manager's checkpoints; with ``--verify``, check each and exit 1 when one is damaged."""
    from cairn._reader import resolve_user_link
    from cairn.errors import CheckpointNotFoundError
    from cairn.storage.resolve import resolve_storage

    require_folder(args.root, what="checkpoint manager's root")
    storage, root = resolve_storage(args.root)
    if not storage.isdir(resolve_user_link(storage, root)):  # the root the user typed may be a link
        hint = ""
        if "://" not in args.root:
            parent = os.path.dirname(os.path.abspath(args.root))
            siblings = [e.name for e in os.scandir(parent) if e.is_dir()] if os.path.isdir(parent) else []
            hint = did_you_mean(os.path.basename(os.path.normpath(args.root)), siblings)
        raise CheckpointNotFoundError(f"{args.root} does not exist{hint}: cairn ls lists a checkpoint manager's root.")
    rows = _ls_rows(args)
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
    elif not rows:
        print(f"No committed checkpoints under {safe_text(args.root)}.")
    else:
        _print_ls_table(rows, args.metric, args.mode)
    return status


def _ls_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per checkpoint of ``args.root`` (and, with ``--verify``, per damaged step folder)."""
    from cairn.manager import CheckpointManager
    from cairn.retention import KNOWN_MODES, KeepBest, best_steps

    mgr = CheckpointManager(args.root)
    infos = mgr.checkpoints()  # their metrics under today's names, whatever version recorded them
    if args.metric is None:
        # cairn train's metric when the run records it; else none (a torch loop's run names its own):
        # the table then shows the metrics the checkpoints record, not a column of dashes.
        args.metric = DEFAULT_METRIC if any(DEFAULT_METRIC in i.metrics for i in infos) else None
    if args.metric is not None:
        if args.mode is None and args.metric not in KNOWN_MODES:
            raise UsageError(
                f"cairn ls --metric {args.metric}: say which end is best, --mode max or --mode min "
                f"(known without it: {', '.join(sorted(KNOWN_MODES))})."
            )
        args.mode = KeepBest(1, args.metric, args.mode).better  # the mode given or known
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
    rows: list[dict[str, Any]] = [
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
        for info in infos
    ]
    if args.verify:
        # Step folders whose root manifest or metadata is damaged are no checkpoints to list,
        # but they are damage a check must report.
        for step, path, why in mgr.damaged():
            row = {"step": step, "path": path, "created": "", "size": None, "metrics": {}}
            rows.append({**row, "latest": False, "best": False, "verified": False, "problems": [why]})
        rows.sort(key=lambda r: int(r["step"]))
    return rows


def _print_ls_table(rows: list[dict[str, Any]], metric: str | None, mode: str | None) -> None:
    if metric:
        print(f"best: by {safe_text(metric)}, {'largest' if mode == 'max' else 'smallest'} ({mode})")
    keys = [metric] if metric else sorted({k for r in rows for k in r["metrics"]})[:4]
    # Each metric's column is as wide as its whole name (a name cut short is a name misread) or its values.
    names = [safe_text(k) for k in keys]
    cells = [[format_value(r["metrics"].get(k)) for k in keys] for r in rows]
    widths = [max([len(name), *(len(row[i]) for row in cells)]) for i, name in enumerate(names)]
    header = f"{'step':>10}  {'created':<25}  {'size':>9}  " + "  ".join(
        f"{n:>{w}}" for n, w in zip(names, widths, strict=True)
    )
    print(header.rstrip())
    for r, row in zip(rows, cells, strict=True):
        marks = ("DAMAGED " if r["verified"] is False else "") + ("latest " if r["latest"] else "")
        marks += "best" if r["best"] else ""
        size = "?" if r["size"] is None else human_size(r["size"])
        vals = "  ".join(f"{v:>{w}}" for v, w in zip(row, widths, strict=True))
        print(f"{r['step']:>10}  {safe_text(r['created']):<25}  {size:>9}  {vals}  {marks}".rstrip())


def _folder_size(path: str) -> int | None:
    """The bytes a checkpoint's manifests record, or None when they cannot be read (damage)."""
    from cairn.tools import inspect_checkpoint

    try:
        return sum(i.size for i in inspect_checkpoint(path))
    except CheckpointError:
        return None


def _ls_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", help="a checkpoint manager's root (cairn train's --checkpoint-dir), e.g. runs/cartpole")
    p.add_argument("--json", action="store_true", help="machine-readable output: one object per checkpoint")
    p.add_argument(
        "--metric",
        default=None,
        help=f"the metric that marks the best and is shown, e.g. --metric loss (default: {DEFAULT_METRIC} "
        "when the checkpoints record it, else none: the first four recorded metrics are shown)",
    )
    p.add_argument(
        "--mode",
        choices=("max", "min"),
        default=None,
        help="which end of --metric is best, e.g. --mode min (needed unless --metric is known: "
        "env_runners/episode_return_mean is max, loss is min)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="check every checkpoint's checksums, mark the damaged ones (exit 1 if any); "
        "latest is then the newest that verifies",
    )


# ---------------------------------------------------------------------- upgrade, convert


def cmd_upgrade(args: argparse.Namespace) -> int:
    """Bring every component to its current STATE_VERSION."""
    from cairn.manifest import FORMAT_VERSION
    from cairn.rl.algorithms.catalog import ALGORITHMS
    from cairn.tools import format_version_of, upgrade_checkpoint

    require_folder(args.checkpoint)
    if not args.dry_run and not args.out:
        print("cairn upgrade: OUT is required unless --dry-run is given.", file=sys.stderr)
        return 2
    # An upgrade calls each component class's upgrade_state, and classes are found only in modules
    # already imported (SPEC 8). cairn's own RL components are known code, so the command imports
    # them up front, whatever the checkpoint names; other packages come in through --import.
    for entry in ALGORITHMS.values():
        with contextlib.suppress(ImportError):  # an installation without torch or gymnasium
            importlib.import_module(entry.module)
    changes = upgrade_checkpoint(args.checkpoint, args.out, dry_run=args.dry_run)
    for comp, cls, old, new in changes:
        status = "unchanged" if old == new else f"v{old} -> v{new}"
        print(f"{safe_text(comp):<50} {safe_text(cls):<50} {safe_text(status)}")
    fmt = format_version_of(args.checkpoint)
    if fmt != FORMAT_VERSION:
        print(f"checkpoint format {fmt} -> {FORMAT_VERSION} (BLAKE3 digests, recorded in each manifest)")
    else:
        print(f"checkpoint format {fmt} (current)")
    if args.dry_run:
        n = sum(1 for c in changes if c[2] != c[3])
        print(f"dry run: {n} component(s) would change; nothing was written.")
    else:
        print(f"Wrote the upgraded checkpoint to {safe_text(args.out)} (verified).")
    return 0


def _upgrade_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", help=_CHECKPOINT_HELP)
    p.add_argument("out", nargs="?", help="the folder to write the upgraded checkpoint to, e.g. upgraded/step_40")
    p.add_argument("--dry-run", action="store_true", help="list what would change and write nothing, e.g. --dry-run")


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
        f"{human_size(sum(i.size for i in infos))}, {seconds:.2f} s, no pickle."
    )
    for info in infos:
        unrecorded = info.metadata.get("rllib_unrecorded") or []
        if unrecorded:
            print(
                f"  {safe_text(info.path)}: not recorded without pickle (pass config= to from_checkpoint): "
                + safe_text(", ".join(map(str, unrecorded)))
            )
    return 0


def _convert_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("framework", choices=["rllib"], help="the framework that wrote SRC: rllib")
    p.add_argument(
        "src", help="the RLlib checkpoint folder (Algorithm.save_to_path), e.g. ~/ray_results/PPO/checkpoint_000010"
    )
    p.add_argument("dst", help="where to write the cairn checkpoint (local path or URI), e.g. converted")
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="required: RLlib's checkpoints are pickles, and reading them runs code; only for checkpoints you trust",
    )


COMMANDS = (
    Command(
        "inspect",
        "show the component tree: classes, sizes, versions",
        _inspect_arguments,
        cmd_inspect,
        examples=(
            "cairn inspect runs/cartpole/step_000000040",
            "cairn inspect runs/cartpole/step_000000040 --tensors | head -30",
        ),
    ),
    Command(
        "verify",
        "check every checksum (exit 1 when broken, 2 on error)",
        _verify_arguments,
        cmd_verify,
        error_status=2,
        examples=(
            "cairn verify runs/cartpole/step_000000040",
            "cairn verify runs/cartpole/step_000000040 --public-key signing.pub",
        ),
    ),
    Command(
        "sign",
        "sign a checkpoint (model.sig, OpenSSF model-signing format)",
        _sign_arguments,
        cmd_sign,
        examples=("cairn sign runs/cartpole/step_000000040 --key signing.pem",),
    ),
    Command(
        "diff",
        "components and tensors that differ (exit 0 equal, 1 different)",
        _diff_arguments,
        cmd_diff,
        error_status=2,
        examples=("cairn diff runs/a/step_000000040 runs/b/step_000000040",),
    ),
    Command(
        "extract",
        "write a standalone checkpoint of one component",
        _extract_arguments,
        cmd_extract,
        examples=(
            "cairn extract runs/cartpole/step_000000040 learner_group/learner/rl_module/default_policy policy",
            "cairn evaluate policy --env CartPole-v1   # the extracted module runs on its own",
        ),
    ),
    Command(
        "ls",
        "list a manager's checkpoints with steps and metrics",
        _ls_arguments,
        cmd_ls,
        examples=(
            "cairn ls runs/cartpole",
            "cairn ls runs/cartpole --verify",
            "cairn ls my_run --metric loss --mode min",
        ),
    ),
    Command(
        "upgrade",
        "bring every component to its current STATE_VERSION",
        _upgrade_arguments,
        cmd_upgrade,
        examples=(
            "cairn upgrade runs/old/step_000000040 --dry-run",
            "cairn --import mypkg upgrade runs/old/step_000000040 upgraded/step_000000040",
        ),
    ),
    Command(
        "convert",
        "turn an RLlib checkpoint folder into a cairn checkpoint",
        _convert_arguments,
        cmd_convert,
        examples=("cairn convert rllib ~/ray_results/PPO/checkpoint_000010 converted --allow-pickle",),
    ),
)
"""The checkpoint tools, in the order ``cairn --help`` lists them."""
