"""Issue 33 section 4, the engine's findings, each replayed through the public API.

* F4: an async save snapshots every container the codec accepts (registered
  dataclasses, nested lists, tuples and dicts, numpy arrays, torch tensors) before
  ``save()`` returns, and a save checks what it wrote before it commits.
* F5: an incremental save checks the file it linked (the new link), not the path it
  linked from.
* F11: manifests parse in one pass, with the bound on components checked first.
* F12: an unreadable file is a ``CheckpointError`` that names it and says what to do.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.manifest import MAX_COMPONENTS, seal_manifest_body
from cairn_test_components import Tree
from log_helpers import warned


class Wide(cairn.Checkpointable):
    """A component with ``n`` leaf components of one small array each."""

    def __init__(self, n: int) -> None:
        self.kids = [Leaf(i) for i in range(n)]

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [(f"k{i}", k) for i, k in enumerate(self.kids)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {name: comp.get_state() for name, comp in self.get_checkpointable_components()}

    def set_state(self, state: dict[str, Any]) -> None:
        for name, comp in self.get_checkpointable_components():
            if name in state:
                comp.set_state(state[name])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (len(self.kids),), {}


class Leaf(cairn.Checkpointable):
    def __init__(self, i: int = 0) -> None:
        self.v = np.full(4, i, dtype=np.int64)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"v": self.v}

    def set_state(self, state: dict[str, Any]) -> None:
        self.v = np.array(state["v"], copy=True)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


# --------------------------------------------------------------------------- F11


def test_a_wide_folder_saves_lists_and_restores(tmp_path: Path) -> None:
    """300 components in one folder: saved, verified and restored (component lookups are set lookups)."""
    w = Wide(300)
    ck = w.save_to_path(tmp_path / "ck")
    assert cairn.verify_checkpoint(ck) == []
    back = Wide(300)
    for k in back.kids:
        k.v[:] = -1
    back.restore_from_path(ck)
    assert [int(k.v[0]) for k in back.kids] == list(range(300))


class _CountedName(str):
    """A component name that counts the comparisons made with it (``==`` runs Python code here)."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _comparisons_to_parse(n: int, monkeypatch: pytest.MonkeyPatch) -> int:
    """Name comparisons made by parsing a manifest of ``n`` components and looking each one up."""
    import cairn.manifest
    from cairn.manifest import MANIFEST, FileEntry, Manifest

    m = Manifest()
    entry = FileEntry.of(b"x")
    for i in range(n):
        m.components.append(f"c{i}")
        m.files[f"c{i}/{MANIFEST}"] = entry
    data = m.to_bytes()
    real = cairn.manifest.load_json

    def counted(raw: bytes | bytearray, *, where: str) -> Any:
        body = real(raw, where=where)
        body["components"] = [_CountedName(c) for c in body["components"]]
        body["files"] = {_CountedName(k): v for k, v in body["files"].items()}
        return body

    monkeypatch.setattr(cairn.manifest, "load_json", counted)
    _CountedName.compared = 0
    parsed = Manifest.from_bytes(data, where="test")
    assert all(parsed.has_component(f"c{i}") for i in range(n))
    return _CountedName.compared


