"""The checkpoint format's one owner: file names, format versions, digests and manifests.

Every folder of a checkpoint holds ``metadata.json`` and ``manifest.json``.
The manifest lists each file of the folder with its size and digest, and each
sub-folder's ``manifest.json`` with its own size and digest, so the root
manifest seals the whole tree (a Merkle tree). It carries a digest of its own
canonical JSON, so a flipped bit anywhere is caught. It is written last, which
makes the root manifest the commit marker on object stores.

Format 3 (written since cairn 0.4): every digest is BLAKE3 by default, a
cryptographic hash about four times faster than SHA-256 per core (and parallel
within one file), or SHA-256 for users who must use it (``digest="sha256"`` on a
save or a manager). The manifest records its algorithm; one tree uses one.

Format 2 (cairn 0.3): every digest is SHA-256; each file entry also records a
CRC-32, a fast pre-check an incremental save used to skip hashing a file that
certainly changed (a matching CRC-32 decides nothing). Format 1 (CRC-32 only,
which guards against accidents, not against anyone who chooses the bytes) is
still read. Both keep loading; ``cairn upgrade`` rewrites them as format 3. A tree
never mixes formats or algorithms: a folder's manifest is in its parent's.

Every reader, writer, storage backend, command and test helper takes the names,
the version check and the digest from here.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from cairn._crc import crc32
from cairn._limits import check_json_cost
from cairn.errors import CheckpointError, CorruptCheckpointError, IncompatibleCheckpointError

FORMAT_VERSION = 3
"""The on-disk format version this cairn writes; it reads every version up to this one."""

DIGEST_ALGORITHM = "blake3"
"""The digest a save uses unless it is given another (``digest=``)."""

DIGEST_ALGORITHMS = ("blake3", "sha256")
"""The digests a save may use (format 3), the allow-list of ``digest=``."""

_ALGORITHMS_OF_VERSION: dict[int, tuple[str, ...]] = {1: ("crc32",), 2: ("sha256",), 3: DIGEST_ALGORITHMS}
_DIGEST_HEX_LENGTH = {"crc32": 8, "sha256": 64, "blake3": 64}


def check_digest_algorithm(digest: Any) -> str:
    """``digest`` checked as a digest a save may use (:data:`DIGEST_ALGORITHMS`): the one home of that rule.

    Raises:
        CheckpointError: Any other value.
    """
    if digest not in DIGEST_ALGORITHMS:
        raise CheckpointError(
            f"digest={digest!r} is not a digest cairn writes; use one of {', '.join(map(repr, DIGEST_ALGORITHMS))} "
            f"(default {DIGEST_ALGORITHM!r})."
        )
    return str(digest)


def check_format_version(version: Any, *, where: str) -> int:
    """The format version ``version`` read at ``where``, checked: an int this cairn reads.

    The one home of the version rule, for manifests and ``metadata.json`` alike.

    Raises:
        CorruptCheckpointError: Not a positive int.
        IncompatibleCheckpointError: Newer than :data:`FORMAT_VERSION`.
    """
    if type(version) is not int or version < 1:
        raise CorruptCheckpointError(f"{where} has an invalid format_version {version!r}.")
    if version > FORMAT_VERSION:
        raise IncompatibleCheckpointError(
            f"{where} is in checkpoint format {version}, newer than the format {FORMAT_VERSION} "
            "this version of cairn reads. Upgrade cairn (pip install -U cairn-rl) to load it."
        )
    return version


@dataclass(frozen=True)
class Digest:
    """The digest of a file or of a manifest: ``algorithm`` (``"blake3"``, ``"sha256"``; format 1 ``"crc32"``) and hex.

    Two digests are equal only when algorithm and value both are: bytes are never
    accepted on the word of a weaker algorithm than the one the format records.
    """

    algorithm: str
    hex: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hex}"

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview, algorithm: str = DIGEST_ALGORITHM) -> Digest:
        """The digest of ``data``."""
        hasher = Hasher(algorithm, size=memoryview(data).nbytes)
        hasher.update(data)
        return hasher.digest()


PARALLEL_HASH_MIN = 1 << 20
"""Inputs of fewer bytes (known in advance) are digested on the calling thread alone, without rayon's pool."""


