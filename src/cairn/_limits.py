"""Memory bounds for decoding what a checkpoint's files hold (SPEC 8).

Loading a checkpoint may allocate at most a small multiple of the bytes it holds
on disk, plus a constant. A decoded Python object is far larger than its encoding
(an empty list is 1 byte of msgpack or 2 of JSON, and ~64 bytes in memory), so the
cost of decoding a file is estimated from its bytes, and checked against
:data:`DECODE_BYTES_PER_BYTE` times its size plus :data:`DECODE_BYTES_CONSTANT`,
before anything is decoded. ``cairn.codec.state.check_skeleton`` does it for
msgpack, :func:`check_json_cost` for JSON (manifests, metadata, constructor
arguments, safetensors headers).
"""

from __future__ import annotations

from cairn.errors import CorruptCheckpointError

DECODE_BYTES_PER_BYTE = 32
"""Memory a decoded file may take per byte of the file."""

DECODE_BYTES_CONSTANT = 16 << 20
"""Memory any file may take to decode, whatever its size."""


def decode_limit(size: int) -> int:
    """The most memory decoding a file of ``size`` bytes may take."""
    return DECODE_BYTES_PER_BYTE * size + DECODE_BYTES_CONSTANT


def check_json_cost(data: bytes | bytearray | memoryview, *, where: str) -> None:
    """Refuse JSON whose decoded objects would take more than :func:`decode_limit` bytes.

    An upper estimate from byte counts (C speed, no parsing): every ``[`` or ``{``
    opens a container (~72 bytes), every ``,`` adds an item (a pointer, maybe an
    int or float object), every ``"`` pair a string object. Bytes inside strings
    are counted too, which only over-estimates.

    Raises:
        CorruptCheckpointError: The estimate is over the bound.
    """
    raw = bytes(data)
    size = len(raw)
    if size * 160 <= DECODE_BYTES_CONSTANT:  # no JSON costs more than ~160 bytes per byte
        return
    cost = 72 * (raw.count(b"[") + raw.count(b"{")) + 40 * raw.count(b",") + 32 * raw.count(b'"') + 2 * size
    if cost > decode_limit(size):
        raise CorruptCheckpointError(
            f"{where}: decoding this {size}-byte JSON would take about {cost} bytes of memory, over the bound "
            f"of {DECODE_BYTES_PER_BYTE}x its size plus {DECODE_BYTES_CONSTANT >> 20} MB; it is corrupt or hostile."
        )
