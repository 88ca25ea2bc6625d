"""Choosing the storage for a path: local paths, ``file://``, fsspec URIs, ``filesystem=``, missing extras."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from storage_backends import Backend
from storage_components import Agent, expected_state

import cairn
from cairn.cli import main as cli_main
from cairn.errors import CheckpointError
from cairn.storage import FsspecStorage, LocalStorage, resolve_storage
from cairn.testing import assert_states_equal


def test_local_forms(tmp_path: Path) -> None:
    """A plain path, a ``file://`` URI and ``filesystem=LocalFileSystem()`` all use the atomic-rename storage."""
    for path, fs in (
        (str(tmp_path / "a"), None),
        (f"file://{tmp_path}/b", None),
        (tmp_path / "c", None),
        (str(tmp_path / "d"), LocalFileSystem()),
    ):
        storage, where = resolve_storage(path, fs)
        assert isinstance(storage, LocalStorage), path
        assert where.startswith(str(tmp_path))
    agent = Agent(4)
    agent.set_step(2)
    agent.save_to_path(f"file://{tmp_path}/ckpt")
    got = Agent(4)
    got.restore_from_path(tmp_path / "ckpt")
    assert_states_equal(expected_state(2, 4), got.get_state())
    assert cairn.verify_checkpoint(f"file://{tmp_path}/ckpt") == []


def test_remote_forms() -> None:
    """``memory://`` and other fsspec URIs use the commit-marker storage."""
    storage, where = resolve_storage("memory://cairn-tests/resolve/x")
    assert isinstance(storage, FsspecStorage)
    assert storage.uri(where) == "memory:///cairn-tests/resolve/x"


def test_unknown_protocol() -> None:
    """An unknown protocol is a CheckpointError naming it."""
    with pytest.raises(cairn.CheckpointError, match="unknown storage protocol 'nosuch'"):
        resolve_storage("nosuch://bucket/x")


def test_missing_backend_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing backend package: the error says what to install (the cairn extra for S3)."""
    loaded = sys.modules["fsspec.registry"]._registry  # classes fsspec imported already
    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs now raises ImportError
    monkeypatch.delitem(loaded, "s3", raising=False)
    with pytest.raises(cairn.CheckpointError, match=r"pip install 'cairn-rl\[s3\]'"):
        resolve_storage("s3://bucket/ckpt")
    monkeypatch.setitem(sys.modules, "gcsfs", None)
    monkeypatch.delitem(loaded, "gs", raising=False)
    with pytest.raises(cairn.CheckpointError, match="pip install gcsfs"):
        resolve_storage("gs://bucket/ckpt")


def test_cli_inspect_and_ls(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """``cairn inspect`` and ``cairn ls`` work on every backend."""
    mgr = cairn.CheckpointManager(backend.uri("run"), keep_last=2)
    agent = Agent(4)
    for step in range(3):
        agent.set_step(step)
        mgr.save(agent, step, metrics={"env_runners/episode_return_mean": float(step)})
    capsys.readouterr()
    assert cli_main(["ls", backend.uri("run"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["latest"] and rows[-1]["best"]
    assert cli_main(["inspect", backend.uri("run", "step_000000002"), "--json"]) == 0
    infos = json.loads(capsys.readouterr().out)
    assert {i["path"] for i in infos} == {".", "policy", "stats", "group", "group/a", "group/b"}


def test_memory_instances_share_one_store() -> None:
    """memory:// is one store per process: a separate MemoryFileSystem() sees what a URI save wrote."""
    Agent(4).save_to_path("memory://cairn-tests/resolve/shared")
    fs = fsspec.filesystem("memory", skip_instance_cache=True)
    try:
        assert fs.exists("/cairn-tests/resolve/shared/manifest.json")
    finally:
        fs.rm("/cairn-tests/resolve", recursive=True)


def test_cli_diff_and_extract(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    """``cairn diff`` and ``cairn extract`` work on every backend."""
    a, b = Agent(4), Agent(4)
    a.set_step(1)
    b.set_step(2)
    a.save_to_path(backend.uri("a"))
    a.save_to_path(backend.uri("a2"))
    b.save_to_path(backend.uri("b"))
    assert cli_main(["diff", backend.uri("a"), backend.uri("a2")]) == 0
    assert cli_main(["diff", backend.uri("a"), backend.uri("b"), "--json"]) == 1
    capsys.readouterr()
    assert cli_main(["extract", backend.uri("b"), "group/a", backend.uri("extracted")]) == 0
    leaf = cairn.Checkpointable.from_checkpoint(backend.uri("extracted"))
    assert_states_equal(b.group.a.get_state(), leaf.get_state())
    assert cairn.verify_checkpoint(backend.uri("extracted")) == []


def test_a_process_without_credentials_says_so_and_how_to_give_them(
    moto_s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray worker whose node has no S3 credentials: the error names the missing credentials and their sources."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)  # config files point at nothing, instance metadata is off
    storage, root = resolve_storage(f"{moto_s3.bucket}/no-credentials", moto_s3.filesystem())
    with pytest.raises(CheckpointError, match="found no credentials for the object store") as info:
        storage.write_file(storage.join(root, "x"), [b"x"])
    assert "AWS_ACCESS_KEY_ID" in str(info.value) and "KubeRay" in str(info.value)
    assert "NoCredentialsError" in str(info.value)
    with pytest.raises(CheckpointError, match="found no credentials"):
        storage.begin_write(root)  # the first calls of a save read records in one batch: the same error