class Hasher:
    """Digests bytes fed in order, the way a file's bytes are read or written.

    ``update`` releases the GIL on large buffers (hashlib, blake3 and ISA-L all do),
    so a helper thread hashes while another reads or writes; BLAKE3 hashes a large
    buffer on several threads of its own (rayon's pool). With
    ``with_crc`` it also keeps the CRC-32 a format 2 manifest records beside the digest.
    """

    __slots__ = ("_b3", "_crc", "_sha", "algorithm", "with_crc")

    def __init__(self, algorithm: str = DIGEST_ALGORITHM, *, with_crc: bool = False, size: int | None = None) -> None:
        """Start a digest of ``algorithm`` (``"blake3"``, ``"sha256"`` or ``"crc32"``).

        ``size``: how many bytes will be fed, when the caller knows; under
        :data:`PARALLEL_HASH_MIN` the digest runs on the calling thread alone.
        """
        if algorithm not in _DIGEST_HEX_LENGTH:
            raise ValueError(f"Unknown digest algorithm {algorithm!r}.")
        self.algorithm = algorithm
        self.with_crc = with_crc or algorithm == "crc32"
        self._sha = hashlib.sha256() if algorithm == "sha256" else None
        self._b3: Any = None
        if algorithm == "blake3":
            import blake3

            if size is not None and size < PARALLEL_HASH_MIN:
                # One thread: with AUTO, blake3 hands every input of 32 KiB or more to rayon's pool and
                # waits for it (2.5x the time at 38 kB here), and the pool's workers then spin in
                # sched_yield for a while, taking a core from the save on a 2-core machine.
                self._b3 = blake3.blake3()
            else:
                # AUTO: rayon's global pool, shared by every digest (RAYON_NUM_THREADS caps it). A number
                # would start a pool per digest: ~0.2 ms each, more than a small file's whole digest.
                self._b3 = blake3.blake3(max_threads=blake3.blake3.AUTO)
        self._crc = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Feed the next bytes."""
        if self._b3 is not None:
            self._b3.update(data)
        elif self._sha is not None:
            self._sha.update(data)
        if self.with_crc:
            self._crc = crc32(data, self._crc)

    def digest(self) -> Digest:
        """The digest of everything fed so far."""
        if self._b3 is not None:
            return Digest("blake3", self._b3.hexdigest())
        if self._sha is not None:
            return Digest("sha256", self._sha.hexdigest())
        return Digest("crc32", f"{self._crc:08x}")

    @property
    def crc(self) -> int:
        """The CRC-32 of everything fed so far (only with ``with_crc``)."""
        return self._crc

    def entry(self, size: int) -> FileEntry:
        """The manifest entry of the ``size`` bytes fed (with the CRC-32 only when it was asked for)."""
        keep_crc = self.with_crc and self.algorithm != "crc32"
        return FileEntry(size, self.digest(), self._crc if keep_crc else None)


MANIFEST = "manifest.json"
METADATA = "metadata.json"
CTOR = "ctor.json"
STATE = "state.msgpack"
EMPTY_STATE = b"\x80"
"""The msgpack of ``{}``: the state of a format 3 folder whose manifest lists neither ``state.msgpack``
nor ``tensors.safetensors`` (a save writes no file for a folder whose own state is empty: most
folders of an RL algorithm hold only components)."""
TENSORS = "tensors.safetensors"
PACK = "packed.bin"
"""A folder's small own files in one file (format 3, since issue 34's small-checkpoint work).

A save writes the folder's ``ctor.json``, ``state.msgpack`` and (up to :data:`PACK_TENSOR_BYTES`)
``tensors.safetensors`` end to end into this one file (``metadata.json`` stays a file of its own:
every folder holds one, SPEC 2, which tools and trackers look for), and the
manifest's ``packed`` table gives each member's offset and size. The file is listed in ``files``
like any other (size and digest: verified whole before any member is sliced from it)."""
PACKED_MEMBERS = (CTOR, STATE, TENSORS)
"""The files a pack may hold (an allow-list), in the order a save writes them; never ``metadata.json``."""
PACK_TENSOR_BYTES = 1 << 20
"""A tensor file up to this size goes into the pack; a larger one keeps its own file (big checkpoints
keep their layout: an incremental save links an unchanged one, a restore streams it)."""
SIGNATURE = "model.sig"
"""A root folder's signature (``cairn sign``): OpenSSF model-signing's file name. No manifest lists it
(it is written after the root manifest it signs); it is never a component name."""
SIGNATURE_TEMPORARY = re.compile(re.escape(f".{SIGNATURE}.") + "[0-9a-f]{32}" + re.escape(".tmp"))
"""What ``cairn sign`` names the signature while it writes it, before the rename into place."""
RESERVED_NAMES = frozenset({MANIFEST, METADATA, CTOR, STATE, TENSORS, PACK})
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

MAX_COMPONENTS = 65_536
"""The most components one folder may have (a save refuses more; a reader checks the count before it loops).

