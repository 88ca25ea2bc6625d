"""Reading what ``cairn train --resume`` and ``cairn evaluate`` load.

Both read a checkpoint's metadata through the engine's verified reader. Both load the
newest checkpoint of a manager's root that loads with ``CheckpointManager.load_latest``,
whose warning for each damaged one skipped (logger ``cairn.manager``) the command shows
on stderr (cli/__init__.py's logging handler).
"""

from __future__ import annotations

from typing import Any

__all__ = ["checkpoint_metadata"]


def checkpoint_metadata(path: str) -> dict[str, Any] | None:
    """The verified ``metadata.json`` of the checkpoint at ``path``, or None when there is none.

    Read through the engine's reader, like any load: manifest first, sizes and checksums checked,
    bounded, regular files only. Damage raises (a damaged checkpoint is not "no checkpoint").
    """
    from cairn._reader import open_checkpoint
    from cairn.errors import CheckpointNotFoundError

    try:
        return open_checkpoint(path, None).metadata
    except CheckpointNotFoundError:
        return None
