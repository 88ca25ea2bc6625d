"""``resolve_storage``: the storage backend for a path or URI.

It lives above the backends it builds (:mod:`cairn.storage.local`,
:mod:`cairn.storage.fsspec_storage`), so that :mod:`cairn.storage.base`, which
they derive from, never knows its subclasses.
"""

from __future__ import annotations

import os
from typing import Any

from cairn.errors import CheckpointError
from cairn.storage.base import Storage, check_deadline
from cairn.storage.fsspec_storage import FsspecStorage
from cairn.storage.local import LocalStorage

__all__ = ["resolve_storage"]

# Protocols with a cairn extra (pyproject.toml), and the fsspec backends of the others.
_EXTRAS = {"s3": "s3", "s3a": "s3"}
_PACKAGES = {
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "abfs": "adlfs",
    "az": "adlfs",
    "adl": "adlfs",
    "hdfs": "pyarrow",
    "sftp": "paramiko",
    "ssh": "paramiko",
    "http": "aiohttp",
    "https": "aiohttp",
    "oci": "ocifs",
    "webdav": "webdav4",
}


def _is_local_fs(fs: Any) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def _bounded_s3_options(protocol: str, deadline: float) -> dict[str, Any]:
    """s3fs options under which cairn's retry loop is the only one (SPEC 8: retries in one place).

    botocore makes one attempt per request and waits at most the deadline for a
    connection or an answer; s3fs's own retry loop is switched off after the
    filesystem is built (``retries`` is an attribute, not an argument). Settings
    the user made through fsspec's configuration (``FSSPEC_S3_...``) win.
    """
    import fsspec.config

    user = fsspec.config.conf.get(protocol, {})
    config: dict[str, Any] = {
        "retries": {"total_max_attempts": 1, "mode": "standard"},
        "connect_timeout": min(5.0, deadline),
        "read_timeout": min(15.0, deadline),
    }
    config.update(user.get("config_kwargs") or {})
    return {"config_kwargs": config}


def resolve_storage(
    path: str | os.PathLike[str] | None, filesystem: Any = None, *, deadline: float | None = None
) -> tuple[Storage, str]:
    """Return the storage for ``path`` and the path as that storage names it.

    Args:
        path: A local path, a ``file://`` URI, any fsspec URI (``memory://``,
            ``s3://``, ...), or a path on ``filesystem``.
        filesystem: An fsspec filesystem; when given, ``path`` is a path on it.
            Its own retries (s3fs's and botocore's, by default) multiply with
            cairn's: build it with them off, as cairn does for ``s3://`` URIs.
        deadline: Seconds each remote call may take, retries included, before
            it fails with a ``CheckpointError``; default ``$CAIRN_STORAGE_DEADLINE``,
            else 60.

    Raises:
        CheckpointError: For an unknown protocol, a missing extra (named), or an
            invalid deadline.
    """
    if path is None:
        raise CheckpointError("A checkpoint path is required.")
    seconds = check_deadline(deadline)
    p = os.fspath(path)
    if filesystem is not None:
        if _is_local_fs(filesystem):
            return LocalStorage(deadline=seconds), os.path.abspath(p.removeprefix("file://"))
        return FsspecStorage(filesystem, deadline=seconds), filesystem._strip_protocol(p)
    if "://" not in p:
        return LocalStorage(deadline=seconds), os.path.abspath(p)
    if p.startswith("file://"):
        return LocalStorage(deadline=seconds), os.path.abspath(p[len("file://") :])
    import fsspec

    protocol = p.split("://", 1)[0]
    try:
        options = _bounded_s3_options(protocol, seconds) if protocol in _EXTRAS else {}
        fs, stripped = fsspec.core.url_to_fs(p, **options)
    except ImportError as err:
        extra = _EXTRAS.get(protocol)
        package = _PACKAGES.get(protocol)
        if extra:
            hint = f"pip install 'cairn-rl[{extra}]'"
        elif package:
            hint = f"pip install {package}"
        else:
            hint = f"install the fsspec backend for {protocol}://"
        raise CheckpointError(
            f"Cannot open {p!r}: the {protocol}:// backend is not installed ({err}). Run: {hint}."
        ) from err
    except ValueError as err:
        raise CheckpointError(f"Cannot open {p!r}: unknown storage protocol {protocol!r} ({err}).") from err
    if _is_local_fs(fs):
        return LocalStorage(deadline=seconds), os.path.abspath(stripped)
    if protocol in _EXTRAS and hasattr(fs, "retries"):
        fs.retries = 1  # s3fs's own loop: one try, cairn's loop retries
    return FsspecStorage(fs, deadline=seconds), stripped
