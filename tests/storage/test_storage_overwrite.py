"""Object stores: a save over an existing checkpoint never loses it (issue 41), and what readers see.

A save over a committed checkpoint writes beside it (a hidden staging sibling) and
switches at commit; a save killed at any point before its commit leaves the previous
checkpoint loadable, and the cleanup (``remove_leftovers``) removes what it left,
unfinished S3 multipart uploads included. A reader never loads a folder inside a save
that has not committed, however deep (issue 33, F13).
"""

from __future__ import annotations

import asyncio
import http.server
import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from storage_backends import Backend, MotoS3
from storage_components import Agent, expected_state
from storage_faults import Fault, FaultyFS

import cairn
from cairn.storage import resolve_storage, writers
from cairn.testing import assert_states_equal
from http_proxy import forward, read_body

N = 8
BIG = 2 << 20  # float32 values per leaf: 8 MiB files: multipart uploads in the child (5 MiB blocks)
CHILD = os.path.join(os.path.dirname(__file__), "storage_overwrite_child.py")


def _agent(step: int, n: int = N) -> Agent:
    agent = Agent(n)
    agent.set_step(step)
    return agent


def _loads(uri: str, step: int, n: int = N, **kwargs: Any) -> None:
    got = Agent(n)
    got.restore_from_path(uri, **kwargs)
    assert_states_equal(expected_state(step, n), got.get_state())


class _HoldFirstPart(http.server.ThreadingHTTPServer):
    """A proxy to moto that holds the first part of any multipart upload (never forwarded)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.held = threading.Event()
        self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server: _HoldFirstPart

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _handle(self) -> None:
                body = read_body(self)
                if self.command == "PUT" and "partNumber=1" in self.path:
                    self.server.held.set()
                    self.server.release.wait(300)
                    self.close_connection = True
                    return
                forward(self, self.server.upstream, body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def hold_proxy(moto_s3: MotoS3) -> Iterator[_HoldFirstPart]:
    proxy = _HoldFirstPart(moto_s3.endpoint_url)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    yield proxy
    proxy.release.set()
    proxy.shutdown()
    proxy.server_close()


def _uploads(moto_s3: MotoS3, prefix: str) -> list[str]:
    out = moto_s3.filesystem().call_s3("list_multipart_uploads", Bucket=moto_s3.bucket, Prefix=prefix)
    return [u["Key"] for u in out.get("Uploads") or []]


def test_a_save_killed_mid_upload_keeps_the_previous_checkpoint(moto_s3: MotoS3, hold_proxy: _HoldFirstPart) -> None:
    """SIGKILL during a multipart upload of a save over a checkpoint: the old one loads; cleanup removes
    the staging folder and aborts the orphaned upload; the next save at the path works."""
    key = f"kill-{uuid.uuid4().hex[:8]}"
    base = f"{moto_s3.bucket}/{key}"
    _agent(1, BIG).save_to_path(f"s3://{base}/ckpt")
    child = subprocess.Popen(
        [sys.executable, CHILD, hold_proxy.url, f"{base}/ckpt", str(BIG), "2"],
        env={**os.environ, **moto_s3.env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        # A real server: a wait far above any load, and the test ends as soon as the part is held.
        assert hold_proxy.held.wait(240), child.stderr.read() if child.poll() is not None else "no upload"  # type: ignore[union-attr]
        assert _uploads(moto_s3, f"{key}/"), "the save should be in the middle of a multipart upload"
    finally:
        child.kill()
        child.wait()
    _loads(f"s3://{base}/ckpt", 1, BIG)
    assert any(writers.TMP_MARK in n for n in moto_s3.filesystem().ls(base, detail=False))
    storage, root = resolve_storage(f"s3://{base}")
    removed = storage.remove_leftovers(root, lambda name: name == "ckpt")
    assert len(removed) == 1 and writers.TMP_MARK in removed[0], removed
    assert _uploads(moto_s3, f"{key}/") == []
    assert moto_s3.filesystem().ls(base, detail=False) == [f"{base}/ckpt"]
    _loads(f"s3://{base}/ckpt", 1, BIG)
    _agent(3).save_to_path(f"s3://{base}/ckpt")  # the dead writer's record is taken over
    _loads(f"s3://{base}/ckpt", 3)


def test_a_failed_save_aborts_its_own_upload(moto_s3: MotoS3) -> None:
    """An upload that fails in this process is aborted, not completed with the parts it sent."""
    key = f"own-{uuid.uuid4().hex[:8]}"
    fs = moto_s3.filesystem(default_block_size=5 << 20)
    storage, path = resolve_storage(f"{moto_s3.bucket}/{key}/f", fs)
    fails = {"n": 0}
    real = fs.call_s3

    def first_part_fails(method: str, *args: Any, **kwargs: Any) -> Any:
        if method == "upload_part" and kwargs.get("PartNumber") == 1:
            fails["n"] += 1
            raise PermissionError("denied (first part)")
        return real(method, *args, **kwargs)

    fs.call_s3 = first_part_fails
    with pytest.raises(cairn.CheckpointError, match="denied"):
        storage.write_file(path, [bytes(12 << 20)])
    assert fails["n"] == 1
    assert _uploads(moto_s3, f"{key}/") == []
    assert not moto_s3.filesystem().exists(f"{moto_s3.bucket}/{key}/f")


def test_a_switch_cut_short_is_committed_and_finished_by_the_next_save(
    remote_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy into place fails after the commit point: readers load the new checkpoint (and its
    components) from the staging folder; the next save finishes the copy before replacing it."""
    uri = remote_backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    faulty = FaultyFS(remote_backend.fs, faults=[Fault("copy", "", times=None, error=lambda: PermissionError("no"))])
    with pytest.raises(cairn.CheckpointError, match="is committed"):
        _agent(2).save_to_path(remote_backend.path("ckpt"), filesystem=faulty)
    _loads(uri, 2)
    got = Agent(N)
    got.stats.restore_from_path(f"{uri}/stats")
    assert_states_equal(expected_state(2, N)["stats"], got.stats.get_state())
    assert cairn.verify_checkpoint(uri) == []
    _agent(3).save_to_path(uri)
    _loads(uri, 3)
    remote_backend.fs.invalidate_cache()
    assert [p.rsplit("/", 1)[-1] for p in remote_backend.fs.ls(remote_backend.base, detail=False)] == ["ckpt"]


