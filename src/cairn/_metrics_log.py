"""Per-iteration training metrics on disk: a JSON-lines file and TensorBoard events.

``cairn train --checkpoint-dir DIR`` keeps two records of a run in ``DIR``:

``DIR/metrics.jsonl``
    One JSON object per training iteration, the algorithm's results with their
    own names (``training_iteration``, ``num_env_steps_sampled_lifetime``,
    ``episode_return_mean``, ``learner/<module id>/policy_loss``, ...) plus
    ``wall_time`` (Unix seconds when the iteration ended) and
    ``perf/time_total_s`` (training wall time of the run, summed over resumes).
    Non-finite numbers are written as ``null``. Each line is written with one
    ``write``, then flushed and fsynced, so a killed run loses at most the line
    it was writing (a cut last line, which readers skip).

``DIR/events.out.tfevents.*``
    The same scalars for TensorBoard (``tensorboard --logdir DIR``), written
    with ``torch.utils.tensorboard`` when the ``tensorboard`` package is
    installed (``pip install "cairn-rl[tensorboard]"``; no TensorFlow needed).
    The step of every scalar is ``training_iteration``.

Resuming never duplicates an iteration. When a run restarts at iteration
``k`` (the restored checkpoint's, 0 for a fresh start), :class:`MetricsLog`
rewrites ``metrics.jsonl`` atomically (temporary file, fsync, rename) to keep
only the lines with ``training_iteration <= k``: the iterations a killed run
logged after its last checkpoint are dropped, since training does them again.
The TensorBoard writer is opened with ``purge_step=k + 1``, which makes
TensorBoard's reader hide the older events of steps above ``k``. As a second
line of defence, :func:`read_metrics` keeps the last row of each iteration.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = [
    "METRICS_FILE",
    "MetricsLog",
    "TensorBoardLog",
    "jsonable",
    "read_metrics",
]

METRICS_FILE = "metrics.jsonl"
"""The JSON-lines file of per-iteration metrics inside a run folder."""

ITERATION_KEY = "training_iteration"
WALL_TIME_KEY = "wall_time"
TIME_TOTAL_KEY = "perf/time_total_s"


def jsonable(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-ready part of ``metrics``: numbers, booleans and strings.

    Non-finite floats become ``None`` (JSON has no NaN); values of other types
    (arrays, nested dicts) are left out.
    """
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, bool | int | str):
            out[key] = value
        elif isinstance(value, float):
            out[key] = value if math.isfinite(value) else None
    return out


