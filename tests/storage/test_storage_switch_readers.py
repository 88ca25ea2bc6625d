"""Readers beside the restore go where ``Storage.locate`` says while a save switches on S3 (issue 41).

A save over a committed checkpoint on an object store switches its new checkpoint into place
after its commit: the path's root manifest is deleted, the new files are copied in, the new
root manifest last. A ``CheckpointManager`` listing or restoring that step, and the signature
checks, read where the storage sends a reader meanwhile (the staging folder, whole): they get the
old checkpoint or the new one, never "no checkpoint". Against moto on 127.0.0.1; the switch is
held in the middle of its copy (after the files, before the root manifest) by a filesystem that
calls back after each ``copy``, so each race runs in one order.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from storage_backends import MotoS3
from storage_components import Agent, expected_state

import cairn
from cairn.signing import sign_checkpoint, signed_root, verify_signature
from cairn.storage import writers
from cairn.testing import assert_states_equal

N = 8


def _agent(step: int) -> Agent:
    agent = Agent(N)
    agent.set_step(step)
    return agent


class _AfterCopy:
    """An fsspec filesystem that calls ``after()`` once each ``copy`` returned (the switch's copies)."""

    def __init__(self, fs: Any, after: Callable[[], None]) -> None:
        self.fs, self.after = fs, after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.fs, name)
        if name != "copy":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self.after()

        return call


@pytest.fixture
def held_switch(moto_s3: MotoS3) -> Iterator[Callable[[str, int], None]]:
    """``hold(path, step)``: save ``step`` over the checkpoint at ``path`` in a thread, and return once its
    switch is held after copying the files (the path has no root manifest then); released at teardown."""
    held, go = threading.Event(), threading.Event()
    failed: list[BaseException] = []
    threads: list[threading.Thread] = []

    def after_copy() -> None:
        if not held.is_set():
            held.set()
            assert go.wait(120), "the test never released the switch"

    def hold(path: str, step: int) -> None:
        def write() -> None:
            try:
                _agent(step).save_to_path(path, filesystem=_AfterCopy(moto_s3.filesystem(), after_copy))
            except BaseException as err:
                failed.append(err)

        threads.append(threading.Thread(target=write))
        threads[-1].start()
        assert held.wait(120), failed
        assert not moto_s3.filesystem().exists(f"{path}/manifest.json")  # the old readers' "no checkpoint"

    def release() -> None:
        go.set()
        for t in threads:
            t.join(120)
        assert not failed, failed

    hold.release = release  # type: ignore[attr-defined]
    try:
        yield hold
    finally:
        go.set()
        for t in threads:
            t.join(120)


def test_a_manager_lists_and_restores_a_step_while_a_save_switches_over_it(moto_s3: MotoS3, held_switch: Any) -> None:
    root = f"{moto_s3.bucket}/switch-{uuid.uuid4().hex[:8]}/run"
    with cairn.CheckpointManager(f"s3://{root}", keep_last=3) as mgr:
        mgr.save(_agent(1), 1)
    step = f"{root}/step_000000001"
    held_switch(step, 2)
    reader = cairn.CheckpointManager(f"s3://{root}", keep_last=3)
    assert [i.step for i in reader.checkpoints()] == [1]  # read from the staging folder: the new one
    got = Agent(N)
    info = reader.restore_latest(got)
    assert info is not None and info.step == 1
    assert_states_equal(expected_state(2, N), got.get_state())
    held_switch.release()
    got = Agent(N)
    assert reader.restore_latest(got) is not None and [i.step for i in reader.checkpoints()] == [1]
    assert_states_equal(expected_state(2, N), got.get_state())
    assert not [n for n in moto_s3.filesystem().ls(root, detail=False) if writers.TMP_MARK in n]


