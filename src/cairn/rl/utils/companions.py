"""Where an algorithm checkpoint keeps a module and the connectors it was trained behind (its *companions*).

One home for the layout rule that :mod:`cairn.rl.env.pretrained_connectors` (a module
loaded with ``load_state_path`` starts its runners' filter from the checkpoint) and every
path that takes a module out of an algorithm checkpoint (``RLModule.from_checkpoint``,
``cairn extract``, ``cairn evaluate``) read: a module folder's connectors are found from the
checkpoint's manifests, never guessed. It sits below ``core`` and ``env`` because both read it.
"""

from __future__ import annotations

from cairn.errors import CheckpointNotFoundError
from cairn.tools import inspect_checkpoint

__all__ = ["MODULE_FOLDER", "PIPELINE_FOLDER", "companion_root", "connectors_note"]

MODULE_FOLDER = "learner_group/learner/rl_module"
"""Where an algorithm checkpoint holds its modules (``<root>/<MODULE_FOLDER>/<module id>``)."""

PIPELINE_FOLDER = "env_runner/env_to_module_connector"
"""Where an algorithm checkpoint holds the local env runner's env_to_module pipeline."""


def companion_root(load_state_path: str, pipeline_folder: str = PIPELINE_FOLDER) -> tuple[str, list[str]] | None:
    """``(root, connector names)`` of the algorithm checkpoint ``load_state_path`` is a module folder of, or None.

    None unless the path is exactly ``<root>/learner_group/learner/rl_module/<mid>``
    and ``<root>``'s manifests list that folder and ``pipeline_folder``;
    the names are the connectors that pipeline holds (possibly none).
    """
    path = str(load_state_path).rstrip("/")
    head, sep, module_id = path.rpartition("/")
    if not sep or not module_id or module_id in (".", ".."):
        return None
    if head == MODULE_FOLDER:  # a relative path from the checkpoint's own folder
        root = "."
    elif head.endswith("/" + MODULE_FOLDER):
        root = head[: -len(MODULE_FOLDER) - 1] or "/"
    else:
        return None
    try:
        folders = {info.path: info for info in inspect_checkpoint(root)}
    except CheckpointNotFoundError:
        return None  # not a checkpoint root: a module folder of its own, loaded for its weights only
    # Any other error (a damaged root manifest) propagates: a module must not silently lose its filter.
    if f"{MODULE_FOLDER}/{module_id}" not in folders or pipeline_folder not in folders:
        return None
    names = [p[len(pipeline_folder) + 1 :] for p in folders if p.startswith(pipeline_folder + "/")]
    return root, sorted(name for name in names if "/" not in name)


_NOTED: set[str] = set()
"""Checkpoint roots whose note was given in this process (the note is said once)."""


def connectors_note(module_path: str, *, once: bool = True) -> str | None:
    """What to tell a user who takes the module at ``module_path`` out of its algorithm checkpoint, or None.

    None unless ``module_path`` is a module folder of an algorithm checkpoint whose env runner
    had env-to-module connectors (a ``MeanStdFilter``, a frame stack): the module learned on
    observations through them and acts wrongly on raw ones. The note names them and gives the
    one line that applies them. With ``once``, a root already noted in this process gives None.
    """
    module_id = str(module_path).rstrip("/").rpartition("/")[2]
    own = f"{PIPELINE_FOLDER}/{module_id}"  # a multi-agent runner keeps one pipeline per module
    found = companion_root(module_path, own)
    line_args = f", module_id={module_id!r}" if found is not None else ""
    found = found or companion_root(module_path)
    if found is None or not found[1]:
        return None
    root, names = found
    if once and root in _NOTED:
        return None
    _NOTED.add(root)
    return (
        f"The module {module_path} was trained behind the env-to-module connectors {names} of its algorithm "
        f"checkpoint; on raw observations it acts unlike it did in training. Apply them: "
        f"EnvToModulePipeline.from_checkpoint({root + '/' + PIPELINE_FOLDER!r}{line_args}) "
        f"(cairn.rl.connectors.env_to_module), or load both in one call: "
        f"Policy.from_checkpoint({root!r}{line_args}) (cairn.rl.inference)."
    )
