"""Recovery (SPEC 8): a manager falls back to the newest checkpoint that verifies, and keeps it.

Real files, damaged the way disks and people damage them: a byte flipped in a tensors file,
garbage in a root manifest or metadata, folders that are not a manager's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cairn
from cairn.manager import parse_step_folder, step_folder_name
from cairn.retention import RetentionPolicy, next_to_verify, steps_to_keep
from cairn.testing import assert_states_equal
from cairn_test_components import Tree
from log_helpers import warned

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files


def damage(folder: Path) -> Path:
    """Flip a byte in one tensors file of ``folder``, as a new file (a hard link to it elsewhere keeps its bytes)."""
    f = sorted(folder.rglob("tensors.safetensors"))[0]
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF
    f.unlink()
    f.write_bytes(bytes(data))
    return f


def run_of(root: Path, steps: list[int], **kw: object) -> tuple[cairn.CheckpointManager, dict[int, Tree]]:
    """A manager at ``root`` with a checkpoint at each step, each of another state."""
    mgr = cairn.CheckpointManager(root, **kw)  # type: ignore[arg-type]
    t = Tree()
    states = {}
    for step in steps:
        t.mutate()
        mgr.save(t, step, metrics={"ret": float(step)})
        snap = Tree()
        snap.set_state(t.get_state())
        states[step] = snap
    return mgr, states


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "cairn", *args], env=env, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- step folder names (item 10b)


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step_000000001", 1),
        ("step_000000000", 0),
        ("step_999999999", 999_999_999),
        ("step_1000000000", 1_000_000_000),
        ("step_0000000001", None),  # 10 digits for step 1: not the name we write
        ("step_\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0661", None),  # Arabic-Indic digits
        ("step_\uff10\uff10\uff10\uff10\uff10\uff10\uff10\uff10\uff11", None),  # full-width digits
        ("step_000000001\n", None),
        ("step_00000001", None),
        ("step_-00000001", None),
        ("xstep_000000001", None),
        ("step_000000001.old", None),
    ],
)
def test_only_canonical_step_folder_names(name: str, step: int | None) -> None:
    assert parse_step_folder(name) == step
    if step is not None:
        assert step_folder_name(step) == name


def test_foreign_step_folders_are_not_listed_nor_deleted(tmp_path: Path) -> None:
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1], keep_last=1)
    foreign = ["step_\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0660\u0662", "step_0000000002", "step_000000002\n"]
    for name in foreign:
        shutil.copytree(root / "step_000000001", root / name)  # valid checkpoints, under names not ours
    assert [i.step for i in mgr.checkpoints()] == [1]
    t = Tree()
    mgr.save(t, 3)
    mgr.save(t, 4)
    # Retention retired our own old steps and left the others alone: they are not ours.
    assert [i.step for i in mgr.checkpoints()] == [4]
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step_")) == sorted(["step_000000004", *foreign])
    assert mgr.latest() == str(root / "step_000000004")


# ---------------------------------------------------------------- restore_latest falls back (item 12)


def test_restore_latest_falls_back_to_the_newest_that_verifies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "run"
    mgr, states = run_of(root, [1, 2, 3])
    damage(root / "step_000000003")
    fresh = Tree()
    info = mgr.restore_latest(fresh)
    # A fallback is logged on cairn.manager, once per checkpoint skipped (not a `warnings` warning: docs/cli.md).
    assert len(warned(caplog)) == 1 and warned(caplog, r"step_000000003.*fails its checksum"), caplog.text
    assert [r.name for r in caplog.records if r.levelno == logging.WARNING] == ["cairn.manager"]
    assert info is not None and info.step == 2 and info.path == str(root / "step_000000002")
    assert_states_equal(fresh.get_state(), states[2].get_state())
    # latest() verifies by default (SPEC 6); the cheap answer still names the damaged one.
    assert mgr.latest(verified=False) == str(root / "step_000000003")
    assert mgr.latest() == mgr.latest(verified=True) == str(root / "step_000000002")
    latest = mgr.latest_info(verified=True)
    assert latest is not None and latest.step == 2
    assert mgr.verify(mgr.checkpoints()[-1]) and not mgr.verify(mgr.checkpoints()[1])


def test_restore_latest_skips_each_damaged_one_and_a_damaged_root_metadata(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "run"
    mgr, states = run_of(root, [1, 2, 3, 4])
    damage(root / "step_000000004")
    (root / "step_000000003" / "manifest.json").write_text("{not json")
    (root / "step_000000002" / "metadata.json").write_text("[]")
    fresh = Tree()
    info = mgr.restore_latest(fresh)
    assert info is not None and info.step == 1
    named = warned(caplog)
    assert len(named) == 3
    assert "step_000000004" in named[0] and "step_000000003" in named[1] and "step_000000002" in named[2]
    assert_states_equal(fresh.get_state(), states[1].get_state())


def test_when_none_verifies_nothing_is_applied_and_the_error_lists_them(tmp_path: Path) -> None:
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2])
    damage(root / "step_000000001")
    damage(root / "step_000000002")
    fresh = Tree()
    before = fresh.get_state()
    with pytest.raises(cairn.CorruptCheckpointError, match=r"step_000000002.*step_000000001.*ls --verify"):
        mgr.restore_latest(fresh)
    assert_states_equal(fresh.get_state(), before)  # a damaged checkpoint is never applied
    assert mgr.latest(verified=True) is None


def test_other_errors_do_not_fall_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint that is sound but does not fit is the caller's to see, not a reason to go back."""
    from cairn_test_components import Leaf

    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2])
    with pytest.raises(cairn.IncompatibleCheckpointError):
        mgr.restore_latest(Leaf())
    assert warned(caplog) == []  # nothing was skipped as damaged


