"""The engine's delegation hook (cairn.delegation) with a delegate that is not Ray: a worker thread.

The ``worker`` component's real state lives in the delegate (as it would in another
process); the owner's ``worker`` object is only its shape. Every entry point goes
through the public API: save_to_path, restore_from_path (whole and partial),
from_checkpoint, CheckpointManager (sync, async, incremental, restore_latest).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import cairn
from cairn import CheckpointError, CheckpointManager, CorruptCheckpointError
from cairn.delegation import DelegatedComponent, DelegatedFolder, Waiter
from delegation_components import FailingWrite, Owner


@pytest.fixture
def owner() -> Iterator[Owner]:
    made = Owner()
    made.fill(1.0)
    yield made
    made.delegate.pool.shutdown()


def _files(root: str | Path) -> set[str]:
    return {str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file()}


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_the_delegate_writes_its_folder_and_reads_it_back(owner: Owner, tmp_path: Path) -> None:
    path = owner.save_to_path(tmp_path / "ckpt")
    assert owner.delegate.calls == ["save"]
    # Same layout and states as the whole state gathered and written by this process.
    gathered = owner.save_to_path(tmp_path / "gathered", state=owner.get_state())
    assert _files(path) == _files(gathered)
    assert cairn.verify_checkpoint(path) == []
    assert '"worker"' in (Path(path) / "metadata.json").read_text()
    saved = owner.values()
    owner.fill(7.0)
    owner.restore_from_path(path)
    assert owner.values() == saved
    assert owner.delegate.calls == ["save", "load", "apply"]
    assert owner.worker_shape.weights.tolist() == [0.0] * 4  # only a shape: not restored here


def test_from_checkpoint_and_partial_restore_go_through_the_delegate(owner: Owner, tmp_path: Path) -> None:
    path = owner.save_to_path(tmp_path / "ckpt")
    rebuilt = Owner.from_checkpoint(path)
    try:
        assert rebuilt.values() == owner.values()
        assert rebuilt.delegate.calls == ["load", "apply"]
    finally:
        rebuilt.delegate.pool.shutdown()
    owner.fill(3.0)
    owner.restore_from_path(Path(path) / "worker", component="worker")
    assert owner.delegate.held.weights.tolist() == [1.5] * 4 and owner.delegate.held.counter == 101
    assert owner.step == 3 and owner.local.weights.tolist() == [3.0] * 4  # the rest untouched


def test_a_delegate_that_fails_mid_save_commits_nothing(owner: Owner, tmp_path: Path) -> None:
    path = owner.save_to_path(tmp_path / "ckpt")
    saved = owner.values()
    owner.fill(2.0)
    owner.delegate.fail_next_save = True
    with pytest.raises(FailingWrite, match="worker thread failed"):
        owner.save_to_path(path)
    assert sorted(os.listdir(tmp_path)) == ["ckpt"]  # no staging folder, no owner record left
    assert cairn.verify_checkpoint(path) == []
    owner.restore_from_path(path)
    assert owner.values() == saved


def test_a_corrupt_delegated_file_applies_nothing_anywhere(owner: Owner, tmp_path: Path) -> None:
    path = Path(owner.save_to_path(tmp_path / "ckpt"))
    _flip_last_byte(path / "worker" / "packed.bin")
    owner.fill(5.0)
    before = owner.values()
    with pytest.raises(CorruptCheckpointError, match="worker"):
        owner.restore_from_path(path)
    # Neither the driver's parts (whose weights it offers as live buffers) nor the delegate changed.
    assert owner.values() == before
    assert owner.delegate.calls[-1] == "drop"
    assert owner.delegate.pending is None


def test_a_corrupt_file_of_this_process_leaves_the_delegate_as_it_was(owner: Owner, tmp_path: Path) -> None:
    path = Path(owner.save_to_path(tmp_path / "ckpt"))
    _flip_last_byte(path / "local" / "packed.bin")
    owner.fill(5.0)
    before = owner.values()
    with pytest.raises(CorruptCheckpointError, match="local"):
        owner.restore_from_path(path)
    assert owner.values() == before
    assert "apply" not in owner.delegate.calls


def test_a_stale_copy_on_the_delegates_node_is_another_version_not_corruption(owner: Owner, tmp_path: Path) -> None:
    """Issue 41, item 8: the delegate's node has its own disk, holding an older save at the same path.
    The read is refused (nothing applied anywhere), and the error says that node holds another
    version of the component, not that the checkpoint is corrupted; a damaged copy is still damage."""
    path = Path(owner.save_to_path(tmp_path / "ckpt"))
    node_disk = tmp_path / "node-b"  # what the delegate's node sees at ``path``: its own disk
    shutil.copytree(path, node_disk / "ckpt")
    owner.fill(2.0)
    owner.save_to_path(path)  # the checkpoint moves on; node B's copy is now stale
    real_load = owner.delegate.start_load

    def load_on_node_b(folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> Waiter:
        def there(p: str) -> str:
            return str(node_disk / Path(p).relative_to(tmp_path))

        moved = dataclasses.replace(folder, path=there(folder.path), root=there(folder.root))
        return real_load(moved, component=component, allow_pickle=allow_pickle)

    owner.delegate.start_load = load_on_node_b  # type: ignore[method-assign]
    owner.fill(5.0)
    before = owner.values()
    with pytest.raises(CorruptCheckpointError, match="holds another version of the component 'worker'") as info:
        owner.restore_from_path(path)
    assert "corrupted" not in str(info.value) and "every node" in str(info.value), info.value
    assert owner.values() == before and owner.delegate.pending is None
    # A copy whose manifest is damaged (not a manifest) is reported as damage, as before.
    manifest = node_disk / "ckpt" / "worker" / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:-7])
    with pytest.raises(CorruptCheckpointError, match="worker") as info:
        owner.restore_from_path(path)
    assert "another version" not in str(info.value), info.value
    assert owner.values() == before


@pytest.mark.loose_files
@pytest.mark.parametrize("async_save", [False, True])
def test_manager_saves_delegate_snapshot_at_save_time(owner: Owner, tmp_path: Path, async_save: bool) -> None:
    with CheckpointManager(tmp_path / "run", keep_last=2, async_save=async_save) as mgr:
        mgr.save(owner, 1)
        saved = owner.values()
        owner.fill(9.0)  # training goes on while an async save writes
        mgr.wait()
        mgr.save(owner, 2)  # the same again: the driver's unchanged files are linked
        mgr.wait()
        assert mgr.last_stats is not None and mgr.last_stats.files_linked > 0
        owner.fill(4.0)
        info = mgr.restore_latest(owner)
        assert info is not None and info.step == 2
        assert owner.values()[:4] == (9, [9.0] * 4, [9.5] * 4, 109)
        step1 = mgr.checkpoints()[0].path
    owner.restore_from_path(step1)
    assert owner.values() == saved


def test_a_failed_delegate_fails_the_manager_save_and_keeps_the_previous_step(owner: Owner, tmp_path: Path) -> None:
    with CheckpointManager(tmp_path / "run", keep_last=1, async_save=True) as mgr:
        mgr.save(owner, 1)
        mgr.wait()
        owner.delegate.fail_next_save = True
        mgr.save(owner, 2)
        with pytest.raises(CheckpointError, match="worker thread failed"):
            mgr.wait()
        assert [info.step for info in mgr.checkpoints()] == [1]
        assert sorted(os.listdir(tmp_path / "run")) == ["cairn-latest.json", "step_000000001"]


def test_a_delegated_name_must_be_a_component(tmp_path: Path) -> None:
    class Wrong(Owner):
        def get_delegated_components(self) -> dict[str, DelegatedComponent]:
            return {"nope": self.delegate}

    wrong = Wrong()
    try:
        with pytest.raises(CheckpointError, match="'nope', which is not one of its components"):
            wrong.save_to_path(tmp_path / "ckpt")
    finally:
        wrong.delegate.pool.shutdown()
