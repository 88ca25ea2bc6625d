"""``cairn train`` and ``cairn evaluate`` end to end, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cairn(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_train_resume_evaluate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = cairn(
        "train",
        "--iterations",
        "3",
        "--checkpoint-dir",
        str(run),
        "--checkpoint-every",
        "2",
        "--seed",
        "1",
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert "iter 3/3" in first.stderr and "steps/s" in first.stderr and "return" in first.stderr
    assert sorted(p.name for p in run.glob("step_*")) == ["step_000000002", "step_000000003"]

    # --iterations is the total: resuming at 3 goes on to 5.
    second = cairn("train", "--iterations", "5", "--checkpoint-dir", str(run), "--resume", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "resumed from" in second.stderr and "iter 4/5" in second.stderr
    assert "iter 3/5" not in second.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[-1]["num_env_steps_sampled_lifetime"] == 5 * 512

    # Stopping and resuming changed nothing: a straight 5-iteration run is bit-identical.
    straight = tmp_path / "straight"
    direct = cairn("train", "--iterations", "5", "--checkpoint-dir", str(straight), "--seed", "1", cwd=tmp_path)
    assert direct.returncode == 0, direct.stderr
    same = cairn("diff", str(run / "step_000000005"), str(straight / "step_000000005"), cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr

    # A manager root, an algorithm checkpoint and a module folder all evaluate.
    module = run / "step_000000005" / "learner_group" / "learner" / "rl_module" / "default_policy"
    for target in (run, run / "step_000000005", module):
        result = cairn("evaluate", str(target), "--episodes", "2", cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "mean return over 2 episodes:" in result.stdout


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the ``cairn`` entry point in this process (no torch import per call)."""
    from cairn.cli import main as cairn_main

    code = cairn_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_train_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main(capsys, "train", "--iterations", "1", "--num-env-runners", "-1")
    assert code != 0 and "num_env_runners" in err and "Traceback" not in err

    run = str(tmp_path / "run")
    code, out, _ = main(capsys, "train", "--iterations", "1", "--checkpoint-dir", run)
    assert code == 0 and "latest checkpoint" in out
    code, _, err = main(capsys, "train", "--iterations", "2", "--checkpoint-dir", run)
    assert code != 0 and "--resume" in err
    code, _, err = main(
        capsys,
        "train",
        "--iterations",
        "2",
        "--checkpoint-dir",
        run,
        "--resume",
        "--env",
        "Pendulum-v1",
    )
    assert code != 0 and "differs" in err
    code, _, err = main(capsys, "train", "--resume", "--iterations", "2")
    assert code != 0 and "--checkpoint-dir" in err

    code, _, err = main(capsys, "evaluate", str(tmp_path / "nothing"))
    assert code != 0 and "nothing does not exist" in err and not (tmp_path / "nothing").exists()
    (tmp_path / "empty").mkdir()
    code, _, err = main(capsys, "evaluate", str(tmp_path / "empty"))
    assert code != 0 and "No checkpoint" in err
    code, _, err = main(capsys, "evaluate", run, "--module", "p9")
    assert code != 0 and "default_policy" in err


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.cli import main as cairn_main

    with pytest.raises(SystemExit) as exit_info:
        cairn_main([command, "--help"])
    assert exit_info.value.code == 0 and "usage" in capsys.readouterr().out


def test_plot_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"training_iteration": i, "num_env_steps_sampled_lifetime": 512 * i, "episode_return_mean": 20.0 + i}
        for i in range(1, 6)
    ]
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + '\n{"cut')
    out = tmp_path / "curves.svg"
    code, stdout, _ = main(capsys, "plot", str(run), "-o", str(out))
    assert code == 0 and "5 iterations" in stdout and "last 25" in stdout
    polylines = [e for e in ET.parse(out).iter() if e.tag.endswith("polyline")]
    assert len(polylines) == 1 and len(polylines[0].attrib["points"].split()) == 5

    code, _, err = main(capsys, "plot", str(tmp_path / "nothing"), "-o", str(out))
    assert code != 0 and "metrics.jsonl" in err
    code, _, err = main(capsys, "plot", str(run), "-o", str(out), "--metric", "nope")
    assert code != 0 and "nope" in err


def test_building_every_parser_does_not_import_torch(tmp_path: Path) -> None:
    code = (
        "import sys, cairn.cli as c\n"
        "assert {'train', 'evaluate', 'plot'} <= {command.name for command in c.COMMANDS}\n"
        "c.build_parser().parse_args(['train', '--algo', 'sac'])\n"
        "heavy = [m for m in ('torch', 'gymnasium') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src") + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_plot_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"num_env_steps_sampled_lifetime": 100 * i, "episode_return_mean": float(i), "x/y": -i} for i in range(4)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = main(capsys, "plot", str(run), str(run), "--metric", "episode_return_mean", "--metric", "x/y")
    assert code == 0, err
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_set_config_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.cli.train import parse_settings
    from cairn.rl import PPO, PPOConfig

    parsed = parse_settings(
        ["lr=1e-3", "entropy_coeff=0", 'policies=["a", "b"]', "env=multi:CartPole-v1", "lr_anneal_timesteps=null"],
        PPOConfig,
    )
    assert parsed == {
        "lr": 1e-3,
        "entropy_coeff": 0.0,
        "policies": ("a", "b"),
        "env": "multi:CartPole-v1",
        "lr_anneal_timesteps": None,
    }
    assert type(parsed["entropy_coeff"]) is float
    with pytest.raises(ValueError, match="has no setting 'nope'"):
        parse_settings(["nope=1"], PPOConfig)

    run = str(tmp_path / "run")
    args = ["train", "--iterations", "1", "--checkpoint-dir", run, "--set", "rollout_length=16"]
    assert main(capsys, *args)[0] == 0
    code, _, err = main(capsys, "train", "--iterations", "2", "--checkpoint-dir", run, "--resume", "--set", "lr=1e-3")
    assert code == 0 and "with lr=0.001" in err
    latest = sorted(Path(run).glob("step_*"))[-1]
    config = PPO.from_checkpoint(latest).config
    assert config.lr == 1e-3 and config.rollout_length == 16
    code, _, err = main(capsys, "train", "--iterations", "3", "--checkpoint-dir", run, "--resume", "--set", "seed=5")
    assert code != 0 and "differs" in err
