"""The safetensors byte format, written and read by cairn itself.

cairn writes standard safetensors files (``safetensors.numpy.load_file`` and
``safetensors.torch.load_file`` read them), but streams them itself so that a
save never builds the whole file in memory and a load can verify the checksum
of the exact bytes it decodes.

Layout (https://github.com/huggingface/safetensors):
    8 bytes    little-endian uint64 N, the header length
    N bytes    UTF-8 JSON: {name: {"dtype": ST, "shape": [...], "data_offsets": [b, e]},
               "__metadata__": {str: str}}, padded with spaces to a multiple of 8
    ...        the tensors' bytes, back to back, offsets relative to the end of the header
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

from cairn._limits import check_json_cost
from cairn.errors import CorruptCheckpointError

# safetensors dtype name -> element size in bytes.
ST_ITEMSIZE: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
    "C64": 8,
}  # fmt: skip

# numpy dtype (native byte order) -> safetensors dtype; anything else is stored as raw U8 bytes.
NUMPY_TO_ST: dict[str, str] = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "int16": "I16", "uint16": "U16",
    "float16": "F16", "int32": "I32", "uint32": "U32", "float32": "F32",
    "int64": "I64", "uint64": "U64", "float64": "F64",
}  # fmt: skip

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the bound safetensors itself uses


@dataclass(frozen=True)
class TensorEntry:
    """One tensor to write: its name, safetensors dtype, shape and bytes (1-d uint8)."""

    name: str
    st_dtype: str
    shape: tuple[int, ...]
    data: np.ndarray  # contiguous uint8 view of the bytes
    align: int = 1  # element size of the real dtype, for ordering tensors in the file


@dataclass(frozen=True)
class TensorRecord:
    """One tensor as described by a file's header."""

    st_dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute offset in the file
    end: int


def build_header(entries: list[TensorEntry], metadata: dict[str, str]) -> bytes:
    """Return the 8-byte length and the padded JSON header for ``entries`` in order."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for e in entries:
        nbytes = int(e.data.nbytes)
        header[e.name] = {"dtype": e.st_dtype, "shape": list(e.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad so that the data section starts 8-byte aligned (as safetensors does).
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    return struct.pack("<Q", len(raw)) + raw


def parse_header(data: memoryview | bytes, *, where: str) -> tuple[dict[str, TensorRecord], dict[str, str]]:
    """Parse and validate a safetensors header; offsets are made absolute.

    Raises:
        CorruptCheckpointError: For any malformed, oversized or inconsistent header.
    """
    size = len(data)
    if size < 8:
        raise CorruptCheckpointError(
            f"{where}: the file is {size} bytes long, too short for a safetensors header; it is truncated."
        )
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > MAX_HEADER_BYTES:
        raise CorruptCheckpointError(
            f"{where}: the safetensors header claims {n} bytes, over the "
            f"limit of {MAX_HEADER_BYTES}; the file is corrupt or hostile."
        )
    if 8 + n > size:
        raise CorruptCheckpointError(
            f"{where}: the safetensors header claims {n} bytes but the file "
            f"has only {size - 8} after the length; it is truncated."
        )
    check_json_cost(data[8 : 8 + n], where=f"{where} (safetensors header)")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise CorruptCheckpointError(f"{where}: the safetensors header is not valid JSON ({err}).") from err
    if not isinstance(header, dict):
        raise CorruptCheckpointError(f"{where}: the safetensors header is not a JSON object.")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise CorruptCheckpointError(f"{where}: '__metadata__' must map strings to strings.")
    base = 8 + n
    records: dict[str, TensorRecord] = {}
    spans: list[tuple[int, int]] = []
    for name, info in header.items():
        if not isinstance(info, dict):
            raise CorruptCheckpointError(f"{where}: tensor {name!r} has a malformed header entry.")
        dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in ST_ITEMSIZE:  # a list would not even hash
            raise CorruptCheckpointError(f"{where}: tensor {name!r} has unknown dtype {dtype!r}.")
        if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
            raise CorruptCheckpointError(f"{where}: tensor {name!r} has an invalid shape {shape!r}.")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(type(o) is int and o >= 0 for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise CorruptCheckpointError(f"{where}: tensor {name!r} has invalid data_offsets {offsets!r}.")
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * ST_ITEMSIZE[dtype]:
            raise CorruptCheckpointError(
                f"{where}: tensor {name!r} of dtype {dtype} and shape {shape} needs "
                f"{count * ST_ITEMSIZE[dtype]} bytes but its offsets span {offsets[1] - offsets[0]}."
            )
        records[name] = TensorRecord(dtype, tuple(shape), base + offsets[0], base + offsets[1])
        spans.append((offsets[0], offsets[1]))
    # Like safetensors: the tensors must tile the data section exactly, no holes, no overlaps.
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise CorruptCheckpointError(f"{where}: tensor data overlaps or leaves a hole at byte {b}.")
        pos = e
    if base + pos != size:
        raise CorruptCheckpointError(
            f"{where}: the header describes {base + pos} bytes but the file has {size}; "
            "it is truncated or has trailing bytes."
        )
    return records, meta