def test_parsing_a_manifest_compares_names_a_number_of_times_linear_in_its_components(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """F11 counted, not timed: a scan of the component list per entry made n*n comparisons (2,000: 4 million)."""
    small, large = (_comparisons_to_parse(n, monkeypatch) for n in (500, 2000))
    assert small <= 16 * 500 and large <= 16 * 2000  # a few per component: name checks, set and dict lookups
    assert large <= 4 * small + 64  # four times the components, at most four times the work


def test_a_manifest_over_the_component_bound_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    ck = Path(Tree().save_to_path(tmp_path / "ck"))
    body = json.loads((ck / "manifest.json").read_text())
    body["components"] = [f"c{i}" for i in range(MAX_COMPONENTS + 1)]
    (ck / "manifest.json").write_bytes(seal_manifest_body(body))
    with pytest.raises(cairn.CorruptCheckpointError, match=f"at most {MAX_COMPONENTS} components"):
        cairn.verify_checkpoint(ck)


def test_a_manifest_listing_more_files_than_its_components_allow_is_refused(tmp_path: Path) -> None:
    ck = Path(Tree().save_to_path(tmp_path / "ck"))
    body = json.loads((ck / "manifest.json").read_text())
    body["components"] = []
    body["files"] = {f"x{i}": {"size": 0} for i in range(10)}
    (ck / "manifest.json").write_bytes(seal_manifest_body(body))
    with pytest.raises(cairn.CorruptCheckpointError, match="files of the folder's own"):
        Tree().restore_from_path(ck)


def test_a_manifest_listing_a_component_twice_is_refused(tmp_path: Path) -> None:
    w = Wide(2)
    ck = Path(w.save_to_path(tmp_path / "ck"))
    body = json.loads((ck / "manifest.json").read_text())
    body["components"] = ["k0", "k0", "k1"]
    (ck / "manifest.json").write_bytes(seal_manifest_body(body))
    with pytest.raises(cairn.CorruptCheckpointError, match="component twice"):
        Wide(2).restore_from_path(ck)


def test_a_save_over_the_component_bound_is_refused(tmp_path: Path) -> None:
    class TooWide(Wide):
        def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
            leaf = self.kids[0]
            return [(f"k{i}", leaf) for i in range(MAX_COMPONENTS + 1)]

    with pytest.raises(cairn.CheckpointError, match=f"more than {MAX_COMPONENTS} components"):
        TooWide(1).save_to_path(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()


# --------------------------------------------------------------------------- F12


def _outcome(fn: Any) -> tuple[str, bool, str]:
    """Run ``fn`` as a user the file permissions apply to: ``(error type, is a CheckpointError, message)``.

    Root reads every file whatever its mode, so as root ``fn`` runs in a forked child that
    has dropped to the ``nobody`` uid first (nothing else of this process runs in the child).
    """

    def run() -> tuple[str, bool, str]:
        try:
            fn()
        except BaseException as err:
            return type(err).__name__, isinstance(err, cairn.CheckpointError), str(err)
        return "", False, "no error"

    if os.geteuid() != 0:
        return run()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop privileges, run, report, exit without running any cleanup
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(w, json.dumps(run()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    name, is_ours, message = json.loads(data)
    return name, is_ours, message


@pytest.mark.parametrize("victim", ["packed.bin", "metadata.json", "manifest.json", "."])
def test_an_unreadable_file_or_folder_is_a_checkpoint_error_naming_it(victim: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="cairn-f12-"))  # not below pytest's 0700 folder: nobody must reach it
    try:
        base.chmod(0o755)
        t = Tree()
        t.mutate()
        ck = Path(t.save_to_path(base / "ck"))
        target = next(p for p in [*sorted(ck.rglob(victim)), ck] if p.name == victim or victim == ".")
        if victim == ".":
            target = ck / "leaf"  # a component's folder
        target.chmod(0)
        name, is_ours, message = _outcome(lambda: Tree().restore_from_path(ck))
        target.chmod(0o755 if target.is_dir() else 0o644)
    finally:
        shutil.rmtree(base)
    assert name == "UnreadableCheckpointError" and is_ours, (name, message)
    assert str(target.resolve()).rstrip("/.") in message and "read access" in message
    assert issubclass(cairn.UnreadableCheckpointError, PermissionError)


# --------------------------------------------------------------------------- F4


@cairn.register_type
@dataclasses.dataclass
class Moments:
    """A registered dataclass holding arrays: what F4's async save left live."""

    mean: np.ndarray
    var: Any  # a torch tensor


class Holder(cairn.Checkpointable):
    """Arrays in every container the codec accepts: a registered dataclass, nested lists, tuples and dicts."""

    def __init__(self, n: int = 1 << 18) -> None:
        import torch

        self.moments = Moments(np.zeros(n, np.float32), torch.zeros(n, dtype=torch.float32))
        self.nested = {"a": [np.zeros(n, np.int32), (torch.zeros(n // 4, dtype=torch.float64), {"b": np.zeros(7)})]}

    def arrays(self) -> list[Any]:
        n = self.nested["a"]
        return [self.moments.mean, self.moments.var, n[0], n[1][0], n[1][1]["b"]]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"moments": self.moments, "nested": self.nested}

    def set_state(self, state: dict[str, Any]) -> None:
        self.moments, self.nested = state["moments"], state["nested"]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (int(self.moments.mean.size),), {}


def test_an_async_save_snapshots_arrays_in_every_container_before_it_returns(tmp_path: Path) -> None:
    h = Holder()
    mgr = cairn.CheckpointManager(tmp_path / "run", async_save=True, keep_last=1)
    for step in range(2):
        for a in h.arrays():
            a[...] = step + 1
        mgr.save(h, step)
        for a in h.arrays():  # training goes on at once, while the save writes
            a[...] = -7
    mgr.wait()
    [info] = mgr.checkpoints()
    assert info.step == 1 and cairn.verify_checkpoint(info.path) == []
    back = Holder(1)
    back.restore_from_path(info.path)
    assert [float(np.asarray(a).min()) for a in back.arrays()] == [2.0] * 5
    assert [float(np.asarray(a).max()) for a in back.arrays()] == [2.0] * 5
    assert isinstance(back.moments, Moments)


def test_a_save_never_commits_bytes_that_changed_while_it_wrote_them(tmp_path: Path) -> None:
    """Another thread changes the arrays of a synchronous save: the save fails or its checkpoint verifies.

    The digest of a file was computed as its bytes went out; a change in between made a
    checkpoint that failed its own checksum. A save that reads back what it wrote refuses
    to commit a mismatch; on a local disk the digest is of the bytes read back as they
    were written (issue 34), so the checkpoint verifies.
    """
    import threading

    h = Holder(2 << 20)
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            h.moments.mean += 1  # numpy releases the GIL on large arrays: it runs during the write

    trainer = threading.Thread(target=train)
    trainer.start()
    refused = 0
    try:
        for i in range(4):
            try:
                ck = h.save_to_path(tmp_path / f"ck{i}")
            except cairn.CorruptCheckpointError as err:
                assert "Nothing was committed" in str(err)
                assert not (tmp_path / f"ck{i}").exists()
                refused += 1
            else:
                assert cairn.verify_checkpoint(ck) == []
    finally:
        stop.set()
        trainer.join()
    print(f"{refused} of 4 saves refused")  # usually all: the race is wide


# --------------------------------------------------------------------------- F5


def _racing_filesystem() -> Any:
    """An in-memory fsspec filesystem on which a second writer commits at the worst moment.

    Its server-side copy (how an incremental save links an unchanged file on object
    stores) first lets "another writer" replace the source file with other bytes of
    the same size, as a second writer's commit of the same step would, then copies:
    the bytes linked are not the ones any check of the path saw.
    """
    from fsspec.implementations.memory import MemoryFileSystem

    class RacingFS(MemoryFileSystem):
        cachable = False
        armed = False
        replaced: list[str] = []  # one class per test: _racing_filesystem defines it anew

        def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
            if self.armed and path1.endswith("tensors.safetensors"):
                data = bytearray(self.cat_file(path1))
                data[-1] ^= 0xFF  # the other writer's bytes: same size, other content
                self.pipe_file(path1, bytes(data))
                self.replaced.append(path1)
            super().cp_file(path1, path2, **kwargs)

    fs = RacingFS()
    fs.store = {}  # not the class-wide store of memory://
    fs.pseudo_dirs = [""]
    return fs


@pytest.mark.loose_files
def test_an_incremental_save_checks_the_file_it_linked_not_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = _racing_filesystem()
    w = Wide(2)
    mgr = cairn.CheckpointManager("/run", filesystem=fs, incremental=True)
    mgr.save(w, 0)
    w.kids[0].v[:] = 100  # k1 is unchanged: its tensor file is reused from step 0
    fs.armed = True
    caplog.clear()
    path = mgr.save(w, 1)
    assert warned(caplog, "damaged or was replaced"), caplog.text
    assert fs.replaced  # the race happened
    assert cairn.verify_checkpoint(path, filesystem=fs) == []
    back = Wide(2)
    back.restore_from_path(path, filesystem=fs)
    assert [int(k.v[0]) for k in back.kids] == [100, 1]
