"""Format 2 (issue 23): SHA-256 decides trust; CRC-32 decides nothing; linked files are not trusted forever.

The two attacks of issue 23, replayed on real files through the public API:

1. a changed state whose tensor file has the same length and CRC-32 as the previous
   step's (bits flipped by solving the CRC's linear equations) must not be reused:
   a restore gives the new values;
2. a byte flipped in a file that later steps link, with its mtime put back by
   ``os.utime`` (how silent corruption looks to ``stat``), must not be linked into
   the next step, and retention must not delete the newest checkpoint that was
   fully checked; for plain tensors and for replay-buffer chunks.

And the format's own promises: format 1 still restores and ``cairn upgrade``
rewrites it as format 2; a tree never mixes formats; the one format module seals.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn.manifest import FORMAT_VERSION, Digest, FileEntry, Manifest, raw_entry, seal_manifest_body
from cairn.testing import assert_states_equal
from cairn_test_components import Tree
from log_helpers import warned
from pack_helpers import own_file

DATA = Path(__file__).parent / "data"


class Blob(cairn.Checkpointable):
    """One uint8 array: its tensor file's data region is the array's bytes, in order."""

    def __init__(self, size: int = 256) -> None:
        self.data = np.arange(size, dtype=np.uint8)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"data": self.data}

    def set_state(self, state: dict[str, Any]) -> None:
        if "data" in state:
            self.data = np.array(state["data"], copy=True)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (int(self.data.size),), {}


class Pair(cairn.Checkpointable):
    """Two blobs: ``moving`` changes every step, ``still`` only when the test says so."""

    def __init__(self) -> None:
        self.moving = Blob(64)
        self.still = Blob(4096)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("moving", self.moving), ("still", self.still)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"moving": self.moving.get_state(), "still": self.still.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        for name, comp in self.get_checkpointable_components():
            if name in state:
                comp.set_state(state[name])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


def crc_neutral_flips(length: int, region: range) -> list[int]:
    """Bit positions inside ``region`` of a ``length``-byte message whose flipping keeps its CRC-32.

    CRC-32 is affine over GF(2): crc(m ^ d) = crc(m) ^ crc(d) ^ crc(0). Any 33 single-bit
    deltas are linearly dependent in 32 bits, so Gaussian elimination finds a non-empty
    subset whose CRC deltas cancel: flipping those bits changes the bytes, not the CRC.
    """
    zero = zlib.crc32(bytes(length))
    rows: list[tuple[int, int]] = []  # (reduced crc delta, bitmask of the chosen bits as an int)
    bits = [region.start * 8 + i * 7 for i in range(40)]  # spread over the region
    assert bits[-1] // 8 < region.stop
    for k, bit in enumerate(bits):
        msg = bytearray(length)
        msg[bit // 8] ^= 1 << (bit % 8)
        value, combo = zlib.crc32(bytes(msg)) ^ zero, 1 << k
        for pivot_value, pivot_combo in rows:
            if value ^ pivot_value < value:
                value, combo = value ^ pivot_value, combo ^ pivot_combo
        if value == 0:
            return [bits[j] for j in range(len(bits)) if combo >> j & 1]
        rows.append((value, combo))
        rows.sort(reverse=True)
    raise AssertionError("40 vectors in a 32-dimensional space are always dependent")


@pytest.fixture
def no_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stamps are trusted at once: these saves follow each other within a stamp's settle time (racy stamps)."""
    import cairn.storage.local

    monkeypatch.setattr(cairn.storage.local, "_settle_ns", lambda _st: 0)


def tensor_file(step_folder: Path, component: str) -> Path:
    return step_folder / component / "tensors.safetensors"


