"""The engine: walks a component tree and turns it into verified files, and back.

It lives in modules along the lines the work follows; this module re-exports
their names for the callers that import ``cairn._engine``:

* :mod:`cairn._tree`: the component tree (validated names, paths, delegated folders);
* :mod:`cairn._save`: planning and writing a save (``plan_checkpoint``, ``start_write``,
  ``commit_plan``), delegated folders written by their delegates meanwhile;
* :mod:`cairn._reader`: reading and verifying a folder (``FolderReader``), and
  reading a checkpoint consistently while another process overwrites it;
* :mod:`cairn._restore`: the restore pipeline (verify, decode, read tensors into
  place, upgrade, apply; ``from_checkpoint``);
* :mod:`cairn._verify`: ``verify``.
"""

from __future__ import annotations

from cairn._reader import (
    READ_ATTEMPTS,
    FolderReader,
    _leaf_map,
    _ReadRace,
    iter_folders,
    iter_folders_lenient,
    open_checkpoint,
    read_consistently,
)
from cairn._restore import (
    LoadedFolder,
    _check_class,
    apply_loaded,
    build_from_checkpoint,
    load_folder,
    read_sources,
    restore,
    upgrade,
)
from cairn._save import (
    CheckedFiles,
    StartedWrite,
    WriteStats,
    _json_bytes,
    _planned_files,
    _PlannedFolder,
    commit_plan,
    has_delegates,
    plan_bytes,
    plan_checkpoint,
    plan_save,
    save,
    start_write,
    write_planned,
)
from cairn._tree import checkpointable_components, component_tree, delegations, find_component
from cairn._verify import verify

__all__ = [
    "READ_ATTEMPTS",
    "CheckedFiles",
    "FolderReader",
    "LoadedFolder",
    "StartedWrite",
    "WriteStats",
    "_PlannedFolder",
    "_ReadRace",
    "_check_class",
    "_json_bytes",
    "_leaf_map",
    "_planned_files",
    "apply_loaded",
    "build_from_checkpoint",
    "checkpointable_components",
    "commit_plan",
    "component_tree",
    "delegations",
    "find_component",
    "has_delegates",
    "iter_folders",
    "iter_folders_lenient",
    "load_folder",
    "open_checkpoint",
    "plan_bytes",
    "plan_checkpoint",
    "plan_save",
    "read_consistently",
    "read_sources",
    "restore",
    "save",
    "start_write",
    "upgrade",
    "verify",
    "write_planned",
]