Parsing a manifest is linear in its components (one set lookup per entry): at this bound
a manifest is about 10 MB and parses in well under a second."""

MAX_OWN_FILES = len(RESERVED_NAMES) - 1
"""The most files of a folder's own a manifest may list (every reserved name but the manifest itself)."""

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


_encode_str = json.encoder.encode_basestring_ascii  # C: what json.dumps does with ensure_ascii
_FLOAT_REPR = float.__repr__


class _NotPlain(Exception):
    """A value :func:`indented_json` leaves to ``json.dumps`` (which raises for what JSON cannot hold)."""


def _indented(value: Any, pad: str, sort_keys: bool) -> str:
    t = type(value)
    if t is str:
        return _encode_str(value)
    if t is int:
        return int.__repr__(value)
    if t is dict:
        if not value:
            return "{}"
        inner = pad + " "
        keys = sorted(value) if sort_keys else value
        parts = []
        for k in keys:
            if type(k) is not str:
                raise _NotPlain  # json turns other keys into strings: its rules, not repeated here
            parts.append(f"{inner}{_encode_str(k)}: {_indented(value[k], inner, sort_keys)}")
        return "{\n" + ",\n".join(parts) + "\n" + pad + "}"
    if t is list:
        if not value:
            return "[]"
        inner = pad + " "
        return "[\n" + ",\n".join(inner + _indented(v, inner, sort_keys) for v in value) + "\n" + pad + "]"
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if t is float and value == value and value not in (float("inf"), float("-inf")):
        return _FLOAT_REPR(value)
    raise _NotPlain


def indented_json(obj: Any, *, sort_keys: bool) -> bytes:
    """``json.dumps(obj, indent=1, sort_keys=sort_keys, allow_nan=False)`` + a newline, as UTF-8, faster.

    Any ``indent`` makes json use its pure-Python encoder; manifests and metadata (a few
    per folder, every save) are dicts, lists, strings and numbers, which this writes
    directly with json's own C string escaper, byte for byte what json.dumps writes
    (``tests/test_format.py`` compares them). Anything else (tuples, subclasses, int keys,
    NaN) is left to json.dumps, whose errors stand.
    """
    try:
        text = _indented(obj, "", sort_keys)
    except (_NotPlain, RecursionError):
        text = json.dumps(obj, indent=1, sort_keys=sort_keys, allow_nan=False)
    return text.encode("utf-8") + b"\n"