def _keys(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / "k.pem", folder / "k.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return private, public


def test_signatures_are_checked_and_written_where_readers_read_during_a_switch(
    moto_s3: MotoS3, held_switch: Any, tmp_path: Path
) -> None:
    """During the switch the signature check reads the new checkpoint (from its staging folder, so it is
    not signed yet: said so, not "no checkpoint"); signing waits for the switch (its signature would miss
    the copy into place); once the switch is done the new checkpoint is signed and verifies at the path."""
    private, public = _keys(tmp_path)
    path = f"{moto_s3.bucket}/switch-{uuid.uuid4().hex[:8]}/ckpt"
    _agent(1).save_to_path(f"s3://{path}")
    sign_checkpoint(f"s3://{path}", private)
    held_switch(path, 2)
    with pytest.raises(cairn.SignatureError, match="is not signed") as unsigned:
        signed_root(f"s3://{path}", public)
    assert f"read from s3://{path.rsplit('/', 1)[0]}/.ckpt{writers.TMP_MARK}" in str(unsigned.value)  # the new one
    with pytest.raises(cairn.CheckpointError, match="switching its new checkpoint into place"):
        sign_checkpoint(f"s3://{path}", private)
    held_switch.release()
    sign_checkpoint(f"s3://{path}", private)
    verify_signature(f"s3://{path}", public)
    got = Agent(N)
    got.restore_from_path(f"s3://{path}", public_key=public)
    assert_states_equal(expected_state(2, N), got.get_state())


def test_a_manager_listing_reads_each_folder_record_once(moto_s3: MotoS3) -> None:
    """Where each step is read from is found once per listing: the owner records of the folders above the
    steps are read once, then one per step (each step was located alone before: a record per folder of its
    depth, steps x depth requests on S3)."""
    root = f"{moto_s3.bucket}/locate-{uuid.uuid4().hex[:8]}/a/b/c/run"
    steps = 3
    with cairn.CheckpointManager(f"s3://{root}", keep_last=steps) as mgr:
        for step in range(1, steps + 1):
            mgr.save(_agent(step), step)
    fs = moto_s3.filesystem()
    records: list[str] = []
    read = fs._cat_file

    async def counted(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith(f"/{writers.INFLIGHT}"):
            records.append(path)
        return await read(path, *args, **kwargs)

    fs._cat_file = counted  # the batched reads of small objects (records, manifests) go through it
    reader = cairn.CheckpointManager(f"s3://{root}", keep_last=steps, filesystem=fs)
    assert [i.step for i in reader.checkpoints()] == [1, 2, 3]
    above = root.count("/")  # the folders from root up, the bucket left out
    assert len(records) == above + steps and len(set(records)) == len(records), records
    records.clear()
    got = Agent(N)
    assert reader.restore_latest(got) is not None
    assert_states_equal(expected_state(steps, N), got.get_state())
    # The pass: the folders above once, then the newest step (the one that loads); the restore of it then
    # locates its path itself (every folder of it).
    assert len(records) == 2 * (above + 1), records


def test_an_incremental_save_links_the_files_of_a_step_that_is_switching(moto_s3: MotoS3, held_switch: Any) -> None:
    """The previous step of an incremental save is read where a restore reads it: while a save over it
    switches (its path has no root manifest until the copy ends), from the staging folder, so its files
    are linked, not all sent again (before, the step was skipped as uncommitted)."""
    root = f"{moto_s3.bucket}/switch-{uuid.uuid4().hex[:8]}/run"
    with cairn.CheckpointManager(f"s3://{root}", keep_last=3) as mgr:
        mgr.save(_agent(1), 1)
    held_switch(f"{root}/step_000000001", 2)
    mgr = cairn.CheckpointManager(f"s3://{root}", keep_last=3)
    mgr.save(_agent(2), 2)  # the same state as the one switching in at step 1
    stats = mgr.last_stats
    assert stats is not None and stats.files_linked > 0, stats
    held_switch.release()
    got = Agent(N)
    info = mgr.restore_latest(got)
    assert info is not None and info.step == 2 and [i.step for i in mgr.checkpoints()] == [1, 2]
    assert_states_equal(expected_state(2, N), got.get_state())
