"""Atomic commits: a reader sees a whole checkpoint or none, never a mix; failed saves commit nothing.

On a local disk the previous checkpoint stays intact through a failed save
(the new one is written into a hidden sibling folder and swapped in). On
object stores, which cannot rename, the root manifest is the commit marker:
the old marker is deleted before the first new file is written, so a reader
sees the old checkpoint, then nothing, then the new one.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_backends import Backend, MotoS3
from storage_components import Agent, FailingLeaf, expected_state
from storage_faults import Fault, FaultyFS

import cairn
from cairn.storage import FsspecStorage, resolve_storage, writers
from cairn.storage.local import TMP_MARK, LocalStorage
from cairn.testing import assert_states_equal, states_equal

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

N = 8


def _agent(step: int) -> Agent:
    agent = Agent(N)
    agent.set_step(step)
    return agent


def view(uri: str, *, filesystem: Any = None, steps: tuple[int, ...] = (1, 2)) -> str:
    """What a reader sees at ``uri``: 'absent', 'step<k>', or a description of what is wrong."""
    fresh = Agent(N)
    try:
        fresh.restore_from_path(uri, filesystem=filesystem)
    except cairn.CheckpointNotFoundError:
        return "absent"
    except Exception as err:
        return f"ERROR {type(err).__name__}: {err}"
    state = fresh.get_state()
    for step in steps:
        if states_equal(state, expected_state(step, N)):
            return f"step{step}"
    return "MIX"


def _staging_leftovers(folder: Path) -> list[str]:
    return [n for n in os.listdir(folder) if TMP_MARK in n]


# ---------------------------------------------------------------------------- never a mix


def test_never_a_mix_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before every file write of a save over a checkpoint, a reader sees the whole old one."""
    target = str(tmp_path / "ckpt")
    _agent(1).save_to_path(target)
    seen: list[str] = []
    real_write = LocalStorage.write_file

    def probing_write(self: LocalStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
        seen.append(view(target))
        return real_write(self, path, chunks, **kwargs)

    monkeypatch.setattr(LocalStorage, "write_file", probing_write)
    _agent(2).save_to_path(target)
    assert len(seen) > 10
    assert set(seen) == {"step1"}, seen
    assert view(target) == "step2"
    assert _staging_leftovers(tmp_path) == []


@pytest.mark.usefixtures("no_read_retry_pause")  # the writer waits inside its call while the probe reads
def test_never_a_mix_remote(remote_backend: Backend) -> None:
    """On object stores a reader sees the old checkpoint, then none, then the new one."""
    uri = remote_backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    seen: list[str] = []
    faulty = FaultyFS(remote_backend.fs, probe=lambda _m, _p: seen.append(view(uri)))
    _agent(2).save_to_path(remote_backend.path("ckpt"), filesystem=faulty)
    assert len(seen) > 10
    # In that order: the old checkpoint, none, then the new one (the writer's last calls, such as
    # removing its in-flight marker, come after the root manifest that commits it).
    order = {"step1": 0, "absent": 1, "step2": 2}
    assert all(v in order for v in seen), seen
    ranks = [order[v] for v in seen]
    assert ranks == sorted(ranks), seen
    assert view(uri) == "step2"


# ---------------------------------------------------------------------------- interrupted saves


def test_interrupted_get_state(backend: Backend) -> None:
    """A component's get_state raising fails the save before anything is written."""
    uri = backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    agent = _agent(2)
    leaf = FailingLeaf(N, seed=3)
    leaf.fail = True
    agent.group.a = leaf
    with pytest.raises(RuntimeError, match="on purpose"):
        agent.save_to_path(uri)
    assert view(uri) == "step1"
    assert cairn.verify_checkpoint(uri) == []
    if backend.name == "local":
        assert _staging_leftovers(Path(backend.base)) == []


def _count_writes(tmp_path: Path) -> int:
    count = 0
    real_write = LocalStorage.write_file

    def counting(self: LocalStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
        nonlocal count
        count += 1
        return real_write(self, path, chunks, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LocalStorage, "write_file", counting)
        _agent(2).save_to_path(str(tmp_path / "count"))
    return count


@pytest.mark.parametrize("where", [0.0, 0.3, 0.7, 1.0])
def test_interrupted_write_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: float) -> None:
    """A write failing at any point (1.0: the root manifest, the last one) leaves the old checkpoint."""
    total = _count_writes(tmp_path)
    fail_at = min(total - 1, int(where * total))
    target = str(tmp_path / "ckpt")
    _agent(1).save_to_path(target)
    calls = 0
    real_write = LocalStorage._write_file
    failed_path = ""

    def failing(self: LocalStorage, path: str, chunks: Any, algorithm: str) -> Any:
        nonlocal calls, failed_path
        calls += 1
        if calls - 1 == fail_at:
            failed_path = path
            raise OSError(28, "No space left on device (injected)")
        return real_write(self, path, chunks, algorithm)

    monkeypatch.setattr(LocalStorage, "_write_file", failing)
    with pytest.raises(cairn.CheckpointError) as info:
        _agent(2).save_to_path(target)
    assert failed_path in str(info.value)
    monkeypatch.undo()
    assert view(target) == "step1"
    assert cairn.verify_checkpoint(target) == []
    assert _staging_leftovers(tmp_path) == []


@pytest.mark.parametrize("which", ["policy/state.msgpack", "group/b/manifest.json", "manifest.json"])
@pytest.mark.parametrize("over", [False, True])
def test_interrupted_write_remote(
    remote_backend: Backend, which: str, over: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails for good commits nothing and leaves no file on object stores; a checkpoint
    that was at the path stays loadable (the save wrote beside it, issue 41)."""
    monkeypatch.setattr(writers, "new_write_id", lambda: "0123456789ab")
    uri = remote_backend.uri("ckpt")
    if over:
        _agent(1).save_to_path(uri)
    staged = writers.tmp_name("ckpt", "0123456789ab") if over else "ckpt"
    faulty = FaultyFS(
        remote_backend.fs,
        faults=[Fault("write", f"{staged}/{which}", times=None, error=lambda: PermissionError("denied"))],
    )
    with pytest.raises(cairn.CheckpointError) as info:
        _agent(2).save_to_path(remote_backend.path("ckpt"), filesystem=faulty)
    assert remote_backend.uri(f"{staged}/{which}") in str(info.value)
    assert faulty.faults[0].fired == 1  # not transient: not retried
    remote_backend.fs.invalidate_cache()
    if over:
        assert view(uri) == "step1"
        assert cairn.verify_checkpoint(uri) == []
        assert not remote_backend.fs.exists(remote_backend.path(staged))
        assert not remote_backend.fs.exists(remote_backend.path("ckpt", writers.INFLIGHT))
    else:
        assert view(uri) == "absent"
        assert remote_backend.fs.find(remote_backend.path("ckpt")) == []


# ---------------------------------------------------------------------------- stale caches


@pytest.fixture
def cached_s3(moto_s3: MotoS3) -> Iterator[Any]:
    """An s3fs client with its listing cache on (s3fs's default)."""
    yield moto_s3.filesystem(use_listings_cache=True)


def test_stale_listing_cache_cannot_keep_old_commit_marker(moto_s3: MotoS3, cached_s3: Any) -> None:
    """A save through a client whose cached listing predates the old checkpoint still uncommits it first.

    The client lists the folder before it holds a checkpoint; another client then saves a
    checkpoint there. A save through the first client that fails at its last
    write must leave no committed checkpoint, rather than the old commit marker
    over a mix of old and new files.
    """
    base = f"{moto_s3.bucket}/stale"
    other = moto_s3.filesystem()
    other.pipe_file(f"{base}/ckpt/ctor.json", b"x")  # what an interrupted save left
    assert cached_s3.ls(base, detail=False)  # the cache now says: ckpt holds one file ...
    assert cached_s3.ls(f"{base}/ckpt", detail=False) == [f"{base}/ckpt/ctor.json"]  # ... and no manifest
    _agent(1).save_to_path(f"{base}/ckpt", filesystem=other)
    faulty = FaultyFS(cached_s3, faults=[Fault("write", "/manifest.json", times=None, error=lambda: OSError("x"))])
    with pytest.raises(cairn.CheckpointError):
        _agent(2).save_to_path(f"{base}/ckpt", filesystem=faulty)
    assert view(f"s3://{base}/ckpt") == "step1"  # the new one was staged beside it, never mixed in


def test_overwrite_with_default_caches(moto_s3: MotoS3, cached_s3: Any) -> None:
    """A save over a checkpoint another client wrote, through a cached client, gives the new values."""
    base = f"{moto_s3.bucket}/stale2"
    other = moto_s3.filesystem()
    cached_s3.ls(moto_s3.bucket, detail=False)
    _agent(1).save_to_path(f"{base}/ckpt", filesystem=other)
    got = Agent(N)
    got.restore_from_path(f"{base}/ckpt", filesystem=cached_s3)
    assert_states_equal(expected_state(1, N), got.get_state())
    _agent(2).save_to_path(f"{base}/ckpt", filesystem=cached_s3)
    assert view(f"{base}/ckpt", filesystem=other) == "step2"


# ---------------------------------------------------------------------------- interrupted deletes


def test_interrupted_delete_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delete killed half-way (retention, overwrite) never leaves a committed but incomplete checkpoint."""
    target = str(tmp_path / "ckpt")
    _agent(1).save_to_path(target)

    def dying_rmtree(path: str, ignore_errors: bool = False) -> None:
        for name in ("state.msgpack", "metadata.json"):
            os.unlink(os.path.join(path, name))
        raise KeyboardInterrupt("killed in the middle of the delete (simulated)")

    monkeypatch.setattr("cairn.storage.local.shutil.rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        LocalStorage().remove_tree(target)
    monkeypatch.undo()
    assert view(target) == "absent"
    # The leftover is hidden and a manager cleans such leftovers up.
    assert [n for n in os.listdir(tmp_path) if not n.startswith(".")] == []


def test_interrupted_delete_remote(remote_backend: Backend) -> None:
    """A bulk delete that dies half-way on an object store leaves an uncommitted folder, not a damaged one."""
    uri = remote_backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    fs = remote_backend.fs

    def partial_delete() -> BaseException:
        for rel in ("ckpt/state.msgpack", "ckpt/policy/manifest.json"):
            fs.rm_file(remote_backend.path(rel))
        return ConnectionAbortedError("killed in the middle of the delete (simulated)")

    faulty = FaultyFS(fs, faults=[Fault("rm", "ckpt", times=None, error=partial_delete)])
    storage, path = resolve_storage(remote_backend.path("ckpt"), faulty)
    assert isinstance(storage, FsspecStorage)
    storage.attempts = 1
    with pytest.raises(cairn.CheckpointError):
        storage.remove_tree(path)
    assert view(uri) == "absent"


def test_manager_retention_delete_interrupted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retention delete killed half-way: the manager never lists the half-deleted step."""
    mgr = cairn.CheckpointManager(str(tmp_path / "run"), keep_last=1)
    mgr.save(_agent(1), 1)

    def dying_rmtree(path: str, ignore_errors: bool = False) -> None:
        os.unlink(os.path.join(path, "state.msgpack"))
        raise KeyboardInterrupt("killed (simulated)")

    monkeypatch.setattr("cairn.storage.local.shutil.rmtree", dying_rmtree)
    with pytest.raises(KeyboardInterrupt):
        mgr.save(_agent(2), 2)
    monkeypatch.undo()
    again = cairn.CheckpointManager(str(tmp_path / "run"), keep_last=1)
    assert [i.step for i in again.checkpoints()] == [2]
    again.save(_agent(3), 3)  # the next writer's first save removes the half-deleted leftover
    assert sorted(os.listdir(tmp_path / "run")) == ["cairn-latest.json", "step_000000003"]


# ---------------------------------------------------------------------------- the manager's cleanup


def test_manager_keeps_newer_format_checkpoints(tmp_path: Path) -> None:
    """Opening a manager never deletes a committed checkpoint it cannot read (here: a newer format)."""
    from fsspec.implementations.local import LocalFileSystem
    from storage_reseal import reseal

    root = str(tmp_path / "run")
    mgr = cairn.CheckpointManager(root)
    mgr.save(_agent(1), 1)
    mgr.save(_agent(2), 2)
    newer = lambda f, b: b.update(format_version=99) if not f else None  # noqa: E731
    reseal(LocalFileSystem(), f"{root}/step_000000002", edit=newer)
    cairn.CheckpointManager(root)
    assert sorted(os.listdir(root)) == ["cairn-latest.json", "step_000000001", "step_000000002"]


def test_manager_keeps_checkpoints_on_read_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """A manager opened while reads fail (transiently, past the retries) deletes nothing."""
    import types

    from fsspec.implementations.memory import MemoryFileSystem

    from cairn.storage import fsspec_storage

    monkeypatch.setattr(fsspec_storage, "time", types.SimpleNamespace(sleep=lambda _s: None))
    fs = MemoryFileSystem()
    root = "/cairn-tests/mgr-read-errors/run"
    mgr = cairn.CheckpointManager(root, filesystem=fs)
    mgr.save(_agent(1), 1)
    faulty = FaultyFS(fs, faults=[Fault("read", "step_000000001/manifest.json", times=None, error=TimeoutError)])
    try:
        cairn.CheckpointManager(root, filesystem=faulty)
        assert fs.exists(f"{root}/step_000000001/manifest.json")
    finally:
        fs.rm("/cairn-tests/mgr-read-errors", recursive=True)


# ---------------------------------------------------------------------------- what a save may replace


def _put(backend: Backend, parts: list[str], data: bytes) -> None:
    path = backend.path(*parts)
    backend.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    backend.fs.pipe_file(path, data)


def test_save_never_replaces_foreign_data(backend: Backend) -> None:
    """A folder holding anything but checkpoint files is never replaced; a file in the way is refused."""
    fs = backend.fs
    _put(backend, ["data", "notes.txt"], b"precious")
    _put(backend, ["data", "sub", "metadata.json"], b"{}")
    with pytest.raises(cairn.CheckpointError, match=r"notes\.txt") as info:
        _agent(1).save_to_path(backend.uri("data"))
    assert "not a file of a cairn checkpoint" in str(info.value)
    fs.invalidate_cache()
    assert fs.cat_file(backend.path("data", "notes.txt")) == b"precious"
    assert fs.exists(backend.path("data", "sub", "metadata.json"))
    _put(backend, ["afile"], b"a file")
    with pytest.raises(cairn.CheckpointError, match="in the way"):
        _agent(1).save_to_path(backend.uri("afile"))
    fs.invalidate_cache()
    assert fs.cat_file(backend.path("afile")) == b"a file"


def test_save_replaces_checkpoints_and_remains_of_saves(backend: Backend) -> None:
    """A checkpoint, or what an interrupted save left (checkpoint files only), is replaced; siblings are not touched."""
    fs = backend.fs
    _put(backend, ["ckpt2", "notes.txt"], b"sibling")  # a sibling sharing the name's prefix
    _put(backend, ["ckpt", "policy", "state.msgpack"], b"partial")
    _put(backend, ["ckpt", "policy", "metadata.json"], b"{")
    _agent(1).save_to_path(backend.uri("ckpt"))
    _agent(2).save_to_path(backend.uri("ckpt"))
    assert view(backend.uri("ckpt")) == "step2"
    fs.invalidate_cache()
    assert fs.cat_file(backend.path("ckpt2", "notes.txt")) == b"sibling"


def test_save_over_without_rename_exchange(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the kernel cannot swap folders (no renameat2), a save over a checkpoint still replaces it whole."""
    import cairn.storage.local as local

    monkeypatch.setattr(local, "_renameat2", None)
    target = str(tmp_path / "ckpt")
    _agent(1).save_to_path(target)
    _agent(2).save_to_path(target)
    assert view(target) == "step2"
    assert _staging_leftovers(tmp_path) == []
