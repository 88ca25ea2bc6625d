"""Re-seal a tampered checkpoint: recompute every manifest's checksums up the tree.

A hostile checkpoint is only a real test of the loader's defences when the
integrity layer does not already refuse it: after editing a file, these
helpers rewrite each folder's ``manifest.json`` with the true sizes and digests
(and the manifest's own checksum), bottom-up, so that the root manifest seals
the tampered tree again.

They work on any fsspec filesystem (local, memory, S3) and write raw JSON, so
they can also seal manifests that ``cairn.manifest.Manifest`` would refuse
(entries with ``..``, a future format version, ...).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cairn.manifest import FORMAT_VERSION, MANIFEST, manifest_algorithm, raw_entry, seal_manifest_body

ManifestEdit = Callable[[str, dict[str, Any]], None]
"""Called with (folder path relative to the root, "" for the root; manifest body) before sealing."""


def seal_body(body: dict[str, Any]) -> bytes:
    """The bytes of a manifest whose own checksum matches ``body`` (any 'checksum' key is replaced)."""
    return seal_manifest_body(body)


def read_body(fs: Any, folder: str) -> dict[str, Any]:
    """The parsed manifest of ``folder`` (no checks)."""
    body: dict[str, Any] = json.loads(fs.cat_file(f"{folder}/{MANIFEST}"))
    return body


def _entry(data: bytes, body: dict[str, Any]) -> dict[str, Any]:
    """The entry of ``data`` in the manifest ``body``: its format and digest (unknown ones: the current)."""
    version = body.get("format_version")
    version = version if type(version) is int and 1 <= version <= FORMAT_VERSION else FORMAT_VERSION
    return raw_entry(data, format_version=version, algorithm=manifest_algorithm({**body, "format_version": version}))


def reseal(fs: Any, root: str, *, edit: ManifestEdit | None = None, rel: str = "") -> bytes:
    """Rewrite the manifests of the tree at ``root`` with the files' true sizes and digests.

    Every file a manifest lists is re-measured when it exists (a missing one keeps
    its entry, so it stays missing); components are sealed first, so the parent
    records their new manifests. ``edit`` may change each body before sealing.

    Returns:
        The bytes written as ``root``'s manifest.
    """
    folder = f"{root}/{rel}" if rel else root
    body = read_body(fs, folder)
    files: dict[str, Any] = body.get("files", {})
    for comp in body.get("components", []):
        if isinstance(comp, str) and fs.exists(f"{folder}/{comp}/{MANIFEST}"):
            sub = f"{rel}/{comp}" if rel else comp
            files[f"{comp}/{MANIFEST}"] = _entry(reseal(fs, root, edit=edit, rel=sub), body)
    for name in list(files):
        if name.endswith("/" + MANIFEST) or "/" in name or name.startswith(".."):
            continue
        path = f"{folder}/{name}"
        if fs.exists(path) and fs.isfile(path):
            files[name] = _entry(fs.cat_file(path), body)
    if edit is not None:
        edit(rel, body)
    data = seal_body(body)
    fs.pipe_file(f"{folder}/{MANIFEST}", data)
    return data


def reseal_after(fs: Any, root: str, rel_file: str, new_data: bytes, *, edit: ManifestEdit | None = None) -> None:
    """Replace the file ``rel_file`` (relative to ``root``) with ``new_data`` and re-seal the tree."""
    fs.pipe_file(f"{root}/{rel_file}", new_data)
    if hasattr(fs, "invalidate_cache"):
        fs.invalidate_cache()
    reseal(fs, root, edit=edit)
