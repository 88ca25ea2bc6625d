"""How many times a restore reads each tensor file: once into fresh arrays, twice only into live buffers.

The bytes a process reads are counted by the kernel (``rchar`` in ``/proc/self/io``),
so these tests see the passes through the public API without timing anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
import cairn.storage.local

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = [
    pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux's /proc/self/io"),
    pytest.mark.loose_files,
]

N = 1 << 21  # 8 MB of float32 per component: far above the small files of a folder


def _read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


class Plain(cairn.Checkpointable):
    """A user's own component: ``set_state`` copies into its arrays, like ``load_state_dict``; no buffers."""

    def __init__(self, n: int = N, seed: int = 0) -> None:
        self.n = n
        self.seed = seed
        self.w = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        self.applied = 0

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"w": self.w}

    def set_state(self, state: dict[str, Any]) -> None:
        self.w[...] = state["w"]
        self.applied += 1

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.n,), {"seed": self.seed}


class Buffered(Plain):
    """A component that offers its arrays as live buffers: its restore is in place."""

    def get_state_buffers(self) -> dict[str, Any]:
        return {"w": self.w}


class Pair(cairn.Checkpointable):
    """A live-buffered component next to a plain one."""

    def __init__(self, seed: int = 0) -> None:
        self.live = Buffered(seed=seed)
        self.plain = Plain(seed=seed + 1)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"live": self.live.get_state(), "plain": self.plain.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        for name in ("live", "plain"):
            if name in state:
                getattr(self, name).set_state(state[name])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("live", self.live), ("plain", self.plain)]


def _passes(tensor_bytes: int, fn: Any) -> float:
    before = _read_bytes()
    fn()
    return (_read_bytes() - before) / tensor_bytes


def test_plain_component_restore_reads_its_tensors_once(tmp_path: Path) -> None:
    """No buffers: the CRC is computed while the file is read, not in a pass of its own."""
    path = Plain(seed=1).save_to_path(tmp_path / "ck")
    size = (Path(path) / "tensors.safetensors").stat().st_size
    target = Plain(seed=2)
    assert _passes(size, lambda: target.restore_from_path(path)) < 1.5
    np.testing.assert_array_equal(target.w, Plain(seed=1).w)


def test_from_checkpoint_reads_tensors_once(tmp_path: Path) -> None:
    path = Buffered(seed=1).save_to_path(tmp_path / "ck")
    size = (Path(path) / "tensors.safetensors").stat().st_size
    box: list[Buffered] = []
    assert _passes(size, lambda: box.append(Buffered.from_checkpoint(path))) < 1.5
    np.testing.assert_array_equal(box[0].w, Buffered(seed=1).w)


def test_live_buffers_are_verified_before_they_are_written(tmp_path: Path) -> None:
    """Bytes that land in live tensors: verified first, then read (two passes), only for those files."""
    path = Pair(seed=1).save_to_path(tmp_path / "ck")
    live = (Path(path) / "live" / "tensors.safetensors").stat().st_size
    plain = (Path(path) / "plain" / "tensors.safetensors").stat().st_size
    target = Pair(seed=5)
    passes = _passes(live + plain, lambda: target.restore_from_path(path))
    assert 1.3 < passes < 1.7, passes  # live: 2, plain: 1
    expect = Pair(seed=1)
    np.testing.assert_array_equal(target.live.w, expect.live.w)
    np.testing.assert_array_equal(target.plain.w, expect.plain.w)


@pytest.mark.parametrize("damaged", ["live", "plain"])
def test_damage_in_any_file_leaves_every_component_untouched(tmp_path: Path, damaged: str) -> None:
    """A file read in one pass that fails its check is found before any live buffer is written."""
    path = Pair(seed=1).save_to_path(tmp_path / "ck")
    victim = Path(path) / damaged / "tensors.safetensors"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    target = Pair(seed=5)
    before = (target.live.w.copy(), target.plain.w.copy())
    with pytest.raises(cairn.CorruptCheckpointError, match=damaged):
        target.restore_from_path(path)
    np.testing.assert_array_equal(target.live.w, before[0])
    np.testing.assert_array_equal(target.plain.w, before[1])
    assert target.live.applied == target.plain.applied == 0


