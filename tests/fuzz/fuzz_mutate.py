"""Mutations of a checkpoint folder on the local disk, and a re-sealer that lets them reach the decoders.

Every mutation is a small frozen dataclass: Hypothesis draws them, prints them
in a falsifying example, and ``@example(...)`` replays them as regressions.
``apply(ckpt)`` edits the checkpoint folder in place and returns an
:class:`Applied` that tells the oracle what a correct loader may do with it.

Positions and node choices are plain integers taken modulo what exists, so a
mutation always applies to whatever template it meets.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from cairn.manifest import FORMAT_VERSION, MANIFEST, STATE, TENSORS, Digest, manifest_algorithm, raw_entry

DATA_FILES = (STATE, TENSORS)


# --------------------------------------------------------------------------- sealing


def canonical(body: Any) -> bytes:
    """The bytes whose CRC seals a manifest (cairn.manifest.canonical_json, tolerant of NaN)."""
    try:
        return json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (ValueError, TypeError):
        return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")


def _algorithm(body: dict[str, Any]) -> str:
    """The digest algorithm a manifest ``body`` is sealed with (cairn.manifest's rule, its one home)."""
    return manifest_algorithm(body)


def seal_bytes(body: Any) -> bytes:
    """A manifest's bytes whose own checksum matches ``body`` (non-dict bodies are written as they are)."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k != "checksum"}
        body["checksum"] = Digest.of(canonical(body), _algorithm(body)).hex
    return dumps_json(body, sort_keys=True)


def walk(root: str) -> list[tuple[str, list[str], list[str]]]:
    """os.walk without recursion (Python 3.11's recurses, and trees here nest 1,500 deep); no symlinks followed."""
    out = []
    stack = [root]
    while stack:
        top = stack.pop()
        dirs, files = [], []
        try:
            with os.scandir(top) as it:
                for e in it:
                    (dirs if e.is_dir(follow_symlinks=False) else files).append(e.name)
        except OSError:
            continue
        out.append((top, sorted(dirs), sorted(files)))
        stack.extend(os.path.join(top, d) for d in sorted(dirs, reverse=True))
    return out


def _is_regular(path: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _entry(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The entry of the file at ``path`` in the manifest ``body`` (its format and algorithm; unknown: the current)."""
    with open(path, "rb") as f:
        data = f.read()
    version = body.get("format_version")
    version = version if type(version) is int and 1 <= version <= FORMAT_VERSION else FORMAT_VERSION
    return raw_entry(data, format_version=version, algorithm=_algorithm({**body, "format_version": version}))


ManifestEdit = Callable[[str, Any], Any]
"""(folder relative to the checkpoint, manifest body) -> the body to seal; may return any JSON value."""


def reseal(ckpt: str, edit: ManifestEdit | None = None) -> None:
    """Rewrite every manifest under ``ckpt`` with the true size and CRC-32 of each regular file it lists.

    Iterative and bottom-up (any depth), never follows symlinks and never opens
    anything but regular files, so it is safe on trees holding FIFOs. Entries of
    files that are missing or not regular keep their old values. A manifest
    that is not JSON is left as it is.
    """
    folders = []
    for dirpath, _dirs, files in walk(ckpt):
        if MANIFEST in files and _is_regular(os.path.join(dirpath, MANIFEST)):
            rel = os.path.relpath(dirpath, ckpt)
            folders.append("" if rel == "." else rel)
    folders.sort(key=lambda r: -len(r.split("/")) if r else 0)
    for rel in folders:
        folder = os.path.join(ckpt, rel) if rel else ckpt
        mpath = os.path.join(folder, MANIFEST)
        try:
            with open(mpath, "rb") as f:
                body: Any = json.loads(f.read())
        except (ValueError, RecursionError):
            continue
        if isinstance(body, dict) and isinstance(body.get("files"), dict):
            for name in list(body["files"]):
                path = os.path.join(folder, name)
                if isinstance(name, str) and ".." not in name.split("/") and _is_regular(path):
                    body["files"][name] = _entry(path, body)
        if edit is not None:
            body = edit(rel, body)
        with open(mpath, "wb") as f:
            f.write(seal_bytes(body))


# --------------------------------------------------------------------------- JSON with raw literals

_RAW_JSON = "@@RAWJSON@@"


@dataclass(frozen=True)
class RawJson:
    """A JSON literal that json.dumps cannot write (``1e400``, ``-Infinity``, a duplicate key...)."""

    text: str


def _raw_default(o: Any) -> Any:
    if isinstance(o, RawJson):
        return _RAW_JSON + o.text + _RAW_JSON
    raise TypeError(type(o).__name__)


def dumps_json(value: Any, *, sort_keys: bool = False) -> bytes:
    """JSON bytes of ``value`` (NaN allowed, :class:`RawJson` spliced in verbatim)."""
    try:
        text = json.dumps(value, indent=1, allow_nan=True, default=_raw_default, sort_keys=sort_keys)
    except TypeError:  # keys of mixed types cannot be sorted
        text = json.dumps(value, indent=1, allow_nan=True, default=_raw_default)
    while _RAW_JSON in text:
        start = text.index('"' + _RAW_JSON)
        end = text.index(_RAW_JSON + '"', start + 1)
        text = text[:start] + text[start + 1 + len(_RAW_JSON) : end] + text[end + len(_RAW_JSON) + 1 :]
    return text.encode("utf-8") + b"\n"


# --------------------------------------------------------------------------- msgpack trees


@dataclass
class Ext:
    """An msgpack extension whose payload was itself msgpack (decoded), or raw bytes."""

    code: int
    inner: Any
    decoded: bool


@dataclass(frozen=True)
class RawMsgpack:
    """Bytes spliced verbatim into an msgpack document (huge declared lengths, deep nesting...)."""

    data: bytes

    def __repr__(self) -> str:
        if len(self.data) <= 24:
            return f"RawMsgpack({self.data!r})"
        return f"RawMsgpack({self.data[:8]!r} + ... ({len(self.data)} bytes))"


def _ext_hook(code: int, data: bytes) -> Any:
    try:
        return Ext(code, msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook), True)
    except Exception:
        return Ext(code, data, False)


def msgpack_tree(data: bytes) -> Any:
    """Decode msgpack keeping every extension as an editable :class:`Ext`."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=_ext_hook)


def ext_bytes(code: int, payload: bytes) -> bytes:
    """An msgpack extension record with any code in -128..127 (reserved negative ones included)."""
    n = len(payload)
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    if n in fixed:
        head = bytes([fixed[n]])
    elif n < 2**8:
        head = b"\xc7" + struct.pack(">B", n)
    elif n < 2**16:
        head = b"\xc8" + struct.pack(">H", n)
    else:
        head = b"\xc9" + struct.pack(">I", n)
    return head + struct.pack(">b", code) + payload


def pack_tree(tree: Any) -> bytes:
    """The inverse of :func:`msgpack_tree`; :class:`RawMsgpack` values are spliced in verbatim."""
    raws: list[bytes] = []

    def default(o: Any) -> Any:
        if isinstance(o, Ext):
            payload = pack_tree(o.inner) if o.decoded else o.inner
            if 0 <= o.code <= 127:
                return msgpack.ExtType(o.code, payload)
            o = RawMsgpack(ext_bytes(o.code, payload))  # msgpack-python packs only codes 0..127
        if isinstance(o, RawMsgpack):
            raws.append(o.data)
            return f"@@RAW{len(raws) - 1:06d}@@".encode()
        if isinstance(o, RawJson):
            return o.text
        if isinstance(o, int):  # beyond 64 bits: its low 64 bits as a uint64
            raws.append(b"\xcf" + struct.pack(">Q", o % 2**64))
            return f"@@RAW{len(raws) - 1:06d}@@".encode()
        raise TypeError(type(o).__name__)

    out = msgpack.packb(tree, default=default, use_bin_type=True)
    for i, raw in enumerate(raws):
        marker = f"@@RAW{i:06d}@@".encode()
        out = out.replace(b"\xc4" + bytes([len(marker)]) + marker, raw, 1)
    return out


# --------------------------------------------------------------------------- tree navigation


def nodes(tree: Any) -> list[tuple[Any, ...]]:
    """Every path into a JSON/msgpack tree (dict keys, list indices, ``"<ext>"`` into an Ext), root first."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        out.append(path)
        if isinstance(node, dict):
            for k in reversed(list(node)):
                stack.append((node[k], (*path, ("key", k))))
        elif isinstance(node, list):
            for i in reversed(range(len(node))):
                stack.append((node[i], (*path, ("idx", i))))
        elif isinstance(node, Ext) and node.decoded:
            stack.append((node.inner, (*path, ("ext", None))))
    return out


def get_at(tree: Any, path: tuple[Any, ...]) -> Any:
    """The node at ``path``."""
    node = tree
    for kind, k in path:
        node = node.inner if kind == "ext" else node[k]
    return node


def set_at(tree: Any, path: tuple[Any, ...], value: Any, *, delete: bool = False) -> Any:
    """Replace (or delete) the node at ``path``; returns the new root."""
    if not path:
        return value
    parent = get_at(tree, path[:-1])
    kind, k = path[-1]
    if kind == "ext":
        parent.inner = value
    elif delete:
        del parent[k]
    else:
        parent[k] = value
    return tree


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _files(ckpt: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in walk(ckpt):
        for name in files:
            path = os.path.join(dirpath, name)
            if _is_regular(path):
                out.append(os.path.relpath(path, ckpt))
    return sorted(out)


def pick_file(ckpt: str, index: int, suffix: str | tuple[str, ...] = "") -> str:
    """The ``index``-th (modulo) regular file of ``ckpt`` whose name ends with ``suffix``."""
    files = [f for f in _files(ckpt) if f.endswith(suffix)]
    return files[index % len(files)]


def _folder(rel: str) -> str:
    return os.path.dirname(rel)


def _component_folders(ckpt: str) -> list[str]:
    out = []
    for dirpath, _dirs, files in walk(ckpt):
        rel = os.path.relpath(dirpath, ckpt)
        if rel != "." and MANIFEST in files:
            out.append(rel)
    return sorted(out)


# --------------------------------------------------------------------------- what a loader may do


@dataclass
class Applied:
    """What a mutation did, for the oracle.

    ``any_value``: component labels whose own values may legitimately differ
    from the template's (their state files were changed and re-sealed);
    ``left_as_is``: labels that a restore may leave untouched (their folder or a
    manifest above it was edited, so the component may no longer be listed);
    ``must_fail``: ops that must raise (verify: or report a problem), because
    they read a file whose bytes no longer match a sealed manifest or that is
    not a regular file; ``path``: the checkpoint to load (a step folder).
    """

    path: str
    changed: bool = True
    any_value: set[str] = field(default_factory=set)
    left_as_is: set[str] = field(default_factory=set)
    must_fail: set[str] = field(default_factory=set)
    step_name_check: bool = False


READS = {
    # The files an op must verify (by basename); a sealed mismatch in one must make it fail.
    "restore": ("state.msgpack", "tensors.safetensors", "metadata.json", "manifest.json"),
    "from_checkpoint": ("state.msgpack", "tensors.safetensors", "metadata.json", "ctor.json", "manifest.json"),
    "diff": ("state.msgpack", "tensors.safetensors", "manifest.json"),
    "verify": ("state.msgpack", "tensors.safetensors", "metadata.json", "ctor.json", "manifest.json"),
}


def _below(rel_folder: str, ckpt: str) -> set[str]:
    """The component labels at and below a folder."""
    return {c for c in _component_folders(ckpt) if not rel_folder or c == rel_folder or c.startswith(rel_folder + "/")}


def _file_outcome(ckpt: str, rel: str, *, resealed: bool, changed: bool) -> Applied:
    """The oracle's rules for one file whose bytes were changed."""
    out = Applied(ckpt, changed=changed)
    if not changed:
        return out
    folder, base = _folder(rel), os.path.basename(rel)
    if not resealed:
        out.must_fail = {op for op, reads in READS.items() if base in reads and base != MANIFEST}
    if base in DATA_FILES and resealed:
        out.any_value.add(folder)
    if base in (MANIFEST, "metadata.json"):
        out.left_as_is |= _below(folder, ckpt)
        if not folder:
            out.left_as_is |= set(_component_folders(ckpt))
    return out


# --------------------------------------------------------------------------- 1. bytes


@dataclass(frozen=True)
class ByteEdit:
    """Flip, insert, delete, truncate or replace bytes of one file (``file`` picks it modulo)."""

    file: int
    kind: str  # flip | insert | delete | truncate | replace | empty | append
    pos: int
    data: bytes = b"\xff"
    reseal: bool = True

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file)
        path = os.path.join(ckpt, rel)
        old = _read(path)
        p = self.pos % (len(old) + 1)
        if self.kind == "flip":
            p = self.pos % max(len(old), 1)
            new = old[:p] + bytes([old[p] ^ (self.data[0] or 1)]) + old[p + 1 :] if old else old
        elif self.kind == "insert":
            new = old[:p] + self.data + old[p:]
        elif self.kind == "delete":
            new = old[:p] + old[p + max(len(self.data), 1) :]
        elif self.kind == "truncate":
            new = old[:p]
        elif self.kind == "replace":
            new = old[:p] + self.data + old[p + len(self.data) :]
        elif self.kind == "append":
            new = old + self.data
        else:
            new = b""
        _write(path, new)
        if self.reseal:
            reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=self.reseal, changed=new != old)


# --------------------------------------------------------------------------- 2. lengths


@dataclass(frozen=True)
class SafetensorsEdit:
    """Edit a safetensors file's header: its length prefix, a tensor's offsets, shape or dtype, extra keys."""

    file: int
    field: str  # header_len | offsets | shape | dtype | extra | drop | metadata
    tensor: int
    value: Any
    fix_len: bool = True  # rewrite the length prefix to match a new header

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file, "tensors.safetensors")
        path = os.path.join(ckpt, rel)
        old = _read(path)
        (n,) = struct.unpack("<Q", old[:8])
        header = json.loads(old[8 : 8 + n])
        body = old[8 + n :]
        names = sorted(k for k in header if k != "__metadata__")
        name = names[self.tensor % len(names)] if names else "__none__"
        if self.field == "header_len":
            new = struct.pack("<Q", int(self.value) % 2**64) + old[8:]
        else:
            entry = header.setdefault(name, {})
            if self.field == "offsets":
                entry["data_offsets"] = self.value
            elif self.field == "shape":
                entry["shape"] = self.value
            elif self.field == "dtype":
                entry["dtype"] = self.value
            elif self.field == "drop":
                header.pop(name, None)
            elif self.field == "metadata":
                header["__metadata__"] = self.value
            else:
                header[str(self.value)[:40] or "x"] = entry
            text = dumps_json(header).rstrip(b"\n")
            text += b" " * (-len(text) % 8)
            prefix = struct.pack("<Q", len(text) if self.fix_len else n)
            new = prefix + text + body
        _write(path, new)
        reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=True, changed=new != old)