def canonical_json(obj: Any) -> bytes:
    """The bytes whose digest seals a manifest: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


@dataclass(frozen=True)
class FileEntry:
    """A file listed in a manifest: its size, its digest and (format 2) a CRC-32 pre-check."""

    size: int
    digest: Digest
    crc32: int | None = None  # never decides trust: see the module docstring

    @classmethod
    def of(cls, data: bytes | bytearray | memoryview, algorithm: str = DIGEST_ALGORITHM) -> FileEntry:
        """The entry of ``data`` in the current format, with the digest ``algorithm``."""
        size = memoryview(data).nbytes
        hasher = Hasher(algorithm, size=size)
        hasher.update(data)
        return hasher.entry(size)

    def same_bytes(self, other: FileEntry) -> bool:
        """Whether both entries record the same bytes: same size and the same digest (CRC-32s decide nothing)."""
        return self.size == other.size and self.digest == other.digest


def entry_json(entry: FileEntry, format_version: int = FORMAT_VERSION) -> dict[str, Any]:
    """A file entry as a manifest of ``format_version`` writes it (format 2 alone records a CRC-32 beside)."""
    out: dict[str, Any] = {"size": entry.size, entry.digest.algorithm: entry.digest.hex}
    if format_version == 2:
        out["crc32"] = f"{entry.crc32 or 0:08x}"
    return out


def manifest_algorithm(body: dict[str, Any]) -> str:
    """The digest a manifest ``body`` is sealed with: its version's, or (format 3) the one it names, if allowed.

    An unknown version or algorithm gives the current default (the seal then fails to match).
    """
    version = body.get("format_version")
    allowed = _ALGORITHMS_OF_VERSION.get(version, ()) if type(version) is int else ()
    named = body.get("algorithm")
    if named in allowed:
        return str(named)
    return allowed[0] if len(allowed) == 1 else DIGEST_ALGORITHM


def seal_manifest_body(body: dict[str, Any]) -> bytes:
    """The bytes of the manifest ``body`` with its own digest (its ``checksum``) set, as cairn writes them.

    The one place that seals a manifest: :meth:`Manifest.to_bytes` and the test
    helpers that re-seal a tampered tree both use it. The algorithm is
    :func:`manifest_algorithm`'s.
    """
    body = {k: v for k, v in body.items() if k != "checksum"}
    body["checksum"] = Digest.of(canonical_json(body), manifest_algorithm(body)).hex
    return indented_json(body, sort_keys=True)


def raw_entry(
    data: bytes | bytearray | memoryview, *, format_version: int = FORMAT_VERSION, algorithm: str | None = None
) -> dict[str, Any]:
    """The JSON entry of a file holding ``data`` in a manifest of ``format_version`` (for re-sealing tools).

    ``algorithm``: the manifest's digest (default: its format's, BLAKE3 for format 3).
    """
    allowed = _ALGORITHMS_OF_VERSION.get(format_version, DIGEST_ALGORITHMS)
    algorithm = algorithm or allowed[0]
    if algorithm == "crc32":
        return {"size": len(data), "crc32": f"{crc32(data):08x}"}
    hasher = Hasher(algorithm, with_crc=format_version == 2)
    hasher.update(data)
    return entry_json(hasher.entry(len(data)), format_version)


@dataclass
class Manifest:
    """The manifest of one checkpoint folder."""

    files: dict[str, FileEntry] = field(default_factory=dict)
    components: list[str] = field(default_factory=list)
    format_version: int = FORMAT_VERSION
    digest: str = DIGEST_ALGORITHM  # format 3 only: earlier formats have one algorithm each (see algorithm)
    packed: dict[str, tuple[int, int]] = field(default_factory=dict)  # member -> (offset, size) in PACK
    _component_set: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def has_component(self, name: str) -> bool:
        """Whether ``name`` is one of the components (a set lookup: walks of wide trees stay linear)."""
        if len(self._component_set) != len(self.components):
            self._component_set = frozenset(self.components)
        return name in self._component_set

    def lists(self, name: str) -> bool:
        """Whether the folder holds its own file ``name``: as a file of its own, or packed in :data:`PACK`."""
        return name in self.files or name in self.packed

    def own_sizes(self) -> dict[str, int]:
        """The folder's own files (packed members included, the pack itself not) -> size in bytes."""
        out = {n: e.size for n, e in self.files.items() if "/" not in n and n != PACK}
        out.update((n, size) for n, (_offset, size) in self.packed.items())
        return out

    @property
    def algorithm(self) -> str:
        """The digest algorithm of this manifest: format 1 and 2 have one each, format 3 records its own."""
        allowed = _ALGORITHMS_OF_VERSION.get(self.format_version, DIGEST_ALGORITHMS)
        return allowed[0] if len(allowed) == 1 else self.digest

    def to_bytes(self) -> bytes:
        """Serialize, with the self-digest."""
        if self.format_version == FORMAT_VERSION:
            return self._sealed_bytes()
        body: dict[str, Any] = {
            "format": "cairn.manifest",
            "format_version": self.format_version,
            "algorithm": self.algorithm,
            "files": {k: entry_json(v, self.format_version) for k, v in sorted(self.files.items())},
            "components": list(self.components),
        }
        if self.packed:
            body["packed"] = {k: {"offset": o, "size": n} for k, (o, n) in sorted(self.packed.items())}
        return seal_manifest_body(body)

    def _sealed_bytes(self) -> bytes:
        """:func:`seal_manifest_body` of this format 3 manifest's body, written directly (the same bytes).

        Every folder of every save seals one; the body's shape is fixed (sorted keys:
        ``algorithm``, ``checksum``, ``components``, ``files``, ``format``, ``format_version``,
        ``packed``; an entry's digest name sorts before ``size``, ``offset`` before ``size``), so
        its two JSON forms are joined from strings json's C escaper made instead of walked
        twice (``tests/test_format2.py`` checks it against seal_manifest_body).
        """
        alg = _encode_str(self.algorithm)
        comps = [_encode_str(c) for c in self.components]
        files = [
            (_encode_str(k), _encode_str(e.digest.hex), int.__repr__(e.size)) for k, e in sorted(self.files.items())
        ]
        packed = [(_encode_str(k), int.__repr__(o), int.__repr__(n)) for k, (o, n) in sorted(self.packed.items())]
        canonical = (
            f'{{"algorithm":{alg},"components":[{",".join(comps)}],"files":{{'
            + ",".join(f'{k}:{{{alg}:{h},"size":{n}}}' for k, h, n in files)
            + f'}},"format":"cairn.manifest","format_version":{FORMAT_VERSION}'
            + (
                ',"packed":{' + ",".join(f'{k}:{{"offset":{o},"size":{n}}}' for k, o, n in packed) + "}"
                if packed
                else ""
            )
            + "}"
        )
        checksum = Digest.of(canonical.encode("utf-8"), self.algorithm).hex
        parts = [f' "algorithm": {alg}', f' "checksum": "{checksum}"']
        parts.append(' "components": ' + ("[\n" + ",\n".join(f"  {c}" for c in comps) + "\n ]" if comps else "[]"))
        parts.append(
            ' "files": '
            + (
                "{\n" + ",\n".join(f'  {k}: {{\n   {alg}: {h},\n   "size": {n}\n  }}' for k, h, n in files) + "\n }"
                if files
                else "{}"
            )
        )
        parts += [' "format": "cairn.manifest"', f' "format_version": {FORMAT_VERSION}']
        if packed:
            parts.append(
                ' "packed": {\n'
                + ",\n".join(f'  {k}: {{\n   "offset": {o},\n   "size": {n}\n  }}' for k, o, n in packed)
                + "\n }"
            )
        return ("{\n" + ",\n".join(parts) + "\n}\n").encode("utf-8")

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
        version = check_format_version(body.get("format_version"), where=where)
        allowed = _ALGORITHMS_OF_VERSION.get(version, ())
        algorithm = body.get("algorithm")
        if algorithm not in allowed:
            raise CorruptCheckpointError(
                f"{where} names the checksum algorithm {str(algorithm)[:40]!r}, not one of the "
                f"{' or '.join(map(repr, allowed))} of format {version}: it was edited or damaged."
            )
        assert isinstance(algorithm, str)  # one of the allowed names
        recorded = body.pop("checksum", None)
        if not isinstance(recorded, str) or recorded != Digest.of(canonical_json(body), algorithm).hex:
            raise CorruptCheckpointError(
                f"{where} fails its own checksum: it was corrupted or edited. Restore the checkpoint from a good copy."
            )
        files_raw, comps = body.get("files"), body.get("components")
        if not isinstance(files_raw, dict) or not isinstance(comps, list):
            raise CorruptCheckpointError(f"{where} lacks its 'files' or 'components' lists.")
        # Bounds before loops: every loop below is one pass, each step a set or dict lookup.
        if len(comps) > MAX_COMPONENTS or len(files_raw) > len(comps) + MAX_OWN_FILES:
            raise CorruptCheckpointError(
                f"{where} lists {len(comps)} components and {len(files_raw)} files; cairn reads at most "
                f"{MAX_COMPONENTS} components per folder, each with one manifest entry, besides at most "
                f"{MAX_OWN_FILES} files of the folder's own. It is damaged or hostile."
            )
        for c in comps:
            problem = component_name_problem(c)
            if problem is not None:
                raise CorruptCheckpointError(f"{where} lists the component {c!r}, an unsafe name: {problem}.")
        comp_set = frozenset(comps)
        if len(comp_set) != len(comps):
            raise CorruptCheckpointError(f"{where} lists a component twice; the checkpoint is tampered.")
        files: dict[str, FileEntry] = {}
        for name, info in files_raw.items():
            _check_entry_name(name, comp_set, where)
            files[name] = _parse_entry(info, algorithm, version, f"{where} ({name!r})")
        for c in comps:
            if f"{c}/{MANIFEST}" not in files:
                raise CorruptCheckpointError(f"{where} lists the component {c!r} without its manifest's checksum.")
        packed = _parse_packed(body.get("packed"), files, version, where)
        manifest = cls(files=files, components=list(comps), format_version=version, digest=algorithm, packed=packed)
        if bytes(data) != manifest.to_bytes():
            raise CorruptCheckpointError(
                f"{where} is not byte for byte the manifest cairn writes (changed whitespace, order or "
                "extra keys): it was edited or damaged. Restore the checkpoint from a good copy."
            )
        return manifest


