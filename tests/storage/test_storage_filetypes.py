"""Only regular files are read: pipes, sockets, devices and links in a checkpoint are refused, never waited on.

SPEC 8: "Symlinks, FIFOs, sockets and devices are refused without blocking on
them". A named pipe in place of a checkpoint file used to hang every reader
(an ``open`` of a FIFO waits for a writer). Each test swaps one file of a real
checkpoint and runs one entry point, in this process under a watchdog (which
unblocks a hung ``open`` by opening the pipe for writing, so that a regression
fails the test instead of hanging the suite) or as a ``cairn`` command in a
child process with a timeout.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_components import Agent

import cairn

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

N = 8
WATCHDOG = 20.0  # seconds; a refusal takes milliseconds
PLACES = ["state.msgpack", "stats/tensors.safetensors", "manifest.json", "group/a/manifest.json"]
TESTS = Path(__file__).parent


def _run_guarded(fn: Callable[[], Any], fifo: Path | None) -> Any:
    """Run ``fn``; fail (and unblock it) when it has not returned within the watchdog time."""
    result: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn())
        except BaseException as err:
            error.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(WATCHDOG)
    if t.is_alive():
        if fifo is not None:
            with contextlib.suppress(OSError):  # a writer end lets the blocked open() return
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        t.join(5)
        pytest.fail(f"the call blocked for over {WATCHDOG:.0f} s")
    if error:
        raise error[0]
    return result[0] if result else None


def _make_fifo(path: Path) -> Path:
    path.unlink()
    os.mkfifo(path)
    return path


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    """A saved checkpoint."""
    agent = Agent(N)
    agent.set_step(3)
    agent.save_to_path(tmp_path / "ckpt")
    return tmp_path / "ckpt"


@pytest.fixture
def run_root(tmp_path: Path) -> Path:
    """A manager root with steps 1 and 2."""
    mgr = cairn.CheckpointManager(tmp_path / "run", keep_last=5)
    for step in (1, 2):
        agent = Agent(N)
        agent.set_step(step)
        mgr.save(agent, step)
    return tmp_path / "run"


def _restore(path: Path) -> None:
    Agent(N).restore_from_path(path)


def _from_checkpoint(path: Path) -> None:
    Agent.from_checkpoint(path)


def _verify(path: Path) -> None:
    problems = cairn.verify_checkpoint(path)
    assert problems, "a checkpoint with a pipe in it verified clean"
    raise cairn.CorruptCheckpointError("; ".join(problems))


ENTRY_POINTS: dict[str, Callable[[Path], None]] = {
    "restore": _restore,
    "from_checkpoint": _from_checkpoint,
    "verify": _verify,
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("place", PLACES)
def test_fifo_is_refused_by_the_api(ckpt: Path, place: str, entry: str) -> None:
    """restore, from_checkpoint and verify: CorruptCheckpointError naming the pipe, at once."""
    fifo = _make_fifo(ckpt / place)
    with pytest.raises(cairn.CorruptCheckpointError) as info:
        _run_guarded(lambda: ENTRY_POINTS[entry](ckpt), fifo)
    msg = str(info.value)
    assert str(fifo) in msg and "is a named pipe, not a regular file" in msg, msg


@pytest.mark.parametrize("place", ["manifest.json", "state.msgpack", "stats/tensors.safetensors"])
def test_fifo_in_a_step_does_not_hang_the_manager(run_root: Path, place: str) -> None:
    """manager.latest() and checkpoints() answer at once with a pipe in the newest step."""
    fifo = _make_fifo(run_root / "step_000000002" / place)
    mgr = cairn.CheckpointManager(run_root)
    try:
        latest = _run_guarded(mgr.latest, fifo)
    except cairn.CheckpointError as err:
        assert "named pipe" in str(err), err
    else:
        assert latest is None or latest.endswith(("step_000000001", "step_000000002"))
    with contextlib.suppress(cairn.CheckpointError):
        _run_guarded(mgr.checkpoints, fifo)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    try:
        return subprocess.run(
            [sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"cairn {' '.join(args)} blocked for over 60 s")


@pytest.mark.parametrize("command", ["verify", "inspect"])
@pytest.mark.parametrize("place", PLACES)
def test_fifo_is_refused_by_the_cli(ckpt: Path, place: str, command: str) -> None:
    """``cairn verify`` / ``cairn inspect``: an error naming the pipe, no traceback, no hang.

    ``inspect`` reads no ``state.msgpack`` (it may then succeed); ``verify`` reads everything.
    """
    fifo = _make_fifo(ckpt / place)
    proc = _cli(command, str(ckpt))
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    if command == "verify" or place != "state.msgpack":
        assert proc.returncode != 0, out
        assert str(fifo) in out and "named pipe" in out, out


@pytest.mark.parametrize("place", ["manifest.json", "state.msgpack", "stats/tensors.safetensors"])
def test_fifo_in_a_step_does_not_hang_cairn_ls(run_root: Path, place: str) -> None:
    """``cairn ls`` with a pipe in a step: it answers (listing, or an error naming the pipe), no traceback."""
    fifo = _make_fifo(run_root / "step_000000002" / place)
    proc = _cli("ls", str(run_root))
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == 0 or (str(fifo) in out and "named pipe" in out), out


# ---------------------------------------------------------------------------- other kinds of file


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the checkpoint that a link could point at."""
    target = tmp_path / "secret.bin"
    target.write_bytes(b"not yours")
    return target


