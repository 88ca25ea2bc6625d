"""Broken and hostile checkpoints: every one is refused with the documented error, naming the file.

Two families:

* Corruption (the integrity layer): every file of a small checkpoint truncated
  at several lengths, with a byte flipped at several positions, or missing, on
  every backend. Each must raise ``CorruptCheckpointError`` (or
  ``CheckpointNotFoundError`` for a missing root manifest, the commit marker)
  naming the file, leave the target object untouched, and be reported by
  ``verify_checkpoint``.
* Hostile input (the loaders behind the integrity layer): tampered files whose
  manifests are re-sealed with correct checksums (``storage_reseal``), so that
  only the format's own limits and checks stand between the input and harm:
  pickle payloads, path traversal, symlinks, oversized headers, deeply nested
  and huge msgpack, future format versions, tampered metadata and manifests.

The counts of what was tried and refused are printed at the end of the session.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import storage_tally
from storage_backends import Backend, make_backend
from storage_components import Agent, ArrayLeaf, BadName
from storage_reseal import read_body, reseal, reseal_after, seal_body

import cairn
from cairn.testing import assert_states_equal

pytest.importorskip("torch")

N = 4
REFUSALS = (
    cairn.CorruptCheckpointError,
    cairn.UnsafeCheckpointError,
    cairn.IncompatibleCheckpointError,
    cairn.CheckpointNotFoundError,
)


def _checkpoint_files() -> list[str]:
    """Every file of the small test checkpoint, relative to its root (computed once, locally)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Agent(N, with_torch=True).save_to_path(os.path.join(tmp, "ckpt"))
        return sorted(str(p.relative_to(path)) for p in Path(path).rglob("*") if p.is_file())


FILES = _checkpoint_files()
STATE_OR_TENSORS = ("stats/state.msgpack", "stats/tensors.safetensors")  # an array record names either


def _save(backend: Backend, step: int = 3) -> str:
    agent = Agent(N, with_torch=True)
    agent.set_step(step)
    return agent.save_to_path(backend.uri("ckpt"))


def _refused(
    backend: Backend,
    name: str | tuple[str, ...],
    expected: type[BaseException] | tuple[type[BaseException], ...],
    *,
    kind: str,
    ops: tuple[str, ...] = ("restore",),
    component: str | None = None,
) -> None:
    """Every op in ``ops`` raises ``expected`` naming ``name`` (a path below the checkpoint, or one of several)."""
    storage_tally.TALLY[f"{kind}/tried"] += 1
    uri = backend.uri("ckpt")
    names = (name,) if isinstance(name, str) else name
    alternatives = [backend.uri("ckpt", n) if n else uri for n in names]
    for op in ops:
        target = Agent(N, with_torch=True)
        before = target.get_state()
        with pytest.raises(expected) as info:
            if op == "restore":
                target.restore_from_path(uri)
            elif op == "component":
                assert component is not None
                target.restore_from_path(f"{uri}/{component}", component=component)
            elif op == "from_checkpoint":
                Agent.from_checkpoint(uri)
            elif op == "verify":
                problems = cairn.verify_checkpoint(uri)
                assert problems, "verify_checkpoint found nothing wrong"
                matching = [p for p in problems if any(a in p for a in alternatives)]
                assert matching, (alternatives, problems)
                raise cairn.CorruptCheckpointError(matching[0])
            else:  # pragma: no cover
                raise AssertionError(op)
        err = info.value
        assert isinstance(err, REFUSALS), type(err)
        assert any(a in str(err) for a in alternatives), (alternatives, str(err))
        # Nothing was applied: a refused restore leaves the object as it was.
        assert_states_equal(before, target.get_state())
    storage_tally.TALLY[f"{kind}/refused"] += 1


# ---------------------------------------------------------------------------- corruption


@pytest.fixture(params=("local", "memory"))
def local_or_memory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The fast backends, for the full corruption matrix."""
    yield from make_backend(request.param, tmp_path, request)


def _component_of(rel: str) -> str | None:
    parts = rel.split("/")[:-1]
    return "/".join(parts) if parts else None


MUTATIONS = (
    "truncate-empty",
    "truncate-one",
    "truncate-half",
    "truncate-all-but-one",
    "flip-first",
    "flip-middle",
    "flip-last",
    "missing",
)


def _mutate(data: bytes, mutation: str) -> bytes | None:
    """The damaged bytes (None: delete the file; the original bytes: not applicable)."""
    kind, _, where = mutation.partition("-")
    if kind == "missing":
        return None
    if kind == "truncate":
        return data[: {"empty": 0, "one": 1, "half": len(data) // 2, "all-but-one": len(data) - 1}[where]]
    out = bytearray(data)
    out[{"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[where]] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize("rel", FILES)
def test_corrupted_file(local_or_memory: Backend, rel: str) -> None:
    """Every file truncated (4 lengths), with a flipped byte (3 positions), or missing.

    Each damage raises CorruptCheckpointError naming the file from restore,
    partial restore of the file's component, from_checkpoint and verify (a
    missing root manifest: CheckpointNotFoundError), and leaves the target
    object as it was.
    """
    backend = local_or_memory
    _save(backend)
    path = backend.path("ckpt", rel)
    original = backend.fs.cat_file(path)
    comp = _component_of(rel)
    for mutation in MUTATIONS:
        damaged = _mutate(original, mutation)
        if damaged == original:
            continue  # e.g. a 1-byte file cut to 1 byte
        if damaged is None:
            backend.fs.rm_file(path)
        else:
            backend.fs.pipe_file(path, damaged)
        ops: tuple[str, ...] = ("restore", "from_checkpoint", "verify")
        if rel == f"{comp}/manifest.json" and mutation == "missing":
            # Opened on its own, a folder without its manifest is no checkpoint at all.
            with pytest.raises(cairn.CheckpointNotFoundError):
                Agent(N, with_torch=True).restore_from_path(backend.uri("ckpt", str(comp)), component=comp)
        elif comp is not None:
            ops = (*ops, "component")
        if rel == "manifest.json" and mutation == "missing":
            # The root manifest is the commit marker: without it there is no checkpoint.
            _refused(backend, "", cairn.CheckpointNotFoundError, kind="corruption", ops=("restore", "from_checkpoint"))
            with pytest.raises(cairn.CheckpointNotFoundError):
                cairn.verify_checkpoint(backend.uri("ckpt"))
        else:
            _refused(backend, rel, cairn.CorruptCheckpointError, kind="corruption", ops=ops, component=comp)
        backend.fs.pipe_file(path, original)
    assert cairn.verify_checkpoint(backend.uri("ckpt")) == []


def test_root_manifest_bytes_are_sealed(tmp_path: Path) -> None:
    """Any change to the root manifest's bytes is detected (here: its last byte cut)."""
    path = Agent(N).save_to_path(tmp_path / "ckpt")
    manifest = Path(path) / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:-1])
    with pytest.raises(cairn.CorruptCheckpointError):
        Agent(N).restore_from_path(path)


