"""Storage: moves bytes, knows nothing of what they mean.

Two strategies for an atomic commit:

* ``LocalStorage`` (a local disk): every file is written into a hidden sibling
  folder, fsynced, and the folder is renamed into place (swapped atomically with
  an existing checkpoint where the kernel allows it).
* ``FsspecStorage`` (object stores, memory, anything fsspec reaches): folders
  cannot be renamed, so the root ``manifest.json`` is written last and is the
  commit marker; readers treat a folder without a valid manifest as absent.
  Deletes go the other way round: the marker first. Metadata is read fresh
  (fsspec's listing caches are dropped first), and transient errors (timeouts,
  resets, 5xx, throttling) are retried with exponential backoff.

S3 and S3-compatible stores (MinIO, Ceph, moto, ...): ``s3://bucket/path``
URIs go through s3fs (``pip install 'cairn-rl[s3]'``), which takes its
settings from the standard AWS environment. To reach a custom endpoint from
Python, from ``cairn verify`` or any other command, set one of:

* ``AWS_ENDPOINT_URL=http://127.0.0.1:9000`` (botocore >= 1.31 honours it for
  every client; ``AWS_ENDPOINT_URL_S3`` for S3 only), or
* ``FSSPEC_S3_ENDPOINT_URL=http://127.0.0.1:9000`` (fsspec's configuration
  from the environment: ``FSSPEC_<PROTOCOL>_<ARGUMENT>`` becomes an argument
  of that protocol's filesystem; read when fsspec is imported),

with credentials in ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` (or a
profile). In Python, an ``s3fs.S3FileSystem(client_kwargs={"endpoint_url":
...})`` can also be passed as ``filesystem=`` with a path on it.
"""

from cairn.storage.base import Storage
from cairn.storage.fsspec_storage import FsspecStorage
from cairn.storage.local import LocalStorage
from cairn.storage.resolve import resolve_storage

__all__ = ["FsspecStorage", "LocalStorage", "Storage", "resolve_storage"]