def test_the_restore_pipeline_has_no_hidden_channel() -> None:
    """The from_checkpoint option is a parameter of the restore, not a context variable (DESIGN)."""
    import importlib

    for name in ("_delegate_protocol", "_tree", "_save", "_reader", "_restore", "_verify", "_tensorio", "delegation"):
        module = importlib.import_module(f"cairn.{name}")
        assert not any(type(v).__name__ == "ContextVar" for v in vars(module).values()), name


# --------------------------------------------------------------------------- two readers
# A restore that reads at least cairn._tensorio.PARALLEL_MIN bytes splits them between two
# threads. These tests lower the bound to 0 so that small checkpoints take that path too.


@pytest.fixture
def two_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    import cairn._tensorio

    monkeypatch.setattr(cairn._tensorio, "PARALLEL_MIN", 0)


class Chunked(cairn.Checkpointable):
    """Several live-buffered components: the bytes of a restore span many files and pieces."""

    def __init__(self, seed: int = 0, parts: int = 3, n: int = (20 << 20) // 4) -> None:
        self.seed, self.parts, self.n = seed, parts, n
        # 20 MB per part: each tensor is cut in 16 MB pieces, and the halves split inside a file.
        self.items = [Buffered(n=n, seed=seed + i) for i in range(parts)]
        self.mutate: Any = None  # run from check_state, between the two passes of the live files

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"parts": self.parts, **{f"p{i}": item.get_state() for i, item in enumerate(self.items)}}

    def set_state(self, state: dict[str, Any]) -> None:
        for i, item in enumerate(self.items):
            if f"p{i}" in state:
                item.set_state(state[f"p{i}"])

    def check_state(self, state: dict[str, Any], components: Any) -> None:
        if self.mutate is not None:
            self.mutate()

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {"seed": self.seed, "parts": self.parts, "n": self.n}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [(f"p{i}", item) for i, item in enumerate(self.items)]


def _files(path: str) -> list[Path]:
    return sorted(Path(path).glob("p*/tensors.safetensors"))


@pytest.mark.usefixtures("two_readers")
def test_two_readers_restore_every_byte_in_place_and_fresh(tmp_path: Path) -> None:
    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    expect = Chunked(seed=1)
    size = sum(f.stat().st_size for f in _files(path))
    target = Chunked(seed=9)
    passes = _passes(size, lambda: target.restore_from_path(path))
    assert 1.7 < passes < 2.3, passes  # every file is live: verified, then read into place
    built: list[Chunked] = []
    assert _passes(size, lambda: built.append(Chunked.from_checkpoint(path))) < 1.3
    for got in (target, built[0]):
        for a, b in zip(got.items, expect.items, strict=True):
            np.testing.assert_array_equal(a.w, b.w)


