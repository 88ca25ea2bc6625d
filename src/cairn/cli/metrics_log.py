"""Per-iteration training metrics on disk: a JSON-lines file and TensorBoard events.

``cairn train --checkpoint-dir DIR`` keeps two records of a run in ``DIR``:

``DIR/metrics.jsonl``
    One JSON object per training iteration, the algorithm's results with their
    own names (``training_iteration``, ``num_env_steps_sampled_lifetime``,
    ``env_runners/episode_return_mean``, ``learners/<module id>/policy_loss``, ...) plus
    ``wall_time`` (Unix seconds when the iteration ended) and
    ``perf/time_total_s`` (training wall time of the run, summed over resumes).
    Non-finite numbers are written as ``null``. Each line is written with one
    ``write``, then flushed and fsynced, so a killed run loses at most the line
    it was writing (a cut last line, which readers skip).

``DIR/events.out.tfevents.*``
    The same scalars for TensorBoard (``tensorboard --logdir DIR``; the
    ``tensorboard`` package, ``pip install "cairn-rl[tensorboard]"``, is needed
    to view them, not to write them). The step of every scalar is
    ``training_iteration``.

Resuming never duplicates an iteration. When a run restarts at iteration
``k`` (the restored checkpoint's, 0 for a fresh start), :class:`MetricsLog`
rewrites ``metrics.jsonl`` atomically (temporary file, fsync, rename) to keep
only the lines with ``training_iteration <= k``: the iterations a killed run
logged after its last checkpoint are dropped, since training does them again.
The TensorBoard event file starts with a ``SessionLog.START`` at step
``k + 1`` (``SummaryWriter``'s ``purge_step``), which makes TensorBoard's
reader hide the older events of steps above ``k``. As a second
line of defence, :func:`read_metrics` keeps the last row of each iteration.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import socket
import struct
import time
from collections.abc import Mapping
from typing import Any, BinaryIO, TextIO

from cairn._metrics import current_metric_names, flat_metrics, jsonable_metrics
from cairn.cli.command import sibling_hint

__all__ = [
    "METRICS_FILE",
    "MetricsLog",
    "TensorBoardLog",
    "flat_metrics",
    "jsonable",
    "read_metrics",
]

METRICS_FILE = "metrics.jsonl"
"""The JSON-lines file of per-iteration metrics inside a run folder."""

ITERATION_KEY = "training_iteration"
WALL_TIME_KEY = "wall_time"
TIME_TOTAL_KEY = "perf/time_total_s"


def jsonable(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-ready part of ``metrics``: numbers, booleans and strings, under flat keys.

    Nested dicts (``train()``'s RLlib layout) are flattened to ``"/"``-joined keys
    (``env_runners/episode_return_mean``). Numpy scalars become Python numbers, non-finite floats become
    ``None`` (JSON has no NaN); values of other types (arrays) are left out. It is the rule
    of the manager's recorded metrics (:func:`cairn._metrics.jsonable_metrics`).
    """
    return jsonable_metrics(metrics)


MAX_LINE_BYTES = 1 << 20
"""The longest line a metrics reader accepts: a row of ``cairn train`` takes a few KB."""


class _BadLine(ValueError):
    """A line of a metrics file that no reader can use (the message says why)."""


