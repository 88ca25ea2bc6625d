"""The same contract on every backend: local disk, ``memory://`` and S3 (moto on 127.0.0.1).

save / restore / partial restore / from_checkpoint / verify / the CLI / the
CheckpointManager (retention, latest, best, incremental reuse by hard links or
server-side copies), through URIs and through ``filesystem=``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from storage_backends import Backend, MotoS3
from storage_components import Agent, ArrayLeaf, Group, TorchLeaf, expected_state

import cairn
from cairn._tree import component_tree, find_component
from cairn.cli import main as cli_main
from cairn.testing import assert_states_equal, states_equal

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

pytest.importorskip("torch")

N = 16


def _saved(backend: Backend, step: int = 7, name: str = "ckpt") -> tuple[Agent, str]:
    agent = Agent(N, with_torch=True)
    agent.set_step(step)
    path = agent.save_to_path(backend.uri(name))
    return agent, path


def _flip(backend: Backend, rel: str) -> None:
    path = backend.path(rel)
    data = bytearray(backend.fs.cat_file(path))
    data[len(data) // 2] ^= 0xFF
    backend.fs.pipe_file(path, bytes(data))


# ---------------------------------------------------------------------------- save and restore


def test_round_trip(backend: Backend) -> None:
    """A save through the URI restores bit for bit, types included, and returns the URI."""
    agent, path = _saved(backend)
    assert path == backend.uri("ckpt")
    fresh = Agent(N, with_torch=True)
    assert not states_equal(fresh.get_state(), agent.get_state())
    fresh.restore_from_path(path)
    assert_states_equal(agent.get_state(), fresh.get_state())
    assert isinstance(fresh.extra["tuple"], tuple)
    assert backend.fs.exists(backend.path("ckpt", "manifest.json"))


def test_filesystem_argument(backend: Backend) -> None:
    """``filesystem=`` with a path on it works for save, restore, from_checkpoint and verify."""
    agent = Agent(N, with_torch=True)
    agent.set_step(3)
    agent.save_to_path(backend.path("viafs"), filesystem=backend.fs)
    fresh = Agent(N, with_torch=True)
    fresh.restore_from_path(backend.path("viafs"), filesystem=backend.fs)
    assert_states_equal(agent.get_state(), fresh.get_state())
    rebuilt = Agent.from_checkpoint(backend.path("viafs"), filesystem=backend.fs)
    assert_states_equal(agent.get_state(), rebuilt.get_state())
    assert cairn.verify_checkpoint(backend.path("viafs"), filesystem=backend.fs) == []
    # ... and the same checkpoint is reachable by URI.
    fresh2 = Agent(N, with_torch=True)
    fresh2.restore_from_path(backend.uri("viafs"))
    assert_states_equal(agent.get_state(), fresh2.get_state())


def test_overwrite_replaces_whole_checkpoint(backend: Backend) -> None:
    """Saving over a checkpoint replaces it entirely (no file of the old one survives)."""
    _saved(backend, step=1)
    small = Agent(N, with_torch=True)
    small.set_step(2)
    state = small.get_state(not_components="group")
    small.save_to_path(backend.uri("ckpt"), state=state)
    fresh = Agent(N, with_torch=True)
    before_group = fresh.group.get_state()
    fresh.restore_from_path(backend.uri("ckpt"))
    assert fresh.step == 2
    assert_states_equal(before_group, fresh.group.get_state())  # no group folder any more
    backend.fs.invalidate_cache()
    assert not backend.fs.exists(backend.path("ckpt", "group"))
    assert cairn.verify_checkpoint(backend.uri("ckpt")) == []


def test_partial_restore(backend: Backend) -> None:
    """Each component restores alone from its own folder; the rest of the object is untouched."""
    agent, path = _saved(backend, step=9)
    for comp in component_tree(agent):
        fresh = Agent(N, with_torch=True)
        before_rest = fresh.get_state(not_components=comp)
        fresh.restore_from_path(f"{path}/{comp}", component=comp)
        assert_states_equal(find_component(agent, comp).get_state(), find_component(fresh, comp).get_state())
        assert_states_equal(before_rest, fresh.get_state(not_components=comp))


def test_partial_restore_reads_only_that_component(backend: Backend) -> None:
    """Damage outside a component does not stop that component's restore (it is never read)."""
    _, path = _saved(backend, step=4)
    _flip(backend, "ckpt/state.msgpack")
    _flip(backend, "ckpt/policy/tensors.safetensors")
    fresh = Agent(N, with_torch=True)
    fresh.restore_from_path(f"{path}/group/a", component="group/a")
    assert_states_equal(expected_state(4, N, with_torch=True)["group"]["a"], fresh.group.a.get_state())


