"""Reading a folder's own file as a test sees it: a file of its own, or a member of the folder's pack."""

from __future__ import annotations

import json
from pathlib import Path


def own_file(folder: Path | str, name: str) -> bytes:
    """The bytes of ``folder``'s own file ``name`` (``metadata.json``, ...), wherever its manifest places it.

    Raw bytes, unchecked: for assertions on what a save wrote (the readers under test verify).
    """
    folder = Path(folder)
    body = json.loads((folder / "manifest.json").read_text())
    at = body.get("packed", {}).get(name)
    if at is not None:
        with open(folder / "packed.bin", "rb") as f:
            f.seek(at["offset"])
            return f.read(at["size"])
    return (folder / name).read_bytes()


def metadata_of(folder: Path | str) -> dict[str, object]:
    """The parsed ``metadata.json`` of ``folder``."""
    meta: dict[str, object] = json.loads(own_file(folder, "metadata.json"))
    return meta


def tensor_file(folder: Path | str) -> Path:
    """The file holding ``folder``'s tensors: ``tensors.safetensors`` of its own, or the folder's pack."""
    folder = Path(folder)
    own = folder / "tensors.safetensors"
    return own if own.exists() else folder / "packed.bin"


def replace_own_file(folder: Path | str, name: str, data: bytes) -> None:
    """Write ``data`` as ``folder``'s own file ``name``, in its pack when it is packed (the manifest left unsealed).

    The pack is rebuilt with the new member and the manifest's ``packed`` table updated to
    match; the caller re-seals the tree (its size and digest entries), as after any edit.
    """
    folder = Path(folder)
    manifest = folder / "manifest.json"
    body = json.loads(manifest.read_text())
    table = body.get("packed", {})
    if name not in table:
        (folder / name).write_bytes(data)
        return
    pack = (folder / "packed.bin").read_bytes()
    out = bytearray()
    for member, at in sorted(table.items(), key=lambda kv: kv[1]["offset"]):
        chunk = data if member == name else pack[at["offset"] : at["offset"] + at["size"]]
        table[member] = {"offset": len(out), "size": len(chunk)}
        out += chunk
    (folder / "packed.bin").write_bytes(bytes(out))
    manifest.write_text(json.dumps(body))
