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
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
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

__all__ = ["CHECKPOINT_FOLDER", "report", "restore"]

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


def report(obj: Any, metrics: dict[str, Any], *, allow_pickle: bool = False) -> None:
    """Save ``obj`` as a cairn checkpoint and report it to Tune with ``metrics``.

    The checkpoint is written (atomically, verified) into a temporary folder,
    handed to ``ray.tune.report``, which copies it into the trial's storage,
    and the temporary folder is removed.

    Args:
        obj: A ``cairn.Checkpointable`` (``cairn.rl.PPO``, ``cairn.torch.TrainState``,
            ...) or an RLlib ``Algorithm``.
        metrics: The result to report (Tune's schedulers read it).
        allow_pickle: Let values the safe format cannot hold be pickled.
    """
    component = _as_checkpointable(obj)
    tmp = Path(tempfile.mkdtemp(prefix="cairn-tune-"))
    try:
        component.save_to_path(tmp / CHECKPOINT_FOLDER, allow_pickle=allow_pickle)
        tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(str(tmp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def restore(obj: Any, *, allow_pickle: bool = False) -> str | None:
    """Restore ``obj`` from the checkpoint Tune hands this trial, if there is one.

    That is the trial's own latest checkpoint after a failure or
    ``Tuner.restore``, or another trial's, copied by PBT.

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
    with checkpoint.as_directory() as local:
        component.restore_from_path(Path(local) / CHECKPOINT_FOLDER, allow_pickle=allow_pickle)
    return str(checkpoint.path)