@pytest.mark.loose_files
def test_a_changed_file_with_the_same_size_and_crc32_is_written_not_linked(tmp_path: Path) -> None:
    """Attack 1: the old bytes were silently restored when size and CRC-32 decided reuse."""
    pair = Pair()
    mgr = cairn.CheckpointManager(tmp_path / "run")
    mgr.save(pair, 1)
    old_file = tensor_file(tmp_path / "run" / "step_000000001", "still")
    raw = old_file.read_bytes()
    data_start = 8 + int.from_bytes(raw[:8], "little")
    flips = crc_neutral_flips(len(raw), range(data_start, len(raw)))
    forged = bytearray(raw)
    for bit in flips:
        forged[bit // 8] ^= 1 << (bit % 8)
    assert zlib.crc32(forged) == zlib.crc32(raw) and forged != raw
    # The new state is exactly the forged bytes: same length, same CRC-32, other values.
    pair.still.data = np.frombuffer(bytes(forged[data_start:]), dtype=np.uint8).copy()
    pair.moving.data = pair.moving.data + 1
    mgr.save(pair, 2)
    new_file = tensor_file(tmp_path / "run" / "step_000000002", "still")
    assert os.stat(new_file).st_ino != os.stat(old_file).st_ino, "the forged file was linked"
    assert mgr.last_stats is not None and mgr.last_stats.files_written >= 2
    restored = Pair.from_checkpoint(tmp_path / "run" / "step_000000002")
    np.testing.assert_array_equal(restored.still.data, pair.still.data)
    assert cairn.verify_checkpoint(tmp_path / "run" / "step_000000002") == []
    # Format 3 records no CRC-32 at all: the digest alone decides, and it differs.
    body = json.loads((tmp_path / "run" / "step_000000002" / "still" / "manifest.json").read_text())
    before = json.loads((tmp_path / "run" / "step_000000001" / "still" / "manifest.json").read_text())
    entry, old_entry = body["files"]["tensors.safetensors"], before["files"]["tensors.safetensors"]
    assert "crc32" not in entry and entry["blake3"] != old_entry["blake3"]


def flip_and_put_mtime_back(path: Path) -> None:
    """Flip one byte of ``path`` (every link to it) and restore its mtime: a stat shows nothing but the ctime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(st.st_size - 1)
        last = f.read(1)
        f.seek(st.st_size - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size


def _steps(root: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in root.iterdir() if p.name.startswith("step_"))


@pytest.mark.loose_files
def test_utime_attack_on_a_linked_tensor_file_does_not_spread(
    tmp_path: Path, no_racy_window: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Attack 2: the damaged file was linked unread, and keep_last=3 left nothing that restores."""
    root = tmp_path / "run"
    pair = Pair()
    # recheck_every=10: the stamp check alone must catch it, not the periodic re-read.
    mgr = cairn.CheckpointManager(root, keep_last=3, recheck_every=10)
    for step in range(1, 5):
        pair.moving.data = pair.moving.data + 1
        if step == 2:
            pair.still.data = pair.still.data[::-1].copy()  # written at 2, linked by 3 and 4
        mgr.save(pair, step)
    assert mgr.last_stats is not None and mgr.last_stats.files_vouched >= 1  # step 4 trusted a stamp
    flip_and_put_mtime_back(tensor_file(root / "step_000000004", "still"))
    pair.moving.data = pair.moving.data + 1
    caplog.clear()
    mgr.save(pair, 5)
    assert warned(caplog, "still/tensors.safetensors"), caplog.text
    assert cairn.verify_checkpoint(root / "step_000000005") == []
    fresh = Pair()
    info = mgr.restore_latest(fresh)
    assert info is not None and info.step == 5
    assert_states_equal(fresh.get_state(), pair.get_state())


def test_retention_keeps_the_newest_fully_checked_one_until_a_newer_one_is(
    tmp_path: Path, no_racy_window: None
) -> None:
    """A save that linked files on their stamps' word does not count as verified: the last one that did stays."""
    root = tmp_path / "run"
    pair = Pair()
    mgr = cairn.CheckpointManager(root, keep_last=1, recheck_every=3)
    seen: list[tuple[int, bool, list[int]]] = []
    for step in range(1, 8):
        pair.moving.data = pair.moving.data + 1
        mgr.save(pair, step)
        assert mgr.last_stats is not None
        seen.append((step, mgr.last_stats.fully_checked, _steps(root)))
    # Save 1 links nothing, and remembers the files it wrote and read back; 2 and 3 trust
    # their stamps; every 3rd save (4, 7) forgets the stamps and reads everything back.
    assert [s for s, full, _ in seen if full] == [1, 4, 7]
    assert dict((s, kept) for s, _, kept in seen) == {
        1: [1],
        2: [1, 2],
        3: [1, 3],
        4: [4],
        5: [4, 5],
        6: [4, 6],
        7: [7],
    }


def test_recheck_every_is_checked(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match="recheck_every"):
        cairn.CheckpointManager(tmp_path, recheck_every=0)


@pytest.mark.loose_files
def test_utime_attack_on_a_replay_buffer_chunk_does_not_spread(
    tmp_path: Path, no_racy_window: None, caplog: pytest.LogCaptureFixture
) -> None:
    from cairn.rl.utils.replay_buffers import ReplayBuffer

    root = tmp_path / "run"
    buf = ReplayBuffer(64, {"obs": ((4,), "float32"), "reward": ((), "float32")}, chunk_rows=8, seed=0)
    mgr = cairn.CheckpointManager(root, keep_last=2, recheck_every=10)
    rng = np.random.default_rng(0)

    def add(rows: int) -> None:
        buf.add({"obs": rng.standard_normal((rows, 4)).astype(np.float32), "reward": np.ones(rows, np.float32)})

    add(16)
    mgr.save(buf, 1)
    for step in (2, 3):
        add(8)
        mgr.save(buf, step)
    assert mgr.last_stats is not None and mgr.last_stats.files_vouched >= 1
    chunk0 = next(p for p in (root / "step_000000003").iterdir() if p.name.startswith("chunk_00000"))
    flip_and_put_mtime_back(chunk0 / "tensors.safetensors")
    add(8)
    caplog.clear()
    mgr.save(buf, 4)
    assert warned(caplog, "chunk_00000"), caplog.text
    assert cairn.verify_checkpoint(root / "step_000000004") == []
    restored = ReplayBuffer.from_checkpoint(root / "step_000000004")
    assert_states_equal(restored.get_state(), buf.get_state())


@pytest.mark.parametrize("version", ["1", "2", "3", "3_sha256", "3_packed"])
def test_golden_checkpoints_of_each_format_restore(version: str) -> None:
    sys.path.insert(0, str(DATA))
    try:
        from make_golden import golden_tree
    finally:
        sys.path.remove(str(DATA))
    golden = DATA / f"golden_format_v{version}"
    assert json.loads((golden / "manifest.json").read_text())["format_version"] == int(version[0])
    loaded = Tree.from_checkpoint(golden)
    assert_states_equal(loaded.get_state(), golden_tree().get_state())
    assert cairn.verify_checkpoint(golden) == []


@pytest.mark.parametrize("version", [1, 2])
def test_cairn_upgrade_rewrites_older_formats_as_format_3(tmp_path: Path, version: int) -> None:
    src = DATA / f"golden_format_v{version}"
    out = tmp_path / "up"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    cmd = [sys.executable, "-m", "cairn", "--import", "cairn_test_components", "upgrade"]
    done = subprocess.run([*cmd, str(src), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert f"checkpoint format {version} -> {FORMAT_VERSION}" in done.stdout
    for manifest in out.rglob("manifest.json"):
        body = json.loads(manifest.read_text())
        assert (body["format_version"], body["algorithm"]) == (3, "blake3"), manifest
    assert json.loads(own_file(out, "metadata.json"))["format_version"] == 3
    assert_states_equal(Tree.from_checkpoint(out).get_state(), Tree.from_checkpoint(src).get_state())
    dry = subprocess.run([*cmd, str(out), "--dry-run"], capture_output=True, text=True, timeout=120, env=env)
    assert dry.returncode == 0 and "checkpoint format 3 (current)" in dry.stdout


@pytest.mark.loose_files
def test_a_format_1_folder_under_a_format_2_parent_is_refused(tmp_path: Path) -> None:
    """CRC-32s inside a SHA-256 tree would let anyone forge the files below that folder."""
    t = Tree()
    t.mutate()
    ck = Path(t.save_to_path(tmp_path / "ck"))
    leaf = ck / "leaf"
    old = Manifest.from_bytes((leaf / "manifest.json").read_bytes(), where="leaf")
    downgraded = Manifest(
        files={n: FileEntry(e.size, Digest.of((leaf / n).read_bytes(), "crc32")) for n, e in old.files.items()},
        components=old.components,
        format_version=1,
    ).to_bytes()
    (leaf / "manifest.json").write_bytes(downgraded)
    body = json.loads((ck / "manifest.json").read_text())
    body["files"]["leaf/manifest.json"] = raw_entry(downgraded)
    (ck / "manifest.json").write_bytes(seal_manifest_body(body))
    with pytest.raises(cairn.CorruptCheckpointError, match="never mixes formats"):
        Tree().restore_from_path(ck)
    assert any("never mixes formats" in p for p in cairn.verify_checkpoint(ck))


def test_a_sha256_folder_under_a_blake3_parent_is_refused(tmp_path: Path) -> None:
    """Format 3 records its digest per manifest; one tree still uses one (the parent's)."""
    t = Tree()
    t.mutate()
    ck = Path(t.save_to_path(tmp_path / "ck"))
    other = Path(t.save_to_path(tmp_path / "other", digest="sha256"))
    shutil.rmtree(ck / "leaf")
    shutil.copytree(other / "leaf", ck / "leaf")
    body = json.loads((ck / "manifest.json").read_text())
    body["files"]["leaf/manifest.json"] = raw_entry((ck / "leaf" / "manifest.json").read_bytes())
    (ck / "manifest.json").write_bytes(seal_manifest_body(body))
    with pytest.raises(cairn.CorruptCheckpointError, match="never mixes formats"):
        Tree().restore_from_path(ck)


@pytest.mark.parametrize("version", [2, 3])
def test_a_manifest_claiming_crc32_in_format_2_or_3_is_refused(tmp_path: Path, version: int) -> None:
    """The algorithm is one its version allows: a format 2 or 3 manifest sealed with CRC-32 is not read."""
    t = Tree()
    ck = Path(t.save_to_path(tmp_path / "ck"))
    body = json.loads((ck / "manifest.json").read_text())
    body["algorithm"] = "crc32"
    body["format_version"] = version
    body["files"] = {
        n: {"size": e["size"], "crc32": f"{zlib.crc32((ck / n).read_bytes()):08x}"} for n, e in body["files"].items()
    }
    body.pop("checksum")
    body["checksum"] = f"{zlib.crc32(json.dumps(body, sort_keys=True, separators=(',', ':')).encode()):08x}"
    (ck / "manifest.json").write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    with pytest.raises(cairn.CorruptCheckpointError, match="checksum algorithm 'crc32'"):
        Tree().restore_from_path(ck)


@pytest.mark.parametrize("digest", ["blake3", "sha256"])
def test_new_checkpoints_are_format_3_with_one_digest_everywhere(tmp_path: Path, digest: str) -> None:
    import hashlib

    import blake3

    hash_of = {"blake3": lambda b: blake3.blake3(b).hexdigest(), "sha256": lambda b: hashlib.sha256(b).hexdigest()}
    t = Tree()
    t.mutate()
    ck = Path(t.save_to_path(tmp_path / "ck", **({} if digest == "blake3" else {"digest": digest})))
    for manifest in ck.rglob("manifest.json"):
        body = json.loads(manifest.read_text())
        assert body["format_version"] == FORMAT_VERSION == 3 and body["algorithm"] == digest
        for name, entry in body["files"].items():
            data = (manifest.parent / name).read_bytes()
            assert entry == {"size": len(data), digest: hash_of[digest](data)}
    meta = json.loads(own_file(ck, "metadata.json"))
    assert meta["format_version"] == 3
    Tree().restore_from_path(ck)
    shutil.rmtree(ck)


def test_an_unknown_digest_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match=r"digest='md5' is not a digest cairn writes.*'blake3', 'sha256'"):
        Tree().save_to_path(tmp_path / "ck", digest="md5")
    with pytest.raises(cairn.CheckpointError, match="digest='crc32'"):
        cairn.CheckpointManager(tmp_path / "run", digest="crc32")
    assert not (tmp_path / "ck").exists() and not (tmp_path / "run").exists()


@pytest.mark.loose_files
def test_a_manager_saves_sha256_when_asked_and_never_links_across_digests(tmp_path: Path) -> None:
    """A tree uses one digest: a manager changed to SHA-256 writes every file again, then links as before."""
    pair = Pair()
    cairn.CheckpointManager(tmp_path / "run").save(pair, 1)
    mgr = cairn.CheckpointManager(tmp_path / "run", digest="sha256")
    pair.moving.data = pair.moving.data + 1
    mgr.save(pair, 2)
    assert mgr.last_stats is not None and mgr.last_stats.files_linked == 0
    pair.moving.data = pair.moving.data + 1
    mgr.save(pair, 3)
    assert mgr.last_stats is not None and mgr.last_stats.files_linked > 0
    for step in (2, 3):
        folder = tmp_path / "run" / f"step_{step:09d}"
        assert {json.loads(m.read_text())["algorithm"] for m in folder.rglob("manifest.json")} == {"sha256"}
        assert cairn.verify_checkpoint(folder) == []


@pytest.mark.loose_files
def test_restore_names_the_digests_on_a_mismatch(tmp_path: Path) -> None:
    t = Tree()
    t.mutate()
    ck = Path(t.save_to_path(tmp_path / "ck"))
    f = ck / "leaf" / "state.msgpack"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(cairn.CorruptCheckpointError, match=r"leaf/state.msgpack fails its checksum \(blake3:"):
            Tree().restore_from_path(ck)


def test_indented_json_writes_what_json_dumps_writes() -> None:
    """Manifests must be byte for byte json.dumps(indent=1, sort_keys=True): the fast writer is checked against it."""
    from cairn.manifest import indented_json

    golden = list(DATA.glob("golden_format_v*/**/*.json"))
    values: list[Any] = [json.loads(p.read_text()) for p in golden]
    assert len(values) > 40  # every golden manifest, metadata and ctor file
    values += [
        {},
        [],
        {"b": [], "a": {}, "c": [1, -2, 3.5, 1e300, -0.0, True, False, None, 'é\n"\\\u2028']},
        [[[{"x": [{}]}]]],
        {"int keys": {1: "x"}, "tuple": (1, 2)},  # left to json.dumps
    ]
    for value in values:
        for sort_keys in (True, False):
            want = json.dumps(value, indent=1, sort_keys=sort_keys, allow_nan=False).encode() + b"\n"
            assert indented_json(value, sort_keys=sort_keys) == want
    for manifest in DATA.glob("golden_format_v3*/**/manifest.json"):
        body = json.loads(manifest.read_text())
        assert seal_manifest_body(body) == manifest.read_bytes()
    with pytest.raises(ValueError):
        indented_json({"x": float("nan")}, sort_keys=True)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        indented_json(loop, sort_keys=False)


def test_a_manifest_is_written_as_seal_manifest_body_seals_its_body() -> None:
    """Manifest.to_bytes joins format 3's two JSON forms from strings: the bytes of the one sealer, every shape."""
    import random

    from cairn.manifest import entry_json

    rng = random.Random(0)
    for i in range(300):
        alg = ("blake3", "sha256")[i % 2]
        names = ["".join(rng.choice("ab/._-Z9é") for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(0, 6))]
        files = {n: FileEntry(rng.randint(0, 10**12), Digest(alg, f"{rng.getrandbits(256):064x}")) for n in names}
        comps = ["".join(rng.choice("ab._-Z9") for _ in range(rng.randint(1, 8))) for _ in range(rng.randint(0, 4))]
        members = rng.sample(["ctor.json", "state.msgpack", "tensors.safetensors"], rng.randint(0, 3))
        packed = {n: (rng.randint(0, 999), rng.randint(0, 999)) for n in members}
        m = Manifest(files=files, components=comps, digest=alg, packed=packed)
        body: dict[str, Any] = {
            "format": "cairn.manifest",
            "format_version": FORMAT_VERSION,
            "algorithm": alg,
            "files": {k: entry_json(v) for k, v in files.items()},
            "components": comps,
        }
        if packed:
            body["packed"] = {k: {"offset": o, "size": n} for k, (o, n) in packed.items()}
        assert m.to_bytes() == seal_manifest_body(body)


class Holder(cairn.Checkpointable):
    """A folder that holds only a component (as most folders of an RL algorithm do)."""

    def __init__(self) -> None:
        self.tree = Tree()

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("tree", self.tree)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


@pytest.mark.loose_files
def test_a_folder_whose_own_state_is_empty_has_no_state_file(tmp_path: Path) -> None:
    """Format 3 writes no state.msgpack for an empty own state; its absence reads as {}, but never beside tensors."""
    import fsspec

    from storage.storage_reseal import reseal

    h = Holder()
    h.tree.mutate()
    ck = Path(h.save_to_path(tmp_path / "ck"))
    assert (
        not (ck / "state.msgpack").exists()
        and "state.msgpack" not in json.loads((ck / "manifest.json").read_text())["files"]
    )
    assert (ck / "tree" / "state.msgpack").exists()  # a state of its own: written as before
    fresh = Holder()
    fresh.restore_from_path(ck)
    assert_states_equal(fresh.get_state(), h.get_state())
    assert subprocess.run([sys.executable, "-m", "cairn", "verify", str(ck)], capture_output=True).returncode == 0
    # A folder whose manifest lists its tensors but not its state is incomplete, not empty.
    (ck / "tree" / "leaf" / "state.msgpack").unlink()
    reseal(
        fsspec.filesystem("file"),
        str(ck),
        edit=lambda rel, body: body["files"].pop("state.msgpack") if rel == "tree/leaf" else None,
    )
    with pytest.raises(cairn.CorruptCheckpointError, match=r"leaf/state.msgpack is not listed"):
        Holder().restore_from_path(ck)