# --------------------------------------------------------------------------- 3. names

PATH_SAFE_MAX = 255


def _can_be_dirname(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\x00" not in name
        and len(name.encode("utf-8", "surrogatepass")) <= PATH_SAFE_MAX
    )


@dataclass(frozen=True)
class ComponentRename:
    """Rename a component in its parent's manifest and metadata (and its folder when the name can be one)."""

    component: int
    name: Any
    rename_dir: bool = True
    in_metadata: bool = True

    def apply(self, ckpt: str) -> Applied:
        comps = _component_folders(ckpt)
        if not comps:  # a leaf checkpoint: nothing to rename, a sound load is checked instead
            return Applied(ckpt, changed=False)
        rel = comps[self.component % len(comps)]
        parent, old = _folder(rel), os.path.basename(rel)
        pdir = os.path.join(ckpt, parent) if parent else ckpt
        if self.rename_dir and _can_be_dirname(self.name):
            with contextlib.suppress(OSError):
                os.rename(os.path.join(pdir, old), os.path.join(pdir, self.name))
        if self.in_metadata:
            meta_path = os.path.join(pdir, "metadata.json")
            meta = json.loads(_read(meta_path))
            meta["components"] = [self.name if c == old else c for c in meta.get("components", [])]
            _write(meta_path, dumps_json(meta))

        def edit(folder: str, body: Any) -> Any:
            if folder == parent and isinstance(body, dict):
                body["components"] = [self.name if c == old else c for c in body.get("components", [])]
                files = body.get("files", {})
                key = f"{old}/{MANIFEST}"
                if key in files:
                    files[f"{self.name}/{MANIFEST}"] = files.pop(key)
            return body

        reseal(ckpt, edit)
        out = Applied(ckpt)
        out.left_as_is |= _below(parent, ckpt) | {rel}
        if not parent:
            out.left_as_is |= set(comps) | {rel}
        out.left_as_is |= {c for c in comps if c == rel or c.startswith(rel + "/")}
        return out


