"""The run options of ``cairn train`` that a resume keeps: ``DIR/train_options.json``.

A run is started with ``--iterations``, ``--checkpoint-every`` and ``--keep-last``
(what the algorithm's config holds is in every checkpoint; these are not). ``cairn
train --checkpoint-dir DIR`` records them in ``DIR/train_options.json``, and
``--resume`` takes each one from there unless it is given again (a new value is
recorded for the next resume). The file is small, written atomically (temporary
file, fsync, rename), and read with bounds: at most :data:`MAX_BYTES`, one JSON
object, each value an integer in its range. Only a local ``--checkpoint-dir`` has
one, as only a local one has ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["DEFAULTS", "MAX_BYTES", "OPTIONS_FILE", "TrainOptions", "check", "read_options", "resolve", "write_options"]

OPTIONS_FILE = "train_options.json"
"""The file of a run folder that records its options."""

MAX_BYTES = 4096
"""The largest options file read: a real one takes ~100 bytes."""

_MAX_COUNT = 10**9
"""The largest value any option takes (an iteration count beyond any run)."""


@dataclass(frozen=True)
class TrainOptions:
    """The options of a ``cairn train`` run that no checkpoint holds.

    Attributes:
        iterations: The total training iterations (``training_iteration`` to reach).
        checkpoint_every: Save every K iterations (and at the last one).
        keep_last: How many checkpoints retention keeps (plus the best).
    """

    iterations: int
    checkpoint_every: int
    keep_last: int


DEFAULTS = TrainOptions(iterations=100, checkpoint_every=10, keep_last=3)
"""The options of a run that gives none."""

_LOWEST = {"iterations": 0, "checkpoint_every": 1, "keep_last": 1}


def check(options: TrainOptions, *, where: str, fix: str = "") -> None:
    """Raise ValueError when an option is out of its range (``where`` says whose options they are, ``fix``
    what to do beyond giving a value in range)."""
    for name, lowest in _LOWEST.items():
        value = getattr(options, name)
        if type(value) is not int or not lowest <= value <= _MAX_COUNT:
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{where}: {flag} must be an integer from {lowest} to {_MAX_COUNT}, got {value!r:.40}{fix}."
            )


def read_options(folder: str) -> TrainOptions | None:
    """The options recorded in ``folder``, or None when it has no options file.

    Raises:
        ValueError: The file is larger than :data:`MAX_BYTES`, not a JSON object of the
            options, or a value is out of its range (the message names the file).
    """
    path = os.path.join(folder, OPTIONS_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    what = f"{path} (the options the run was started with)"
    if len(raw) > MAX_BYTES:
        raise ValueError(f"{what} is larger than {MAX_BYTES} bytes: not one cairn wrote; delete it to resume.")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ValueError(f"{what} cannot be read ({type(err).__name__}); delete it to resume.") from err
    names = [f.name for f in fields(TrainOptions)]
    if not isinstance(data, dict) or sorted(data) != sorted(names):
        raise ValueError(f"{what} is not a JSON object of {', '.join(names)}; delete it to resume.")
    options = TrainOptions(**data)
    check(options, where=what, fix="; delete it to resume")
    return options


def write_options(folder: str, options: TrainOptions) -> None:
    """Record ``options`` in ``folder`` atomically (temporary file, fsync, rename, fsync of the folder)."""
    path = os.path.join(folder, OPTIONS_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    data = (json.dumps(asdict(options), indent=1) + "\n").encode()
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def resolve(given: dict[str, Any], recorded: TrainOptions | None) -> tuple[TrainOptions, list[str]]:
    """The run's options: each one given (not None), else the recorded one, else the default.

    Returns:
        The options, and the names of those taken from ``recorded`` (to say so).
    """
    values: dict[str, int] = {}
    kept: list[str] = []
    for f in fields(TrainOptions):
        if given.get(f.name) is not None:
            values[f.name] = given[f.name]
        elif recorded is not None:
            values[f.name] = getattr(recorded, f.name)
            kept.append(f.name)
        else:
            values[f.name] = getattr(DEFAULTS, f.name)
    return TrainOptions(**values), kept
