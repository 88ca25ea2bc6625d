"""Ray Tune with cairn checkpoints (SPEC 11): fault tolerance, ``Tuner.restore`` and PBT.

A Tune function trainable reports a cairn checkpoint with each result and
starts from the checkpoint Tune hands it, if any::

    from cairn.integrations import tune as cairn_tune

    def trainable(config):
        algo = PPO(PPOConfig(env="CartPole-v1", lr=config["lr"]))
        cairn_tune.restore(algo)                     # no-op on a fresh trial
        while True:
            metrics = algo.train()
            cairn_tune.report(algo, metrics)

Tune then does the rest with the checkpoint folders it keeps per trial:

* fault tolerance (``RunConfig(failure_config=FailureConfig(max_failures=N))``):
  a trial whose worker died starts again from its latest checkpoint;
* ``Tuner.restore(path, trainable)``: an interrupted experiment goes on
  from each trial's latest checkpoint;
* Population Based Training: a trial that falls behind is given a copy of a
  better trial's checkpoint and restores from it, with mutated hyperparameters.

Each checkpoint is a complete, verified cairn checkpoint (its manifest and
checksums travel with Tune's copy); :func:`restore` verifies it before
anything is applied, so a checkpoint damaged in transit raises
:class:`cairn.CorruptCheckpointError` instead of training on wrong values.
RLlib objects (an ``Algorithm``) work too, through
:mod:`cairn.integrations.rllib`.

Across nodes: both functions work in the run's storage (``RunConfig(storage_path=...)``:
a shared filesystem or an object store), never in a folder of the trial's node. A
save is written straight into the trial's folder there, so that env runners and
learners on other nodes write their parts of it (they cannot see the trial node's
disk), then handed to Tune, which files it as the trial's checkpoint; a restore
reads Tune's checkpoint where it is stored, so a trial restarted on another node
(its node was lost) resumes from it. Reserve the algorithm's actors with the trial:
``tune.with_resources(trainable, PPO.default_resource_request(config))``
(docs/rl.md, "Node loss, placement and Tune").
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from cairn.checkpointable import Checkpointable
from cairn.errors import CheckpointError

try:
    from ray import tune
except ImportError as _err:  # pragma: no cover - depends on the install
    raise ImportError(
        f"cairn.integrations.tune needs Ray Tune ({_err}). Install it with: pip install 'cairn-rl[tune]'",
        name="ray.tune",
    ) from _err

__all__ = ["CHECKPOINT_FOLDER", "STAGING_FOLDER", "report", "restore", "storage_location"]

CHECKPOINT_FOLDER = "cairn"
"""The cairn checkpoint's folder inside each Tune checkpoint directory."""


def _is_rllib(obj: Any) -> bool:
    try:
        from ray.rllib.utils.checkpoints import Checkpointable as RLlibBase
    except ImportError:  # Tune without RLlib: nothing is an RLlib object
        return False
    return isinstance(obj, RLlibBase)


def _as_checkpointable(obj: Any) -> Checkpointable:
    """``obj`` itself, or an RLlib object wrapped for cairn."""
    if isinstance(obj, Checkpointable):
        return obj
    if _is_rllib(obj):
        from cairn.integrations.rllib import wrap

        return wrap(obj)
    raise CheckpointError(
        f"cairn.integrations.tune saves a cairn.Checkpointable or an RLlib Checkpointable, not a "
        f"{type(obj).__qualname__}; wrap plain PyTorch objects in cairn.torch.TrainState."
    )


STAGING_FOLDER = "cairn-staging"
"""The folder of the trial's storage folder where :func:`report` writes a save before Tune files it."""


def storage_location(filesystem: Any, path: str) -> tuple[str, Any]:
    """``(path, fsspec filesystem or None)`` for cairn of a path on a ``pyarrow.fs`` filesystem (Tune's storage).

    A local filesystem gives the path itself; a ``PyFileSystem`` over fsspec (what Tune
    builds from an fsspec filesystem, e.g. ``storage_filesystem=`` an ``s3fs`` one) gives its
    fsspec filesystem; S3 and GCS give an ``s3://`` / ``gs://`` URI, which cairn opens
    with the credentials of each process's environment.

    Raises:
        CheckpointError: A filesystem cairn cannot write (the message names it).
    """
    import pyarrow.fs as pafs

    if isinstance(filesystem, pafs.LocalFileSystem):
        return path, None
    if isinstance(filesystem, pafs.PyFileSystem) and isinstance(filesystem.handler, pafs.FSSpecHandler):
        return path, filesystem.handler.fs
    if isinstance(filesystem, pafs.S3FileSystem):
        return f"s3://{path}", None
    if isinstance(filesystem, pafs.GcsFileSystem):
        return f"gs://{path}", None
    raise CheckpointError(
        f"cairn.integrations.tune cannot write Tune's storage on a {type(filesystem).__name__} ({path}): give "
        "RunConfig a storage_path that is a local or shared folder, an s3:// or gs:// URI, or a "
        "storage_filesystem built from an fsspec filesystem (pyarrow.fs.PyFileSystem(FSSpecHandler(fs)))."
    )


def report(obj: Any, metrics: dict[str, Any], *, allow_pickle: bool = False) -> None:
    """Save ``obj`` as a cairn checkpoint in the run's storage and report it to Tune with ``metrics``.

    The checkpoint is written (atomically, verified) into ``cairn-staging/`` of the trial's
    folder in the run's storage (``RunConfig(storage_path=...)``), where remote env runners
    and learners on any node write their parts; Tune files it as the trial's next checkpoint
    (a copy within the storage), and the staging copy is removed.

    Args:
        obj: A ``cairn.Checkpointable`` (``cairn.rl.PPO``, ``cairn.torch.TrainState``,
            ...) or an RLlib ``Algorithm``.
        metrics: The result to report (Tune's schedulers read it).
        allow_pickle: Let values the safe format cannot hold be pickled.
    """
    component = _as_checkpointable(obj)
    storage = tune.get_context().get_storage()
    staging = f"{storage.trial_fs_path}/{STAGING_FOLDER}/{uuid.uuid4().hex}"
    path, filesystem = storage_location(storage.storage_filesystem, f"{staging}/{CHECKPOINT_FOLDER}")
    try:
        component.save_to_path(path, filesystem=filesystem, allow_pickle=allow_pickle)
        tune.report(metrics, checkpoint=tune.Checkpoint(path=staging, filesystem=storage.storage_filesystem))
    finally:
        with contextlib.suppress(FileNotFoundError):
            storage.storage_filesystem.delete_dir(staging)


def restore(obj: Any, *, allow_pickle: bool = False) -> str | None:
    """Restore ``obj`` from the checkpoint Tune hands this trial, if there is one.

    That is the trial's own latest checkpoint after a failure or
    ``Tuner.restore``, or another trial's, copied by PBT. It is read where Tune
    stores it (the run's storage), by the driver and by every remote actor, so the
    trial may run on another node than the one that saved it.

    Args:
        obj: The object the trainable built (as in :func:`report`).
        allow_pickle: Allow a checkpoint written with pickle.

    Returns:
        The Tune checkpoint's path restored from, or None on a fresh start.

    Raises:
        CheckpointNotFoundError: Tune's checkpoint holds no cairn checkpoint.
        CorruptCheckpointError: A file of it is damaged (named in the message).
    """
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    component = _as_checkpointable(obj)
    path, filesystem = storage_location(checkpoint.filesystem, f"{checkpoint.path}/{CHECKPOINT_FOLDER}")
    component.restore_from_path(path, filesystem=filesystem, allow_pickle=allow_pickle)
    return str(checkpoint.path)
