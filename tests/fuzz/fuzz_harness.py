"""The fuzz harness: a worker process per session, one case = one mutated checkpoint through every load path.

A case copies a template into ``<case>/root/step_000000001``, applies a
mutation (:mod:`fuzz_mutate`), then sends each operation of :data:`OPS` to the
worker (:mod:`fuzz_worker`) with a deadline. :func:`judge` turns each result
into findings (strings ``"<op>: <class>: <detail>"``); the tests assert there
are none. Counts of cases, operations and finding classes are tallied per test
and printed at the end of the session (see ``conftest.py``).

Environment:
    CAIRN_FUZZ_EXAMPLES   examples per test (default: the CI budget of each test)
    CAIRN_FUZZ_TIMEOUT    seconds one operation may take (default 10; 30 under pytest-xdist)
    CAIRN_FUZZ_COLLECT=1  record findings without failing, run every op of every case
                          (to survey the failure classes of a build)
    CAIRN_FUZZ_REPORT     a path: the tally is also written there as JSON
    CAIRN_FUZZ_VERBOSE=1  also print how each operation ended (ok or which CheckpointError), per test
"""

from __future__ import annotations

import collections
import json
import os
import re
import selectors
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import fuzz_mutate as fm

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = ("restore", "from_checkpoint", "verify", "inspect", "diff", "latest")
# Under pytest-xdist the worker shares the cores with another test worker and Ray's actors: an
# operation may wait its turn for several seconds (a 50,000-record bloat took > 12 s at a load of 8),
# and 30 s still tells a hang from a slow answer.
TIMEOUT = float(os.environ.get("CAIRN_FUZZ_TIMEOUT", "30" if os.environ.get("PYTEST_XDIST_WORKER") else "10"))
VERBOSE = os.environ.get("CAIRN_FUZZ_VERBOSE", "") not in ("", "0")
COLLECT = os.environ.get("CAIRN_FUZZ_COLLECT", "") not in ("", "0")
MEMORY_FACTOR, MEMORY_CONSTANT = 16, 64 * 2**20
STEP_NAME = re.compile(r"step_[0-9]{9,}", re.ASCII)

# Modules a sound load may import lazily the first time an error path runs (not named by a checkpoint).
HARMLESS_IMPORTS = re.compile(r"^(encodings\..*|_strptime|unicodedata|numpy\.lib\..*|numpy\._core\._.*|_?json\..*)$")


@dataclass
class Tally:
    """What one test ran and found."""

    cases: int = 0
    ops: int = 0
    findings: collections.Counter[str] = field(default_factory=collections.Counter)
    examples: dict[str, str] = field(default_factory=dict)
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)


TALLY: dict[str, Tally] = collections.defaultdict(Tally)


class WorkerClient:
    """The worker process: started lazily, killed and restarted after a hang, a crash or a tainting import."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.proc: subprocess.Popen[str] | None = None
        self.restarts = 0

    def _start(self) -> subprocess.Popen[str]:
        env = dict(os.environ)
        tests = os.path.dirname(HERE)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, tests, env.get("PYTHONPATH", "")) if p)
        log = open(os.path.join(self.workdir, "worker_stderr.log"), "a")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "fuzz_worker.py"), self.workdir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
        log.close()
        line = self._readline(proc, 300.0)
        if line is None or "ready" not in line:
            self._kill(proc)
            with open(os.path.join(self.workdir, "worker_stderr.log")) as f:
                raise RuntimeError(f"the fuzz worker did not start: {f.read()[-3000:]}")
        return proc

    @staticmethod
    def _readline(proc: subprocess.Popen[str], timeout: float) -> str | None:
        assert proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                return None
        return proc.stdout.readline()

    @staticmethod
    def _kill(proc: subprocess.Popen[str]) -> None:
        proc.kill()  # our own child, by its handle
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()

    def restart(self) -> None:
        """Drop the current worker; the next call starts a fresh one."""
        if self.proc is not None:
            self._kill(self.proc)
            self.proc = None
            self.restarts += 1

    def run(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Run one operation: the worker's result, or ``{"outcome": "hang"|"crash"}``."""
        if self.proc is None:
            self.proc = self._start()
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.restart()
            return {"outcome": "crash", "rc": "broken pipe"}
        line = self._readline(self.proc, deadline(int(cmd.get("bytes", 0))))
        if line is None:
            self.restart()
            return {"outcome": "hang"}
        if not line:
            rc = self.proc.wait()
            self.restart()
            return {"outcome": "crash", "rc": rc}
        result: dict[str, Any] = json.loads(line)
        if result.get("new_modules"):
            self.restart()  # a module the checkpoint imported may have changed the process
        return result

    def close(self) -> None:
        """Stop the worker (closing its stdin ends it)."""
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def deadline(size: int) -> float:
    """Seconds one operation may take on a checkpoint of ``size`` bytes: TIMEOUT, plus 2 s per MB held."""
    return TIMEOUT + 2.0 * size / 2**20


