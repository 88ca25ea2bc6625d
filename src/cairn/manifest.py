"""The per-folder manifest and metadata: what a checkpoint folder holds and how to check it.

Every folder of a checkpoint holds ``metadata.json`` and ``manifest.json``.
The manifest lists each file of the folder with its size and CRC-32, and each
sub-folder's ``manifest.json`` with its own size and CRC-32, so the root
manifest seals the whole tree (a Merkle tree). It carries a CRC-32 of its own
canonical JSON, so a flipped bit anywhere is caught. It is written last, which
makes the root manifest the commit marker on object stores.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from cairn._crc import crc32
from cairn._limits import check_json_cost
from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError

FORMAT_VERSION = 1
"""The on-disk format version this cairn writes; it reads every version up to this one."""

MANIFEST = "manifest.json"
METADATA = "metadata.json"
CTOR = "ctor.json"
STATE = "state.msgpack"
TENSORS = "tensors.safetensors"
SIGNATURE = "model.sig"
"""A root folder's signature (``cairn sign``): OpenSSF model-signing's file name. No manifest lists it
(it is written after the root manifest it signs); it is never a component name."""
RESERVED_NAMES = frozenset({MANIFEST, METADATA, CTOR, STATE, TENSORS})
STANDARD_METADATA_KEYS = frozenset(
    {
        "format_version",
        "cairn_version",
        "class",
        "state_version",
        "frameworks",
        "created",
        "uses_pickle",
        "components",
        "has_tensors",
    }
)
"""The keys cairn writes into every ``metadata.json``; ``get_metadata()`` may not use them."""

MAX_JSON_BYTES = 64 * 1024 * 1024  # manifest, metadata and ctor files are small

MAX_COMPONENT_DEPTH = 64
"""How deep components may nest: a save refuses deeper trees, and a reader refuses to descend
further (a hostile checkpoint of thousands of nested folders must not exhaust the stack)."""

MAX_NAME_LENGTH = 200
"""The longest component name: a name becomes a folder name on every storage."""

# ASCII only, matched whole with fullmatch: `$` would accept a trailing newline ("kid\n").
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")


def component_name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a component (folder) name, or None when it can.

    The one home of the name rule (SPEC 2): one path segment of ASCII letters,
    digits, ``_``, ``-`` and ``.``, not ``.`` or ``..``, not one of the
    checkpoint's own file names, at most :data:`MAX_NAME_LENGTH` characters.
    Saving, reading manifests and every API that accepts a component or module
    id (``MultiRLModule.add_module``, connector names, policy ids) use it, so an
    id is refused when it is given, not when it is first saved.
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not a str"
    if len(name) > MAX_NAME_LENGTH:
        return f"it is longer than {MAX_NAME_LENGTH} characters"
    if name in (".", "..") or _NAME_RE.fullmatch(name) is None:
        return "names may hold only ASCII letters, digits, '_', '-' and '.', and may not be '.' or '..'"
    if name in RESERVED_NAMES or name == SIGNATURE:
        return f"{name!r} is the name of one of the checkpoint's own files"
    return None


def canonical_json(obj: Any) -> bytes:
    """The bytes whose CRC seals a manifest: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class FileEntry:
    """A file listed in a manifest."""

    size: int
    crc32: int


