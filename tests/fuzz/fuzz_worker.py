"""The fuzz suite's worker process: runs one load operation at a time on a (mutated) checkpoint.

Run as ``python fuzz_worker.py WORKDIR``. It reads one JSON command per line
from the pipe the harness gave it as stdin and writes one JSON result per line
to the pipe that was its stdout. Before running anything it moves the protocol
pipes to private descriptors and points fds 0 and 1 at /dev/null, so that code
a checkpoint manages to run (a module's ``__main__`` reading stdin, printing)
cannot disturb the protocol.

Each operation runs under ``tracemalloc`` (peak bytes are reported) and catches
``BaseException``, so ``SystemExit``, ``KeyboardInterrupt``, ``RecursionError``
and ``MemoryError`` are reported as what they are. Hangs are the harness's
business: it kills this process after a deadline and starts another.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
import traceback
import tracemalloc
from typing import Any

OPS = ("restore", "from_checkpoint", "verify", "inspect", "diff", "latest")


def _own_states(obj: Any) -> dict[str, Any]:
    """Each component's own state (without its sub-components' states), by label."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Any]] = [("", obj)]
    while stack:
        label, node = stack.pop()
        kids = node.get_checkpointable_components()
        names = {n for n, _ in kids}
        state = node.get_state()
        out[label] = {k: v for k, v in state.items() if k not in names}
        for name, kid in kids:
            stack.append((f"{label}/{name}" if label else name, kid))
    return out


class Worker:
    """Holds the templates, their expected and pristine states, and runs operations."""

    def __init__(self, workdir: str) -> None:
        import fuzz_components

        import cairn
        from cairn.testing import states_equal

        self.cairn = cairn
        self.states_equal = states_equal
        self.templates = fuzz_components.templates(workdir)
        self.expected = {n: _own_states(t.cls.from_checkpoint(t.path)) for n, t in self.templates.items()}
        self.pristine = {n: _own_states(t.pristine()) for n, t in self.templates.items()}

    def classify(self, template: str, obj: Any) -> dict[str, str]:
        """For each label: 'expected', 'pristine', 'either' (both), 'other' or 'missing'."""
        try:
            got = _own_states(obj)
        except Exception as err:  # the object is broken: report it as such
            return {"<get_state>": f"raised {type(err).__name__}: {err}"}
        out = {}
        for label, want in self.expected[template].items():
            if label not in got:
                out[label] = "missing"
            elif self.states_equal(got[label], want):
                # A component whose own state is the same in the checkpoint and in a fresh object
                # (e.g. an empty one) cannot tell a restore from none.
                same = self.states_equal(got[label], self.pristine[template][label])
                out[label] = "either" if same else "expected"
            elif self.states_equal(got[label], self.pristine[template][label]):
                out[label] = "pristine"
            else:
                out[label] = "other"
        return out

    def op(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Run one operation; returns what happened (never raises)."""
        from cairn.tools import diff_checkpoints, inspect_checkpoint, verify_checkpoint

        name, path, tpl = cmd["op"], cmd["path"], self.templates[cmd["template"]]
        info: dict[str, Any] = {}
        target = tpl.pristine() if name == "restore" else None
        before = set(sys.modules)
        tracemalloc.start()
        t0 = time.monotonic()
        try:
            if name == "restore":
                assert target is not None
                target.restore_from_path(path)
                info["labels"] = self.classify(tpl.name, target)
            elif name == "from_checkpoint":
                obj = tpl.cls.from_checkpoint(path)
                info["isinstance"] = isinstance(obj, tpl.cls)
                info["labels"] = self.classify(tpl.name, obj)
            elif name == "verify":
                problems = verify_checkpoint(path)
                info["problems"] = len(problems)
                info["first"] = problems[0][:300] if problems else ""
            elif name == "inspect":
                info["components"] = len(inspect_checkpoint(path))
            elif name == "diff":
                info["differences"] = len(diff_checkpoints(path, tpl.path))
            elif name == "latest":
                mgr = self.cairn.CheckpointManager(cmd["root"], async_save=False)
                try:
                    latest = mgr.latest()
                finally:
                    mgr.close()
                info["latest"] = latest
                if latest is not None:
                    try:
                        info["latest_problems"] = len(verify_checkpoint(latest))
                    except self.cairn.CheckpointError as err:
                        info["latest_problems"] = f"{type(err).__name__}: {err}"[:300]
            else:
                raise ValueError(name)
            outcome: dict[str, Any] = {"outcome": "ok"}
        except BaseException as err:  # SystemExit & co. are findings, not the end of the worker
            outcome = {
                "outcome": "raised",
                "exc": f"{type(err).__module__}.{type(err).__qualname__}",
                "checkpoint_error": isinstance(err, self.cairn.CheckpointError),
                "msg": str(err)[:2000],
                "where": _where(err),
            }
            if target is not None:
                info["labels"] = self.classify(tpl.name, target)
        seconds = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        new = sorted(m for m in set(sys.modules) - before if not m.startswith("cairn"))
        return {**outcome, **info, "peak": peak, "seconds": seconds, "new_modules": new}


def _where(err: BaseException) -> str:
    """The innermost frame of a traceback outside the standard library: where the raw error escaped."""
    frames = traceback.extract_tb(err.__traceback__)
    for fr in reversed(frames):
        if "/cairn/" in fr.filename:
            return f"{os.path.basename(fr.filename)}:{fr.lineno} {fr.name}"
    return f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def _limit_address_space(extra: int) -> None:
    """Refuse allocations beyond the current size plus ``extra`` bytes: a runaway load raises MemoryError."""
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, resource.RLIM_INFINITY))


def main() -> None:
    """Serve commands until stdin closes."""
    workdir = sys.argv[1]
    cmd_in = os.fdopen(os.dup(0), "r")
    res_out = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115
    sys.stdout = sys.stderr
    cwd = os.path.join(workdir, "worker_cwd")  # empty: nothing for an imported __main__ to discover
    os.makedirs(cwd, exist_ok=True)
    os.chdir(cwd)
    worker = Worker(workdir)
    # Warm up every op on every template, so that lazy imports done by sound loads are not
    # blamed on a checkpoint later.
    for name, tpl in worker.templates.items():
        root = os.path.join(workdir, "warm", name)
        step = os.path.join(root, "step_000000001")
        if not os.path.exists(step):
            shutil.copytree(tpl.path, step)
        for op in OPS:
            r = worker.op({"op": op, "template": name, "path": step, "root": root})
            if r["outcome"] != "ok":
                print(f"fuzz worker: warm-up {op} on {name} failed: {r}", file=sys.stderr)
    _limit_address_space(int(os.environ.get("CAIRN_FUZZ_AS_HEADROOM", str(3 * 2**30))))
    res_out.write(json.dumps({"ready": True}) + "\n")
    res_out.flush()
    for line in cmd_in:
        if not line.strip():
            continue
        result = worker.op(json.loads(line))
        res_out.write(json.dumps(result, default=str) + "\n")
        res_out.flush()


if __name__ == "__main__":
    main()