@pytest.mark.usefixtures("two_readers")
def test_the_second_pass_of_a_settled_file_is_checked_by_its_stamp_not_hashed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHA-256 is the slowest part of a restore: a file verified by the first pass, whose stamp did not
    move since before it, is read into place without a second digest, and restores every byte."""
    monkeypatch.setattr(cairn.storage.local, "_settle_ns", lambda _st: 0)  # just written: settle them now
    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    hashed: list[int] = []
    real = cairn._tensorio._hash_pieces

    def counting(pieces: list[Any]) -> Any:
        hashed.append(sum(p.length for p in pieces))
        return real(pieces)

    monkeypatch.setattr(cairn._tensorio, "_hash_pieces", counting)
    target = Chunked(seed=9)
    target.restore_from_path(path)
    assert sum(hashed) == 0, hashed  # the first pass hashed (verify), the second only read
    for a, b in zip(target.items, Chunked(seed=1).items, strict=True):
        np.testing.assert_array_equal(a.w, b.w)


@pytest.mark.usefixtures("two_readers")
def test_two_readers_find_damage_in_the_second_half(tmp_path: Path) -> None:
    """from_checkpoint reads in one pass: damage near the end is found, by file, and the object is dropped."""
    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    victim = _files(path)[-1]
    with open(victim, "r+b") as f:
        f.seek(-5, 2)
        byte = f.read(1)
        f.seek(-5, 2)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(cairn.CorruptCheckpointError, match=f"{victim.parent.name}/tensors.safetensors fails"):
        Chunked.from_checkpoint(path)


@pytest.mark.usefixtures("two_readers")
@pytest.mark.parametrize("how", ["shortened", "changed"])
@pytest.mark.parametrize("second_pass", ["hashed", "stamped"])
def test_a_file_changed_between_the_passes_is_reported_not_used_silently(
    tmp_path: Path, how: str, second_pass: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live file verified by the first pass and then truncated or rewritten: an error, and no hang.

    The change is made from ``check_state``, which runs after the verifying pass and before
    the bytes are read into place: exactly the window a concurrent writer would use. A file
    saved just now is hashed again by the second pass (its stamp is racy); one older than
    settled at once is checked by its stamp instead (ctime), which the write moves as well.
    """
    if second_pass == "stamped":
        monkeypatch.setattr(cairn.storage.local, "_settle_ns", lambda _st: 0)
    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    victim = _files(path)[-1]
    target = Chunked(seed=9)

    def mutate() -> None:
        with open(victim, "r+b") as f:
            if how == "shortened":
                f.truncate(victim.stat().st_size // 2)
            else:
                f.seek(-5, 2)
                f.write(b"\x00\x01\x02\x03\x04")

    target.mutate = mutate
    message = "became shorter" if how == "shortened" else "changed while it was being restored"
    with pytest.raises(cairn.CorruptCheckpointError, match=message) as info:
        target.restore_from_path(path)
    # Said once, not retried into a plain "corrupted" (which would hide that live values were written).
    assert "after it had passed its checksum" in str(info.value)
    assert "may come from the changed file" in str(info.value)


@pytest.mark.usefixtures("two_readers")
@pytest.mark.parametrize("victim_index", [0, -1])
def test_two_verifying_threads_leave_every_live_buffer_untouched_on_damage(tmp_path: Path, victim_index: int) -> None:
    """The first pass of live files runs on two threads; a damaged file, first or last, stops the restore."""
    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    victim = _files(path)[victim_index]
    with open(victim, "r+b") as f:
        f.seek(-7, 2)
        f.write(b"\xde\xad\xbe\xef\x00\x00\x00")
    target = Chunked(seed=9)
    before = [item.w.copy() for item in target.items]
    with pytest.raises(cairn.CorruptCheckpointError, match=f"{victim.parent.name}/tensors.safetensors fails"):
        target.restore_from_path(path)
    for item, old in zip(target.items, before, strict=True):
        np.testing.assert_array_equal(item.w, old)
        assert item.applied == 0


@pytest.mark.usefixtures("two_readers")
def test_concurrent_restores_in_threads_never_deadlock(tmp_path: Path) -> None:
    """Restores in two threads share the CRC and reader threads: in-place ones (two passes) and fresh ones.

    The CRC thread waits on reads of the reader thread; the reader thread must never wait
    on the CRC thread, or two restores at once would wait on each other forever.
    """
    import threading
    import time

    path = Chunked(seed=1).save_to_path(tmp_path / "ck")
    expect = [item.w for item in Chunked(seed=1).items]
    failures: list[BaseException] = []
    done: list[str] = []

    def run(kind: str) -> None:
        try:
            for _ in range(3):
                got = Chunked.from_checkpoint(path) if kind == "fresh" else Chunked(seed=9)
                if kind == "live":
                    got.restore_from_path(path)
                for item, want in zip(got.items, expect, strict=True):
                    np.testing.assert_array_equal(item.w, want)
            done.append(kind)
        except BaseException as err:  # reported below
            failures.append(err)

    threads = [threading.Thread(target=run, args=(kind,), daemon=True) for kind in ("live", "fresh", "live")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 90
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not failures, failures
    assert sorted(done) == ["fresh", "live", "live"], "a restore thread is stuck"


class Gapped(cairn.Checkpointable):
    """Three arrays; the test makes the middle one (40 MB) bytes that nothing in the state refers to."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.a = rng.standard_normal(1000).astype(np.float32)
        self.b = rng.standard_normal((40 << 20) // 4).astype(np.float32)
        self.c = rng.standard_normal(1000).astype(np.float32)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "c": self.c}

    def set_state(self, state: dict[str, Any]) -> None:
        self.a[...] = state["a"]
        self.c[...] = state["c"]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}


@pytest.mark.parametrize("readers", ["one", "two"])
def test_bytes_nothing_refers_to_are_checksummed_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, readers: str
) -> None:
    """A tensor file with 40 MB that the state does not refer to (a file written by other tools, or
    tampered with and resealed): those bytes are read in pieces of at most 16 MB (never one 40 MB
    allocation), checksummed in file order between the arrays' pieces: the restore passes, and a
    flipped byte among them fails it."""
    import fsspec
    import msgpack

    import cairn._tensorio
    from storage.storage_reseal import reseal_after

    if readers == "two":
        monkeypatch.setattr(cairn._tensorio, "PARALLEL_MIN", 0)
    path = Gapped(seed=1).save_to_path(tmp_path / "ck")
    fs = fsspec.filesystem("file")
    skeleton = msgpack.unpackb((Path(path) / "state.msgpack").read_bytes(), raw=False)
    del skeleton["b"]
    reseal_after(fs, str(path), "state.msgpack", msgpack.packb(skeleton, use_bin_type=True))
    target = Gapped(seed=2)
    target.restore_from_path(path)
    expect = Gapped(seed=1)
    np.testing.assert_array_equal(target.a, expect.a)
    np.testing.assert_array_equal(target.c, expect.c)
    # A flipped byte inside the unreferenced bytes (resealed nowhere): found, nothing applied.
    tensors = Path(path) / "tensors.safetensors"
    with open(tensors, "r+b") as f:
        f.seek(tensors.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x10]))
    fresh = Gapped(seed=3)
    before = fresh.a.copy()
    with pytest.raises(cairn.CorruptCheckpointError, match=r"tensors\.safetensors fails its checksum"):
        fresh.restore_from_path(path)
    np.testing.assert_array_equal(fresh.a, before)


# --------------------------------------------------------------------------- one tree per restore


class CountedLeaf(Plain):
    """A leaf that counts how often a restore asks it for its components."""

    def __init__(self, n: int = 16, seed: int = 0) -> None:
        super().__init__(n, seed)
        self.asked = 0

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        self.asked += 1
        return []


class CountedPair(cairn.Checkpointable):
    """Two counted leaves under a parent that counts too (three levels with :class:`CountedRoot`)."""

    def __init__(self, seed: int = 0) -> None:
        self.a, self.b = CountedLeaf(seed=seed), CountedLeaf(seed=seed + 1)
        self.asked = self.asked_delegated = 0

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {name: comp.get_state() for name, comp in self.get_checkpointable_components()}

    def set_state(self, state: dict[str, Any]) -> None:
        # Not _set_components_state: it asks for the components, and only the engine's asking is counted.
        for name in ("a", "b", "pair"):
            if name in state:
                getattr(self, name).set_state(state[name])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {}

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        self.asked += 1
        return [("a", self.a), ("b", self.b)]

    def get_delegated_components(self) -> dict[str, Any]:
        self.asked_delegated += 1
        return {}


class CountedRoot(CountedPair):
    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.pair = CountedPair(seed + 2)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [*super().get_checkpointable_components(), ("pair", self.pair)]


def _counts(root: CountedRoot) -> list[int]:
    objs: list[Any] = [root, root.a, root.b, root.pair, root.pair.a, root.pair.b]
    return [o.asked for o in objs] + [root.asked_delegated, root.pair.asked_delegated]


def _reset(root: CountedRoot) -> None:
    for o in (root, root.a, root.b, root.pair, root.pair.a, root.pair.b):
        o.asked = 0
    root.asked_delegated = root.pair.asked_delegated = 0


def test_a_restore_asks_each_object_for_its_components_once(tmp_path: Path) -> None:
    """One validated tree per restore, passed down verify, decode, upgrade, check and apply (issue 26).

    Asking again per phase (as the restore once did, five times) could let the phases see
    different objects; each object is asked once, a partial restore and from_checkpoint included.
    """
    path = CountedRoot(seed=1).save_to_path(tmp_path / "ck")
    target = CountedRoot(seed=7)
    _reset(target)
    target.restore_from_path(path)
    assert _counts(target) == [1, 1, 1, 1, 1, 1, 1, 1]
    np.testing.assert_array_equal(target.pair.b.w, CountedRoot(seed=1).pair.b.w)

    _reset(target)
    target.restore_from_path(Path(path) / "pair", component="pair")
    assert _counts(target) == [1, 1, 1, 1, 1, 1, 1, 1]  # the whole tree, once: a delegate may sit anywhere

    built = CountedRoot.from_checkpoint(path)
    assert _counts(built) == [1, 1, 1, 1, 1, 1, 1, 1]