def test_load_latest_gives_what_the_loader_returns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "run"
    mgr, states = run_of(root, [5, 7])
    damage(root / "step_000000007")
    found = mgr.load_latest(lambda info: Tree.from_checkpoint(info.path))
    assert warned(caplog, "step_000000007"), caplog.text
    assert found is not None
    info, tree = found
    assert info.step == 5 and isinstance(tree, Tree)
    assert_states_equal(tree.get_state(), states[5].get_state())
    assert cairn.CheckpointManager(tmp_path / "empty").load_latest(lambda info: 1) is None


# ---------------------------------------------------------------- listing never raises foreign errors


@pytest.mark.parametrize(
    "harm",
    [
        "metadata-garbage",
        "metadata-list",
        "metadata-bytes",
        "manifest-garbage",
        "manifest-dir",
        "manifest-missing",
        "step-is-file",
        "metadata-dir",
        "metadata-edited",
        "manifest-deep",
        "step-is-symlink",
    ],
)
def test_listing_damaged_step_folders_raises_nothing_foreign(tmp_path: Path, harm: str) -> None:
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2])
    step = root / "step_000000002"
    if harm == "metadata-garbage":
        (step / "metadata.json").write_text("{")
    elif harm == "metadata-list":
        (step / "metadata.json").write_text("[1, 2]")
    elif harm == "metadata-bytes":
        (step / "metadata.json").write_bytes(b"\xff\xfe\x00" * 50)
    elif harm == "manifest-garbage":
        (step / "manifest.json").write_bytes(os.urandom(300))
    elif harm == "manifest-dir":
        (step / "manifest.json").unlink()
        (step / "manifest.json").mkdir()
    elif harm == "manifest-missing":
        (step / "manifest.json").unlink()
    elif harm == "step-is-file":
        shutil.rmtree(step)
        step.write_text("not a folder")
    elif harm == "metadata-dir":
        (step / "metadata.json").unlink()
        (step / "metadata.json").mkdir()
    elif harm == "manifest-deep":
        (step / "manifest.json").write_text("[" * 200_000)
    elif harm == "step-is-symlink":
        shutil.rmtree(step)
        step.symlink_to(root / "step_000000001")
    elif harm == "metadata-edited":
        meta = json.loads((step / "metadata.json").read_text())
        meta["manager"] = {"metrics": [1, 2]}
        (step / "metadata.json").write_text(json.dumps(meta))
    try:
        infos = mgr.checkpoints()
        latest = mgr.latest()
        verified = mgr.latest(verified=True)
    except cairn.CheckpointError:
        return  # allowed; anything else is not
    assert infos[0].step == 1
    assert latest is not None and verified == str(root / "step_000000001")


