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
