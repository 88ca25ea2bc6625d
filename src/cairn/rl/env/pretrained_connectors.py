"""The observation filter travels with ``load_state_path``: a pre-trained module's *companion component*.

A module trained behind a ``MeanStdFilter`` has learned on normalised
observations. Loaded into a new algorithm with
``RLModuleSpec(load_state_path=<algo ckpt>/learner_group/learner/rl_module/<mid>)``,
its weights alone would meet raw observations (RLlib #49424-style silent
mismatch). So cairn treats ``<algo ckpt>/env_runner/env_to_module_connector``
as the module's companion: every env runner of the new algorithm starts its
``env_to_module`` pipeline from that state (:func:`restore_pretrained_connectors`,
called once after the runner built its pipelines).

The companion is found from the checkpoint's manifests, never guessed: only when
the path is exactly ``<root>/learner_group/learner/rl_module/<mid>`` and
``<root>`` is a cairn checkpoint whose manifests list that module folder and the
``env_runner/env_to_module_connector`` folder (a module saved on its own, or
any other folder, has no companion and loads weights only, as before; a damaged
root is an error, never "no companion"). The state is read through cairn's
verified restore (no pickle).

The connectors must match: a checkpoint trained with connectors (by name,
e.g. ``MeanStdFilter``) that the new config does not have, or the other way
round, is refused with a ``ValueError`` before the algorithm is built; set the
config's ``observation_filter`` as where the module was trained, or opt out with
``config.load_pretrained_connectors = False`` (the pipeline then starts fresh).
One pipeline serves all modules of a single-agent runner, so its modules may
load companions from one checkpoint only. The multi-agent runner has one
pipeline per module (:func:`restore_module_pretrained_connectors`): each module's
pipeline starts from its own module's companion, which in a multi-agent
checkpoint is the source module's folder
``<root>/env_runner/env_to_module_connector/<source mid>/`` and in a single-agent
one the whole ``<root>/env_runner/env_to_module_connector/``. After the algorithm's own first
checkpoint, its connectors are its own state: its recorded config has no
``load_state_path``. A module added while training runs (``Algorithm.add_module``
with a ``load_state_path``) brings its weights only: the running pipeline is the
algorithm's own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from cairn.rl.config.algorithm_config import AlgorithmConfig
from cairn.rl.connectors.connectors import ConnectorPipeline
from cairn.rl.core.rl_module.multi_rl_module import load_state_paths
from cairn.rl.utils.companions import MODULE_FOLDER, PIPELINE_FOLDER, companion_root

__all__ = [
    "MODULE_FOLDER",
    "PIPELINE_FOLDER",
    "companion_root",
    "restore_module_pretrained_connectors",
    "restore_pretrained_connectors",
]


def restore_pretrained_connectors(
    pipeline: ConnectorPipeline,
    config: AlgorithmConfig,
    module_ids: Collection[str] | None = None,
    *,
    pipeline_folder: str = PIPELINE_FOLDER,
) -> str | None:
    """Start ``pipeline`` from the connector state the modules' ``load_state_path`` checkpoints were trained with.

    Args:
        pipeline: The env runner's freshly built env_to_module pipeline (changed only on success).
        config: The algorithm's config (its ``rl_module_spec`` load paths and
            ``load_pretrained_connectors``).
        module_ids: The modules ``pipeline`` serves; ``None``: every module of ``config``.
            A runner with one pipeline per module calls this once per module.
        pipeline_folder: The pipeline's folder in the pre-training checkpoint
            (a per-module layout names its own).

    Returns:
        The checkpoint root the state came from, or None when there is none to load.

    Raises:
        ValueError: The modules come from two checkpoints with connectors, or the
            connectors of the checkpoint and of ``pipeline`` differ (what, where and
            what to do are in the message). Raised before ``pipeline`` changes.
        cairn.CheckpointError: The companion's state is damaged or does not fit (its shape).
    """
    if not config.load_pretrained_connectors:
        return None
    paths = load_state_paths(config)
    wanted = paths if module_ids is None else {m: p for m, p in paths.items() if m in set(module_ids)}
    companions = _companions(wanted, pipeline_folder)
    if not companions:
        return None
    roots = sorted({root for root, _ in companions.values()})
    if len(roots) > 1:
        raise ValueError(
            f"Modules {sorted(companions)} load their weights from {len(roots)} algorithm checkpoints ({roots}); "
            "one env_to_module pipeline (observation filter) serves them and can start from one checkpoint's "
            "state only. Load them from one checkpoint, or set config.load_pretrained_connectors = False to "
            "start the filter fresh."
        )
    root, names = next(iter(companions.values()))
    own = sorted(name for name, _ in pipeline.get_checkpointable_components())
    if names != own:
        module_id = sorted(companions)[0]
        raise ValueError(
            f"Module {module_id!r} (load_state_path={wanted[module_id]!r}) was trained behind the env_to_module "
            f"connectors {names} ({root}/{pipeline_folder}), but this config's env runners build {own} "
            f"(observation_filter={config.observation_filter!r}): the module would see observations unlike those "
            "it learned on. Set config.observation_filter as where it was trained (its state is then loaded), or "
            "set config.load_pretrained_connectors = False to start the connectors fresh on purpose."
        )
    if names:
        pipeline.restore_from_path(f"{root.rstrip('/')}/{pipeline_folder}")
    return root


def _companions(paths: Mapping[str, str], pipeline_folder: str) -> dict[str, tuple[str, list[str]]]:
    out: dict[str, tuple[str, list[str]]] = {}
    for module_id, path in paths.items():
        found: Any = companion_root(path, pipeline_folder)
        if found is not None:
            out[module_id] = found
    return out


def restore_module_pretrained_connectors(
    pipeline: ConnectorPipeline, config: AlgorithmConfig, module_id: str
) -> str | None:
    """Start one module's own env_to_module ``pipeline`` (a multi-agent runner's) from its module's companion.

    The module's ``load_state_path`` is ``<root>/learner_group/learner/rl_module/<source mid>``.
    When ``<root>`` is a multi-agent checkpoint (its pipelines per module), the state is
    that of ``<source mid>``'s pipeline (``env_runner/env_to_module_connector/<source mid>/``);
    otherwise that of the single-agent checkpoint's one pipeline.

    Returns:
        The checkpoint root the state came from, or None when there is none to load.

    Raises:
        ValueError: The connectors of the source and of ``pipeline`` differ (see
            :func:`restore_pretrained_connectors`); raised before ``pipeline`` changes.
        cairn.CheckpointError: The companion's state is damaged or does not fit (its shape).
    """
    path = load_state_paths(config).get(module_id) if config.load_pretrained_connectors else None
    if path is None:
        return None
    source = str(path).rstrip("/").rpartition("/")[2]
    per_module = f"{PIPELINE_FOLDER}/{source}"
    folder = per_module if companion_root(path, per_module) is not None else PIPELINE_FOLDER
    return restore_pretrained_connectors(pipeline, config, [module_id], pipeline_folder=folder)