def _parse_packed(raw: Any, files: dict[str, FileEntry], version: int, where: str) -> dict[str, tuple[int, int]]:
    """The ``packed`` table of a manifest, checked against its pack's recorded size before anyone slices.

    Every member is an allowed name not also listed as a file of its own, and the members
    tile the pack exactly: sorted by offset they start at 0, each begins where the one before
    ends, and the last ends at the pack's size. So no range lies past the end, overlaps
    another or leaves bytes nobody reads, and no sum can exceed the size the pack's digest
    vouches for. The count is bounded by the allow-list before the loop.
    """
    if raw is None:
        if PACK in files:
            raise CorruptCheckpointError(
                f"{where} lists {PACK} without its 'packed' table; the checkpoint is tampered."
            )
        return {}
    if version < 3 or not isinstance(raw, dict) or not raw or len(raw) > len(PACKED_MEMBERS):
        raise CorruptCheckpointError(
            f"{where} has a malformed 'packed' table (format 3 only: a non-empty object of at most "
            f"{len(PACKED_MEMBERS)} members); the checkpoint is damaged or tampered."
        )
    pack = files.get(PACK)
    if pack is None:
        raise CorruptCheckpointError(
            f"{where} has a 'packed' table but does not list {PACK}; the checkpoint is tampered."
        )
    ranges: list[tuple[int, int, str]] = []
    for name, info in raw.items():
        if name not in PACKED_MEMBERS or name in files:
            raise CorruptCheckpointError(
                f"{where} packs {str(name)[:80]!r}, which is not a file a pack may hold or is also listed on its own; "
                "the checkpoint is tampered."
            )
        offset, size = (info.get("offset"), info.get("size")) if isinstance(info, dict) else (None, None)
        if type(offset) is not int or type(size) is not int or offset < 0 or size < 0:
            raise CorruptCheckpointError(f"{where} has a malformed 'packed' entry for {name!r}.")
        ranges.append((offset, size, name))
    end = 0
    for offset, size, name in sorted(ranges):
        if offset != end or size > pack.size - offset:
            raise CorruptCheckpointError(
                f"{where} packs {name!r} at bytes {offset}..{offset + size} of {PACK} ({pack.size} bytes), which "
                f"is not where the member before it ends ({end}) or lies past the pack's end: the members "
                "must tile the pack exactly. The checkpoint is damaged or tampered."
            )
        end = offset + size
    if end != pack.size:
        raise CorruptCheckpointError(
            f"{where} packs {end} bytes into {PACK} of {pack.size} bytes; the members must fill it exactly. "
            "The checkpoint is damaged or tampered."
        )
    return {name: (offset, size) for offset, size, name in ranges}


_HEX = re.compile(r"[0-9a-f]+")


def _parse_hex(value: Any, length: int, where: str) -> str:
    if not isinstance(value, str) or len(value) != length or _HEX.fullmatch(value) is None:
        raise CorruptCheckpointError(f"{where} has a malformed checksum {str(value)[:80]!r}.")
    return value


def _parse_entry(info: Any, algorithm: str, version: int, where: str) -> FileEntry:
    if not (isinstance(info, dict) and type(info.get("size")) is int and info["size"] >= 0):
        raise CorruptCheckpointError(f"{where} is a malformed entry.")
    digest = Digest(algorithm, _parse_hex(info.get(algorithm), _DIGEST_HEX_LENGTH[algorithm], where))
    crc = None
    if version == 2:
        crc = int(_parse_hex(info.get("crc32"), 8, where), 16)
    return FileEntry(info["size"], digest, crc)


def _check_entry_name(name: Any, comps: frozenset[str], where: str) -> None:
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