@dataclass(frozen=True)
class StepRename:
    """Give the manager's step folder another name (unicode digits, 10 digits, a trailing newline...)."""

    name: str

    def apply(self, ckpt: str) -> Applied:
        new = os.path.join(os.path.dirname(ckpt), self.name)
        os.rename(ckpt, new)
        return Applied(new, changed=False, step_name_check=True)


@dataclass(frozen=True)
class ManifestFileName:
    """Add or rename a ``files`` entry of a manifest (``..``, absolute, a trailing newline...)."""

    component: int
    name: str
    rename: bool = False

    def apply(self, ckpt: str) -> Applied:
        comps = ["", *_component_folders(ckpt)]
        rel = comps[self.component % len(comps)]

        def edit(folder: str, body: Any) -> Any:
            if folder == rel and isinstance(body, dict) and isinstance(body.get("files"), dict):
                files = body["files"]
                victim = sorted(k for k in files if "/" not in k)
                entry = {"size": 3, "sha256": "0" * 64, "crc32": "00000000"}
                if self.rename and victim:
                    entry = files.pop(victim[len(self.name) % len(victim)])
                files[self.name] = entry
            return body

        reseal(ckpt, edit)
        out = Applied(ckpt)
        out.left_as_is |= _below(rel, ckpt)
        out.any_value |= _below(rel, ckpt)
        return out