def test_a_root_that_is_a_file_gives_a_checkpoint_error(tmp_path: Path) -> None:
    mgr = cairn.CheckpointManager(tmp_path / "run")
    (tmp_path / "run").rmdir()
    (tmp_path / "run").write_text("x")
    with contextlib.suppress(cairn.CheckpointError):  # allowed; anything else is not
        assert mgr.checkpoints() == [] and mgr.latest() is None


# ---------------------------------------------------------------- retention keeps the newest that verifies


R = RetentionPolicy


@pytest.mark.parametrize(
    ("steps", "policy", "verified", "keep"),
    [
        ([1, 2, 3], R(keep_last=1), None, {3}),
        ([1, 2, 3], R(keep_last=1), {3: True}, {3}),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: True}, {3, 2}),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: False, 1: True}, {3, 1}),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: False, 1: False}, {3}),  # nothing sound to keep
        ([1, 2, 3], R(keep_last=1), {3: False, 2: None, 1: True}, {3, 2, 1}),  # unknown is kept
        ([1, 2, 3, 4], R(keep_last=2), {4: False, 3: True}, {3, 4}),
        ([1, 2, 3], R(keep_last=None), {3: False}, {1, 2, 3}),
        ([1, 2, 3], R(keep_last=1, keep_best=1, metric="m", mode="max"), {3: False, 2: True}, {1, 2, 3}),
    ],
)
def test_steps_to_keep_table(
    steps: list[int], policy: RetentionPolicy, verified: dict[int, bool | None] | None, keep: set[int]
) -> None:
    entries = [(s, {"m": 10.0 - s}) for s in steps]
    assert steps_to_keep(entries, policy, verified=verified) == keep


@pytest.mark.parametrize(
    ("steps", "policy", "verified", "next_step"),
    [
        ([1, 2, 3], R(keep_last=1), {3: True}, None),  # the one just saved is newest: no read
        ([1, 2, 3], R(keep_last=1), {}, 3),
        ([1, 2, 3], R(keep_last=1), {3: False}, 2),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: True}, None),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: False}, 1),
        ([1, 2, 3], R(keep_last=1), {3: False, 2: False, 1: False}, None),
        ([1, 2, 3], R(keep_last=None), {}, None),  # nothing to delete: nothing to check
        ([1, 5, 9], R(keep_last=1), {2: True}, 9),  # a step saved below newer ones: check those
        ([1, 2, 3, 4], R(keep_last=3), {4: False, 3: False, 2: False}, 1),
        ([1, 2, 3, 4], R(keep_last=3), {4: False, 3: None, 2: False}, 1),
        ([5, 6, 7], R(keep_last=2), {7: False, 6: False}, 5),
    ],
)
def test_next_to_verify_table(
    steps: list[int], policy: RetentionPolicy, verified: dict[int, bool | None], next_step: int | None
) -> None:
    entries = [(s, {}) for s in steps]
    assert next_to_verify(entries, policy, verified) == next_step


