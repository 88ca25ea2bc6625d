"""A path the user typed may be a symbolic link (issue 24, finding 9); links inside a checkpoint are damage.

``best -> run/step_000000040`` names a sound checkpoint: every load path reads it
through the link, as do the commands. A link in place of a folder or file *inside*
the checkpoint is still refused (SPEC 8), whether the checkpoint was reached
through a link or not.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cairn
from cairn.tools import diff_checkpoints, inspect_checkpoint
from cairn_test_components import Tree

TESTS = Path(__file__).parent


def cairn_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    return subprocess.run([sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=env)


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, Tree]:
    """A manager root with one sound checkpoint (step 40) of a mutated tree."""
    tree = Tree()
    tree.mutate()
    manager = cairn.CheckpointManager(str(tmp_path / "run"))
    manager.save(tree, 40)
    manager.close()
    return tmp_path / "run", tree


def _same(a: Tree, b: Tree) -> None:
    assert a.history == b.history and a.branch.step == b.branch.step
    np.testing.assert_array_equal(a.branch.left.weights, b.branch.left.weights)
    np.testing.assert_array_equal(a.leaf.weights, b.leaf.weights)


def test_a_link_to_a_checkpoint_loads_everywhere(run: tuple[Path, Tree], tmp_path: Path) -> None:
    root, tree = run
    best = tmp_path / "best"
    best.symlink_to(Path("run") / "step_000000040")  # relative, as `ln -s run/step_000000040 best` makes it
    restored = Tree()
    restored.restore_from_path(str(best))
    _same(restored, tree)
    _same(Tree.from_checkpoint(str(best)), tree)
    assert cairn.verify_checkpoint(str(best)) == []
    assert [i.path for i in inspect_checkpoint(str(best))][:2] == [".", "branch"]
    assert diff_checkpoints(str(best), str(root / "step_000000040")) == []
    # A component of a checkpoint reached through the link, and a link among the parent folders.
    left = Tree().branch.left
    left.restore_from_path(str(best / "branch" / "left"))
    np.testing.assert_array_equal(left.weights, tree.branch.left.weights)
    (tmp_path / "runs").symlink_to("run")
    _same(Tree.from_checkpoint(str(tmp_path / "runs" / "step_000000040")), tree)
    # A chain of links.
    (tmp_path / "best2").symlink_to("best")
    _same(Tree.from_checkpoint(str(tmp_path / "best2")), tree)


def test_the_commands_follow_the_link_the_user_typed(run: tuple[Path, Tree], tmp_path: Path) -> None:
    best = tmp_path / "best"
    best.symlink_to(run[0] / "step_000000040")
    verified = cairn_cli("verify", str(best))
    assert verified.returncode == 0, verified.stderr
    assert "OK" in verified.stdout
    inspected = cairn_cli("inspect", str(best))
    assert inspected.returncode == 0 and "[cairn_test_components:Tree]" in inspected.stdout, inspected.stderr
    (tmp_path / "runs").symlink_to(run[0])
    listed = cairn_cli("ls", str(tmp_path / "runs"))
    assert listed.returncode == 0, listed.stderr
    assert "40" in listed.stdout and "latest" in listed.stdout


def test_a_manager_on_a_linked_root(run: tuple[Path, Tree], tmp_path: Path) -> None:
    root, tree = run
    link = tmp_path / "link"
    link.symlink_to(root)
    manager = cairn.CheckpointManager(str(link), keep_last=1)
    restored = Tree()
    info = manager.restore_latest(restored)
    assert info is not None and info.step == 40
    _same(restored, tree)
    tree.mutate()
    manager.save(tree, 50)
    manager.close()
    # The save went through the link into the real root, and retention removed step 40 there.
    assert sorted(os.listdir(root)) == ["cairn-latest.json", "step_000000050"]
    assert cairn.verify_checkpoint(str(link / "step_000000050")) == []
    _same(Tree.from_checkpoint(str(cairn.CheckpointManager(str(link)).latest())), tree)


@pytest.mark.parametrize("where", ["folder", "file"])
def test_a_link_inside_a_checkpoint_is_still_refused(run: tuple[Path, Tree], tmp_path: Path, where: str) -> None:
    root, _ = run
    step = root / "step_000000040"
    inside = step / "branch" if where == "folder" else step / "leaf" / "packed.bin"
    moved = tmp_path / f"moved-{where}"
    shutil.move(str(inside), moved)
    inside.symlink_to(moved)
    best = tmp_path / "best"
    best.symlink_to(step)
    for path in (step, best):
        with pytest.raises(cairn.CorruptCheckpointError, match=r"symbolic link|not a regular file"):
            Tree().restore_from_path(str(path))
        with pytest.raises(cairn.CorruptCheckpointError):
            Tree.from_checkpoint(str(path))
        problems = cairn.verify_checkpoint(str(path)) if where == "file" else None
        assert problems is None or problems, "a link inside the checkpoint verified"
    bad = cairn_cli("verify", str(best))
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