# --------------------------------------------------------------------------- 4. file types

FILE_KINDS = (
    "fifo",
    "symlink_same",
    "symlink_outside",
    "symlink_devzero",
    "symlink_dangling",
    "symlink_fifo",
    "directory",
    "socket",
    "hardlink_outside",
)


@dataclass(frozen=True)
class FileTypeEdit:
    """Put a FIFO, symlink, directory or socket in place of a file or a component folder."""

    target: int
    kind: str
    folder: bool = False  # replace a component folder instead of a file

    def apply(self, ckpt: str) -> Applied:
        comps = _component_folders(ckpt) if self.folder else []
        rel = comps[self.target % len(comps)] if comps else pick_file(ckpt, self.target)
        path = os.path.join(ckpt, rel)
        outside = os.path.join(os.path.dirname(os.path.dirname(ckpt)), "outside")
        os.makedirs(outside, exist_ok=True)
        copy = os.path.join(outside, rel.replace("/", "_"))
        os.rename(path, copy)
        if self.kind == "fifo":
            os.mkfifo(path)
        elif self.kind == "symlink_same":
            inside = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".orig")
            os.rename(copy, inside)
            os.symlink(os.path.basename(inside), path)
        elif self.kind == "symlink_outside":
            os.symlink(copy, path)
        elif self.kind == "symlink_devzero":
            os.symlink("/dev/zero", path)
        elif self.kind == "symlink_dangling":
            os.symlink(os.path.join(outside, "nothing-here"), path)
        elif self.kind == "symlink_fifo":
            fifo = copy + ".fifo"
            if not os.path.exists(fifo):
                os.mkfifo(fifo)
            os.symlink(fifo, path)
        elif self.kind == "directory":
            os.mkdir(path)
        elif self.kind == "socket":
            s = socket.socket(socket.AF_UNIX)
            try:
                s.bind(path)
            except OSError:  # a path too long for a socket address: a FIFO instead
                os.mkfifo(path)
            finally:
                s.close()
        elif self.kind == "hardlink_outside":
            if comps:
                os.symlink(copy, path)
            else:
                os.link(copy, path)
        out = Applied(ckpt)
        base = os.path.basename(rel)
        if self.kind == "hardlink_outside" and not comps:
            # A hard link is a regular file with the right bytes: loading it is correct.
            return Applied(ckpt, changed=False)
        if comps:
            out.must_fail = {"restore", "from_checkpoint", "verify", "diff"}
            out.left_as_is |= {rel}
        else:
            out.must_fail = {op for op, reads in READS.items() if base in reads}
            out.left_as_is |= _below(_folder(rel), ckpt)
        return out


