"""The `cairn` command line: inspect, verify, diff, extract, ls; exit codes and error lines."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cairn
from cairn_test_components import Tree

TESTS = Path(__file__).parent
# The subprocesses run this checkout's cairn (not whichever one is installed) and find the test components.
CHILD_PATH = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])


def cairn_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": CHILD_PATH}
    return subprocess.run([sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=env)


@pytest.fixture
def ckpt(tmp_path: Path) -> str:
    t = Tree()
    t.mutate()
    return t.save_to_path(tmp_path / "ck")


def test_inspect_text_and_json(ckpt: str) -> None:
    out = cairn_cli("inspect", ckpt, "--tensors")
    assert out.returncode == 0, out.stderr
    assert "[cairn_test_components:Tree]" in out.stdout and "left" in out.stdout
    assert "weights: F32[2]" in out.stdout
    data = json.loads(cairn_cli("inspect", ckpt, "--json").stdout)
    paths = [c["path"] for c in data]
    assert paths == [".", "branch", "branch/left", "branch/right", "leaf"]
    left = data[2]
    assert left["class"] == "cairn_test_components:Leaf" and left["state_version"] == 1
    assert left["tensors"] == [{"name": "weights", "dtype": "F32", "shape": [2], "nbytes": 8}]
    assert left["uses_pickle"] is False
    # The keys cairn writes itself are not shown as the component's own metadata.
    assert not {"frameworks", "created", "class", "components"} & set(left["metadata"]), left["metadata"]


def test_verify_exit_codes(ckpt: str, tmp_path: Path) -> None:
    ok = cairn_cli("verify", ckpt)
    assert ok.returncode == 0 and "OK" in ok.stdout
    f = Path(ckpt) / "branch" / "right" / "packed.bin"
    data = bytearray(f.read_bytes())
    data[-2] ^= 0x10
    f.write_bytes(bytes(data))
    (Path(ckpt) / "leaf" / "metadata.json").write_text("{}")
    bad = cairn_cli("verify", ckpt)
    assert bad.returncode == 1
    assert "right/packed.bin" in bad.stdout and "leaf/metadata.json" in bad.stdout
    missing = cairn_cli("verify", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "No checkpoint" in missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1


def test_diff(ckpt: str, tmp_path: Path) -> None:
    same = cairn_cli("diff", ckpt, ckpt)
    assert same.returncode == 0 and "equal" in same.stdout
    t = Tree.from_checkpoint(ckpt)
    t.branch.left.weights = t.branch.left.weights + 0.5
    t.branch.step += 1
    other = t.save_to_path(tmp_path / "other")
    d = cairn_cli("diff", ckpt, other, "--json")
    assert d.returncode == 1
    diffs = json.loads(d.stdout)["differences"]
    keys = {(x["component"], x["key"]) for x in diffs}
    assert keys == {("branch/left", "weights"), ("branch", "step")}
    w = next(x for x in diffs if x["key"] == "weights")
    assert w["max_abs_diff"] == pytest.approx(0.5)
    err = cairn_cli("diff", ckpt, str(tmp_path / "missing"))
    assert err.returncode == 2


def test_extract_gives_standalone_checkpoint(ckpt: str, tmp_path: Path) -> None:
    out = tmp_path / "left_only"
    r = cairn_cli("extract", ckpt, "branch/left", str(out))
    assert r.returncode == 0, r.stderr
    from cairn_test_components import Leaf

    leaf = Leaf.from_checkpoint(out)
    original = Tree.from_checkpoint(ckpt).branch.left
    assert (leaf.weights == original.weights).all() and leaf.counter == original.counter
    bad = cairn_cli("extract", ckpt, "branch/nope", str(tmp_path / "x"))
    assert bad.returncode == 1 and "branch/nope" in bad.stderr and "left" in bad.stderr


def test_ls(tmp_path: Path) -> None:
    mgr = cairn.CheckpointManager(tmp_path / "run", keep_last=5)
    t = Tree()
    # Results of train() recorded under the names before issue 37: listed under today's.
    for step, r in [(1, 10.0), (2, 30.0), (3, 20.0)]:
        mgr.save(t, step, metrics={"training_iteration": step, "episode_return_mean": r, "loss": 1.0 / step})
    out = cairn_cli("ls", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "best: by env_runners/episode_return_mean, largest (max)"
    assert len(lines) == 5 and lines[3].rstrip().endswith("best") and lines[4].rstrip().endswith("latest")
    # The metric's column header is its whole name, and its values line up under its end (issue 36).
    assert lines[1].endswith("  env_runners/episode_return_mean") and lines[3].index(" 30  ") + 3 == len(lines[1])
    rows = json.loads(cairn_cli("ls", str(tmp_path / "run"), "--json").stdout)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[1]["best"] and rows[2]["latest"]
    assert rows[0]["metrics"] == {"training_iteration": 1, "env_runners/episode_return_mean": 10.0, "loss": 1.0}
    assert rows[0]["size"] > 0
    # A metric's mode: known (loss: smallest is best), given, or asked for.
    loss = cairn_cli("ls", str(tmp_path / "run"), "--metric", "loss").stdout.splitlines()
    assert loss[0] == "best: by loss, smallest (min)" and loss[-1].rstrip().endswith("latest best")
    mgr.save(t, 4, metrics={"score": 2.0, "episode_return_mean": 5.0})  # a loop's own names: kept as they are
    unknown = cairn_cli("ls", str(tmp_path / "run"), "--metric", "score")
    assert unknown.returncode == 2 and "--mode max or --mode min" in unknown.stderr
    given = cairn_cli("ls", str(tmp_path / "run"), "--metric", "score", "--mode", "max").stdout.splitlines()
    assert given[0] == "best: by score, largest (max)" and given[-1].rstrip().endswith("latest best")
    assert json.loads(cairn_cli("ls", str(tmp_path / "run"), "--json").stdout)[3]["metrics"]["episode_return_mean"] == 5


def test_ls_ranks_as_the_runs_manager(tmp_path: Path) -> None:
    """A torch loop's manager ranks by its own metric and mode: cairn ls reads them from the checkpoints (issue 36)."""
    from cairn.retention import KeepBest, KeepLast

    t = Tree()
    losses = cairn.CheckpointManager(tmp_path / "loss", metric="loss", async_save=False)
    scores = cairn.CheckpointManager(tmp_path / "score", retention=KeepLast(3) | KeepBest(1, "score", "max"))
    for step, (loss, score) in enumerate([(1.0, 3), (0.2, 1), (0.5, 2)], start=1):
        losses.save(t, step, metrics={"loss": loss, "accuracy": step / 10})
        scores.save(t, step, metrics={"score": score, "loss": loss})
    scores.wait()
    listed = cairn_cli("ls", str(tmp_path / "loss")).stdout.splitlines()
    assert listed[0] == "best: by loss, smallest (min)" and listed[1].endswith("  loss")
    assert listed[3].rstrip().endswith("0.2  best") and listed[4].rstrip().endswith("latest")
    listed = cairn_cli("ls", str(tmp_path / "score")).stdout.splitlines()
    assert listed[0] == "best: by score, largest (max)" and listed[2].rstrip().endswith("3  best")
    # --metric still chooses; the manager's own metric needs no --mode.
    assert cairn_cli("ls", str(tmp_path / "score"), "--metric", "score").stdout.splitlines()[0].endswith("(max)")
    assert cairn_cli("ls", str(tmp_path / "score"), "--metric", "loss").stdout.splitlines()[0].endswith("(min)")
    assert [i.best_by for i in scores.checkpoints()] == [("score", "max")] * 3