def test_remove_leftovers_finishes_a_dead_writers_switch(remote_backend: Backend) -> None:
    """A writer gone after its commit point: cleanup copies its checkpoint into place, never deletes it."""
    uri = remote_backend.uri("ckpt")
    _agent(1).save_to_path(uri)
    faulty = FaultyFS(remote_backend.fs, faults=[Fault("copy", "", times=None, error=lambda: PermissionError("no"))])
    with pytest.raises(cairn.CheckpointError, match="is committed"):
        _agent(2).save_to_path(remote_backend.path("ckpt"), filesystem=faulty)
    storage, root = resolve_storage(remote_backend.uri())
    storage.remove_leftovers(root, lambda name: name == "ckpt")
    remote_backend.fs.invalidate_cache()
    assert [p.rsplit("/", 1)[-1] for p in remote_backend.fs.ls(remote_backend.base, detail=False)] == ["ckpt"]
    assert not remote_backend.fs.exists(remote_backend.path("ckpt", writers.INFLIGHT))
    _loads(uri, 2)


def test_a_folder_deep_inside_an_uncommitted_save_does_not_load() -> None:
    """F13: a checkpoint 10 (or 40) folders inside a save in flight is refused, not only 8 levels up;
    a staging folder named directly is refused; a path deeper than any S3 key is refused outright."""
    from fsspec.implementations.memory import MemoryFileSystem

    fs = MemoryFileSystem()
    top = f"/cairn-f13/{uuid.uuid4().hex[:8]}/run"
    for depth in (10, 40):
        deep = "/".join([top, *(f"l{i}" for i in range(depth)), "ckpt"])
        _agent(1).save_to_path(f"memory://{deep}")
        _loads(f"memory://{deep}", 1)
        fs.pipe_file(f"{top}/{writers.INFLIGHT}", writers.Owner.of_this_process("0123456789ab").to_bytes())
        with pytest.raises(cairn.CheckpointNotFoundError, match="has not committed"):
            _loads(f"memory://{deep}", 1)
        fs.rm_file(f"{top}/{writers.INFLIGHT}")
    with pytest.raises(cairn.CheckpointNotFoundError, match="staging folder"):
        _loads(f"memory://{top}/{writers.tmp_name('ckpt', '0123456789ab')}/stats", 1)
    too_deep = "/".join(["/cairn-f13", *(["d"] * writers.MAX_FOLDER_DEPTH), "ckpt"])
    with pytest.raises(cairn.CheckpointError, match="folders deep"):
        _loads(f"memory://{too_deep}", 1)
    fs.rm("/cairn-f13", recursive=True)