@dataclass
class Manifest:
    """The manifest of one checkpoint folder."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    components: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION

    def to_bytes(self) -> bytes:
        """Serialize, with the self-checksum."""
        body: dict[str, Any] = {
            "format": "cairn.manifest",
            "format_version": self.format_version,
            "algorithm": "crc32",
            "files": {k: {"size": v.size, "crc32": f"{v.crc32:08x}"} for k, v in sorted(self.files.items())},
            "components": list(self.components),
        }
        body["checksum"] = f"{crc32(canonical_json(body)):08x}"
        return json.dumps(body, indent=1, sort_keys=True).encode("utf-8") + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes | bytearray, *, where: str) -> Manifest:
        """Parse and check a manifest.

        Raises:
            CorruptCheckpointError: For malformed, tampered or unsafe entries.
            IncompatibleCheckpointError: For a format version newer than this cairn reads.
        """
        body = load_json(data, where=where)
        if not isinstance(body, dict) or body.get("format") != "cairn.manifest":
            raise CorruptCheckpointError(f"{where} is not a cairn manifest.")
        recorded = body.pop("checksum", None)
        if not isinstance(recorded, str) or recorded != f"{crc32(canonical_json(body)):08x}":
            raise CorruptCheckpointError(
                f"{where} fails its own checksum: it was corrupted or edited. Restore the checkpoint from a good copy."
            )
        version = body.get("format_version")
        if type(version) is not int or version < 1:
            raise CorruptCheckpointError(f"{where} has an invalid format_version {version!r}.")
        if version > FORMAT_VERSION:
            raise IncompatibleCheckpointError(
                f"{where} is in checkpoint format {version}, newer than the format {FORMAT_VERSION} "
                "this version of cairn reads. Upgrade cairn (pip install -U cairn-rl) to load it."
            )
        if body.get("algorithm") != "crc32":
            raise CorruptCheckpointError(f"{where} names an unknown checksum algorithm {body.get('algorithm')!r}.")
        files_raw, comps = body.get("files"), body.get("components")
        if not isinstance(files_raw, dict) or not isinstance(comps, list):
            raise CorruptCheckpointError(f"{where} lacks its 'files' or 'components' lists.")
        for c in comps:
            problem = component_name_problem(c)
            if problem is not None:
                raise CorruptCheckpointError(f"{where} lists the component {c!r}, an unsafe name: {problem}.")
        files: dict[str, FileEntry] = {}
        for name, info in files_raw.items():
            _check_entry_name(name, comps, where)
            if not (
                isinstance(info, dict)
                and type(info.get("size")) is int
                and info["size"] >= 0
                and isinstance(info.get("crc32"), str)
            ):
                raise CorruptCheckpointError(f"{where} has a malformed entry for {name!r}.")
            try:
                crc = int(info["crc32"], 16)
            except ValueError as err:
                raise CorruptCheckpointError(f"{where} has a malformed checksum for {name!r}.") from err
            files[name] = FileEntry(info["size"], crc)
        for c in comps:
            if f"{c}/{MANIFEST}" not in files:
                raise CorruptCheckpointError(f"{where} lists the component {c!r} without its manifest's checksum.")
        manifest = cls(files=files, components=list(comps), format_version=version)
        if bytes(data) != manifest.to_bytes():
            raise CorruptCheckpointError(
                f"{where} is not byte for byte the manifest cairn writes (changed whitespace, order or "
                "extra keys): it was edited or damaged. Restore the checkpoint from a good copy."
            )
        return manifest


def _check_entry_name(name: Any, comps: list[str], where: str) -> None:
    """Manifest entries are plain file names, or '<component>/manifest.json'; never paths out."""
    if not isinstance(name, str):
        raise CorruptCheckpointError(f"{where} has a non-string file entry.")
    if "/" in name:
        comp, _, rest = name.partition("/")
        if rest != MANIFEST or comp not in comps:
            raise CorruptCheckpointError(
                f"{where} lists {name!r}, which is outside this folder; manifests may only name "
                "their own files and their components' manifests. The checkpoint is tampered."
            )
        return
    if name not in RESERVED_NAMES or name == MANIFEST:
        raise CorruptCheckpointError(f"{where} lists the unexpected file {name!r}; the checkpoint is tampered.")


def load_json(data: bytes | bytearray, *, where: str) -> Any:
    """Parse JSON, turning every failure into :class:`CorruptCheckpointError`.

    JSON whose decoded objects would take more memory than the bound of
    :mod:`cairn._limits` is refused before it is parsed.
    """
    check_json_cost(data, where=where)
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise CorruptCheckpointError(f"{where} is not valid JSON ({err}); it is corrupt or truncated.") from err