def test_errors_are_one_line_unless_debug(tmp_path: Path) -> None:
    r = cairn_cli("inspect", str(tmp_path / "nothing"))
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    r = cairn_cli("--debug", "inspect", str(tmp_path / "nothing"))
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_verify_reports_progress(ckpt: str) -> None:
    calls: list[tuple[int, int]] = []
    assert cairn.verify_checkpoint(ckpt, progress=lambda done, total: calls.append((done, total))) == []
    assert calls and calls[-1][0] == calls[-1][1] > 0
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_verify_shows_progress_on_a_terminal(ckpt: str) -> None:
    import pty

    env = {**os.environ, "PYTHONPATH": CHILD_PATH}
    pid, fd = pty.fork()
    if pid == 0:  # the child: stdout and stderr are the terminal
        os.execve(sys.executable, [sys.executable, "-m", "cairn", "verify", ckpt], env)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"verifying" in out and b"100.0%" in out


def test_help_lists_every_command_of_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """One table: `cairn --help` names each command, and each has its own parser and help."""
    from cairn.cli import COMMANDS, main

    names = [command.name for command in COMMANDS]
    assert len(set(names)) == len(names)
    assert {"inspect", "verify", "sign", "diff", "extract", "ls", "upgrade", "convert"} <= set(names)
    assert {"train", "evaluate", "plot"} <= set(names)
    with pytest.raises(SystemExit) as top:
        main(["--help"])
    listing = capsys.readouterr().out
    assert top.value.code == 0
    for command in COMMANDS:
        assert f"    {command.name} " in listing, command.name
        with pytest.raises(SystemExit) as one:
            main([command.name, "--help"])
        assert one.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: cairn {command.name} "), command.name


