"""The benchmark suite: cases, targets, the table and the JSON report.

Run ``python -m bench --help``. Each case measures cairn and its baselines in
the same run on the same data, interleaved round by round, and reports the
median of the timed rounds after an untimed warm-up round.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from bench import replay, replay_per, sampling_cpu, small_rl, util
from bench.util import MB, Method, interleave

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = (
    "save", "savecpu", "restore", "digests", "partial", "async", "incremental", "small", "memory", "import",
    "inspect", "startup", "ppo", "sampling", "replay", "replay_per", "smallrl",
)  # fmt: skip


@dataclass
class Row:
    """One line of the table."""

    case: str
    what: str
    value: str  # the measured figure, human-readable
    baseline: str  # what it is compared with, and that figure
    ratio: float | None
    target: str = ""  # e.g. ">= 0.80"
    ok: bool | None = None  # None: no target
    data: dict[str, Any] = field(default_factory=dict)
    best: float | None = None  # the same ratio from each contender's fastest round (less noise-prone)

    @property
    def status(self) -> str:
        return "" if self.ok is None else ("PASS" if self.ok else "MISS")


class Context:
    """What the cases share: options, the temp dir, lazily built states and checkpoints."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick: bool = args.quick
        self.size_gb: float = args.size_gb if args.size_gb is not None else (0.1 if args.quick else 1.2)
        self.params = int(self.size_gb * 1e9 / 12)  # float32 params + two Adam buffers
        self.reps: int = args.reps if args.reps is not None else (3 if self.quick else 5)
        base = args.tmp or ("/work/tmp" if os.path.isdir("/work/tmp") else tempfile.gettempdir())
        os.makedirs(base, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="cairn-bench-", dir=base)
        self.rows: list[Row] = []
        self.raw: dict[str, Any] = {}
        self._model: Any = None
        self._eight: Any = None
        self._model_ckpt: str | None = None
        self.notes: list[str] = []

    def log(self, msg: str) -> None:
        if self.args.verbose:
            print(msg, file=sys.stderr, flush=True)

    def say(self, msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def path(self, *parts: str) -> str:
        p = os.path.join(self.tmp, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    @property
    def model(self) -> Any:
        if self._model is None:
            from bench.workload import ModelAdamState, model_spec

            t0 = time.perf_counter()
            self._model = ModelAdamState(model_spec(self.params))
            self.say(
                f"  built the model+Adam state: {len(self._model.flat_tensors())} tensors, "
                f"{self._model.nbytes / MB:.0f} MB in {time.perf_counter() - t0:.1f} s"
            )
        return self._model

    @property
    def eight(self) -> Any:
        if self._eight is None:
            from bench.workload import EightModules

            t0 = time.perf_counter()
            self._eight = EightModules(self.params // 8)
            total = sum(self._eight.module_nbytes(n) for n in self._eight.modules)
            self.say(f"  built eight modules: {total / MB:.0f} MB in {time.perf_counter() - t0:.1f} s")
        return self._eight

    def model_ckpt(self) -> str:
        """A cairn checkpoint of the model state (for restore, inspect)."""
        if self._model_ckpt is None or not os.path.isdir(self._model_ckpt):
            p = self.path("model_ckpt")
            self.model.save_to_path(p)
            self._model_ckpt = p
        return self._model_ckpt

    def add(self, row: Row) -> None:
        self.rows.append(row)
        flag = f"  [{row.status}]" if row.status else ""
        ratio = f"  ratio {row.ratio:.3f}" if row.ratio is not None else ""
        self.say(f"  {row.case}: {row.what}: {row.value}{ratio}{flag}")


def _mbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / MB:,.0f} MB/s ({seconds:.3f} s)"


def _rm(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.unlink(path)


# ============================================================================ case 1: save


def case_save(ctx: Context) -> None:
    """Save the model+Adam state: raw write, torch.save, safetensors, cairn (all fsync'd)."""
    import safetensors.torch
    import torch

    obj = ctx.model
    nbytes = obj.nbytes
    buffers = [memoryview(t.numpy()).cast("B") for t in obj.flat_tensors().values()]

    written: list[str] = []

    def setup(kind: str) -> Callable[[int], str]:
        def s(r: int) -> str:
            p = ctx.path("save", f"{kind}_{r}")
            written.append(p)
            ctx.raw.setdefault("files", {})[kind] = p
            return p

        return s

    def end_round(_r: int) -> None:
        # Delete this round's files (all but the newest of each kind) together, then let the
        # disk settle: the root fs is mounted with `discard`, and freeing 1 GB is not free.
        keep = set(ctx.raw["files"].values())
        for p in [p for p in written if p not in keep]:
            _rm(p)
            written.remove(p)
        os.sync()
        time.sleep(1.0)

    def torch_save(p: str) -> None:
        with open(p, "wb") as f:
            torch.save(obj.torch_state(), f)
            f.flush()
            os.fsync(f.fileno())

    def st_save(p: str) -> None:
        safetensors.torch.save_file(obj.flat_tensors(), p)
        util.fsync_path(p)

    methods = [
        Method("raw write+fsync", lambda p: util.raw_write(p, buffers), setup("raw")),
        Method("torch.save+fsync", torch_save, setup("torch")),
        Method("safetensors save_file+fsync", st_save, setup("safetensors")),
        Method("cairn save_to_path", lambda p: obj.save_to_path(p), setup("cairn")),
    ]
    interleave(methods, ctx.reps, log=ctx.log, end_round=end_round)
    raw, tsave, st, cairn = (m.median for m in methods)
    braw, btsave, bst, bcairn = (m.best for m in methods)
    ctx._model_ckpt = ctx.raw["files"]["cairn"]
    ctx.raw["save"] = {m.name: m.times for m in methods}
    ctx.add(Row("save", "raw write+fsync", _mbps(nbytes, raw), "-", 1.0, data={"seconds": raw}))
    ctx.add(
        Row("save", "torch.save+fsync", _mbps(nbytes, tsave), "raw write", raw / tsave, data={"seconds": tsave},
            best=braw / btsave)
    )  # fmt: skip
    ctx.add(
        Row("save", "safetensors save_file+fsync", _mbps(nbytes, st), "raw write", raw / st, data={"seconds": st},
            best=braw / bst)
    )  # fmt: skip
    ctx.add(
        Row("save", "cairn save bandwidth", _mbps(nbytes, cairn), "raw write", raw / cairn, ">= 0.90",
            raw / cairn >= 0.90, data={"seconds": cairn}, best=braw / bcairn)
    )  # fmt: skip
    ctx.add(
        Row("save", "cairn save time vs torch.save", f"{cairn:.3f} s", f"torch.save {tsave:.3f} s", cairn / tsave,
            "< 1.00", cairn < tsave, best=bcairn / btsave)
    )  # fmt: skip


# ============================================================================ save on tmpfs (no disk)


def case_savecpu(ctx: Context) -> None:
    """Save to tmpfs (/dev/shm): the software cost of a save with the disk out of the picture."""
    import torch

    shm = "/dev/shm"
    obj = ctx.model
    if not os.path.isdir(shm) or shutil.disk_usage(shm).free < 3 * obj.nbytes:
        ctx.say("  savecpu: skipped: /dev/shm is missing or too small")
        return
    nbytes = obj.nbytes
    buffers = [memoryview(t.numpy()).cast("B") for t in obj.flat_tensors().values()]
    base = tempfile.mkdtemp(prefix="cairn-bench-", dir=shm)

    def setup(kind: str) -> Callable[[int], str]:
        return lambda r: os.path.join(base, f"{kind}_{r}")

    def torch_save(p: str) -> None:
        with open(p, "wb") as f:
            torch.save(obj.torch_state(), f)

    try:
        methods = [
            Method("raw write (tmpfs)", lambda p: util.raw_write(p, buffers), setup("raw"), lambda p, _r: _rm(p)),
            Method("torch.save (tmpfs)", torch_save, setup("torch"), lambda p, _r: _rm(p)),
            Method("cairn save_to_path (tmpfs)", lambda p: obj.save_to_path(p), setup("cairn"), lambda p, _r: _rm(p)),
        ]
        interleave(methods, ctx.reps, log=ctx.log)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    raw, tsave, cairn = (m.median for m in methods)
    ctx.raw["savecpu"] = {m.name: m.times for m in methods}
    ctx.add(
        Row("savecpu", "torch.save to tmpfs", _mbps(nbytes, tsave), f"raw write to tmpfs {raw:.3f} s", raw / tsave,
            best=methods[0].best / methods[1].best)
    )  # fmt: skip
    ctx.add(
        Row("savecpu", "cairn save to tmpfs", _mbps(nbytes, cairn), f"raw write to tmpfs {raw:.3f} s", raw / cairn,
            best=methods[0].best / methods[2].best)
    )  # fmt: skip


# ============================================================================ case 1: restore


def _ensure_files(ctx: Context) -> dict[str, str]:
    """The files of the save case (written once here when that case did not run)."""
    import safetensors.torch
    import torch

    files = ctx.raw.setdefault("files", {})
    obj = ctx.model
    if "raw" not in files:
        files["raw"] = ctx.path("save", "raw")
        util.raw_write(files["raw"], [memoryview(t.numpy()).cast("B") for t in obj.flat_tensors().values()])
    if "torch" not in files:
        files["torch"] = ctx.path("save", "torch")
        torch.save(obj.torch_state(), files["torch"])
    if "safetensors" not in files:
        files["safetensors"] = ctx.path("save", "safetensors")
        safetensors.torch.save_file(obj.flat_tensors(), files["safetensors"])
    files["cairn"] = ctx.model_ckpt()
    return files


def case_restore(ctx: Context) -> None:
    """Restore: raw read, torch.load, safetensors load_file, cairn restore/from_checkpoint, cold cache."""
    import numpy as np
    import safetensors.torch
    import torch

    from bench.workload import ModelAdamState, PlainModelAdamState, model_spec

    obj = ctx.model
    plain = PlainModelAdamState(model_spec(ctx.params), fill="fast")
    nbytes = obj.nbytes
    files = _ensure_files(ctx)
    expect = obj.checksum()
    buf = np.ones(os.path.getsize(files["raw"]), np.uint8)  # touched: reading into existing memory
    mv = memoryview(buf)

    def cold(_r: int) -> None:
        util.drop_cache(files.values())

    checked: list[bool] = []

    def restore(_ctx: Any) -> None:
        obj.restore_from_path(files["cairn"])

    def check_restore(_c: Any, _r: Any) -> None:
        checked.append(obj.checksum() == expect)

    def restore_plain(_ctx: Any) -> None:
        plain.restore_from_path(files["cairn"])

    def check_plain(_c: Any, _r: Any) -> None:
        checked.append(plain.checksum() == expect)

    def from_ckpt(_ctx: Any) -> Any:
        return ModelAdamState.from_checkpoint(files["cairn"])

    def restore_one(_ctx: Any) -> None:
        with util.one_reader():
            obj.restore_from_path(files["cairn"])

    def restore_plain_one(_ctx: Any) -> None:
        with util.one_reader():
            plain.restore_from_path(files["cairn"])

    def check_from(_c: Any, res: Any) -> None:
        checked.append(res.checksum() == expect)

    def raw_fresh(_c: Any) -> None:
        # What from_checkpoint and a plain component read into: memory never touched, so each page
        # costs a fault on first write (slow on this VM), which the raw read above never pays. A torch
        # tensor, as theirs are: numpy asks for huge pages on large arrays, whose compaction on a busy
        # machine took 7 s here for what 4 kB faults do in 0.3 s.
        util.raw_read(files["raw"], memoryview(torch.empty(len(mv), dtype=torch.uint8).numpy()))

    def raw_twice(_c: Any) -> None:
        # A restore into live buffers reads twice (docs/format.md): the cold read verifies, then the
        # bytes are copied from the page cache into place. This is that floor without any hashing.
        util.raw_read(files["raw"], mv)
        util.raw_read(files["raw"], mv)

    methods = [
        Method("raw read (cold cache)", lambda _c: util.raw_read(files["raw"], mv), cold),
        Method("raw read into fresh memory", raw_fresh, cold),
        Method("raw read, then again from the page cache", raw_twice, cold),
        Method("torch.load", lambda _c: torch.load(files["torch"], weights_only=True), cold),
        Method("safetensors load_file", lambda _c: safetensors.torch.load_file(files["safetensors"]), cold),
        Method("cairn restore_from_path", restore, cold, check_restore),
        Method("cairn from_checkpoint", from_ckpt, cold, check_from),
        Method("cairn restore_from_path, plain component", restore_plain, cold, check_plain),
        Method("cairn restore_from_path, one reader thread", restore_one, cold, check_restore),
        Method("cairn restore_from_path, plain component, one reader thread", restore_plain_one, cold, check_plain),
    ]
    interleave(methods, ctx.reps, log=ctx.log)
    raw, fresh, twice, tload, st, rest, fromc, pl, rest1, pl1 = (m.median for m in methods)
    braw, _, _, btload, bst, brest, bfromc, bpl, _, _ = (m.best for m in methods)
    ctx.raw["restore"] = {m.name: m.times for m in methods}
    ctx.raw["restore_cache"] = "drop_caches" if util.CAN_DROP else "posix_fadvise(DONTNEED)"
    if not all(checked):
        ctx.notes.append("restore: a restored state did not match the saved one!")
    ctx.add(Row("restore", "raw read (cold cache)", _mbps(nbytes, raw), "-", 1.0, data={"seconds": raw}))
    ctx.add(Row("restore", "raw read into fresh memory", _mbps(nbytes, fresh), "raw read", raw / fresh,
                data={"seconds": fresh}))  # fmt: skip
    ctx.add(Row("restore", "raw read, then again from the page cache", _mbps(nbytes, twice), "raw read",
                raw / twice, data={"seconds": twice}))  # fmt: skip
    ctx.add(
        Row("restore", "torch.load", _mbps(nbytes, tload), "raw read", raw / tload, data={"seconds": tload},
            best=braw / btload)
    )  # fmt: skip
    ctx.add(
        Row("restore", "safetensors load_file", _mbps(nbytes, st), "raw read", raw / st, data={"seconds": st},
            best=braw / bst)
    )  # fmt: skip
    ctx.add(
        Row("restore", "cairn restore_from_path bandwidth (live buffers)", _mbps(nbytes, rest), "raw read",
            raw / rest, ">= 0.85", raw / rest >= 0.85, data={"seconds": rest}, best=braw / brest)
    )  # fmt: skip
    ctx.add(
        Row("restore", "cairn restore time vs torch.load", f"{rest:.3f} s", f"torch.load {tload:.3f} s",
            rest / tload, "< 1.00", rest < tload, best=brest / btload)
    )  # fmt: skip
    ctx.add(
        Row("restore", "cairn from_checkpoint bandwidth", _mbps(nbytes, fromc), "raw read", raw / fromc,
            ">= 0.90", raw / fromc >= 0.90, data={"seconds": fromc}, best=braw / bfromc)
    )  # fmt: skip
    ctx.add(
        Row("restore", "cairn from_checkpoint vs torch.load", f"{fromc:.3f} s", f"torch.load {tload:.3f} s",
            fromc / tload, "< 1.00", fromc < tload, best=bfromc / btload)
    )  # fmt: skip
    ctx.add(
        Row("restore", "cairn restore_from_path, plain component (no buffers)", _mbps(nbytes, pl), "raw read",
            raw / pl, ">= 0.90", raw / pl >= 0.90, data={"seconds": pl}, best=braw / bpl)
    )  # fmt: skip
    ctx.add(
        Row("restore", "plain component restore vs torch.load", f"{pl:.3f} s", f"torch.load {tload:.3f} s",
            pl / tload, "< 1.00", pl < tload, best=bpl / btload)
    )  # fmt: skip
    # What bounds each path, measured in the same rounds: live buffers read twice (a failed restore
    # changes nothing), fresh arrays pay the page faults of memory touched for the first time.
    ctx.add(
        Row("restore", "live buffers vs its floor (raw read, then again from the page cache)", f"{rest:.3f} s",
            f"raw twice {twice:.3f} s", rest / twice)
    )  # fmt: skip
    for label, t in (("from_checkpoint", fromc), ("plain component", pl)):
        ctx.add(
            Row("restore", f"{label} vs its floor (raw read into fresh memory)", f"{t:.3f} s",
                f"raw into fresh memory {fresh:.3f} s", t / fresh)
        )  # fmt: skip
    for label, two, one in (("live buffers", rest, rest1), ("plain component", pl, pl1)):
        ctx.add(
            Row("restore", f"restore_from_path ({label}): two reader threads vs one", f"{two:.3f} s",
                f"one reader {one:.3f} s", two / one)
        )  # fmt: skip


# ============================================================================ BLAKE3 against SHA-256


def case_digests(ctx: Context) -> None:
    """BLAKE3 (format 3's default) and SHA-256 side by side: save and cold restore, with raw I/O baselines."""
    import torch

    obj = ctx.model
    nbytes = obj.nbytes
    buffers = [memoryview(t.numpy()).cast("B") for t in obj.flat_tensors().values()]
    paths: dict[str, str] = {}
    expect = obj.checksum()
    checked: list[bool] = []

    def setup(kind: str) -> Callable[[int], str]:
        def s(r: int) -> str:
            p = ctx.path("digests", f"{kind}_{r}")
            _rm(p)
            paths[kind] = p
            return p

        return s

    def end_round(_r: int) -> None:
        os.sync()
        time.sleep(1.0)

    def torch_save(p: str) -> None:
        with open(p, "wb") as f:
            torch.save(obj.torch_state(), f)
            f.flush()
            os.fsync(f.fileno())

    saves = [
        Method("raw write+fsync", lambda p: util.raw_write(p, buffers), setup("raw")),
        Method("torch.save+fsync", torch_save, setup("torch")),
        Method("cairn save, blake3", lambda p: obj.save_to_path(p), setup("blake3")),
        Method("cairn save, sha256", lambda p: obj.save_to_path(p, digest="sha256"), setup("sha256")),
    ]
    interleave(saves, ctx.reps, log=ctx.log, end_round=end_round)
    raw_w, tsave, b3_w, sha_w = (m.median for m in saves)
    import numpy as np

    buf = np.ones(os.path.getsize(paths["raw"]), np.uint8)
    mv = memoryview(buf)

    def cold(_r: int) -> None:
        util.drop_cache(paths.values())

    def restore(kind: str) -> Callable[[Any], None]:
        def run(_c: Any) -> None:
            obj.restore_from_path(paths[kind])

        return run

    def check(_c: Any, _r: Any) -> None:
        checked.append(obj.checksum() == expect)

    loads = [
        Method("raw read (cold cache)", lambda _c: util.raw_read(paths["raw"], mv), cold),
        Method("torch.load (cold cache)", lambda _c: torch.load(paths["torch"], weights_only=True), cold),
        Method("cairn restore, blake3", restore("blake3"), cold, check),
        Method("cairn restore, sha256", restore("sha256"), cold, check),
    ]
    interleave(loads, ctx.reps, log=ctx.log)
    raw_r, tload, b3_r, sha_r = (m.median for m in loads)
    ctx.raw["digests"] = {m.name: m.times for m in saves + loads}
    if not all(checked):
        ctx.notes.append("digests: a restored state did not match the saved one!")
    for what, t in (("save, blake3", b3_w), ("save, sha256", sha_w)):
        ctx.add(Row("digests", f"cairn {what}", _mbps(nbytes, t), f"raw write+fsync {raw_w:.3f} s", raw_w / t,
                    ">= 0.90", raw_w / t >= 0.90, data={"seconds": t}))  # fmt: skip
        ctx.add(Row("digests", f"cairn {what} vs torch.save+fsync", f"{t:.3f} s", f"torch.save {tsave:.3f} s",
                    t / tsave, "< 1.00", t < tsave))  # fmt: skip
    for what, t in (("restore, blake3", b3_r), ("restore, sha256", sha_r)):
        ctx.add(Row("digests", f"cairn {what} (cold cache)", _mbps(nbytes, t), f"raw read {raw_r:.3f} s", raw_r / t,
                    ">= 0.90", raw_r / t >= 0.90, data={"seconds": t}))  # fmt: skip
        ctx.add(Row("digests", f"cairn {what} vs torch.load", f"{t:.3f} s", f"torch.load {tload:.3f} s",
                    t / tload, "< 1.00", t < tload))  # fmt: skip
    ctx.add(Row("digests", "save time, blake3 / sha256", f"{b3_w:.3f} s", f"sha256 {sha_w:.3f} s", b3_w / sha_w))
    ctx.add(Row("digests", "restore time, blake3 / sha256", f"{b3_r:.3f} s", f"sha256 {sha_r:.3f} s", b3_r / sha_r))


# ============================================================================ case 2: partial restore


def case_partial(ctx: Context) -> None:
    """Restore 1 module of 8: bytes read from disk and time, against restoring all 8."""
    eight = ctx.eight
    ckpt = ctx.path("eight_ckpt")
    eight.save_to_path(ckpt)
    mod_bytes = eight.module_nbytes("m3")
    folder_bytes = util.dir_size(os.path.join(ckpt, "m3"))
    ios: dict[str, list[dict[str, int]]] = {"one": [], "all": []}

    def cold(_r: int) -> dict[str, int]:
        util.drop_cache([ckpt])
        return util.proc_io()

    def after(kind: str) -> Callable[[Any, Any], None]:
        def td(io0: dict[str, int], _res: Any) -> None:
            ios[kind].append(util.io_delta(io0))

        return td

    methods = [
        Method("restore 1 of 8 modules", lambda _c: eight.restore_from_path(os.path.join(ckpt, "m3"), component="m3"),
               cold, after("one")),
        Method("restore all 8 modules", lambda _c: eight.restore_from_path(ckpt), cold, after("all")),
    ]  # fmt: skip
    interleave(methods, ctx.reps, log=ctx.log)
    one, allt = methods[0].median, methods[1].median
    rb_one = statistics.median(d["read_bytes"] for d in ios["one"])
    rb_all = statistics.median(d["read_bytes"] for d in ios["all"])
    rc_one = statistics.median(d["rchar"] for d in ios["one"])
    ctx.raw["partial"] = {"times": {m.name: m.times for m in methods}, "io": ios, "module_bytes": mod_bytes,
                          "module_folder_bytes": folder_bytes}  # fmt: skip
    ctx.add(
        Row("partial", "bytes read from disk, 1 of 8", f"{rb_one / MB:.1f} MB (rchar {rc_one / MB:.1f} MB)",
            f"module tensors {mod_bytes / MB:.1f} MB", rb_one / mod_bytes, "<= 1.25", rb_one / mod_bytes <= 1.25)
    )  # fmt: skip
    ctx.add(
        Row("partial", "bytes read, 1 of 8 vs all 8", f"{rb_one / MB:.1f} MB", f"all: {rb_all / MB:.1f} MB",
            rb_one / rb_all if rb_all else None)
    )  # fmt: skip
    ctx.add(
        Row("partial", "time, 1 of 8 vs all 8", f"{one:.3f} s", f"all: {allt:.3f} s", one / allt,
            best=methods[0].best / methods[1].best)
    )  # fmt: skip


# ============================================================================ case 3: async save


def _mutate(tensors: Any) -> None:
    """Change every tensor a little, so that a save has new bytes to write."""
    for t in tensors:
        if t.numel():
            t.view(-1)[0] += 1.0


def case_async(ctx: Context) -> None:
    """How long CheckpointManager(async_save=True).save blocks, against a synchronous save."""
    import cairn

    obj = ctx.model
    tensors = list(obj.flat_tensors().values())
    reused = [t.clone() for t in tensors]  # the copy an async save must make, into buffers it keeps
    sync_mgr = cairn.CheckpointManager(ctx.path("async", "sync"), keep_last=1)
    async_mgr = cairn.CheckpointManager(ctx.path("async", "async"), keep_last=1, async_save=True)
    waits: list[float] = []
    step = [0]

    def prep(_r: int) -> int:
        _mutate(tensors)
        os.sync()
        step[0] += 1
        return step[0]

    def wait(_c: Any, _r: Any) -> None:
        t0 = time.perf_counter()
        async_mgr.wait()
        waits.append(time.perf_counter() - t0)

    def copy_once(_s: Any) -> None:
        for dst, src in zip(reused, tensors, strict=True):
            dst.copy_(src)

    methods = [
        Method("sync manager.save", lambda s: sync_mgr.save(obj, s), prep),
        Method("async manager.save (blocking part)", lambda s: async_mgr.save(obj, s), prep, wait),
        Method("one copy of the state into reused buffers", copy_once, prep),
    ]
    # Two untimed rounds: the first async save allocates the manager's buffers (not steady state).
    interleave(methods, ctx.reps, warmup=2, log=ctx.log)
    async_mgr.close()
    sync_t, block_t, copy_t = methods[0].median, methods[1].median, methods[2].median
    total = statistics.median(b + w for b, w in zip(methods[1].times, waits[-len(methods[1].times) :], strict=True))
    ctx.raw["async"] = {"sync": methods[0].times, "block": methods[1].times, "wait": waits}
    ctx.add(
        Row("async", "async save blocks", f"{block_t:.3f} s", f"sync save {sync_t:.3f} s", block_t / sync_t,
            "<= 0.15", block_t / sync_t <= 0.15, best=methods[1].best / methods[0].best)
    )  # fmt: skip
    ctx.add(
        Row("async", "async save blocks vs one copy of the state", f"{block_t:.3f} s",
            f"copy into reused buffers {copy_t:.3f} s", block_t / copy_t, "<= 1.20", block_t / copy_t <= 1.20,
            best=methods[1].best / methods[2].best)
    )  # fmt: skip
    ctx.add(Row("async", "async save, block + wait", f"{total:.3f} s", f"sync save {sync_t:.3f} s", total / sync_t))


# ============================================================================ case 4: incremental


def case_incremental(ctx: Context) -> None:
    """Bytes written by a save with 1 of 8 modules changed, against a full save (CheckpointManager)."""
    import cairn

    eight = ctx.eight
    mgr = cairn.CheckpointManager(ctx.path("incr"), keep_last=2)
    all_tensors = [t for m in eight.modules.values() for t in m.inner.flat_tensors().values()]
    one_tensors = list(eight.modules["m3"].inner.flat_tensors().values())
    stats: dict[str, list[dict[str, int]]] = {"full": [], "incr": []}
    step = [0]

    def prep(which: str) -> Callable[[int], tuple[int, dict[str, int]]]:
        def s(_r: int) -> tuple[int, dict[str, int]]:
            _mutate(all_tensors if which == "full" else one_tensors)
            os.sync()
            step[0] += 1
            return step[0], util.proc_io()

        return s

    def after(which: str) -> Callable[[Any, Any], None]:
        def td(c: tuple[int, dict[str, int]], _res: Any) -> None:
            io = util.io_delta(c[1])
            st = mgr.last_stats
            stats[which].append(
                {"write_bytes": io["write_bytes"], "wchar": io["wchar"],
                 "bytes_written": st.bytes_written if st else -1, "bytes_linked": st.bytes_linked if st else -1,
                 "bytes_reread": st.bytes_reread if st else -1}
            )  # fmt: skip

        return td

    methods = [
        Method("full save (8 of 8 changed)", lambda c: mgr.save(eight, c[0]), prep("full"), after("full")),
        Method("incremental save (1 of 8 changed)", lambda c: mgr.save(eight, c[0]), prep("incr"), after("incr")),
    ]
    interleave(methods, ctx.reps, log=ctx.log)
    mgr.close()
    med = {k: {f: statistics.median(d[f] for d in v) for f in v[0]} for k, v in stats.items()}
    ctx.raw["incremental"] = {"stats": stats, "times": {m.name: m.times for m in methods}}
    full_w, inc_w = med["full"]["bytes_written"], med["incr"]["bytes_written"]
    ctx.add(
        Row("incremental", "bytes written (last_stats), 1 of 8 changed",
            f"{inc_w / MB:.1f} MB (+{med['incr']['bytes_linked'] / MB:.0f} MB linked)",
            f"full save {full_w / MB:.1f} MB", inc_w / full_w, "<= 0.20", inc_w / full_w <= 0.20)
    )  # fmt: skip
    ctx.add(
        Row("incremental", "linked bytes read back to check them, 1 of 8 changed",
            f"{med['incr']['bytes_reread'] / MB:.1f} MB", f"linked {med['incr']['bytes_linked'] / MB:.0f} MB",
            med["incr"]["bytes_reread"] / max(med["incr"]["bytes_linked"], 1))
    )  # fmt: skip
    fw, iw = med["full"]["write_bytes"], med["incr"]["write_bytes"]
    ctx.add(
        Row("incremental", "bytes written (/proc/self/io write_bytes)", f"{iw / MB:.1f} MB",
            f"full save {fw / MB:.1f} MB", iw / fw if fw else None)
    )  # fmt: skip
    ctx.add(
        Row("incremental", "time, incremental vs full", f"{methods[1].median:.3f} s",
            f"full save {methods[0].median:.3f} s", methods[1].median / methods[0].median, "<= 0.25",
            methods[1].median / methods[0].median <= 0.25, best=methods[1].best / methods[0].best)
    )  # fmt: skip


# ============================================================================ small checkpoints


def case_small(ctx: Context) -> None:
    """Latency of saving an RL-sized checkpoint (5 folders, ~6.5 MB): cairn against torch.save+fsync."""
    import torch

    from bench.workload import SmallTree

    tree = SmallTree()
    nbytes = sum(tree.module_nbytes(n) for n in tree.modules)
    written: list[str] = []

    def setup(kind: str) -> Callable[[int], str]:
        def s(r: int) -> str:
            p = ctx.path("small", f"{kind}_{r}")
            written.append(p)
            return p

        return s

    def torch_save(p: str) -> None:
        with open(p, "wb") as f:
            torch.save(tree.get_state(), f)
            f.flush()
            os.fsync(f.fileno())

    def end_round(_r: int) -> None:
        for p in written:
            _rm(p)
        written.clear()
        os.sync()

    methods = [
        Method("torch.save+fsync", torch_save, setup("torch")),
        Method("cairn save_to_path", lambda p: tree.save_to_path(p), setup("cairn")),
    ]
    interleave(methods, 15 if not ctx.quick else 7, warmup=2, log=ctx.log, end_round=end_round)
    t, c = methods[0].median, methods[1].median
    ctx.raw["small"] = {m.name: m.times for m in methods}
    ctx.add(
        Row("small", f"save a {nbytes / MB:.1f} MB, 5-folder checkpoint", f"{c * 1000:.1f} ms",
            f"torch.save+fsync {t * 1000:.1f} ms", c / t, "<= 1.00", c <= t, best=methods[1].best / methods[0].best)
    )  # fmt: skip


def case_smallrl(ctx: Context) -> None:
    """A PPO CartPole checkpoint: save vs torch.save+fsync of its tensors; fresh-process restore vs a baseline."""
    out = small_rl.measure(ctx.reps if ctx.args.reps is not None else 9, ctx.path("smallrl", "x").rsplit("/", 1)[0],
                           log=ctx.log)  # fmt: skip
    ctx.raw["smallrl"] = out
    med = statistics.median
    c, t = med(out["save_cairn"]), med(out["save_torch"])
    ctx.add(
        Row("smallrl", f"save a PPO CartPole algorithm ({out['files']} files, {out['tensor_bytes'] / 1e3:.0f} kB "
            "of tensors)", f"{c * 1000:.1f} ms", f"torch.save+fsync of its tensors {t * 1000:.1f} ms", c / t,
            "<= 1.50", c / t <= 1.5, best=min(out["save_cairn"]) / min(out["save_torch"]))
    )  # fmt: skip
    a = med(out["save_torch_atomic"])
    ctx.add(
        Row("smallrl", "the same save against an atomic torch.save (its two syncs, as cairn's commit)",
            f"{c * 1000:.1f} ms", f"torch.save to a temporary name+fsync+rename+fsync of the folder {a * 1000:.1f} ms",
            c / a, "", None, best=min(out["save_cairn"]) / min(out["save_torch_atomic"]))
    )  # fmt: skip
    rc, rb = med(out["restore_cairn"]), med(out["restore_baseline"])
    ctx.add(
        Row("smallrl", "PPO.from_checkpoint in a fresh process (imports included)", f"{rc:.3f} s",
            f"{out['restore_baseline_name']} in a fresh process {rb:.3f} s", rc / rb, "<= 1.00", rc <= rb,
            best=min(out["restore_cairn"]) / min(out["restore_baseline"]))
    )  # fmt: skip


# ============================================================================ case 5: memory


def _child(ctx: Context, op: str, path: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.child", op, "--params", str(ctx.params), "--path", path]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(argv, check=True, capture_output=True, text=True, env=env, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def case_memory(ctx: Context) -> None:
    """Peak extra RSS of save and restore, each in a fresh process, against the state's size."""
    ck = ctx.path("mem", "cairn")
    tf = ctx.path("mem", "torch.pt")
    sf = ctx.path("mem", "model.safetensors")
    results: dict[str, dict[str, Any]] = {}
    for op, p in (
        ("cairn_save", ck),
        ("cairn_restore", ck),
        ("cairn_restore_plain", ck),
        ("cairn_from_checkpoint", ck),
        ("torch_save", tf),
        ("torch_load", tf),
        ("safetensors_save", sf),
        ("safetensors_load", sf),
    ):
        if op.endswith(("load", "restore", "checkpoint")):
            util.drop_cache([p])
        results[op] = _child(ctx, op, p)
        ctx.log(f"    {op}: {results[op]}")
    ctx.raw["memory"] = results
    state = results["cairn_save"]["state_bytes"]
    limit = 0.10 + 64 * 1024 * 1024 / state
    for op, label, target in (
        ("cairn_save", "cairn save: peak extra RSS", limit),
        ("cairn_restore", "cairn restore_from_path (live buffers): peak extra RSS", limit),
        ("cairn_restore_plain", "cairn restore_from_path, plain component (no buffers): peak extra RSS", 1.10),
        ("cairn_from_checkpoint", "cairn from_checkpoint: peak RSS beyond the new state", None),
        ("torch_save", "torch.save: peak extra RSS", None),
        ("torch_load", "torch.load: peak RSS beyond the loaded state", None),
        ("safetensors_save", "safetensors save_file: peak extra RSS", None),
        ("safetensors_load", "safetensors load_file: peak RSS beyond the loaded state", None),
    ):
        r = results[op]
        ratio = r["extra"] / state
        shown = f"{r['extra'] / MB:.0f} MB" + (" (result is mmap-backed)" if r["extra"] < 0 else "")
        ctx.add(
            Row("memory", label, shown, f"state {state / MB:.0f} MB", ratio,
                f"<= {target:.3f}" if target else "", (ratio <= target) if target else None, data=r)
        )  # fmt: skip


# ============================================================================ case 6: import, inspect


def _importtime_top(n: int = 8) -> list[tuple[str, int]]:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cairn"], capture_output=True, text=True, cwd=REPO
    ).stderr
    rows = []
    for line in out.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((m.group(4), int(m.group(2)), len(m.group(3))))
    # top-level packages by cumulative time (only the outermost entries of each tree)
    top = sorted(((name, cum) for name, cum, depth in rows if depth <= 2), key=lambda x: -x[1])
    return top[:n]


def case_import(ctx: Context) -> None:
    """``import cairn`` wall time against ``python -c pass`` (fresh processes, interleaved)."""
    reps = 9 if ctx.quick else 21
    bare: list[float] = []
    imp: list[float] = []
    for _ in range(reps):
        bare += util.subprocess_times([sys.executable, "-c", "pass"], 1, cwd=REPO)
        imp += util.subprocess_times([sys.executable, "-c", "import cairn"], 1, cwd=REPO)
    b, i = statistics.median(bare), statistics.median(imp)
    heavy = subprocess.run(
        [sys.executable, "-c", "import cairn, sys; print(sorted(m for m in ('torch','gymnasium','ray','fsspec',"
         "'msgpack','safetensors','numpy') if m in sys.modules))"],
        capture_output=True, text=True, cwd=REPO,
    ).stdout.strip()  # fmt: skip
    top = _importtime_top()
    ctx.raw["import"] = {"bare": bare, "import": imp, "modules_loaded": heavy, "importtime_top": top}
    ctx.add(
        Row("import", "import cairn, extra wall time", f"+{i - b:.3f} s ({i:.3f} s total)",
            f"python -c pass {b:.3f} s", i / b, "extra <= 0.150 s", (i - b) <= 0.150,
            data={"extra_seconds": i - b, "loaded": heavy, "importtime_top_us": top})
    )  # fmt: skip


def case_inspect(ctx: Context) -> None:
    """``cairn inspect`` on the model checkpoint, as a command (wall time), warm and cold cache."""
    ckpt = ctx.model_ckpt()
    argv = [sys.executable, "-m", "cairn", "inspect", ckpt]
    reps = 5 if ctx.quick else 9
    warm = util.subprocess_times(argv, reps, cwd=REPO)
    cold = []
    for _ in range(3):
        util.drop_cache([ckpt], whole=False)  # the checkpoint's pages only, not Python's
        cold += util.subprocess_times(argv, 1, cwd=REPO)
    bare = util.subprocess_times([sys.executable, "-c", "pass"], reps, cwd=REPO)
    w, c, b = statistics.median(warm), statistics.median(cold), statistics.median(bare)
    ctx.raw["inspect"] = {"warm": warm, "cold": cold, "bare": bare, "checkpoint_bytes": util.dir_size(ckpt)}
    ctx.add(
        Row("inspect", f"cairn inspect ({util.dir_size(ckpt) / MB:.0f} MB checkpoint)", f"{w:.3f} s",
            f"python -c pass {b:.3f} s", w / 0.5, "<= 0.500 s", w <= 0.5, data={"seconds": w})
    )  # fmt: skip
    ctx.add(
        Row("inspect", "cairn inspect, checkpoint not in page cache", f"{c:.3f} s", f"python -c pass {b:.3f} s",
            c / 0.5, "<= 0.500 s", c <= 0.5, data={"seconds": c})
    )  # fmt: skip


# ============================================================================ start-up of the RL commands


def case_startup(ctx: Context) -> None:
    """Start-up: ``cairn evaluate`` of a CartPole checkpoint (1 episode), ``cairn train`` to its first iteration.

    Both are dominated by imports, so each is also given as a ratio to ``python -c "import torch"``
    (the floor of any command that runs a torch module), measured in the same rounds: the ratios
    hold still when the machine's load changes between runs, the seconds do not.
    """
    d = ctx.path("startup", "run")
    _rm(d)
    t0 = time.perf_counter()
    wall1, lines, _ = _train(ctx, 1, d)
    iter_s = float(lines[-1].get("timers/training_iteration", "nan"))
    ctx.log(f"    train 1 iteration: {wall1:.2f} s ({time.perf_counter() - t0:.1f})")
    evaluate = [sys.executable, "-m", "cairn", "evaluate", d, "--episodes", "1", "--seed", "0"]
    import_torch = [sys.executable, "-c", "import torch"]
    reps = 3 if ctx.quick else 5
    ev: list[float] = []
    torch_s: list[float] = []
    trains = [wall1 - iter_s]
    for i in range(reps):  # interleaved, so that a burst of load hits both sides alike
        torch_s += util.subprocess_times(import_torch, 1, cwd=REPO)
        ev += util.subprocess_times(evaluate, 1, cwd=REPO)
        if i < (1 if ctx.quick else 2):
            w, ls, _ = _train(ctx, 1, d + "_again")
            trains.append(w - float(ls[-1].get("timers/training_iteration", "nan")))
            _rm(d + "_again")
    bare = util.subprocess_times([sys.executable, "-c", "pass"], reps, cwd=REPO)
    e, t, tr, b = (statistics.median(x) for x in (ev, torch_s, trains, bare))
    ctx.raw["startup"] = {"evaluate": ev, "import_torch": torch_s, "bare": bare, "train_outside_iteration": trains}
    base = f"python -c 'import torch' {t:.2f} s (-c pass {b:.3f} s)"
    ctx.add(
        Row("startup", "cairn evaluate, CartPole checkpoint, 1 episode (wall)", f"{e:.2f} s", base, e / t,
            "<= 2.50 s", e <= 2.5, data={"seconds": e, "import_torch_s": t}, best=min(ev) / min(torch_s))
    )  # fmt: skip
    ctx.add(
        Row("startup", "cairn train --iterations 1, wall outside the iteration", f"{tr:.2f} s", base, tr / t,
            data={"seconds": tr, "import_torch_s": t}, best=min(trains) / min(torch_s))
    )  # fmt: skip


# ============================================================================ case 7: PPO


_RAW_ENV = """
import time, gymnasium as gym, numpy as np
n = int({n})
env = gym.make("CartPole-v1"); env.reset(seed=0)
rng = np.random.default_rng(0)
t0 = time.perf_counter()
for _ in range(n):
    _, _, term, trunc, _ = env.step(int(rng.integers(2)))
    if term or trunc:
        env.reset()
print(n / (time.perf_counter() - t0))
"""


def _train(ctx: Context, iterations: int, d: str | None = None) -> tuple[float, list[dict[str, Any]], str]:
    d = d or ctx.path("ppo", f"run_{iterations}")
    _rm(d)
    argv = [sys.executable, "-m", "cairn", "train", "--env", "CartPole-v1", "--iterations", str(iterations),
            "--checkpoint-dir", d, "--checkpoint-every", "1", "--seed", "0"]  # fmt: skip
    t0 = time.perf_counter()
    out = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=1200)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"cairn train failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    mfile = os.path.join(d, "metrics.jsonl")
    if not os.path.exists(mfile):
        raise RuntimeError(f"cairn train wrote no {mfile}")
    with open(mfile) as f:
        lines = [json.loads(x) for x in f if x.strip()]
    if not lines or "num_env_steps_sampled_lifetime" not in lines[-1]:
        raise RuntimeError("cairn train reported no num_env_steps_sampled_lifetime")
    return wall, lines, out.stdout[-2000:]


RLLIB_STEPS_PER_S = 4000 / 6.35  # ANCHORS.md: one RLlib PPO iteration (4000 steps) took 6.1-6.6 s here


def case_ppo(ctx: Context) -> None:
    """Env steps per second of ``cairn train`` (PPO, CartPole-v1) against raw env stepping."""
    its = 3 if ctx.quick else 5
    try:
        wall, lines, tail = _train(ctx, its)
    except Exception as err:  # the RL stack may not have landed yet
        ctx.say(f"  ppo: skipped: {err}")
        ctx.notes.append(f"ppo skipped: {err}")
        return
    steps = int(lines[-1]["num_env_steps_sampled_lifetime"])
    iter_s = [float(x.get("timers/training_iteration", "nan")) for x in lines]
    in_loop = steps / sum(iter_s) if all(v == v for v in iter_s) else float("nan")
    raw_sps = float(
        subprocess.run([sys.executable, "-c", _RAW_ENV.format(n=max(steps, 2000))], capture_output=True, text=True,
                       check=True).stdout.strip()
    )  # fmt: skip
    ctx.raw["ppo"] = {"wall": wall, "steps": steps, "iteration_times": iter_s, "raw_env_sps": raw_sps,
                      "metrics_last": lines[-1], "stdout_tail": tail}  # fmt: skip
    ctx.add(
        Row("ppo", f"cairn train env steps/s in training ({its} iterations, {steps} steps)", f"{in_loop:,.0f} steps/s",
            f"raw CartPole stepping {raw_sps:,.0f} steps/s", in_loop / raw_sps)
    )  # fmt: skip
    ctx.add(
        Row("ppo", "cairn train env steps/s in training vs RLlib", f"{in_loop:,.0f} steps/s",
            f"RLlib PPO ~{RLLIB_STEPS_PER_S:,.0f} steps/s (ANCHORS.md, not this run)", in_loop / RLLIB_STEPS_PER_S)
    )  # fmt: skip
    ctx.add(
        Row("ppo", "cairn train whole command (start-up, checkpoint every iteration)", f"{wall:.2f} s",
            f"time in training iterations {sum(iter_s):.2f} s", wall / sum(iter_s), data={"wall": wall})
    )  # fmt: skip


CASE_FUNCS: dict[str, Callable[[Context], None]] = {
    "save": case_save,
    "savecpu": case_savecpu,
    "restore": case_restore,
    "digests": case_digests,
    "partial": case_partial,
    "async": case_async,
    "incremental": case_incremental,
    "small": case_small,
    "memory": case_memory,
    "import": case_import,
    "inspect": case_inspect,
    "startup": case_startup,
    "ppo": case_ppo,
    "sampling": sampling_cpu.case_sampling,
    "replay": replay.case_replay,
    "replay_per": replay_per.case_replay_per,
    "smallrl": case_smallrl,
}


# ============================================================================ report


def table(rows: list[Row]) -> str:
    head = ("case", "measurement", "cairn / contender", "baseline", "ratio", "best-round ratio", "target", "")
    body = [
        (r.case, r.what, r.value, r.baseline, "-" if r.ratio is None else f"{r.ratio:.3f}",
         "" if r.best is None else f"{r.best:.3f}", r.target, r.status)
        for r in rows
    ]  # fmt: skip
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    out = [line, sep]
    for b in body:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) + " |")
    return "\n".join(out)