# --------------------------------------------------------------------------- 5. nesting


def nested_json(depth: int) -> RawJson:
    """``[[[...]]]`` ``depth`` levels deep."""
    return RawJson("[" * depth + "]" * depth)


def nested_msgpack(depth: int) -> RawMsgpack:
    """Fixarrays of one element, ``depth`` levels deep."""
    return RawMsgpack(b"\x91" * depth + b"\xc0")


def nested_ext(depth: int, code: int = 2) -> RawMsgpack:
    """Extension records (tuples by default) each holding the next, ``depth`` levels deep."""
    inner = msgpack.packb(None)
    for _ in range(depth):
        payload = b"\x91" + inner
        inner = msgpack.packb(msgpack.ExtType(code, payload))
    return RawMsgpack(inner)


@dataclass(frozen=True)
class DeepComponents:
    """A chain of ``depth`` nested components (copies of a leaf folder) under one folder."""

    depth: int
    under: int = 0

    def apply(self, ckpt: str) -> Applied:
        comps = ["", *_component_folders(ckpt)]
        parent = comps[self.under % len(comps)]
        leaf = next(c for c in [*_component_folders(ckpt), ""] if not _component_folders(os.path.join(ckpt, c)))
        src = os.path.join(ckpt, leaf) if leaf else ckpt
        names = [n for n in os.listdir(src) if _is_regular(os.path.join(src, n))]
        blobs = {n: _read(os.path.join(src, n)) for n in names}
        folder = os.path.join(ckpt, parent) if parent else ckpt
        chain = [folder]
        for _ in range(self.depth):
            folder = os.path.join(folder, "d")
            os.mkdir(folder)
            for n, b in blobs.items():
                _write(os.path.join(folder, n), b)
            chain.append(folder)
        for i, f in enumerate(chain[:-1]):
            meta_path = os.path.join(f, "metadata.json")
            meta = json.loads(_read(meta_path))
            meta["components"] = [*meta.get("components", []), "d"] if i == 0 else ["d"]
            _write(meta_path, dumps_json(meta))
            mpath = os.path.join(f, MANIFEST)
            body = json.loads(_read(mpath))
            body["components"] = [*body.get("components", []), "d"] if i == 0 else ["d"]
            body["files"][f"d/{MANIFEST}"] = {"size": 0, "sha256": "0" * 64, "crc32": "00000000"}
            _write(mpath, dumps_json(body))
        reseal(ckpt)
        out = Applied(ckpt)
        out.left_as_is |= _below(parent, ckpt)
        return out