def disk_bytes(root: str) -> int:
    """Bytes of the regular files under ``root`` (symlinks not followed)."""
    total = 0
    for dirpath, _dirs, files in fm.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                total += st.st_size
    return total


def judge(op: str, r: dict[str, Any], applied: Any, size: int, *, strict_latest: bool = False) -> list[str]:
    """The findings of one operation's result (empty when it behaved)."""
    out = r.get("outcome")
    if out == "hang":
        return [f"{op}: hang: no answer within {deadline(size):.0f} s"]
    if out == "crash":
        return [f"{op}: crash: the worker process died (rc {r.get('rc')})"]
    found: list[str] = []
    if out == "raised" and not r.get("checkpoint_error"):
        found.append(f"{op}: raised {r['exc']}: at {r.get('where')}: {r.get('msg', '')[:160]}")
    bound = MEMORY_FACTOR * size + MEMORY_CONSTANT
    if r.get("peak", 0) > bound:
        found.append(f"{op}: memory: traced peak {r['peak']} B > bound {bound} B (checkpoint {size} B)")
    new = [m for m in r.get("new_modules", []) if not HARMLESS_IMPORTS.match(m)]
    if new:
        found.append(f"{op}: import: the load imported {', '.join(new[:5])}")
    ok = out == "ok"
    if ok and op in applied.must_fail and (op != "verify" or r.get("problems", 0) == 0):
        found.append(f"{op}: accepted: succeeded although a file it reads is changed or not a regular file")
    if not applied.changed and not ok and op != "latest":
        found.append(f"{op}: refused-sound: failed on a checkpoint whose bytes were not changed: {r.get('msg')}")
    if (
        not applied.changed
        and ok
        and ((op == "verify" and r.get("problems")) or (op == "diff" and r.get("differences")))
    ):
        found.append(f"{op}: refused-sound: reports problems on an unchanged checkpoint")
    labels: dict[str, str] = r.get("labels", {})
    if op == "restore" and out == "raised":
        touched = sorted(k for k, v in labels.items() if v not in ("pristine", "either"))
        # Documented (docs/format.md, Trust): files are all verified before anything is applied, but
        # a set_state that refuses its (verified) values fails after the components below it were
        # applied. That is allowed only when the error says so, and only with the checkpoint's own
        # values in the components already applied (never garbage).
        said_partly = "IncompatibleCheckpointError" in str(r.get("exc")) and "partly restored" in str(r.get("msg"))
        if touched and not (said_partly and all(labels[k] == "expected" for k in touched)):
            found.append(f"{op}: partial: a failed restore changed the target ({', '.join(touched)})")
    if op in ("restore", "from_checkpoint") and ok:
        if r.get("isinstance") is False:
            found.append(f"{op}: wrong-class: from_checkpoint returned an object of another class")
        for label, v in sorted(labels.items()):
            if v in ("expected", "either") or label in applied.any_value:
                continue
            if label in applied.left_as_is and (v == "pristine" or op == "from_checkpoint"):
                continue
            found.append(f"{op}: wrong-values: component {label or '<root>'!r} restored {v} values")
    if op == "latest" and ok and r.get("latest"):
        name = os.path.basename(str(r["latest"]).rstrip("/"))
        if applied.step_name_check and not STEP_NAME.fullmatch(name):
            found.append(f"latest: step-name: offered the folder {name!r} as a step")
        if strict_latest and r.get("latest_problems"):
            found.append(f"latest: unverified: offered a checkpoint that fails verification ({r['latest_problems']})")
    return found


