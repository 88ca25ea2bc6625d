"""Several writers on one root (SPEC 8, "Concurrency"), and saves killed half-way on object stores.

* A writer never deletes another writer's save in flight: a second manager's
  cleanup leaves it alone (trust issue 13, item 4), two processes saving through
  new managers on one root raise nothing but ``CheckpointError`` and every
  committed checkpoint verifies (item 11a).
* A save whose staging another writer removed fails instead of committing.
* Leftovers (staging folders, ``-deleting`` folders, uncommitted folders on
  object stores) go with the next save once their writer is gone (its process
  is dead, or its heartbeat is stale), never with a reader.
* On object stores, no sub-folder of an uncommitted save loads on its own (item 7).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from storage_backends import Backend
from storage_components import Agent, ArrayLeaf, expected_state
from storage_faults import FaultyFS

import cairn
from cairn._reader import FolderReader
from cairn.manager import POINTER, STEP_RE
from cairn.storage import LocalStorage, resolve_storage, writers
from cairn.testing import assert_states_equal

CHILD = str(Path(__file__).with_name("storage_writers_child.py"))
N = 8


def _agent(step: int, n: int = N) -> Agent:
    agent = Agent(n)
    agent.set_step(step)
    return agent


def _committed_steps(root_uri: str) -> list[int]:
    """Steps whose folder under ``root_uri`` reads as committed."""
    storage, root = resolve_storage(root_uri)
    steps = []
    for name in storage.listdir(root):
        m = STEP_RE.match(name)
        if not m:
            continue
        try:
            FolderReader(storage, storage.join(root, name)).manifest  # noqa: B018
        except cairn.CheckpointNotFoundError:
            continue
        steps.append(int(m.group(1)))
    return sorted(steps)


def _all_verify(root_uri: str, n: int = N) -> list[int]:
    """Every committed step verifies and restores to its own values; returns the steps."""
    steps = _committed_steps(root_uri)
    sep = "/" if "://" in root_uri else os.sep
    for step in steps:
        uri = f"{root_uri}{sep}step_{step:09d}"
        assert cairn.verify_checkpoint(uri) == [], uri
        got = Agent(n)
        got.restore_from_path(uri)
        assert_states_equal(expected_state(step, n), got.get_state())
    return steps


def _leftovers(backend: Backend, folder: str) -> list[str]:
    """What is under ``folder`` besides committed step folders (hidden names, uncommitted folders, markers)."""
    fs = backend.fs
    fs.invalidate_cache()
    out = []
    for entry in fs.ls(backend.path(folder), detail=False):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name == POINTER:
            continue  # the manager's pointer file to the newest step: no leftover
        if not STEP_RE.match(name):
            out.append(name)
            continue
        if not fs.exists(f"{entry.rstrip('/')}/manifest.json"):
            out.append(name)
        elif fs.exists(f"{entry.rstrip('/')}/{writers.INFLIGHT}"):
            out.append(f"{name}/{writers.INFLIGHT}")
    return sorted(out)


# ---------------------------------------------------------------------------- item 4: a second manager's cleanup


def test_second_manager_leaves_a_save_in_flight_alone(backend: Backend) -> None:
    """Manager B's first save runs while manager A is half-way through a save: both commit, both verify."""
    root = backend.uri("run")
    done: list[str] = []

    def second_manager_saves() -> None:
        if not done:
            done.append("B")
            cairn.CheckpointManager(root).save(_agent(2), 2)  # its first save cleans up leftovers

    if backend.name == "local":
        real = LocalStorage.write_file

        def probing(self: LocalStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
            if f"{os.sep}group{os.sep}" in path and "step_000000001" in path:
                second_manager_saves()
            return real(self, path, chunks, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(LocalStorage, "write_file", probing)
            cairn.CheckpointManager(root).save(_agent(1), 1)
    else:

        def probe(method: str, path: str) -> None:
            if "step_000000001/group/" in path:
                second_manager_saves()

        faulty = FaultyFS(backend.fs, probe=probe)
        cairn.CheckpointManager(backend.path("run"), filesystem=faulty).save(_agent(1), 1)
    assert done == ["B"]
    assert _all_verify(root) == [1, 2]
    assert [i.step for i in cairn.CheckpointManager(root).checkpoints()] == [1, 2]
    cairn.CheckpointManager(root).save(_agent(3), 3)
    assert _leftovers(backend, "run") == []


# ---------------------------------------------------------------------------- a staging removed under a writer


def test_save_whose_staging_was_removed_fails(backend: Backend) -> None:
    """Another writer removes a save's staging half-way (it judged it stale): the save fails, commits nothing."""
    target = backend.uri("ckpt")
    removed: list[str] = []

    def remove_staging() -> None:
        if removed:
            return
        if backend.name == "local":
            parent = Path(backend.base)
            for name in os.listdir(parent):
                if name.startswith(".ckpt" + writers.TMP_MARK):
                    p = parent / name
                    shutil.rmtree(p) if p.is_dir() else p.unlink()
                    removed.append(name)
        else:
            backend.fs.invalidate_cache()
            backend.fs.rm(backend.path("ckpt"), recursive=True)
            removed.append("ckpt")

    if backend.name == "local":
        real = LocalStorage.write_file

        def probing(self: LocalStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
            if f"{os.sep}group{os.sep}b{os.sep}" in path:
                remove_staging()
            return real(self, path, chunks, **kwargs)

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(LocalStorage, "write_file", probing)
            with pytest.raises(cairn.CheckpointError, match=r"removed|not its own|lost"):
                _agent(1).save_to_path(target)
    else:
        faulty = FaultyFS(backend.fs, probe=lambda _m, p: remove_staging() if "ckpt/group/b/" in p else None)
        with pytest.raises(cairn.CheckpointError, match=r"removed|not its own|lost"):
            _agent(1).save_to_path(backend.path("ckpt"), filesystem=faulty)
    assert removed
    with pytest.raises(cairn.CheckpointNotFoundError):
        Agent(N).restore_from_path(target)
    with pytest.raises(cairn.CheckpointNotFoundError):
        Agent(N).restore_from_path(backend.uri("ckpt", "group"))
    _agent(2).save_to_path(target)  # the path is usable again
    assert cairn.verify_checkpoint(target) == []
    if backend.name == "local":
        assert [n for n in os.listdir(backend.base) if writers.TMP_MARK in n] == []


# ---------------------------------------------------------------------------- item 11a: two processes


def _run_writers(root: str, env: dict[str, str], procs: int, count: int) -> list[dict[str, Any]]:
    children = [
        subprocess.Popen(
            [sys.executable, CHILD, "loop", root, "0", str(count), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for i in range(procs)
    ]
    outcomes: list[dict[str, Any]] = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-3000:]
        outcomes += [json.loads(line) for line in out.splitlines()]
    assert len(outcomes) == procs * count
    return outcomes


@pytest.mark.parametrize("name", ["local", "s3"])
def test_two_processes_save_to_one_root(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Two processes save the same steps through new managers: only CheckpointErrors, all committed verify.

    Then a save once both are gone leaves no leftover at all.
    """
    from storage_backends import make_backend

    backend = next(make_backend(name, tmp_path, request))
    root = backend.uri("run")
    count = 12 if name == "local" else 6
    outcomes = _run_writers(root, backend.child_env(), procs=2, count=count)
    bad = [o for o in outcomes if o["type"] not in (None, "CheckpointError")]
    assert bad == [], bad
    failed = [o for o in outcomes if o["error"]]
    print(f"{len(failed)} of {len(outcomes)} saves failed with a CheckpointError: {failed[:3]}")
    assert len(failed) < len(outcomes)
    steps = _all_verify(root, n=2000)
    assert steps and max(steps) == count - 1
    cairn.CheckpointManager(root, keep_last=2).save(_agent(count, 2000), count)
    assert _leftovers(backend, "run") == []
    assert _all_verify(root, n=2000)[-1] == count


# ---------------------------------------------------------------------------- item 7: a killed save's sub-folder


def test_killed_save_sub_folder_is_not_a_checkpoint(
    moto_s3: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """On S3, a save killed after ``group/a/manifest.json``: ``ckpt/group/a`` does not load on its own."""
    from storage_backends import make_backend

    backend = next(make_backend("s3", tmp_path, request))
    ckpt = backend.uri("ckpt")
    child = subprocess.run(
        [sys.executable, CHILD, "killed", ckpt], env=backend.child_env(), capture_output=True, text=True, timeout=300
    )
    assert child.returncode == -9, child.stderr[-3000:]
    sub = backend.uri("ckpt", "group", "a")
    backend.fs.invalidate_cache()
    assert backend.fs.exists(backend.path("ckpt", "group", "a", "manifest.json"))  # the sub-folder looks complete
    with pytest.raises(cairn.CheckpointNotFoundError, match="not committed"):
        ArrayLeaf.from_checkpoint(sub)
    with pytest.raises(cairn.CheckpointNotFoundError, match="not committed"):
        ArrayLeaf(N, seed=3).restore_from_path(sub)
    with pytest.raises(cairn.CheckpointNotFoundError):
        cairn.verify_checkpoint(sub)
    with pytest.raises(cairn.CheckpointNotFoundError):
        Agent(N).restore_from_path(ckpt)
    # The writer is gone (its process is dead): the next save to the path takes it over.
    _agent(8).save_to_path(ckpt)
    leaf = ArrayLeaf.from_checkpoint(sub)
    assert_states_equal(expected_state(8, N)["group"]["a"], leaf.get_state())
    assert not backend.fs.exists(backend.path("ckpt", writers.INFLIGHT))


# ---------------------------------------------------------------------------- leftovers and heartbeats


def _foreign_owner(age: float) -> writers.Owner:
    """The owner record of a writer on another machine whose last heartbeat was ``age`` seconds ago."""
    now = time.time()
    return writers.Owner(
        id="0123456789ab", host="elsewhere", machine="elsewhere/boot/0", pid=4242, pid_start=None, beat=now - age
    )


def test_leftovers_go_once_stale_never_before(backend: Backend) -> None:
    """A save in flight on another machine is kept while its heartbeat is fresh, removed once stale."""
    root = backend.uri("run")
    cairn.CheckpointManager(root).save(_agent(1), 1)
    _storage, path = resolve_storage(root)
    fresh, stale = _foreign_owner(1.0), _foreign_owner(writers.STALE_AFTER + 60)
    if backend.name == "local":
        run = Path(path)
        for step, owner in ((5, fresh), (6, stale)):
            staging = run / writers.tmp_name(f"step_{step:09d}", owner.id)
            staging.mkdir()
            (staging / "state.msgpack").write_bytes(b"partial")
            marker = Path(f"{staging}{writers.OWNER_SUFFIX}")
            marker.write_bytes(owner.to_bytes())
            os.utime(marker, (owner.beat, owner.beat))
        # What interrupted deletes left, in this version's and in the earlier version's naming.
        (run / writers.tmp_name("step_000000002", "aaaaaaaaaaaa", writers.DELETING_SUFFIX)).mkdir()
        (run / "..step_000000003.cairn-tmp-abcdef123456.cairn-tmp-0a1b2c3d4e5f-deleting").mkdir()
    else:
        fs = backend.fs
        for step, owner in ((5, fresh), (6, stale)):
            fs.pipe_file(backend.path("run", f"step_{step:09d}", writers.INFLIGHT), owner.to_bytes())
            fs.pipe_file(backend.path("run", f"step_{step:09d}", "group", "a", "state.msgpack"), b"partial")
        fs.pipe_file(backend.path("run", "step_000000002", "state.msgpack"), b"no marker, no manifest")
    cairn.CheckpointManager(root).checkpoints()  # a reader (cairn ls) deletes nothing
    before = _leftovers(backend, "run")
    assert len(before) == (6 if backend.name == "local" else 3), before
    cairn.CheckpointManager(root).save(_agent(7), 7)
    after = _leftovers(backend, "run")
    if backend.name == "local":
        assert after == sorted(
            [
                f".step_000000005{writers.TMP_MARK}{fresh.id}",
                f".step_000000005{writers.TMP_MARK}{fresh.id}{writers.OWNER_SUFFIX}",
            ]
        )
    else:
        assert after == ["step_000000005"]
    assert _all_verify(root) == [1, 7]


def test_save_refused_while_another_writer_holds_the_path(remote_backend: Backend) -> None:
    """On object stores a save never writes into another live writer's save; a stale one is taken over."""
    fs = remote_backend.fs
    marker = remote_backend.path("ckpt", writers.INFLIGHT)
    fs.pipe_file(marker, _foreign_owner(1.0).to_bytes())
    with pytest.raises(cairn.CheckpointError, match="another save"):
        _agent(1).save_to_path(remote_backend.uri("ckpt"))
    fs.invalidate_cache()
    assert fs.cat_file(marker) == _foreign_owner(1.0).to_bytes()[:0] + fs.cat_file(marker)  # untouched
    fs.pipe_file(marker, _foreign_owner(writers.STALE_AFTER + 60).to_bytes())
    _agent(1).save_to_path(remote_backend.uri("ckpt"))
    assert cairn.verify_checkpoint(remote_backend.uri("ckpt")) == []
    fs.invalidate_cache()
    assert not fs.exists(marker)


def test_heartbeat_keeps_a_slow_save_fresh(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """During a save slower than the stale threshold, the owner record's heartbeat is renewed.

    The save is held at two points for longer than the stale threshold; each time, the test waits
    until the record shows a beat newer than the moment the save was held. It asserts no age: on a
    loaded machine (CI) a beat may land late, and an age bound failed there (1.7 s against 0.8 s),
    so it checks that the beat is renewed while the save waits, which a save without a heartbeat
    never shows (the wait's cap, 120 s, only bounds a broken heartbeat's run).
    """
    monkeypatch.setenv(writers.STALE_AFTER_ENV, "0.8")  # a heartbeat every 0.2 s
    renewed: list[bool] = []

    def last_beat() -> float:
        if backend.name == "local":
            records = [n for n in os.listdir(backend.base) if n.endswith(writers.OWNER_SUFFIX)]
            assert len(records) == 1, records
            return os.stat(os.path.join(backend.base, records[0])).st_mtime
        backend.fs.invalidate_cache()
        owner = writers.Owner.from_bytes(backend.fs.cat_file(backend.path("ckpt", writers.INFLIGHT)))
        assert owner is not None
        return owner.beat

    def slow(path: str) -> None:
        if "group" in path and "manifest.json" in path and len(renewed) < 2:
            held = time.time()
            time.sleep(1.2)  # longer than the stale threshold
            cap = time.monotonic() + 120
            while last_beat() <= held and time.monotonic() < cap:
                time.sleep(0.05)
            renewed.append(last_beat() > held)

    if backend.name == "local":
        real = LocalStorage.write_file

        def probing(self: LocalStorage, path: str, chunks: Any, **kwargs: Any) -> Any:
            slow(path)
            return real(self, path, chunks, **kwargs)

        monkeypatch.setattr(LocalStorage, "write_file", probing)
        _agent(1).save_to_path(backend.uri("ckpt"))
        monkeypatch.undo()
    else:
        faulty = FaultyFS(backend.fs, probe=lambda _m, p: slow(p))
        _agent(1).save_to_path(backend.path("ckpt"), filesystem=faulty)
    assert renewed == [True, True], renewed
    assert cairn.verify_checkpoint(backend.uri("ckpt")) == []


def test_save_to_path_removes_a_dead_writers_staging(tmp_path: Path) -> None:
    """A local save killed half-way leaves a staging folder; the next save to that path removes it.

    A staging folder of a process that still runs (here: this machine's pid 1) stays.
    """
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    now = time.time()
    for wid, pid in (("dead00000000", dead_pid), ("alive0000000", 1)):
        owner = writers.Owner(id=wid, host="here", machine=writers.MACHINE, pid=pid, pid_start=None, beat=now)
        staging = tmp_path / writers.tmp_name("ckpt", wid)
        (staging / "policy").mkdir(parents=True)
        Path(f"{staging}{writers.OWNER_SUFFIX}").write_bytes(owner.to_bytes())
    _agent(1).save_to_path(str(tmp_path / "ckpt"))
    alive = writers.tmp_name("ckpt", "alive0000000")
    assert sorted(os.listdir(tmp_path)) == [alive, alive + writers.OWNER_SUFFIX, "ckpt"]
    assert cairn.verify_checkpoint(str(tmp_path / "ckpt")) == []