def test_from_checkpoint(backend: Backend) -> None:
    """from_checkpoint rebuilds the recorded class with its arguments; subfolders stand alone."""
    agent, path = _saved(backend, step=5)
    rebuilt = Agent.from_checkpoint(path)
    assert type(rebuilt) is Agent and rebuilt.n == N and rebuilt.with_torch
    assert_states_equal(agent.get_state(), rebuilt.get_state())
    policy = TorchLeaf.from_checkpoint(f"{path}/policy")
    assert_states_equal(agent.policy.get_state(), policy.get_state())
    group = cairn.Checkpointable.from_checkpoint(f"{path}/group")
    assert type(group) is Group
    assert_states_equal(agent.group.get_state(), group.get_state())
    with pytest.raises(cairn.IncompatibleCheckpointError):
        ArrayLeaf.from_checkpoint(path)
    small = Agent.from_checkpoint(path, n=N)  # an override equal to the recorded value
    assert_states_equal(agent.get_state(), small.get_state())


def test_missing_checkpoint(backend: Backend) -> None:
    """No checkpoint: CheckpointNotFoundError (also a FileNotFoundError) everywhere."""
    fresh = Agent(N, with_torch=True)
    for call in (
        lambda: fresh.restore_from_path(backend.uri("nothing")),
        lambda: Agent.from_checkpoint(backend.uri("nothing")),
        lambda: cairn.verify_checkpoint(backend.uri("nothing")),
    ):
        with pytest.raises(cairn.CheckpointNotFoundError) as info:
            call()
        assert isinstance(info.value, FileNotFoundError)
        assert "nothing" in str(info.value)


def test_folder_without_manifest_is_absent(backend: Backend) -> None:
    """A folder whose root manifest is missing is not a checkpoint (the commit marker)."""
    _saved(backend)
    backend.fs.rm_file(backend.path("ckpt", "manifest.json"))
    with pytest.raises(cairn.CheckpointNotFoundError):
        Agent(N, with_torch=True).restore_from_path(backend.uri("ckpt"))
    with pytest.raises(cairn.CheckpointNotFoundError):
        cairn.verify_checkpoint(backend.uri("ckpt"))


# ---------------------------------------------------------------------------- verify


def test_verify_sound_and_broken(backend: Backend) -> None:
    """verify_checkpoint returns nothing for a sound checkpoint and names every broken file."""
    _, path = _saved(backend)
    assert cairn.verify_checkpoint(path) == []
    broken = ["ckpt/state.msgpack", "ckpt/policy/tensors.safetensors", "ckpt/group/b/metadata.json"]
    for rel in broken:
        _flip(backend, rel)
    problems = cairn.verify_checkpoint(path)
    assert len(problems) == len(broken), problems
    for rel in broken:
        assert any(backend.uri(rel) in p for p in problems), (rel, problems)