def finding_class(finding: str) -> str:
    """The class of a finding: op, kind and (for raw exceptions) the exception type and place."""
    parts = finding.split(": ")
    if parts[1].startswith("raised"):
        return ": ".join(parts[:3])
    return ": ".join(parts[:2])


@dataclass
class Case:
    """One mutated checkpoint and what the operations did with it."""

    findings: list[str]
    applied: Any


def run_case(
    client: WorkerClient,
    template: Any,
    mutation: Any,
    workdir: str,
    test: str,
    *,
    ops: tuple[str, ...] = OPS,
    strict_latest: bool = False,
) -> Case:
    """Mutate a copy of ``template`` and run every op on it; tallies under ``test``."""
    case_dir = tempfile.mkdtemp(prefix="case", dir=workdir)
    tally = TALLY[test]
    tally.cases += 1
    try:
        root = os.path.join(case_dir, "root")
        step = os.path.join(root, "step_000000001")
        shutil.copytree(template.path, step)
        applied = mutation.apply(step)
        size = disk_bytes(root)
        findings: list[str] = []
        for op in ops:
            r = client.run({"op": op, "template": template.name, "path": applied.path, "root": root, "bytes": size})
            tally.ops += 1
            exc = str(r.get("exc", r.get("outcome"))).rsplit(".", 1)[-1]
            tally.outcomes[f"{op}:{'ok' if r.get('outcome') == 'ok' else exc}"] += 1
            found = judge(op, r, applied, size, strict_latest=strict_latest)
            findings += found
            if found and not COLLECT:
                break  # one finding fails the case; a hang would cost every remaining op its deadline
        for f in findings:
            cls = finding_class(f)
            tally.findings[cls] += 1
            tally.examples.setdefault(cls, f"{template.name} {mutation!r}: {f}"[:600])
        return Case(findings, applied)
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


def check(case: Case) -> None:
    """Fail the example unless collecting."""
    if case.findings and not COLLECT:
        raise AssertionError("\n".join(case.findings))


def report() -> list[str]:
    """Lines for the session summary."""
    lines = []
    total_cases = total_ops = 0
    for test, t in sorted(TALLY.items()):
        total_cases += t.cases
        total_ops += t.ops
        lines.append(f"{test}: {t.cases} cases, {t.ops} operations, {sum(t.findings.values())} findings")
        if VERBOSE:
            lines.append("    outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(t.outcomes.items())))
        for cls, n in t.findings.most_common():
            lines.append(f"    {n:5d}  {cls}")
            lines.append(f"           e.g. {t.examples[cls]}")
    lines.append(f"fuzz total: {total_cases} cases, {total_ops} operations")
    path = os.environ.get("CAIRN_FUZZ_REPORT")
    if path:
        with open(path, "w") as f:
            json.dump(export(), f, indent=1)
    return lines


def export() -> dict[str, dict[str, Any]]:
    """The tally in plain types: the JSON report, and what a pytest-xdist worker hands the controller."""
    return {
        k: {
            "cases": v.cases,
            "ops": v.ops,
            "findings": dict(v.findings),
            "examples": v.examples,
            "outcomes": dict(v.outcomes),
        }
        for k, v in TALLY.items()
    }


def merge(exported: dict[str, dict[str, Any]]) -> None:
    """Add a worker's :func:`export` (in the controller, which prints the sum)."""
    for test, part in exported.items():
        tally = TALLY[test]
        tally.cases += part["cases"]
        tally.ops += part["ops"]
        tally.findings.update(part["findings"])
        tally.outcomes.update(part["outcomes"])
        for cls, example in part["examples"].items():
            tally.examples.setdefault(cls, example)


_printed: list[bool] = []


def terminal_summary(terminalreporter: Any) -> None:
    """Print :func:`report` once (both this folder's conftest and, under xdist, the root's ask)."""
    if TALLY and not _printed:
        _printed.append(True)
        terminalreporter.section("cairn fuzz")
        for line in report():
            terminalreporter.write_line(line)
