"""cairn's S3 transfers against ``aws s3 cp``-style parallel transfers, to one moto server, in one run.

    PYTHONPATH=src python -m bench.s3_transfer [--size-mb 96] [--rounds 3]

moto's S3 server runs in its own process on 127.0.0.1. Each round, in alternating
order, uploads (and downloads) one file of ``--size-mb`` with:

* ``cairn``: ``FsspecStorage.write_file`` / ``read_file`` (a multipart upload whose
  parts go up concurrently, ``MULTIPART_CONCURRENCY`` at once, of ``MULTIPART_PART_BYTES``;
  a read of ranged GETs as concurrent, into one buffer), as a save and a restore move a file;
* ``cairn-serial``: the same storage with parallel parts off (s3fs's own writer: its parts
  one after the other; one GET for the read), the baseline cairn had before;
* ``boto3``: boto3's transfer manager (s3transfer, what ``aws s3 cp`` uses) with the
  same part size and concurrency.

Medians are printed, with each one's ratio to boto3's (lower is better). moto on a
loopback is CPU-bound, not network-bound: the ratios compare request patterns on this
machine; on real S3, parallel parts matter more (each part is a separate round trip).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from cairn.storage import fsspec_storage, resolve_storage

BUCKET = "bench"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(url: str, proc: subprocess.Popen[bytes]) -> None:
    import urllib.request

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("moto's server exited")
        try:
            urllib.request.urlopen(url, timeout=1)  # loopback
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not answer at {url}")


def main() -> None:
    """Start moto, run the rounds, print medians and ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "NO_PROXY": "127.0.0.1"}
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "NO_PROXY")})
    os.environ["AWS_DEFAULT_REGION"] = "us-east-1"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(url + "/moto-api/", server)
        _run(url, args.size_mb * 1024 * 1024, args.rounds)
    finally:
        server.terminate()
        server.wait()


def _run(url: str, size: int, rounds: int) -> None:
    import boto3
    import s3fs
    from boto3.s3.transfer import TransferConfig

    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": url}, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    storage, _ = resolve_storage(f"{BUCKET}/x", fs)
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1")
    config = TransferConfig(
        multipart_threshold=fsspec_storage.MULTIPART_THRESHOLD,
        multipart_chunksize=fsspec_storage.MULTIPART_PART_BYTES,
        max_concurrency=fsspec_storage.MULTIPART_CONCURRENCY,
    )
    data = os.urandom(size)
    digest = hashlib.sha256(data).digest()
    tmp = tempfile.mkdtemp(prefix="cairn-s3-bench-")
    source = os.path.join(tmp, "src")
    with open(source, "wb") as f:
        f.write(data)
    threshold = fsspec_storage.MULTIPART_THRESHOLD

    def cairn_up(key: str) -> None:
        storage.write_file(f"{BUCKET}/{key}", [data])

    def serial_up(key: str) -> None:
        fsspec_storage.MULTIPART_THRESHOLD = 1 << 62  # s3fs's writer, parts one after the other
        try:
            storage.write_file(f"{BUCKET}/{key}", [data])
        finally:
            fsspec_storage.MULTIPART_THRESHOLD = threshold

    def boto_up(key: str) -> None:
        client.upload_file(source, BUCKET, key, Config=config)  # from a file, as aws s3 cp does

    def cairn_down(key: str) -> None:
        # Bounded by the size, as a restore reads a file its manifest lists.
        assert hashlib.sha256(storage.read_file(f"{BUCKET}/{key}", max_bytes=size)).digest() == digest

    def serial_down(key: str) -> None:
        fsspec_storage.MULTIPART_THRESHOLD = 1 << 62  # one GET
        try:
            cairn_down(key)
        finally:
            fsspec_storage.MULTIPART_THRESHOLD = threshold

    def boto_down(key: str) -> None:
        target = os.path.join(tmp, "dst")
        client.download_file(BUCKET, key, target, Config=config)
        with open(target, "rb") as f:
            assert hashlib.sha256(f.read()).digest() == digest

    cases: dict[str, tuple[Callable[[str], None], Callable[[str], None] | None]] = {
        "cairn": (cairn_up, cairn_down),
        "cairn-serial": (serial_up, serial_down),
        "boto3": (boto_up, boto_down),
    }
    up: dict[str, list[float]] = {name: [] for name in cases}
    down: dict[str, list[float]] = {name: [] for name, (_, d) in cases.items() if d is not None}
    names = list(cases)
    for r in range(rounds):
        for name in names if r % 2 == 0 else list(reversed(names)):
            upload, download = cases[name]
            key = f"{name}-{r}"
            t = time.perf_counter()
            upload(key)
            up[name].append(time.perf_counter() - t)
            if download is not None:
                t = time.perf_counter()
                download(key)
                down[name].append(time.perf_counter() - t)
            fs.rm_file(f"{BUCKET}/{key}")
    mb = size / (1 << 20)
    print(
        f"{mb:.0f} MiB, {rounds} rounds, parts of {fsspec_storage.MULTIPART_PART_BYTES >> 20} MiB, "
        f"{fsspec_storage.MULTIPART_CONCURRENCY} at once; medians, ratio to boto3 (lower is better)"
    )
    for what, times in (("upload", up), ("download", down)):
        base = statistics.median(times["boto3"])
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"  {what:8s} {name:13s} {m:7.2f} s  {mb / m:7.1f} MiB/s  x{m / base:.2f}")


if __name__ == "__main__":
    main()