def _swap(path: Path, kind: str, outside: Path) -> str:
    """Replace ``path`` with a file of ``kind``; return the word the refusal uses."""
    path.unlink()
    if kind == "symlink":
        path.symlink_to(outside)
        return "symbolic link"
    if kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
        return "a socket"
    if kind == "chardev":
        os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))  # a /dev/null twin
        return "a character device"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["symlink", "socket", "chardev"])
@pytest.mark.parametrize("place", ["state.msgpack", "stats/tensors.safetensors", "manifest.json"])
def test_other_non_regular_files_are_refused(ckpt: Path, outside: Path, place: str, kind: str) -> None:
    """A link to a file outside the checkpoint, a socket, a device: refused with CorruptCheckpointError."""
    if kind == "chardev" and os.geteuid() != 0:
        pytest.skip("mknod of a device needs root")
    word = _swap(ckpt / place, kind, outside)
    for entry in ENTRY_POINTS.values():
        with pytest.raises(cairn.CorruptCheckpointError) as info:
            _run_guarded(lambda entry=entry: entry(ckpt), None)  # type: ignore[misc]
        assert str(ckpt / place) in str(info.value) and word in str(info.value), str(info.value)


def test_linked_component_folder_is_refused(ckpt: Path, tmp_path: Path) -> None:
    """A component folder replaced by a link to a copy elsewhere: refused, the copy is not read."""
    import shutil

    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(ckpt / "stats"), elsewhere)
    (ckpt / "stats").symlink_to(elsewhere, target_is_directory=True)
    for entry in ENTRY_POINTS.values():
        with pytest.raises(cairn.CorruptCheckpointError) as info:
            _run_guarded(lambda entry=entry: entry(ckpt), None)  # type: ignore[misc]
        assert "symbolic link" in str(info.value), str(info.value)


def test_open_regular_refuses_a_linked_parent_folder(ckpt: Path, tmp_path: Path) -> None:
    """The storage's opener itself refuses a file whose folder is a link (whoever calls it)."""
    from cairn.storage import LocalStorage

    (tmp_path / "via").symlink_to(ckpt / "stats", target_is_directory=True)
    storage = LocalStorage()
    with pytest.raises(cairn.CorruptCheckpointError, match="symbolic link"):
        storage.read_file(str(tmp_path / "via" / "state.msgpack"))
    with pytest.raises(cairn.CorruptCheckpointError, match="symbolic link"):
        storage.read_range(str(tmp_path / "via" / "state.msgpack"), 0, 4)
    fd = storage.open_regular(str(ckpt / "stats" / "state.msgpack"))
    try:
        assert os.get_blocking(fd)
    finally:
        os.close(fd)


def test_a_fifo_swapped_in_after_the_check_is_still_refused(ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: a regular file at lstat time, a pipe at open time. The fstat after the open refuses it."""
    from cairn.storage import local

    real_stat = os.stat
    target = ckpt / "state.msgpack"

    def stat_then_swap(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        result = real_stat(path, *args, **kwargs)
        if path == "state.msgpack" and target.is_file() and not target.is_fifo():
            _make_fifo(target)
        return result

    monkeypatch.setattr(local.os, "stat", stat_then_swap)
    with pytest.raises(cairn.CorruptCheckpointError, match="named pipe"):
        _run_guarded(lambda: local.LocalStorage().read_file(str(target)), target)


def _iter_files(root: Path) -> Iterator[Path]:
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            yield Path(dirpath) / f


def test_regular_checkpoint_still_loads(ckpt: Path) -> None:
    """The control: nothing swapped, every entry point works."""
    assert all(p.is_file() for p in _iter_files(ckpt))
    assert cairn.verify_checkpoint(ckpt) == []
    Agent(N).restore_from_path(ckpt)
    Agent.from_checkpoint(ckpt)