def _decode_row(raw: bytes) -> Any:
    """One line's JSON value, NaN and infinities read as None (what :class:`MetricsLog` writes for them).

    Raises:
        json.JSONDecodeError: Not JSON, or cut short.
        _BadLine: Not UTF-8, nested deeper than the interpreter can parse, or a number
            beyond any float.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _BadLine(f"not UTF-8 text ({err.reason} at byte {err.start})") from err
    try:
        # json.dumps writes NaN and Infinity (not JSON) for non-finite floats; read them as null.
        row = json.loads(text, parse_constant=lambda _name: None)
    except RecursionError as err:
        raise _BadLine("JSON nested too deeply to parse (a metrics row is one flat object)") from err
    except json.JSONDecodeError:
        raise
    except ValueError as err:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise _BadLine(f"a number cairn cannot read ({err})") from err
    if isinstance(row, dict):
        for key, value in row.items():
            if isinstance(value, int) and not isinstance(value, bool):
                try:
                    float(value)  # what a plot does with it
                except OverflowError as err:
                    raise _BadLine(f"the value of {key[:80]!r} is an integer beyond any float") from err
    return row


def _parse_lines(path: str, *, strict: bool) -> list[dict[str, Any]]:
    """The JSON objects of ``path``; a cut last line is skipped.

    A cut line is the file's last line without its newline (:meth:`MetricsLog.append`
    writes each line and its newline in one ``write``, so a kill leaves at most that).
    Lines are read one at a time and at most :data:`MAX_LINE_BYTES` long, so that a
    hostile or damaged file cannot take the memory or the stack.

    With ``strict``, another line that is not a JSON object raises ``ValueError`` naming
    the file and line; without, it is skipped.
    """
    rows: list[dict[str, Any]] = []
    with open(path, "rb") as f:
        number = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            number += 1
            try:
                if len(raw) > MAX_LINE_BYTES:
                    while raw and not raw.endswith(b"\n"):  # skip the rest of the line, bounded
                        raw = f.readline(MAX_LINE_BYTES)
                    raise _BadLine(f"longer than {MAX_LINE_BYTES} bytes (a metrics row takes a few KB)")
                if not raw.strip():
                    continue
                try:
                    row = _decode_row(raw)
                except json.JSONDecodeError as err:
                    if not raw.endswith(b"\n"):
                        continue  # the last line of a run killed while writing it
                    raise _BadLine(f"not JSON ({err})") from err
                if not isinstance(row, dict):
                    raise _BadLine(f"expected a JSON object, found {type(row).__name__}")
            except _BadLine as err:
                if not strict:
                    continue
                raise ValueError(
                    f"{path}, line {number}: {err}. Remove or fix that line (each line of a metrics file "
                    "is one JSON object, as cairn train writes it)."
                ) from err
            rows.append(row)
    return rows


def read_metrics(path: str) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl``, one per training iteration, in order.

    Args:
        path: A run folder or the file itself.

    Returns:
        The rows sorted by ``training_iteration``, under current names (the names of
        older runs translated by :func:`cairn._metrics.current_metric_names`); when an iteration appears more
        than once (a file written by another tool, or appended to without
        :class:`MetricsLog`'s rewrite on resume), its last row wins. Rows without
        ``training_iteration`` are kept in file order, after the others.

    Raises:
        FileNotFoundError: No metrics file.
        ValueError: A line other than the last that is not a JSON object.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist{sibling_hint(path)}: give a run folder (cairn train's --checkpoint-dir) "
            f"or its {METRICS_FILE}."
        )
    file = os.path.join(path, METRICS_FILE) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        raise FileNotFoundError(
            f"No {METRICS_FILE} in {path}: 'cairn train --checkpoint-dir DIR' writes the "
            f"metrics of each iteration to DIR/{METRICS_FILE}."
        )
    by_iteration: dict[int, dict[str, Any]] = {}
    others: list[dict[str, Any]] = []
    for row in map(current_metric_names, _parse_lines(file, strict=True)):
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

    The event file is written here, without ``torch.utils.tensorboard`` or the
    ``tensorboard`` package (importing them took ~0.2 s of CPU, ~0.5 s of wall
    time on a busy machine, at every ``cairn train`` start): TFRecord frames
    (length, masked CRC-32C of the length, a serialized ``Event`` protobuf,
    its masked CRC-32C), the records ``SummaryWriter`` writes, one ``Event`` per
    iteration holding every scalar as a ``simple_value``. ``tensorboard
    --logdir`` and TensorBoard's ``EventAccumulator`` read them.

    Use :meth:`open`.

    Args:
        file: The event file, open for binary writing.
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file

    @classmethod
    def open(cls, folder: str, *, start_iteration: int) -> TensorBoardLog:
        """A log writing a new event file into ``folder`` (made if missing).

        Args:
            folder: The run folder.
            start_iteration: The iteration training starts from; TensorBoard
                hides events of later steps that an earlier, killed run wrote
                (the ``purge_step`` of ``SummaryWriter``: a ``SessionLog.START``
                event at step ``start_iteration + 1``).
        """
        os.makedirs(folder, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}"
        log = cls(open(os.path.join(folder, name), "xb"))  # noqa: SIM115 (closed by close())
        now = time.time()
        log._write(_event(now, 0, _field_bytes(3, _FILE_VERSION)))
        purge = start_iteration + 1
        log._write(_event(now, purge, _field_bytes(3, _FILE_VERSION)))
        log._write(_event(now, purge, _field_bytes(7, _SESSION_LOG_START)))
        log._file.flush()
        return log

    def append(self, row: Mapping[str, Any]) -> None:
        """Write the numeric values of one row (as :meth:`MetricsLog.append` returns it), then flush."""
        step = int(row[ITERATION_KEY])
        wall_time = row.get(WALL_TIME_KEY)
        values = bytearray()
        for key, value in row.items():
            if key in (ITERATION_KEY, WALL_TIME_KEY) or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                values += _field_bytes(1, _field_bytes(1, key.encode()) + b"\x15" + _float32(float(value)))
        when = float(wall_time) if isinstance(wall_time, int | float) else time.time()
        self._write(_event(when, step, _field_bytes(5, bytes(values))))
        self._file.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._file.close()

    def _write(self, event: bytes) -> None:
        length = struct.pack("<Q", len(event))
        self._file.write(
            length + struct.pack("<I", _masked_crc32c(length)) + event + struct.pack("<I", _masked_crc32c(event))
        )


# ---------------------------------------------------------------------- event file encoding

_FILE_IDS = itertools.count()  # SummaryWriter's file names end in a per-process counter too
_FILE_VERSION = b"brain.Event:2"
_SESSION_LOG_START = b"\x08\x01"  # SessionLog{status: START}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (string, bytes or message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(wall_time: float, step: int, rest: bytes) -> bytes:
    """An ``Event`` message: wall_time (1, double), step (2, int64), then ``rest``'s fields."""
    return b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step & 0xFFFFFFFFFFFFFFFF) + rest


def _float32(value: float) -> bytes:
    """``value`` as a protobuf ``float``; beyond float32's range it is an infinity, as protobuf stores it."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C_TABLE = _crc32c_table()


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: CRC-32C (Castagnoli, not zlib's CRC-32), rotated and offset."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
