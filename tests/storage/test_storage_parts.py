"""Large files go to and come from S3 in parts moved concurrently (issue 41, item 7).

Against moto on 127.0.0.1 through a loopback proxy that sees each part: the object read
back is the bytes written (digest and size as ``write_file`` returned), the parts of a
file are in flight together (the proxy holds part 1 until another part arrives), and a
part that fails aborts the whole upload, leaving nothing for S3 to bill. Reads of a large
object (a restore's tensor file among them) are ranged GETs in flight together (the proxy
holds the second range until a later one arrives; a small file's read stays one GET, a large one's
asks for no size), their bytes put together exactly, and all of one version of the object: a read
whose object is replaced after its first range is refused, or reads on from that version.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from storage_backends import MotoS3
from storage_components import ArrayLeaf

import cairn
from cairn.manifest import PACK, TENSORS, Hasher
from cairn.storage import fsspec_storage, resolve_storage
from cairn.storage.base import ObjectChangedError
from cairn.testing import assert_states_equal
from http_proxy import forward, read_body

SIZE = fsspec_storage.MULTIPART_THRESHOLD + fsspec_storage.MULTIPART_PART_BYTES + 12345  # 4 parts, the last short
PARTS = 4


class _PartsProxy(http.server.ThreadingHTTPServer):
    """A proxy to moto that records the parts of multipart uploads; it can hold part 1 until another
    part arrives, and refuse one part (403, as S3 answers a denied request)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.parts: list[int] = []
        self.hold_first = False
        self.seen_while_held: list[int] = []
        self.refuse: int | None = None
        self.ranges: list[tuple[str, int]] = []  # (path, first byte) of each ranged GET
        self.hold_first_range = False
        self.heads = 0
        self.seen_while_range_held: list[int] = []
        self.another_range = threading.Event()
        self.before_range: Any = None  # called with (path, first byte) before a ranged GET is sent on
        self.lock = threading.Lock()
        self.another = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server: _PartsProxy

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

            def _handle(self) -> None:
                body = read_body(self)
                ranged = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if self.command == "HEAD":
                    self.server.heads += 1
                if ranged is not None and self.command == "GET":
                    self.server.saw_range(self.path.split("?")[0], int(ranged.group(1)), int(ranged.group(2)))
                part = re.search(r"partNumber=(\d+)", self.path) if self.command == "PUT" else None
                if part is not None:
                    number = int(part.group(1))
                    proxy = self.server
                    with proxy.lock:
                        proxy.parts.append(number)
                    if number != 1:
                        proxy.another.set()
                    # A writer that sends parts one by one would never send part 2 now: the cap is for it.
                    if number == 1 and proxy.hold_first and proxy.another.wait(120):
                        with proxy.lock:
                            proxy.seen_while_held = [n for n in proxy.parts if n != 1]
                    if number == proxy.refuse:
                        data = b"<Error><Code>AccessDenied</Code><Message>denied (injected)</Message></Error>"
                        self.send_response(403)
                        self.send_header("Content-Type", "application/xml")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                forward(self, self.server.upstream, body)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        super().__init__(("127.0.0.1", 0), Handler)

    def saw_range(self, path: str, start: int, last: int) -> None:
        """Record a ranged GET; hold the second part of a large object until a later part is asked for.

        (The first comes alone: it tells a small file from a large one.)
        """
        step = fsspec_storage.MULTIPART_PART_BYTES
        with self.lock:
            self.ranges.append((path, start))
        if self.before_range is not None:
            self.before_range(path, start)
        if start >= 2 * step:
            self.another_range.set()
        # A reader that reads the ranges one by one would never ask for a later one now: the cap is for it.
        if start == step and self.hold_first_range and self.another_range.wait(120):
            with self.lock:
                self.seen_while_range_held = [s for p, s in self.ranges if p == path and s > step]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def proxy(moto_s3: MotoS3) -> Iterator[_PartsProxy]:
    server = _PartsProxy(moto_s3.endpoint_url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.another.set()
    server.another_range.set()
    server.shutdown()
    server.server_close()


def _uploads(moto_s3: MotoS3, prefix: str) -> list[str]:
    out = moto_s3.filesystem().call_s3("list_multipart_uploads", Bucket=moto_s3.bucket, Prefix=prefix)
    return [u["Key"] for u in out.get("Uploads") or []]


def _data() -> bytes:
    return hashlib.shake_256(b"cairn parts").digest(SIZE)


def test_a_large_file_is_uploaded_in_concurrent_parts(moto_s3: MotoS3, proxy: _PartsProxy) -> None:
    key = f"parts-{uuid.uuid4().hex[:8]}"
    fs = moto_s3.filesystem(client_kwargs={"endpoint_url": proxy.url})
    storage, path = resolve_storage(f"{moto_s3.bucket}/{key}/f", fs)
    data = _data()
    proxy.hold_first = True
    cut = 5 * 1024 * 1024 + 7  # chunks that do not line up with the parts
    entry = storage.write_file(path, [data[:cut], memoryview(data)[cut:]])
    assert sorted(proxy.parts) == list(range(1, PARTS + 1))
    assert proxy.seen_while_held, "part 1 was held: the others must have been sent meanwhile"
    hasher = Hasher(entry.digest.algorithm)
    hasher.update(data)
    assert entry.size == SIZE and entry.digest == hasher.digest()
    assert bytes(moto_s3.filesystem().cat_file(path)) == data
    assert _uploads(moto_s3, f"{key}/") == []


def test_a_failed_part_aborts_the_upload(moto_s3: MotoS3, proxy: _PartsProxy) -> None:
    key = f"parts-{uuid.uuid4().hex[:8]}"
    fs = moto_s3.filesystem(client_kwargs={"endpoint_url": proxy.url})
    storage, path = resolve_storage(f"{moto_s3.bucket}/{key}/f", fs)
    proxy.refuse = 2
    with pytest.raises(cairn.CheckpointError, match="denied"):
        storage.write_file(path, [_data()])
    assert 2 in proxy.parts
    assert _uploads(moto_s3, f"{key}/") == []
    assert not moto_s3.filesystem().exists(path)


def test_a_large_object_is_read_with_concurrent_ranged_gets(moto_s3: MotoS3, proxy: _PartsProxy) -> None:
    path = f"{moto_s3.bucket}/parts-{uuid.uuid4().hex[:8]}/f"
    data = _data()
    moto_s3.filesystem().pipe_file(path, data)
    storage, path = resolve_storage(path, moto_s3.filesystem(client_kwargs={"endpoint_url": proxy.url}))
    proxy.hold_first_range = True
    assert bytes(storage.read_file(path, max_bytes=SIZE)) == data
    step = fsspec_storage.MULTIPART_PART_BYTES
    assert sorted(s for _, s in proxy.ranges) == list(range(0, SIZE, step))
    assert proxy.seen_while_range_held, "the second range was held: the others must have been asked meanwhile"
    assert proxy.heads == 0  # the size came with the first range (its Content-Range)
    proxy.ranges.clear()
    with pytest.raises(cairn.CheckpointError, match="over the limit"):  # the bound, after the first range only
        storage.read_file(path, max_bytes=SIZE - 1)
    assert [s for _, s in proxy.ranges] == [0]
    small = f"{path}-small"
    moto_s3.filesystem().pipe_file(small, data[:1000])
    proxy.ranges.clear()
    heads = proxy.heads
    assert bytes(storage.read_file(small, max_bytes=SIZE)) == data[:1000]
    assert [s for _, s in proxy.ranges] == [0] and proxy.heads == heads  # one GET: no size asked for


@pytest.mark.parametrize("versioned", [False, True], ids=["unversioned", "versioned"])
def test_a_read_in_ranges_never_mixes_two_versions_of_the_object(
    moto_s3: MotoS3, proxy: _PartsProxy, versioned: bool
) -> None:
    """The object is replaced (same size, other bytes) once its first range was read. Without versioning
    the other ranges are refused (``If-Match`` on the first one's ETag): the read raises ObjectChangedError,
    where it returned the first 8 MiB of one object and the rest of the other. In a versioned bucket they
    read the first one's version: the read returns the old object whole."""
    fs = moto_s3.filesystem()
    bucket = moto_s3.bucket
    if versioned:
        bucket = f"{moto_s3.bucket}-v{uuid.uuid4().hex[:6]}"
        fs.mkdir(bucket)
        fs.call_s3("put_bucket_versioning", Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    path = f"{bucket}/parts-{uuid.uuid4().hex[:8]}/f"
    old = _data()
    new = hashlib.shake_256(b"the other version").digest(SIZE)
    fs.pipe_file(path, old)
    storage, path = resolve_storage(path, moto_s3.filesystem(client_kwargs={"endpoint_url": proxy.url}))
    replaced = threading.Event()

    def replace_after_the_first(_: str, start: int) -> None:
        if start > 0 and not replaced.is_set():
            replaced.set()
            fs.pipe_file(path, new)

    proxy.before_range = replace_after_the_first
    if versioned:
        assert bytes(storage.read_file(path, max_bytes=SIZE)) == old
    else:
        with pytest.raises(ObjectChangedError, match="changed while it was read") as info:
            storage.read_file(path, max_bytes=SIZE)
        assert path in str(info.value)
    assert replaced.is_set()
    proxy.before_range = None
    assert bytes(storage.read_file(path, max_bytes=SIZE)) == new  # read again: the new one, whole


def test_a_restore_reads_its_large_tensor_file_in_concurrent_ranges(moto_s3: MotoS3, proxy: _PartsProxy) -> None:
    n = fsspec_storage.MULTIPART_THRESHOLD // 4 + 1000  # float32 values: a tensor file just over the threshold
    path = f"s3://{moto_s3.bucket}/parts-{uuid.uuid4().hex[:8]}/ckpt"
    saved = ArrayLeaf(n, seed=1)
    saved.set_step(3)
    saved.save_to_path(path, filesystem=moto_s3.filesystem())
    got = ArrayLeaf(n, seed=1)
    proxy.hold_first_range = True
    got.restore_from_path(path, filesystem=moto_s3.filesystem(client_kwargs={"endpoint_url": proxy.url}))
    assert_states_equal(saved.get_state(), got.get_state())
    large = {p for p, s in proxy.ranges if s > 0}
    assert len(large) == 1 and next(iter(large)).endswith(f"/{TENSORS}"), proxy.ranges
    assert proxy.seen_while_range_held


def test_an_emptied_object_reads_as_no_bytes_and_a_restore_calls_it_damaged(moto_s3: MotoS3) -> None:
    """S3 answers a range past an object's end with 416 (s3fs: EINVAL): an empty object is no bytes, and
    a checkpoint whose tensor file was emptied is refused as damaged, not with "Invalid argument"."""
    fs = moto_s3.filesystem()
    empty = f"{moto_s3.bucket}/parts-{uuid.uuid4().hex[:8]}/empty"
    fs.pipe_file(empty, b"")
    storage, path = resolve_storage(empty, fs)
    assert bytes(storage.read_file(path, max_bytes=SIZE)) == b""
    path = f"s3://{moto_s3.bucket}/parts-{uuid.uuid4().hex[:8]}/ckpt"
    saved = ArrayLeaf(1000, seed=1)
    saved.save_to_path(path, filesystem=fs)
    fs.pipe_file(f"{path}/{PACK}", b"")
    with pytest.raises(cairn.CorruptCheckpointError, match=PACK):
        ArrayLeaf(1000, seed=1).restore_from_path(path, filesystem=fs)