class _Hooked:
    """An fsspec filesystem that calls ``after(method, path)`` once each ``cat_file`` (or s3fs's
    ``get_object`` request) or ``copy`` returned (or raised): the test decides there what the other
    side does next, so a race runs in one order."""

    def __init__(self, fs: Any, after: Any) -> None:
        self.fs, self.after = fs, after

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.fs, name)
        if name == "_call_s3":
            # Bounded S3 reads of 16 MiB or more (a manifest's) send s3fs's get_object themselves. The hook
            # may wait for the writer, whose calls run on the same event loop: it waits in a thread.
            async def call_async(method: str, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await attr(method, *args, **kwargs)
                finally:
                    if method == "get_object":
                        where = f"{kwargs['Bucket']}/{kwargs['Key']}"
                        await asyncio.to_thread(self.after, "cat_file", where)

            return call_async
        if name not in ("cat_file", "copy"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            finally:
                self.after(name, str(args[0]))

        return call


@pytest.mark.parametrize("finished_after", ["locate", "manifest"])
def test_a_reader_racing_a_switch_loads_the_new_checkpoint(remote_backend: Backend, finished_after: str) -> None:
    """SPEC 8: a restore that races an overwrite gets the old or the new checkpoint, never neither.

    The reader is sent to the staging folder of a save that is switching into place, and the
    switch finishes (the staging folder is deleted) right after the reader located it
    (``locate``), or right after it read the root manifest there (``manifest``, a mid-read
    deletion). Its retry resolves the path again and loads the new checkpoint from the path.
    Before, it reopened the deleted staging folder and reported "not found"."""
    uri, path = remote_backend.uri("ckpt"), remote_backend.path("ckpt")
    _agent(1).save_to_path(uri)
    switching, go = threading.Event(), threading.Event()

    def hold_the_copy(method: str, _: str) -> None:
        if method == "copy" and not switching.is_set():
            switching.set()  # the record says switching: readers are sent to the staging folder
            assert go.wait(120), "the reader never reached the staging folder"

    failed: list[BaseException] = []

    def write() -> None:
        try:
            _agent(2).save_to_path(path, filesystem=_Hooked(remote_backend.fs, hold_the_copy))
        except BaseException as err:
            failed.append(err)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert switching.wait(120), failed
        staged_reads: list[str] = []
        root_manifest = re.compile(rf"/\.ckpt{re.escape(writers.TMP_MARK)}[0-9a-f]+/manifest\.json$")

        def finish_the_switch(method: str, where: str) -> None:
            if method != "cat_file" or not root_manifest.search(where) or go.is_set():
                return
            staged_reads.append(where)
            # locate reads the staging folder's root manifest first, the reader then reads it itself.
            if len(staged_reads) == {"locate": 1, "manifest": 2}[finished_after]:
                go.set()
                writer.join(120)
                assert not writer.is_alive() and not failed, failed

        got = Agent(N)
        got.restore_from_path(path, filesystem=_Hooked(remote_backend.fs, finish_the_switch))
    finally:
        go.set()
        writer.join(120)
    assert len(staged_reads) == {"locate": 1, "manifest": 2}[finished_after], staged_reads
    assert not failed, failed
    assert_states_equal(expected_state(2, N), got.get_state())
    remote_backend.fs.invalidate_cache()
    assert [p.rsplit("/", 1)[-1] for p in remote_backend.fs.ls(remote_backend.base, detail=False)] == ["ckpt"]
