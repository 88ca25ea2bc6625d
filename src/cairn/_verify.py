"""``cairn.verify_checkpoint``: every file of a checkpoint checked against its manifest."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from cairn._reader import (
    FolderReader,
    iter_folders_lenient,
    open_checkpoint,
    read_consistently,
)
from cairn._tensorio import MemoryTensorFile
from cairn.errors import (
    CheckpointError,
    CorruptCheckpointError,
)
from cairn.manifest import (
    CTOR,
    MANIFEST,
    METADATA,
    PACK,
    TENSORS,
    load_json,
)


def verify(
    path: str | os.PathLike[str], filesystem: Any = None, *, progress: Callable[[int, int], None] | None = None
) -> list[str]:
    """Check every file of a checkpoint against its manifest; return the problems found.

    Tensor files on local disk are streamed (never held in memory whole).
    ``progress(bytes_checked, bytes_total)`` is called after each file.
    """
    root = open_checkpoint(path, filesystem)
    root.manifest  # noqa: B018 - a missing or bad root manifest raises: nothing else can be checked

    def run(reader: FolderReader) -> list[str]:
        problems = _verify_once(reader, progress)
        if problems:  # raised so that a concurrent overwrite is told apart from damage
            raise _Problems(problems)
        return problems

    try:
        # A damaged file is reported at once (no second read); only an overwrite retries.
        return read_consistently(root, run, confirm=False)
    except _Problems as found:
        return found.problems


def _check_member(reader: FolderReader, name: str) -> None:
    """Read a packed file (the pack verified whole) and parse what a restore parses of it before using it."""
    data = reader.read(name)
    if name in (METADATA, CTOR):
        load_json(data, where=reader.where(name))
    elif name == TENSORS:
        MemoryTensorFile(data, reader.where(name)).verify()


class _Problems(CorruptCheckpointError):
    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems[0])
        self.problems = problems


def _verify_once(root: FolderReader, progress: Callable[[int, int], None] | None) -> list[str]:
    problems: list[str] = []
    total = 0
    if progress is not None:
        for _, r in iter_folders_lenient(root):
            total += sum(e.size for n, e in r.manifest.files.items() if not n.endswith("/" + MANIFEST))
    done = [0]

    def walk(reader: FolderReader) -> None:
        try:
            manifest = reader.manifest
        except CheckpointError as err:
            problems.append(str(err))
            return
        for name, entry in manifest.files.items():
            if name.endswith("/" + MANIFEST):
                continue
            try:
                if name == PACK:
                    for member in manifest.packed:  # the pack is read and verified whole by the first
                        _check_member(reader, member)
                elif name == TENSORS:
                    source = reader.tensor_source()
                    if source is not None:
                        try:
                            source.verify()
                        finally:
                            source.close()
                else:
                    data = reader.read(name)
                    if name in (METADATA, CTOR):
                        load_json(data, where=reader.where(name))
            except CheckpointError as err:
                problems.append(str(err))
            done[0] += entry.size
            if progress is not None:
                progress(done[0], total)
        for comp in manifest.components:
            try:
                child = reader.child(comp)
            except CheckpointError as err:
                problems.append(str(err))
                continue
            walk(child)

    walk(root)
    return problems