def _run_cli(backend: Backend, *args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run ``cairn`` in a child process (local, S3) or in-process (memory:// lives in this process)."""
    if backend.name == "memory":
        code = cli_main(list(args))
        out = capsys.readouterr()
        return code, out.out + out.err
    proc = subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        env=backend.child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_cli_verify(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """``cairn verify``: 0 when sound, 1 naming every broken file, 2 without a checkpoint."""
    _, path = _saved(backend)
    code, out = _run_cli(backend, "verify", path, capsys=capsys)
    assert code == 0, out
    broken = ["ckpt/policy/state.msgpack", "ckpt/stats/ctor.json", "ckpt/group/a/tensors.safetensors"]
    for rel in broken:
        _flip(backend, rel)
    code, out = _run_cli(backend, "verify", path, capsys=capsys)
    assert code == 1, out
    for rel in broken:
        assert backend.uri(rel) in out, (rel, out)
    backend.fs.rm_file(backend.path("ckpt", "group", "a", "manifest.json"))
    code, out = _run_cli(backend, "verify", path, capsys=capsys)
    assert code == 1 and backend.uri("ckpt/group/a/manifest.json") in out, out
    code, out = _run_cli(backend, "verify", backend.uri("nothing"), capsys=capsys)
    assert code == 2, out
    assert "nothing" in out


def test_cli_verify_endpoint_from_fsspec_env(moto_s3: MotoS3) -> None:
    """The CLI also reaches a custom endpoint through fsspec's FSSPEC_S3_ENDPOINT_URL."""
    agent = Agent(4)
    uri = f"s3://{moto_s3.bucket}/fsspec-env/ckpt"
    agent.save_to_path(uri)
    env = {k: v for k, v in {**os.environ, **moto_s3.env}.items() if k != "AWS_ENDPOINT_URL"}
    env["FSSPEC_S3_ENDPOINT_URL"] = moto_s3.endpoint_url
    proc = subprocess.run(
        [sys.executable, "-m", "cairn", "verify", uri], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- the manager


def test_manager(backend: Backend) -> None:
    """Several steps, retention, latest/best, restore_latest and incremental reuse on each backend."""
    agent = Agent(N, with_torch=True)
    mgr = cairn.CheckpointManager(backend.uri("run"), keep_last=2, keep_best=1, metric="score", mode="max")
    scores = {0: 1.0, 1: 9.0, 2: 3.0, 3: 2.0, 4: 5.0}
    for step, score in scores.items():
        agent.set_step(step)
        mgr.save(agent, step, metrics={"score": score})
        stats = mgr.last_stats
        assert stats is not None
        if step > 0:
            # group/b never changes, ctor.json never changes: reused, not written again.
            assert stats.files_linked >= 4, stats
    assert [i.step for i in mgr.checkpoints()] == [1, 3, 4]
    latest = mgr.latest()
    assert latest is not None and latest.endswith("step_000000004")
    best = mgr.best()
    assert best is not None and best.endswith("step_000000001")
    fresh = Agent(N, with_torch=True)
    info = mgr.restore_latest(fresh)
    assert info is not None and info.step == 4 and info.metrics == {"score": 5.0}
    assert_states_equal(expected_state(4, N, with_torch=True), fresh.get_state())
    # Every kept step folder is complete on its own, even after older ones were deleted.
    for ckpt in mgr.checkpoints():
        assert cairn.verify_checkpoint(ckpt.path) == [], ckpt
        got = Agent.from_checkpoint(ckpt.path)
        assert_states_equal(expected_state(ckpt.step, N, with_torch=True), got.get_state())
    # A second manager on the same root sees the same checkpoints.
    again = cairn.CheckpointManager(backend.uri("run"), keep_last=2)
    assert [i.step for i in again.checkpoints()] == [1, 3, 4]


def test_manager_async(backend: Backend) -> None:
    """Async saves snapshot the state before returning and commit in the background."""
    agent = Agent(N, with_torch=True)
    with cairn.CheckpointManager(backend.uri("run"), keep_last=3, async_save=True) as mgr:
        for step in range(4):
            agent.set_step(step)
            mgr.save(agent, step)
            agent.set_step(100 + step)  # training goes on; the snapshot is unaffected
        mgr.wait()
        assert [i.step for i in mgr.checkpoints()] == [1, 2, 3]
        fresh = Agent(N, with_torch=True)
        mgr.restore_latest(fresh)
        assert_states_equal(expected_state(3, N, with_torch=True), fresh.get_state())


def test_manager_cleans_uncommitted(backend: Backend) -> None:
    """A step folder without a committed manifest is never listed and is cleaned up."""
    agent = Agent(N)
    mgr = cairn.CheckpointManager(backend.uri("run"))
    mgr.save(agent, 1)
    agent.set_step(2)
    mgr.save(agent, 2)
    backend.fs.rm_file(backend.path("run", "step_000000002", "manifest.json"))
    assert [i.step for i in mgr.checkpoints()] == [1]
    assert mgr.latest() == backend.uri("run", "step_000000001")
    reader = cairn.CheckpointManager(backend.uri("run"))  # opened only to read: deletes nothing
    reader.checkpoints()
    backend.fs.invalidate_cache()
    assert backend.fs.exists(backend.path("run", "step_000000002", "state.msgpack"))
    writer = cairn.CheckpointManager(backend.uri("run"))
    agent.set_step(3)
    writer.save(agent, 3)  # the first save of a writer cleans up what interrupted saves left
    backend.fs.invalidate_cache()
    assert not backend.fs.exists(backend.path("run", "step_000000002"))


# ---------------------------------------------------------------------------- S3 with caches on


def test_s3_default_caches_see_other_writers(moto_s3: MotoS3) -> None:
    """With s3fs's default (cached) instance, reads see what another client wrote since.

    The reader lists and reads first (filling its listing cache); a second,
    independent client then adds, replaces and deletes checkpoints; the reader
    must see each change.
    """
    import fsspec

    root = f"s3://{moto_s3.bucket}/caches/run"
    writer_fs = moto_s3.filesystem()  # its own client, no shared cache
    reader = cairn.CheckpointManager(root)  # resolves s3:// to fsspec's default, cached instance
    default_fs = fsspec.filesystem("s3")
    assert default_fs.dircache.use_listings_cache
    writer = cairn.CheckpointManager(root.removeprefix("s3://"), filesystem=writer_fs)

    agent = Agent(N)
    writer.save(agent, 1)
    assert reader.latest() == f"{root}/step_000000001"
    default_fs.ls(f"{moto_s3.bucket}/caches/run/step_000000001")  # fill more of the cache
    agent.set_step(2)
    writer.save(agent, 2)
    assert reader.latest() == f"{root}/step_000000002"
    fresh = Agent(N)
    reader.restore_latest(fresh)
    assert_states_equal(expected_state(2, N), fresh.get_state())
    # Replace step 2 with other values through the writer; the reader restores the new ones.
    agent.set_step(5)
    agent.save_to_path(f"{moto_s3.bucket}/caches/run/step_000000002", filesystem=writer_fs)
    fresh = Agent(N)
    reader.restore_latest(fresh)
    assert_states_equal(expected_state(5, N), fresh.get_state())
    # Delete it through the writer: the reader falls back to step 1.
    writer_fs.rm(f"{moto_s3.bucket}/caches/run/step_000000002", recursive=True)
    assert reader.latest() == f"{root}/step_000000001"
    with pytest.raises(cairn.CheckpointNotFoundError):
        Agent(N).restore_from_path(f"{root}/step_000000002")


def test_s3_multipart_upload(moto_s3: MotoS3) -> None:
    """Files larger than s3fs's block size go up in several parts; they restore exactly."""
    fs = moto_s3.filesystem(default_block_size=5 * 2**20)  # S3's smallest part size
    agent = Agent(1_600_000)  # 6.4 MB per leaf: each tensor file needs two parts
    agent.set_step(4)
    path = f"{moto_s3.bucket}/multipart/ckpt"
    agent.save_to_path(path, filesystem=fs)
    assert fs.size(f"{path}/stats/tensors.safetensors") > fs.default_block_size
    got = Agent(1_600_000)
    got.restore_from_path(path, filesystem=fs)
    assert_states_equal(agent.get_state(), got.get_state())