def test_retention_keeps_the_newest_checkpoint_that_verifies(tmp_path: Path) -> None:
    """A save below newer steps (a restarted run): the newest sound checkpoint survives retention."""
    root = tmp_path / "run"
    run_of(root, [10, 20, 30, 40])
    damage(root / "step_000000040")
    mgr = cairn.CheckpointManager(root, keep_last=1)
    mgr.save(Tree(), 25)
    # keep_last=1 keeps 40 (damaged) and the step just saved; 30 is the newest that verifies.
    assert [i.step for i in mgr.checkpoints()] == [25, 30, 40]


def test_retention_in_the_common_case_deletes_by_policy(tmp_path: Path) -> None:
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2, 3], keep_last=1)
    assert [i.step for i in mgr.checkpoints()] == [3]


# ---------------------------------------------------------------- cairn ls --verify


def test_ls_verify_marks_damaged_and_latest_is_the_newest_that_verifies(tmp_path: Path) -> None:
    root = tmp_path / "run"
    run_of(root, [1, 2, 3])
    damage(root / "step_000000003")

    plain = json.loads(cli("ls", str(root), "--json").stdout)
    assert [r["latest"] for r in plain] == [False, False, True]  # cheap: reads no data
    assert all(r["verified"] is None for r in plain)

    out = cli("ls", str(root), "--verify", "--json", "--metric", "ret", "--mode", "max")
    assert out.returncode == 1, out.stderr
    rows = json.loads(out.stdout)
    assert [r["verified"] for r in rows] == [True, True, False]
    assert [r["best"] for r in rows] == [False, True, False]  # the best that verifies
    assert [r["latest"] for r in rows] == [False, True, False]
    assert rows[2]["problems"] and "tensors.safetensors" in rows[2]["problems"][0]
    assert rows[0]["problems"] == []

    text = cli("ls", str(root), "--verify")
    assert text.returncode == 1
    lines = text.stdout.strip().splitlines()
    assert "DAMAGED" in lines[3] and "latest" not in lines[3]
    assert "latest" in lines[2] and "DAMAGED" not in lines[2]
    assert "1 of 3 checkpoints" in text.stderr and "step_000000003" in text.stderr

    sound = tmp_path / "sound"
    run_of(sound, [1])
    ok = cli("ls", str(sound), "--verify")
    assert ok.returncode == 0 and "latest" in ok.stdout and "DAMAGED" not in ok.stdout


def test_ls_without_verify_lists_a_damaged_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "run"
    run_of(root, [1, 2])
    (root / "step_000000002" / "leaf" / "metadata.json").write_text("{")
    out = cli("ls", str(root))
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr


def test_ls_verify_reports_step_folders_with_damaged_root_metadata(tmp_path: Path) -> None:
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2, 3])
    (root / "step_000000003" / "manifest.json").write_text("{")
    (root / "step_000000002" / "metadata.json").write_text("[]")
    (root / "step_000000004").mkdir()  # a save in flight: not damage, not listed
    assert [s for s, _, _ in mgr.damaged()] == [2, 3]
    assert [i.step for i in mgr.checkpoints()] == [1]
    out = cli("ls", str(root), "--verify", "--json")
    assert out.returncode == 1
    rows = json.loads(out.stdout)
    got = [(r["step"], r["verified"], r["latest"]) for r in rows]
    assert got == [(1, True, True), (2, False, False), (3, False, False)]
    assert "metadata.json" in rows[1]["problems"][0] and "manifest.json" in rows[2]["problems"][0]
    text = cli("ls", str(root), "--verify")
    assert text.returncode == 1 and text.stdout.count("DAMAGED") == 2 and "2 of 3" in text.stderr


def test_best_is_the_best_checkpoint_that_verifies(tmp_path: Path) -> None:
    """best() skips a damaged checkpoint however good its recorded metric (verified=False does not)."""
    root = tmp_path / "run"
    mgr, _ = run_of(root, [1, 2, 3], metric="ret", mode="max")
    assert mgr.best() == str(root / "step_000000003")
    damage(root / "step_000000003")
    assert mgr.best() == str(root / "step_000000002")
    assert mgr.best(verified=False) == str(root / "step_000000003")
