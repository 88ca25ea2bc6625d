"""Finding what ``cairn train --resume`` and ``cairn evaluate`` load.

Both read a checkpoint's metadata through the engine's verified reader, and both
load the newest checkpoint of a manager's root that loads, naming on stderr each
damaged one they skip.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from cairn._display import safe_text

if TYPE_CHECKING:
    from cairn.manager import CheckpointInfo, CheckpointManager

__all__ = ["checkpoint_metadata", "load_newest_sound"]

T = TypeVar("T")


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


def load_newest_sound(
    manager: CheckpointManager, load: Callable[[str], T], *, command: str
) -> tuple[CheckpointInfo, T] | None:
    """``manager.load_latest``, with each damaged checkpoint skipped named on one stderr line.

    Args:
        manager: The manager of the run's root.
        load: Loads the checkpoint at a path.
        command: The command running (``train``, ``evaluate``), which starts each line.
    """
    from cairn.manager import DamagedCheckpointWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DamagedCheckpointWarning)
        try:
            return manager.load_latest(lambda info: load(info.path))
        finally:
            for w in caught:
                if issubclass(w.category, DamagedCheckpointWarning):
                    print(f"cairn {command}: {safe_text(w.message)}", file=sys.stderr, flush=True)
                else:  # not ours to swallow: show it as it would have been shown
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