# --------------------------------------------------------------------------- 6. JSON structure


@dataclass(frozen=True)
class JsonEdit:
    """Replace, delete or add a node of a JSON file (ctor, metadata or manifest) and re-seal."""

    file: int
    node: int
    op: str  # replace | delete | add_key
    value: Any = None
    key: str = "extra"
    suffix: str = ".json"

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file, self.suffix)
        path = os.path.join(ckpt, rel)
        old = _read(path)
        tree = json.loads(old)
        if os.path.basename(rel) == MANIFEST:
            tree.pop("checksum", None)
        paths = nodes(tree)
        target = paths[self.node % len(paths)]
        tree = self._edit(tree, target)
        if os.path.basename(rel) == MANIFEST:
            folder = _folder(rel)

            def edit(f: str, body: Any) -> Any:
                return tree if f == folder else body

            reseal(ckpt, edit)
        else:
            _write(path, dumps_json(tree))
            reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=True, changed=_read(path) != old)

    def _edit(self, tree: Any, target: tuple[Any, ...]) -> Any:
        if self.op == "delete" and target:
            return set_at(tree, target, None, delete=True)
        if self.op == "add_key":
            node = get_at(tree, target)
            if isinstance(node, dict):
                node[self.key] = self.value
                return tree
            if isinstance(node, list):
                node.append(self.value)
                return tree
        return set_at(tree, target, self.value)