def test_an_import_error_is_one_line_with_the_commands_error_status(
    ckpt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from cairn.cli import main

    # verify and diff say 2 ("could not check"), since 1 means "broken" or "different" there.
    for argv, status in ((["verify", ckpt], 2), (["diff", ckpt, ckpt], 2), (["inspect", ckpt], 1)):
        code = main(["--import", "no_such_module_\x1b[31m", *argv])
        err = capsys.readouterr().err
        assert code == status, argv
        assert err.count("\n") == 1 and f"cairn {argv[0]}: error: cannot import" in err
        assert "\x1b" not in err  # the module name came from the user: printed through safe_text


# ---------------------------------------------------------------------- the first hour (issue 36)


def test_version_matches_the_package() -> None:
    import cairn

    result = cairn_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"cairn {cairn.__version__}"


def test_every_command_documents_its_arguments_defaults_and_examples(capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.cli import COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command in COMMANDS:
        p = sub.choices[command.name]
        for action in p._actions:
            assert action.help, f"cairn {command.name} {action.dest} has no help"
        assert command.examples and all(e.startswith("cairn ") for e in command.examples), command.name
        with pytest.raises(SystemExit):
            p.parse_args(["--help"])
        shown = capsys.readouterr().out
        assert "examples:\n  cairn " in shown, command.name
    with pytest.raises(SystemExit):
        sub.choices["evaluate"].parse_args(["--help"])
    assert "(default: 10)" in capsys.readouterr().out  # --episodes


def test_a_file_where_a_checkpoint_folder_goes_is_a_usage_error(ckpt: str, tmp_path: Path) -> None:
    """F17: exit 2 (could not check), not 1 (broken); the message says where the checkpoint is."""
    manifest = str(Path(ckpt) / "manifest.json")
    result = cairn_cli("verify", manifest)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip() == f"cairn verify: error: {manifest} is a file, and a checkpoint is a folder; " + (
        f"the checkpoint is the folder holding it: {ckpt}."
    )
    for args in (["inspect", manifest], ["diff", ckpt, manifest], ["ls", manifest]):
        result = cairn_cli(*args)
        assert result.returncode == 2 and "is a file" in result.stderr and len(result.stderr.splitlines()) == 1


def test_ls_of_a_missing_folder_says_so(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    result = cairn_cli("ls", str(tmp_path / "rusn"))
    assert result.returncode == 1
    assert result.stderr.strip().endswith(
        "does not exist (did you mean runs?): cairn ls lists a checkpoint manager's root."
    )
    # evaluate and plot say the same of a mistyped folder, and evaluate no longer creates it (issue 36).
    evaluated = cairn_cli("evaluate", str(tmp_path / "rusn"))
    assert evaluated.returncode == 1 and len(evaluated.stderr.strip().splitlines()) == 1
    assert "rusn does not exist (did you mean runs?): cairn evaluate takes" in evaluated.stderr
    plotted = cairn_cli("plot", str(tmp_path / "rusn"))
    assert plotted.returncode == 1 and "rusn does not exist (did you mean runs?): give a run folder" in plotted.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"]


def test_typos_in_evaluate_and_train_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--env of evaluate is checked as train's is; --algo takes any case; --checkpoint-dir must be a folder."""
    from cairn.cli import build_parser, main

    assert main(["evaluate", str(tmp_path), "--env", "CartPol-v1"]) == 1  # checked before anything loads
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "--env CartPol-v1: no such environment (did you mean CartPole-v1" in err
    assert build_parser().parse_args(["train", "--algo", "DQN"]).algo == "dqn"  # as `cairn --help` spells it
    (tmp_path / "afile").write_text("")
    assert main(["train", "--checkpoint-dir", str(tmp_path / "afile"), "--iterations", "1"]) == 2
    assert capsys.readouterr().err.strip().endswith("afile is a file, and a run folder (--checkpoint-dir) is a folder.")


def test_a_closed_pipe_is_no_error(ckpt: str) -> None:
    """`cairn inspect ... | head`: the reader leaves early; no broken-pipe message."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cairn", "inspect", ckpt, "--tensors"],
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before inspect prints (its imports come first)
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode == 141 and err == ""  # 128 + SIGPIPE, as a C tool ends


def test_the_library_prints_nothing() -> None:
    """The library speaks through logging (the CLI shows it); only cairn.cli prints."""
    import ast

    root = TESTS.parent / "src" / "cairn"
    printing = []
    for path in root.rglob("*.py"):
        if (root / "cli") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                printing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert printing == []


def test_shell_completion(tmp_path: Path) -> None:
    """argcomplete (the completion extra) completes commands and options as the shell asks it."""
    pytest.importorskip("argcomplete")
    answer = tmp_path / "completions"
    line = "cairn train --checkpoint-e"
    env = {
        **os.environ,
        "PYTHONPATH": CHILD_PATH,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "COMP_TYPE": "9",
        "_ARGCOMPLETE_STDOUT_FILENAME": str(answer),
    }
    done = subprocess.run([sys.executable, "-m", "cairn"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert answer.read_text().split() == ["--checkpoint-every"]