def _git_rev() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--size-gb", type=float, default=None, help="size of the model+Adam state (default 1.2)")
    ap.add_argument("--quick", action="store_true", help="a ~100 MB variant that finishes in about a minute")
    ap.add_argument("--only", default=None, help=f"comma-separated cases among: {', '.join(CASES)}")
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "results", "latest.json"), help="where to write JSON")
    ap.add_argument("--reps", type=int, default=None, help="timed rounds per I/O case (default 3)")
    ap.add_argument("--tmp", default=None, help="where to put temporary checkpoints (default /work/tmp or $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary checkpoints")
    ap.add_argument("--before", default="main", help="git ref the 'sampling' case compares this checkout with")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every timed round")
    args = ap.parse_args(argv)
    cases = list(CASES) if not args.only else [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASE_FUNCS]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {', '.join(CASES)}")

    import torch

    torch.set_num_threads(1)  # the machine has 2 shared cores; keep the main process to one
    ctx = Context(args)
    started = time.perf_counter()
    ctx.say(
        f"cairn bench: {ctx.size_gb:g} GB state, cases {', '.join(cases)}, {ctx.reps} timed rounds; "
        f"page cache: {'drop_caches' if util.CAN_DROP else 'posix_fadvise'}; tmp {ctx.tmp}"
    )
    warm = util.warm_memory(int(ctx.size_gb * 3e9))
    ctx.say(f"  warmed {ctx.size_gb * 3:.1f} GB of memory in {warm:.1f} s")
    failed = []
    try:
        for c in cases:
            t0 = time.perf_counter()
            ctx.say(f"[{c}] {CASE_FUNCS[c].__doc__.strip().splitlines()[0]}")
            try:
                CASE_FUNCS[c](ctx)
            except Exception as err:
                failed.append(c)
                ctx.notes.append(f"{c} failed: {type(err).__name__}: {err}")
                ctx.say(f"  {c}: FAILED: {type(err).__name__}: {err}")
                if args.verbose:
                    traceback.print_exc()
            ctx.say(f"  ({time.perf_counter() - t0:.1f} s)")
    finally:
        if not args.keep:
            shutil.rmtree(ctx.tmp, ignore_errors=True)
    print()
    print(table(ctx.rows))
    for n in ctx.notes:
        print(f"note: {n}")
    misses = [r for r in ctx.rows if r.ok is False]
    print(
        f"\n{sum(r.ok is True for r in ctx.rows)} targets met, {len(misses)} missed; "
        f"{time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.2f}"
    )
    report = {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git": _git_rev(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average": os.getloadavg(),
        },
        "options": {k: v for k, v in vars(args).items()},
        "size_gb": ctx.size_gb,
        "state_bytes": ctx._model.nbytes if ctx._model is not None else None,
        "rows": [asdict(r) | {"status": r.status} for r in ctx.rows],
        "raw": ctx.raw,
        "notes": ctx.notes,
        "failed_cases": failed,
    }
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1, default=str)
        print(f"JSON: {args.json}")
    return 1 if failed else 0