def _parse_lines(path: str, *, strict: bool) -> list[dict[str, Any]]:
    """The JSON objects of ``path``; a cut last line is skipped.

    With ``strict``, another line that is not a JSON object raises ``ValueError``;
    without, it is skipped.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if number == len(lines) or not strict:
                continue  # the last line of a run killed while writing it
            raise ValueError(f"{path}, line {number}: not JSON ({err}).") from err
        if isinstance(row, dict):
            rows.append(row)
        elif strict:
            raise ValueError(f"{path}, line {number}: expected a JSON object, found {type(row).__name__}.")
    return rows


def read_metrics(path: str) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, one per training iteration, in order.

    Args:
        path: A run folder or the file itself.

    Returns:
        The rows sorted by ``training_iteration``; when an iteration appears more
        than once (a file written by another tool, or appended to without
        :class:`MetricsLog`'s rewrite on resume), its last row wins. Rows without
        ``training_iteration`` are kept in file order, after the others.

    Raises:
        FileNotFoundError: No metrics file.
        ValueError: A line other than the last that is not a JSON object.
    """
    file = os.path.join(path, METRICS_FILE) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(
            f"No {METRICS_FILE} in {path}: 'cairn train --checkpoint-dir DIR' writes the "
            f"metrics of each iteration to DIR/{METRICS_FILE}."
        )
    by_iteration: dict[int, dict[str, Any]] = {}
    others: list[dict[str, Any]] = []
    for row in _parse_lines(file, strict=True):
        iteration = row.get(ITERATION_KEY)
        if isinstance(iteration, int) and not isinstance(iteration, bool):
            by_iteration[iteration] = row
        else:
            others.append(row)
    return [by_iteration[i] for i in sorted(by_iteration)] + others


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class MetricsLog:
    """Appends one JSON line per training iteration to ``FOLDER/metrics.jsonl``.

    Opening the log rewrites the file atomically to the iterations up to
    ``start_iteration`` (see the module docstring), so that a resumed run goes
    on with exactly one line per iteration.

    Args:
        folder: The run folder (created when missing).
        start_iteration: The iteration training starts from: the restored
            checkpoint's, or 0 for a fresh run (which empties the file).
    """

    def __init__(self, folder: str, *, start_iteration: int) -> None:
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, METRICS_FILE)
        self.start_iteration = start_iteration
        kept: list[dict[str, Any]] = []
        if os.path.exists(self.path):
            # Not strict: a line broken in the middle must not stop a resume.
            for row in _parse_lines(self.path, strict=False):
                iteration = row.get(ITERATION_KEY)
                if isinstance(iteration, int) and iteration <= start_iteration:
                    kept.append(row)
        self._rewrite(folder, kept)
        last = kept[-1] if kept else {}
        total = last.get(TIME_TOTAL_KEY)
        self.time_total_s = float(total) if isinstance(total, int | float) else 0.0
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open for the run

    def _rewrite(self, folder: str, rows: list[dict[str, Any]]) -> None:
        # A temporary file beside the log (mode from the umask, as for the log itself),
        # fsynced, then renamed over it: a kill leaves the old file or the new one.
        tmp = os.path.join(folder, f".{METRICS_FILE}.{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(row) + "\n" for row in rows)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        _fsync_dir(folder)

    def append(self, results: Mapping[str, Any], *, iteration_time_s: float) -> dict[str, Any]:
        """Write the line of one iteration; returns the row as written.

        Args:
            results: The iteration's metrics (``Algorithm.train()``'s result).
            iteration_time_s: Wall time the iteration took, added to
                ``perf/time_total_s``.

        Raises:
            ValueError: The log is closed.
        """
        if self._file is None:
            raise ValueError(f"The metrics log {self.path} is closed.")
        self.time_total_s += iteration_time_s
        row = jsonable(results)
        row[WALL_TIME_KEY] = time.time()
        row[TIME_TOTAL_KEY] = self.time_total_s
        # One write of a whole line, then flush and fsync: a kill leaves at most a cut last line.
        self._file.write(json.dumps(dict(sorted(row.items()))) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        return row

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardLog:
    """Writes each iteration's numeric metrics as TensorBoard scalars.

    Use :meth:`open`, which returns ``None`` when the ``tensorboard`` package
    is not installed.

    Args:
        writer: A ``torch.utils.tensorboard.SummaryWriter``.
    """

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    @classmethod
    def open(cls, folder: str, *, start_iteration: int) -> TensorBoardLog | None:
        """A log writing event files into ``folder``, or ``None`` without tensorboard.

        Args:
            folder: The run folder.
            start_iteration: The iteration training starts from; TensorBoard
                hides events of later steps that an earlier, killed run wrote.
        """
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return None
        return cls(SummaryWriter(log_dir=folder, purge_step=start_iteration + 1))

    def append(self, row: Mapping[str, Any]) -> None:
        """Write the numeric values of one row (as :meth:`MetricsLog.append` returns it), then flush."""
        step = int(row[ITERATION_KEY])
        wall_time = row.get(WALL_TIME_KEY)
        for key, value in row.items():
            if key in (ITERATION_KEY, WALL_TIME_KEY) or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                self._writer.add_scalar(key, value, global_step=step, walltime=wall_time)
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