@dataclass(frozen=True)
class RawJsonFile:
    """Replace a JSON file with the given text, re-sealed (deep nesting, duplicate keys, NaN...)."""

    file: int
    text: str

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file, ".json")
        path = os.path.join(ckpt, rel)
        old = _read(path)
        _write(path, self.text.encode("utf-8", "surrogatepass"))
        reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=True, changed=_read(path) != old)


# --------------------------------------------------------------------------- 7. msgpack structure


@dataclass(frozen=True)
class MsgpackEdit:
    """Replace or delete a node of a state.msgpack, change an extension's code, or splice raw bytes."""

    file: int
    node: int
    op: str  # replace | delete | ext_code | add_key
    value: Any = None

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file, "state.msgpack")
        path = os.path.join(ckpt, rel)
        old = _read(path)
        tree = msgpack_tree(old)
        paths = nodes(tree)
        target = paths[self.node % len(paths)]
        if self.op == "ext_code":
            exts = [p for p in paths if isinstance(get_at(tree, p), Ext)]
            if exts:
                where = exts[self.node % len(exts)]
                ext = get_at(tree, where)
                code = (self.value if isinstance(self.value, int) else len(repr(self.value))) % 256 - 128
                tree = set_at(tree, where, Ext(code, ext.inner, ext.decoded))
        elif self.op == "delete" and target:
            tree = set_at(tree, target, None, delete=True)
        elif self.op == "add_key" and isinstance(get_at(tree, target), dict):
            hashable = isinstance(self.value, str | int | float | bytes | bool | type(None))
            get_at(tree, target)[self.value if hashable else "k"] = self.value
        else:
            tree = set_at(tree, target, self.value)
        new = pack_tree(tree)
        _write(path, new)
        reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=True, changed=new != old)


@dataclass(frozen=True)
class MsgpackBloat:
    """Many small records that each decode to a large object: a state.msgpack that amplifies memory."""

    file: int
    count: int
    record: str = "array"  # array (an extension the file already holds) | tuple | list | str

    def apply(self, ckpt: str) -> Applied:
        rel = pick_file(ckpt, self.file, "state.msgpack")
        path = os.path.join(ckpt, rel)
        tree = msgpack_tree(_read(path))
        exts = [get_at(tree, p) for p in nodes(tree) if isinstance(get_at(tree, p), Ext)]
        arrays = [e for e in exts if e.code == 1]
        if self.record == "array" and arrays:
            one: Any = min(arrays, key=lambda e: len(pack_tree(e)))
        elif self.record == "tuple" or (self.record == "array" and not arrays):
            one = Ext(2, [], True)
        elif self.record == "list":
            one = []
        else:
            one = ""
        if not isinstance(tree, dict):
            tree = {}
        tree["bloat"] = [one] * self.count
        _write(path, pack_tree(tree))
        reseal(ckpt)
        return _file_outcome(ckpt, rel, resealed=True, changed=True)


@dataclass(frozen=True)
class JsonSet:
    """Set the value at an explicit key path of one JSON file (``rel``, relative to the checkpoint) and re-seal."""

    rel: str
    path: tuple[Any, ...]
    value: Any

    def apply(self, ckpt: str) -> Applied:
        path = os.path.join(ckpt, self.rel)
        old = _read(path)
        tree = json.loads(old)
        node = tree
        for k in self.path[:-1]:
            node = node[k]
        node[self.path[-1]] = self.value
        _write(path, dumps_json(tree))
        reseal(ckpt)
        out = _file_outcome(ckpt, self.rel, resealed=True, changed=_read(path) != old)
        if os.path.basename(self.rel) == "ctor.json":
            # Other constructor arguments (an RL config) may rightly build components whose state differs.
            out.left_as_is |= _below(_folder(self.rel), ckpt) | {_folder(self.rel)}
        return out