@pytest.mark.parametrize("comp", ["policy", "group", "group/b"])
def test_missing_component_folder(local_or_memory: Backend, comp: str) -> None:
    """A whole component folder missing: its manifest is named as missing."""
    backend = local_or_memory
    _save(backend)
    backend.fs.rm(backend.path("ckpt", comp), recursive=True)
    _refused(
        backend, f"{comp}/manifest.json", cairn.CorruptCheckpointError, kind="corruption", ops=("restore", "verify")
    )


def test_every_file_flipped_s3(moto_s3: Any, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """On S3: a flipped byte in every file, one at a time, and missing files (one loop, for speed)."""
    backend = next(make_backend("s3", tmp_path, request))
    _save(backend)
    for rel in FILES:
        path = backend.path("ckpt", rel)
        original = backend.fs.cat_file(path)
        data = bytearray(original)
        data[len(data) // 2] ^= 0xFF
        backend.fs.pipe_file(path, bytes(data))
        # restore verifies what it reads; verify_checkpoint on S3 is covered by the contract tests.
        _refused(backend, rel, cairn.CorruptCheckpointError, kind="corruption", ops=("restore",))
        if rel.endswith(("state.msgpack", "manifest.json")) and rel != "manifest.json":
            backend.fs.rm_file(path)
            _refused(backend, rel, cairn.CorruptCheckpointError, kind="corruption", ops=("restore",))
        backend.fs.pipe_file(path, original)
    assert cairn.verify_checkpoint(backend.uri("ckpt")) == []


def test_cli_verify_names_every_broken_file(local_or_memory: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """Several broken files at once: ``cairn verify`` exits 1 and names each one."""
    from cairn.cli import main

    backend = local_or_memory
    _save(backend)
    broken = [r for r in FILES if not r.endswith("manifest.json")][::3]
    for rel in broken:
        path = backend.path("ckpt", rel)
        data = bytearray(backend.fs.cat_file(path))
        data[-1] ^= 0x01
        backend.fs.pipe_file(path, bytes(data))
    assert main(["verify", backend.uri("ckpt")]) == 1
    out = capsys.readouterr().out
    for rel in broken:
        assert backend.uri("ckpt", rel) in out, rel
    assert out.count("BROKEN") == len(broken)


# ---------------------------------------------------------------------------- hostile: helpers


@pytest.fixture
def hostile(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    """A local folder with a fresh, sound checkpoint at ``ckpt``.

    The loaders behind the integrity layer do not depend on the backend; the
    pickle tests also run on ``memory://`` (``hostile_any``).
    """
    backend = next(make_backend("local", tmp_path, request))
    _save(backend)
    return backend


@pytest.fixture
def hostile_any(local_or_memory: Backend) -> Backend:
    """A sound checkpoint at ``ckpt`` on the local disk and on ``memory://``."""
    _save(local_or_memory)
    return local_or_memory


def _tamper(backend: Backend, rel: str, data: bytes, *, edit: Any = None) -> None:
    """Replace ``ckpt/rel`` with ``data`` and re-seal every manifest (checksums all pass)."""
    reseal_after(backend.fs, backend.path("ckpt"), rel, data, edit=edit)
    if not rel.endswith("manifest.json") and edit is None:
        assert cairn.verify_checkpoint(backend.uri("ckpt")) == [], "the re-sealed checkpoint should verify"


def _edit_json(backend: Backend, rel: str, change: Callable[[Any], Any]) -> bytes:
    obj = json.loads(backend.fs.cat_file(backend.path("ckpt", rel)))
    new = change(obj)
    return json.dumps(obj if new is None else new).encode()


# ---------------------------------------------------------------------------- hostile: pickle


class _Payload:
    """Unpickling this runs ``exec`` of code that writes a marker file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('the payload ran')",))


def _pickle_bytes(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker))


@pytest.mark.loose_files
@pytest.mark.parametrize("declared", [False, True], ids=["undeclared", "declared-in-metadata"])
@pytest.mark.parametrize("where", ["root", "policy", "nested-in-tuple"])
def test_pickle_in_state_never_runs(hostile_any: Backend, tmp_path: Path, where: str, declared: bool) -> None:
    """A pickle payload in state.msgpack: UnsafeCheckpointError, and it never runs without allow_pickle."""
    hostile = hostile_any
    marker = tmp_path / "PWNED"
    payload = msgpack.ExtType(5, _pickle_bytes(marker))
    folder = "policy/" if where == "policy" else ""
    if where == "nested-in-tuple":
        value: Any = msgpack.ExtType(2, msgpack.packb([1, {"deep": payload}]))
    else:
        value = payload
    state = {"step": value, "extra": {}} if folder == "" else {"step": value}
    rel = f"{folder}state.msgpack"
    _tamper(hostile, rel, msgpack.packb(state))
    named = rel
    if declared:
        meta = _edit_json(hostile, f"{folder}metadata.json", lambda m: m.update(uses_pickle=True))
        _tamper(hostile, f"{folder}metadata.json", meta)
        named = f"{folder}".rstrip("/")  # the refusal names the folder saved with pickle
    ops: tuple[str, ...] = ("restore", "from_checkpoint")
    if folder:
        ops = (*ops, "component")
    _refused(hostile, named, cairn.UnsafeCheckpointError, kind="hostile", ops=ops, component=folder.rstrip("/") or None)
    from cairn.tools import diff_checkpoints, inspect_checkpoint

    inspect_checkpoint(hostile.uri("ckpt"))
    with pytest.raises(cairn.UnsafeCheckpointError):
        diff_checkpoints(hostile.uri("ckpt"), hostile.uri("ckpt"))
    assert cairn.verify_checkpoint(hostile.uri("ckpt")) == []  # sound bytes; only loading is refused
    assert not marker.exists(), "the pickle payload ran without allow_pickle=True"
    # The payload is live: the caller who opts in runs it (this is what the refusal prevents).
    with pytest.raises(Exception):  # noqa: B017 - the exec'd payload returns None, which set_state rejects or not
        Agent(N, with_torch=True).restore_from_path(hostile.uri("ckpt"), allow_pickle=True)
        raise RuntimeError("restored")
    assert marker.exists()


@pytest.mark.loose_files
def test_pickle_in_ctor_never_runs(hostile_any: Backend, tmp_path: Path) -> None:
    """A pickle tag in ctor.json: from_checkpoint raises UnsafeCheckpointError; the payload never runs."""
    hostile = hostile_any
    marker = tmp_path / "PWNED"
    tag = {"__cairn__": "pickle", "b64": base64.b64encode(_pickle_bytes(marker)).decode()}
    ctor = _edit_json(hostile, "ctor.json", lambda c: c["kwargs"].update(n=tag))
    _tamper(hostile, "ctor.json", ctor)
    _refused(hostile, "ctor.json", cairn.UnsafeCheckpointError, kind="hostile", ops=("from_checkpoint",))
    from cairn.tools import inspect_checkpoint

    inspect_checkpoint(hostile.uri("ckpt"))
    assert not marker.exists()
    # Also declared in the metadata: refused before the ctor is even read.
    meta = _edit_json(hostile, "metadata.json", lambda m: m.update(uses_pickle=True))
    _tamper(hostile, "metadata.json", meta)
    _refused(hostile, "", cairn.UnsafeCheckpointError, kind="hostile", ops=("from_checkpoint", "restore"))
    assert not marker.exists()


@pytest.mark.loose_files
def test_object_dtype_array_refused(hostile: Backend) -> None:
    """A numpy object dtype (which would unpickle) in an array reference or scalar: refused."""
    ref = msgpack.ExtType(1, msgpack.packb(["values", 0, "|O", [4]]))
    _tamper(hostile, "stats/state.msgpack", msgpack.packb({"values": ref}))
    _refused(hostile, STATE_OR_TENSORS, cairn.CorruptCheckpointError, kind="hostile")
    scalar = msgpack.ExtType(6, msgpack.packb(["|O", b"\x00" * 8]))
    _tamper(hostile, "stats/state.msgpack", msgpack.packb({"count": scalar}))
    _refused(hostile, "stats/state.msgpack", cairn.CorruptCheckpointError, kind="hostile")


# ---------------------------------------------------------------------------- hostile: paths


@pytest.mark.parametrize("name", ["..", ".", "a/b", "/abs", "", "a\\b", "manifest.json", "x" * 300, "ok name"])
def test_hostile_component_name_refused_on_save(tmp_path: Path, name: str) -> None:
    """A component name that is not one safe path segment fails the save; nothing is written."""
    with pytest.raises(cairn.CheckpointError) as info:
        BadName(name).save_to_path(tmp_path / "deep" / "ckpt")
    assert repr(name)[:40] in str(info.value) or name[:40] in str(info.value)
    assert not (tmp_path / "deep" / "ckpt").exists()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
    storage_tally.tried("hostile", refused=True)


TRAVERSALS: list[tuple[str, Callable[[dict[str, Any]], None]]] = [
    ("component-dotdot", lambda b: b.update(components=[*b["components"], ".."])),
    ("component-abs", lambda b: b.update(components=[*b["components"], "/etc"])),
    ("component-nested", lambda b: b.update(components=[*b["components"], "a/../../x"])),
    ("entry-dotdot", lambda b: b["files"].update({"../outside.json": {"size": 1, "crc32": "00000000"}})),
    ("entry-abs", lambda b: b["files"].update({"/etc/passwd": {"size": 1, "crc32": "00000000"}})),
    ("entry-through-component", lambda b: b["files"].update({"policy/../../x": {"size": 1, "crc32": "00000000"}})),
    ("entry-other-file-of-component", lambda b: b["files"].update({"policy/state.msgpack": {"size": 1, "crc32": "0"}})),
    ("entry-backslash", lambda b: b["files"].update({"..\\x": {"size": 1, "crc32": "00000000"}})),
    ("entry-unknown-file", lambda b: b["files"].update({"evil.py": {"size": 1, "crc32": "00000000"}})),
    ("entry-manifest-itself", lambda b: b["files"].update({"manifest.json": {"size": 1, "crc32": "00000000"}})),
]


@pytest.mark.parametrize("case", [c for c, _ in TRAVERSALS])
@pytest.mark.parametrize("level", ["root", "group"])
def test_manifest_path_traversal(hostile: Backend, case: str, level: str) -> None:
    """Re-sealed manifests naming paths outside their folder: CorruptCheckpointError naming the manifest."""
    change = dict(TRAVERSALS)[case]
    rel = "manifest.json" if level == "root" else "group/manifest.json"

    def edit(folder: str, body: dict[str, Any]) -> None:
        if folder == ("" if level == "root" else "group"):
            change(body)

    reseal(hostile.fs, hostile.path("ckpt"), edit=edit)
    ops: tuple[str, ...] = ("restore", "from_checkpoint")
    if level == "group":
        ops = (*ops, "verify")
    _refused(hostile, rel, cairn.CorruptCheckpointError, kind="hostile", ops=ops)


@pytest.fixture
def local_hostile(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    """A local backend with a sound checkpoint (symlinks exist only on local disks)."""
    backend = next(make_backend("local", tmp_path, request))
    _save(backend)
    return backend


@pytest.mark.parametrize("rel", [r for r in FILES if "/" in r] + ["manifest.json", "packed.bin"])
def test_symlinked_file_refused(local_hostile: Backend, tmp_path: Path, rel: str) -> None:
    """A file replaced by a link to an identical copy outside the checkpoint: refused, never followed."""
    path = Path(local_hostile.path("ckpt", rel))
    outside = tmp_path / "outside" / rel.replace("/", "_")
    outside.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, outside)
    path.unlink()
    path.symlink_to(outside)
    ops: tuple[str, ...] = ("restore",) if rel == "manifest.json" else ("restore", "verify")
    _refused(local_hostile, rel, cairn.CorruptCheckpointError, kind="hostile", ops=ops)


@pytest.mark.parametrize("comp", ["policy", "group", "group/a"])
def test_symlinked_component_folder_refused(local_hostile: Backend, tmp_path: Path, comp: str) -> None:
    """A component folder replaced by a link to a complete copy outside: refused."""
    path = Path(local_hostile.path("ckpt", comp))
    outside = tmp_path / "outside-folder" / comp
    shutil.copytree(path, outside)
    shutil.rmtree(path)
    path.symlink_to(outside, target_is_directory=True)
    _refused(local_hostile, comp, cairn.CorruptCheckpointError, kind="hostile", ops=("restore", "verify"))


def test_save_through_symlinked_target_refused(tmp_path: Path) -> None:
    """Saving where a link stands (it could point anywhere) is refused; the link's target is untouched."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    (tmp_path / "ckpt").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(cairn.CheckpointError):
        Agent(N).save_to_path(tmp_path / "ckpt")
    assert sorted(os.listdir(elsewhere)) == ["precious.txt"]
    storage_tally.tried("hostile", refused=True)


# ---------------------------------------------------------------------------- hostile: safetensors


def _st(header: Any, data: bytes = b"", *, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


SAFETENSORS_CASES: dict[str, bytes] = {
    "header-length-2**62": _st({}, length=2**62),
    "header-length-over-limit": _st({}, length=100 * 1024 * 1024 + 1),
    "header-length-past-eof": _st({}, length=1000),
    "header-not-json": _st(b"{not json"),
    "header-not-utf8": _st(b'{"\xff": 1}'),
    "header-deeply-nested": _st(b"[" * 100_000 + b"]" * 100_000),
    "header-a-list": _st([1, 2]),
    "huge-shape": _st({"values": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 16]}}, b"\0" * 16),
    "offsets-past-eof": _st({"values": {"dtype": "F32", "shape": [4], "data_offsets": [0, 2**60]}}, b"\0" * 16),
    "negative-offsets": _st({"values": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}}, b"\0" * 16),
    "unknown-dtype": _st({"values": {"dtype": "O", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16),
    "overlapping": _st(
        {
            "values": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
            "counts": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]},
        },
        b"\0" * 16,
    ),
    "trailing-bytes": _st({"values": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 20),
    "metadata-not-strings": _st({"__metadata__": {"a": 1}}),
}


@pytest.mark.loose_files
@pytest.mark.parametrize("case", sorted(SAFETENSORS_CASES))
def test_hostile_safetensors(hostile: Backend, case: str) -> None:
    """Oversized, malformed or inconsistent safetensors headers (re-sealed): CorruptCheckpointError."""
    _tamper_nocheck(hostile, "stats/tensors.safetensors", SAFETENSORS_CASES[case])
    _refused(
        hostile, "stats/tensors.safetensors", cairn.CorruptCheckpointError, kind="hostile", ops=("restore", "verify")
    )


def _tamper_nocheck(backend: Backend, rel: str, data: bytes) -> None:
    reseal_after(backend.fs, backend.path("ckpt"), rel, data)


@pytest.mark.parametrize(
    ("case", "header_change"),
    [
        ("dtype-differs-same-size", {"dtype": "I32"}),
        ("shape-differs-same-size", {"shape": [2, 4]}),
    ],
)
@pytest.mark.loose_files
def test_tensor_disagrees_with_state(hostile: Backend, case: str, header_change: dict[str, Any]) -> None:
    """A tensor whose dtype or shape differs from the state's record (same bytes): refused, never reinterpreted."""
    path = hostile.path("ckpt", "policy", "tensors.safetensors")
    data = hostile.fs.cat_file(path)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header["weight"].update(header_change)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - (8 + len(raw)) % 8) % 8)
    _tamper_nocheck(hostile, "policy/tensors.safetensors", struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    _refused(hostile, "policy/tensors.safetensors", cairn.CorruptCheckpointError, kind="hostile")


# ---------------------------------------------------------------------------- hostile: msgpack


def _ext_tuple_chain(depth: int) -> Any:
    value: Any = None
    for _ in range(depth):
        value = msgpack.ExtType(2, msgpack.packb([value]))
    return value


MSGPACK_CASES: dict[str, bytes] = {
    "nested-arrays-100k": b"\x91" * 100_000 + b"\xc0",
    "nested-maps-100k": b"\x81\xa1k" * 100_000 + b"\xc0",
    "array32-claims-4G-items": b"\x81\xa6values\xdd\xff\xff\xff\xff",
    "map32-claims-4G-pairs": b"\xdf\xff\xff\xff\xff",
    "str32-claims-4GB": b"\x81\xa6values\xdb\xff\xff\xff\xff",
    "bin32-claims-4GB": b"\x81\xa6values\xc6\xff\xff\xff\xff",
    "ext32-claims-4GB": b"\x81\xa6values\xc9\xff\xff\xff\xff\x02",
    "huge-list-root": msgpack.packb([None] * 2_000_000),
    "not-a-dict": msgpack.packb("hello"),
    "trailing-garbage": msgpack.packb({"count": 1}) + b"\xc1\xc1",
    "reserved-byte": b"\x81\xa5count\xc1",
    "invalid-utf8-str": b"\x81\xa5count\xa2\xff\xfe",
    "unhashable-key": b"\x81\x91\x01\x01",
    "unknown-ext-code": msgpack.packb({"count": msgpack.ExtType(99, b"x")}),
    "array-ref-malformed": msgpack.packb({"values": msgpack.ExtType(1, msgpack.packb(["values", 7]))}),
    "array-ref-missing-tensor": msgpack.packb({"values": msgpack.ExtType(1, msgpack.packb(["nope", 0, "<f4", [4]]))}),
    "array-ref-wrong-shape": msgpack.packb({"values": msgpack.ExtType(1, msgpack.packb(["values", 0, "<f4", [3]]))}),
    "array-ref-negative-shape": msgpack.packb(
        {"values": msgpack.ExtType(1, msgpack.packb(["values", 0, "<f4", [-4, -1]]))}
    ),
    "array-ref-bad-dtype": msgpack.packb({"values": msgpack.ExtType(1, msgpack.packb(["values", 0, "<zz", [4]]))}),
    "bigint-malformed": msgpack.packb({"count": msgpack.ExtType(3, b"12x")}),
    "bigint-huge": msgpack.packb({"count": msgpack.ExtType(3, b"9" * 100_000)}),
    "npscalar-wrong-size": msgpack.packb({"count": msgpack.ExtType(6, msgpack.packb(["<f8", b"\0" * 3]))}),
    "custom-unregistered": msgpack.packb({"count": msgpack.ExtType(4, msgpack.packb(["os:system", "ls"]))}),
}


@pytest.mark.parametrize(
    "case",
    sorted(MSGPACK_CASES),
)
@pytest.mark.loose_files
def test_hostile_msgpack(hostile: Backend, case: str) -> None:
    """Deeply nested, huge-claiming or malformed msgpack (re-sealed): refused with a cairn error naming the file.

    Never a raw msgpack, numpy or Python error, and never a crash or a hang.
    """
    _tamper(hostile, "stats/state.msgpack", MSGPACK_CASES[case])
    _refused(
        hostile,
        STATE_OR_TENSORS,
        (cairn.CorruptCheckpointError, cairn.IncompatibleCheckpointError),
        kind="hostile",
        ops=("restore", "component"),
        component="stats",
    )


_CHILD_RESTORE = """
import sys
sys.path.insert(0, sys.argv[1])
import cairn
from storage_components import Agent
try:
    Agent(4, with_torch=False).restore_from_path(sys.argv[2])
except cairn.CorruptCheckpointError as err:
    print("REFUSED", err)
    sys.exit(3)
print("RESTORED")
"""


@pytest.mark.loose_files
@pytest.mark.parametrize("depth", [250, 1000])
def test_nested_ext_records_do_not_crash(tmp_path: Path, depth: int) -> None:
    """Deeply nested tuple records (re-sealed) are refused with CorruptCheckpointError, not a crash.

    Run in a child process: a segfault must fail this test, not kill the test session.
    """
    import subprocess
    import sys

    storage_tally.TALLY["hostile/tried"] += 1
    root = tmp_path / "ckpt"
    Agent(N).save_to_path(root)
    from fsspec.implementations.local import LocalFileSystem

    reseal_after(
        LocalFileSystem(), str(root), "stats/state.msgpack", msgpack.packb({"values": _ext_tuple_chain(depth)})
    )
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD_RESTORE, str(Path(__file__).parent), str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, f"exit {proc.returncode}: {proc.stdout[-500:]} {proc.stderr[-500:]}"
    assert str(root / "stats" / "state.msgpack") in proc.stdout
    storage_tally.TALLY["hostile/refused"] += 1


# ---------------------------------------------------------------------------- hostile: versions and metadata


@pytest.mark.parametrize("rel", ["manifest.json", "group/manifest.json", "group/a/manifest.json"])
def test_future_manifest_format(hostile: Backend, rel: str) -> None:
    """A manifest in a format from the future (re-sealed): IncompatibleCheckpointError naming it."""
    folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
    reseal(hostile.fs, hostile.path("ckpt"), edit=lambda f, b: b.update(format_version=99) if f == folder else None)
    _refused(hostile, rel, cairn.IncompatibleCheckpointError, kind="hostile", ops=("restore", "from_checkpoint"))
    with pytest.raises(cairn.IncompatibleCheckpointError):
        cairn.verify_checkpoint(hostile.uri("ckpt")) if rel == "manifest.json" else _raise_first_problem(hostile)


def _raise_first_problem(backend: Backend) -> None:
    problems = cairn.verify_checkpoint(backend.uri("ckpt"))
    assert problems
    raise cairn.IncompatibleCheckpointError(problems[0])


@pytest.mark.loose_files
@pytest.mark.parametrize("rel", ["metadata.json", "policy/metadata.json"])
def test_future_metadata_format(hostile: Backend, rel: str) -> None:
    """metadata.json in a format from the future (re-sealed): IncompatibleCheckpointError naming it."""
    _tamper(hostile, rel, _edit_json(hostile, rel, lambda m: m.update(format_version=99)))
    _refused(hostile, rel, cairn.IncompatibleCheckpointError, kind="hostile", ops=("restore", "from_checkpoint"))


@pytest.mark.loose_files
def test_future_state_version(hostile: Backend) -> None:
    """A component state newer than its class: IncompatibleCheckpointError naming the folder and both versions."""
    _tamper(
        hostile, "stats/metadata.json", _edit_json(hostile, "stats/metadata.json", lambda m: m.update(state_version=7))
    )
    _refused(hostile, "stats", cairn.IncompatibleCheckpointError, kind="hostile")


METADATA_CASES: dict[str, tuple[Callable[[dict[str, Any]], Any], type[BaseException]]] = {
    # Not on the allow-list (issue 33, SPEC 8): refused as unsafe, whatever the name would resolve to.
    "class-is-a-function": (lambda m: m.update({"class": "os:system"}), cairn.UnsafeCheckpointError),
    "class-not-checkpointable": (lambda m: m.update({"class": "subprocess:Popen"}), cairn.UnsafeCheckpointError),
    "class-unrelated": (
        lambda m: m.update({"class": "storage_components:ArrayLeaf"}),
        cairn.IncompatibleCheckpointError,
    ),
    "class-missing-module": (
        lambda m: m.update({"class": "no_such_module_xyz:Thing"}),
        cairn.UnsafeCheckpointError,
    ),
    "class-not-a-path": (lambda m: m.update({"class": "Agent"}), cairn.UnsafeCheckpointError),
    "class-locals": (
        lambda m: m.update({"class": "storage_components:f.<locals>.X"}),
        cairn.UnsafeCheckpointError,
    ),
    "format-version-zero": (lambda m: m.update(format_version=0), cairn.CorruptCheckpointError),
    "format-version-string": (lambda m: m.update(format_version="1"), cairn.CorruptCheckpointError),
    "format-version-bool": (lambda m: m.update(format_version=True), cairn.CorruptCheckpointError),
    "uses-pickle-not-bool": (lambda m: m.update(uses_pickle="no"), cairn.CorruptCheckpointError),
    "state-version-not-int": (lambda m: m.update(state_version="1"), cairn.CorruptCheckpointError),
    "no-class": (lambda m: m.pop("class"), cairn.CorruptCheckpointError),
    "a-list": (lambda m: [m], cairn.CorruptCheckpointError),
}


@pytest.mark.loose_files
@pytest.mark.parametrize("case", sorted(METADATA_CASES))
def test_tampered_metadata(hostile: Backend, case: str) -> None:
    """Tampered metadata.json (re-sealed): the documented error naming it; no class is ever instantiated."""
    change, expected = METADATA_CASES[case]
    data = _edit_json(hostile, "metadata.json", lambda m: change(m))
    _tamper(hostile, "metadata.json", data)
    # A class that exists but does not fit is named with the checkpoint folder that holds it.
    names = ("metadata.json", "") if case.startswith("class") else ("metadata.json",)
    _refused(hostile, names, expected, kind="hostile", ops=("from_checkpoint",))
    if expected is cairn.CorruptCheckpointError:
        _refused(hostile, "metadata.json", expected, kind="hostile", ops=("restore",))


@pytest.mark.parametrize(
    ("case", "data"),
    [
        ("not-json", b"{"),
        ("deeply-nested", b"[" * 100_000 + b"]" * 100_000),
        ("not-utf8", b'{"\xff": 1}'),
        ("nan", b'{"format_version": NaN}'),
    ],
)
@pytest.mark.loose_files
def test_unparsable_metadata(hostile: Backend, case: str, data: bytes) -> None:
    """metadata.json that is not JSON (re-sealed): CorruptCheckpointError naming it."""
    _tamper_nocheck(hostile, "metadata.json", data)
    _refused(hostile, "metadata.json", cairn.CorruptCheckpointError, kind="hostile", ops=("restore", "from_checkpoint"))


CTOR_CASES: dict[str, Any] = {
    "deeply-nested": None,  # filled below (raw bytes)
    "not-an-object": [1, 2],
    "class-tag-to-function": {"args": [], "kwargs": {"n": {"__cairn__": "class", "class": "os:system"}}},
    "enum-tag-to-non-enum": {"args": [], "kwargs": {"n": {"__cairn__": "enum", "class": "os:system", "name": "x"}}},
    "unknown-tag": {"args": [], "kwargs": {"n": {"__cairn__": "exec", "code": "print(1)"}}},
    "ndarray-object-dtype": {
        "args": [],
        "kwargs": {"n": {"__cairn__": "ndarray", "dtype": "|O", "shape": [1], "b64": "AAAAAAAAAAA="}},
    },
    "bytes-bad-b64": {"args": [], "kwargs": {"n": {"__cairn__": "bytes", "b64": "!!!"}}},
}


@pytest.mark.loose_files
@pytest.mark.parametrize("case", sorted(CTOR_CASES))
def test_hostile_ctor(hostile: Backend, case: str) -> None:
    """Hostile ctor.json (re-sealed): from_checkpoint refuses it with a cairn error naming the file (a
    class or enum not on the allow-list: UnsafeCheckpointError, issue 33)."""
    if case == "deeply-nested":
        data = b'{"args": ' + b"[" * 100_000 + b"]" * 100_000 + b', "kwargs": {}}'
    else:
        data = json.dumps(CTOR_CASES[case]).encode()
    _tamper_nocheck(hostile, "ctor.json", data)
    _refused(
        hostile,
        "ctor.json",
        (cairn.CorruptCheckpointError, cairn.IncompatibleCheckpointError)
        if "tag-to" not in case
        else cairn.UnsafeCheckpointError,
        kind="hostile",
        ops=("from_checkpoint",),
    )


# ---------------------------------------------------------------------------- hostile: manifests


MANIFEST_CASES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "wrong-digest-for-a-file": lambda b: b["files"]["state.msgpack"].update({b["algorithm"]: "0" * 64}),
    "wrong-size-for-a-file": lambda b: b["files"]["state.msgpack"].update(size=b["files"]["state.msgpack"]["size"] + 1),
    "negative-size": lambda b: b["files"]["state.msgpack"].update(size=-1),
    "digest-not-hex": lambda b: b["files"]["state.msgpack"].update({b["algorithm"]: "zz" * 32}),
    "size-a-float": lambda b: b["files"]["state.msgpack"].update(size=1.5),
    "size-a-bool": lambda b: b["files"]["state.msgpack"].update(size=True),
    "ghost-component": lambda b: (
        b["components"].append("ghost"),
        b["files"].update({"ghost/manifest.json": {"size": 10, b["algorithm"]: "0" * 64}}),
    ),
    "component-without-entry": lambda b: b["components"].append("ghost2"),
    "component-not-a-string": lambda b: b["components"].append(7),
    "unknown-algorithm": lambda b: b.update(algorithm="md5"),
    "not-a-manifest": lambda b: b.update(format="something-else"),
    "files-a-list": lambda b: b.update(files=[]),
    "huge-size": lambda b: b["files"]["state.msgpack"].update(size=2**62),
}


@pytest.mark.parametrize(
    "case",
    sorted(MANIFEST_CASES),
)
@pytest.mark.loose_files
@pytest.mark.parametrize("level", ["root", "stats"])
def test_tampered_manifest(hostile: Backend, case: str, level: str) -> None:
    """Tampered manifests (re-sealed, so their own checksum passes): refused, naming the manifest or file."""
    folder = "" if level == "root" else "stats"
    reseal(hostile.fs, hostile.path("ckpt"), edit=lambda f, b: MANIFEST_CASES[case](b) if f == folder else None)
    rel = f"{folder}/manifest.json" if folder else "manifest.json"
    if case in ("wrong-digest-for-a-file", "wrong-size-for-a-file", "huge-size"):
        rel = f"{folder}/state.msgpack" if folder else "state.msgpack"
    if case == "ghost-component":
        # A restore reads only the components the target has (by design: a MultiRLModule with fewer
        # modules restores those it has), so only verify, which checks every listed folder, sees it.
        ghost = "ghost" if not folder else "stats/ghost"
        _refused(
            hostile, (f"{ghost}/manifest.json", ghost), cairn.CorruptCheckpointError, kind="hostile", ops=("verify",)
        )
        return
    _refused(hostile, rel, cairn.CorruptCheckpointError, kind="hostile", ops=("restore",))


def _last_member(body: dict[str, Any]) -> dict[str, int]:
    entries: dict[str, dict[str, int]] = body["packed"]
    return max(entries.values(), key=lambda e: e["offset"])


def _second_member(body: dict[str, Any]) -> dict[str, int]:
    entries: dict[str, dict[str, int]] = body["packed"]
    return sorted(entries.values(), key=lambda e: e["offset"])[1]


# A folder's small files packed into packed.bin (format 3): the 'packed' table of offsets and sizes is
# checked against the pack's recorded size before anything is sliced (cairn.manifest._parse_packed).
PACK_CASES: dict[str, Callable[[dict[str, Any]], Any]] = {
    "offset-past-end": lambda b: _last_member(b).update(offset=b["files"]["packed.bin"]["size"] + 8),
    "overlapping": lambda b: _second_member(b).update(offset=_second_member(b)["offset"] - 1),
    "length-overflow": lambda b: _last_member(b).update(size=2**64),
    "short-of-the-end": lambda b: _last_member(b).update(size=_last_member(b)["size"] - 1),
    "negative-offset": lambda b: _second_member(b).update(offset=-1),
    "offset-a-bool": lambda b: _last_member(b).update(offset=True),
    "member-not-allowed": lambda b: b["packed"].update({"evil.py": b["packed"].pop("ctor.json")}),
    "member-also-a-file": lambda b: b["files"].update({"ctor.json": b["files"]["packed.bin"]}),
    "metadata-packed": lambda b: b["packed"].update({"metadata.json": b["packed"].pop("ctor.json")}),
    "table-without-pack": lambda b: b["files"].pop("packed.bin"),
    "pack-without-table": lambda b: b.pop("packed"),
    "empty-table": lambda b: b.update(packed={}),
    "table-a-list": lambda b: b.update(packed=[]),
}


@pytest.mark.parametrize("case", sorted(PACK_CASES))
@pytest.mark.parametrize("level", ["root", "stats"])
def test_tampered_pack_table(hostile: Backend, case: str, level: str) -> None:
    """A pack's table (re-sealed) that does not tile the pack exactly, or names other files: refused, nothing sliced."""
    folder = "" if level == "root" else "stats"
    reseal(hostile.fs, hostile.path("ckpt"), edit=lambda f, b: PACK_CASES[case](b) if f == folder else None)
    rel = f"{folder}/manifest.json" if folder else "manifest.json"
    _refused(hostile, rel, cairn.CorruptCheckpointError, kind="hostile", ops=("restore", "from_checkpoint", "verify"))


@pytest.mark.parametrize("member", ["ctor.json", "state.msgpack", "tensors.safetensors"])
def test_packed_member_changed(hostile: Backend, member: str) -> None:
    """A byte changed inside one packed file (manifest untouched): the pack fails its digest, nothing is applied."""
    body = read_body(hostile.fs, hostile.path("ckpt", "stats"))
    at = body["packed"][member]
    path = hostile.path("ckpt", "stats", "packed.bin")
    data = bytearray(hostile.fs.cat_file(path))
    data[at["offset"] + at["size"] // 2] ^= 0x01
    hostile.fs.pipe_file(path, bytes(data))
    ops = ("restore", "component", "from_checkpoint", "verify")
    _refused(hostile, "stats/packed.bin", cairn.CorruptCheckpointError, kind="corrupt", ops=ops, component="stats")


@pytest.mark.loose_files
def test_manifest_edited_without_resealing(hostile: Backend) -> None:
    """A manifest edited by hand (its own checksum not updated): CorruptCheckpointError naming it."""
    body = read_body(hostile.fs, hostile.path("ckpt"))
    body["files"]["state.msgpack"][body["algorithm"]] = "0" * 64
    hostile.fs.pipe_file(hostile.path("ckpt", "manifest.json"), json.dumps(body).encode())
    _refused(hostile, "manifest.json", cairn.CorruptCheckpointError, kind="hostile", ops=("restore", "from_checkpoint"))
    assert seal_body(body)  # re-sealing is what the other tests do to get past this check


def test_oversized_manifest_refused(hostile: Backend) -> None:
    """A root manifest larger than the JSON bound is refused before being parsed."""
    from cairn.manifest import MAX_JSON_BYTES

    if hostile.name != "memory":
        pytest.skip("64 MB on disk for one case; the memory backend shows the bound")
    hostile.fs.pipe_file(hostile.path("ckpt", "manifest.json"), b" " * (MAX_JSON_BYTES + 1))
    _refused(hostile, "manifest.json", cairn.CorruptCheckpointError, kind="hostile", ops=("restore",))


def test_valid_after_all(hostile: Backend) -> None:
    """Control: re-sealing an untouched checkpoint changes nothing that matters; it restores exactly."""
    reseal(hostile.fs, hostile.path("ckpt"))
    agent = Agent(N, with_torch=True)
    agent.restore_from_path(hostile.uri("ckpt"))
    expect = Agent(N, with_torch=True)
    expect.set_step(3)
    assert_states_equal(expect.get_state(), agent.get_state())
    leaf = ArrayLeaf.from_checkpoint(hostile.uri("ckpt", "stats"))
    assert_states_equal(expect.stats.get_state(), leaf.get_state())


@pytest.mark.loose_files
def test_file_changed_during_restore_is_detected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor file modified in place after it was verified, before it was read: refused, not restored.

    (tests/test_restore_passes.py makes the same change from a ``check_state`` hook, on two reader threads.)
    """
    from cairn import _restore

    agent = Agent(N)
    agent.set_step(3)
    path = agent.save_to_path(tmp_path / "ckpt")
    victim = Path(path) / "stats" / "tensors.safetensors"
    real_read_files = _restore.read_files
    tampered: list[bool] = []

    def tampering_read_files(sources: Any) -> None:
        # Once, before the read that follows the verifying pass: a second flip would put the bytes back.
        if any(s.where.endswith(str(victim)) for s in sources) and not tampered:
            tampered.append(True)
            data = bytearray(victim.read_bytes())
            data[-1] ^= 0xFF  # the last value of the last tensor
            with open(victim, "r+b") as f:  # in place: same inode as the verified one
                f.write(data)
        real_read_files(sources)

    monkeypatch.setattr(_restore, "read_files", tampering_read_files)
    fresh = Agent(N)
    with pytest.raises(cairn.CorruptCheckpointError):
        fresh.restore_from_path(path)
