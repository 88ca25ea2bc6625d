"""``cairn plot``: a PNG of the learning curves (return, losses, entropy), several runs on one figure."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from cairn.cli import main as cairn_main


def cairn(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cairn_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _write_run(folder: Path, *, iterations: int, modules: tuple[str, ...], scale: float) -> Path:
    """A metrics.jsonl as cairn train wrote it before issue 37 (old names, read under today's): a rising
    return, falling losses and entropy."""
    folder.mkdir(parents=True)
    rows = []
    for i in range(1, iterations + 1):
        row: dict[str, Any] = {
            "training_iteration": i,
            "num_env_steps_sampled_lifetime": 512 * i,
            "episode_return_mean": scale * (500 - 480 * math.exp(-i / 15)) + 10 * math.sin(i),
        }
        for n, module in enumerate(modules):
            row[f"learner/{module}/policy_loss"] = -0.01 * math.exp(-i / 20) + 0.002 * math.cos(i + n)
            row[f"learner/{module}/vf_loss"] = 100 * math.exp(-i / 25) + n
            row[f"learner/{module}/entropy"] = 0.69 - 0.2 * i / iterations - 0.05 * n
        rows.append(row)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _read_png(path: Path) -> Any:
    image = pytest.importorskip("matplotlib.image")
    return image.imread(str(path))


def test_png_of_several_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    a = _write_run(tmp_path / "seed_0", iterations=60, modules=("default_policy",), scale=1.0)
    b = _write_run(tmp_path / "seed_1", iterations=40, modules=("default_policy",), scale=0.8)
    out = tmp_path / "curves.png"
    code, stdout, err = cairn(capsys, "plot", str(a), str(b), "-o", str(out))
    assert code == 0, err
    assert f"{a}: 60 iterations, 30720 env steps" in stdout and f"{b}: 40 iterations" in stdout

    pixels = _read_png(out)
    # 9 x 6.1 inches at 100 dpi: the return panel above a row of three small panels.
    assert pixels.shape[:2] == (610, 900) and pixels.shape[2] in (3, 4)
    rgb = pixels[..., :3]
    assert float(rgb.var()) > 0.005, "the image is blank"
    # Both run colours are drawn (tab:blue for the first run, the red for the second).
    blue = ((abs(rgb[..., 0] - 0x1F / 255) < 0.06) & (abs(rgb[..., 2] - 0xB4 / 255) < 0.06)).sum()
    red = ((abs(rgb[..., 0] - 0xD6 / 255) < 0.06) & (abs(rgb[..., 1] - 0x27 / 255) < 0.06)).sum()
    assert blue > 500 and red > 500

    # The default output is RUN_DIR/curves.png, of the first run.
    code, _, err = cairn(capsys, "plot", str(a))
    assert code == 0, err
    assert (a / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_svg_panels_and_modules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _write_run(tmp_path / "multi", iterations=10, modules=("p0", "p1"), scale=1.0)
    out = tmp_path / "curves.svg"
    assert cairn(capsys, "plot", str(run), "-o", str(out))[0] == 0
    lines = [e for e in ET.parse(out).iter() if e.tag.endswith("polyline")]
    # One return curve, then policy_loss, vf_loss and entropy for each of the two modules.
    assert len(lines) == 1 + 3 * 2
    titles = [next(iter(e)).text for e in lines]
    assert titles[1:3] == ["multi p0", "multi p1"]
    assert all(len(e.attrib["points"].split()) == 10 for e in lines)
    # Readable without matplotlib (issue 36): the figure's title names the run, each panel its metric and
    # the x axis, ticks read as the PNG's ("25 k", never "2.5e+04").
    texts = [e.text or "" for e in ET.parse(out).iter() if e.tag.endswith("text")]
    assert texts[0] == "cairn plot: multi" and "env steps" in texts and "env_runners/episode_return_mean" in texts
    assert not [t for t in texts if "e+" in t or "e-" in t]

    # --metric chooses the panels; a bare name matches every learner/<module>/<name>.
    code, _, err = cairn(capsys, "plot", str(run), "-o", str(out), "--metric", "entropy")
    assert code == 0, err
    assert len([e for e in ET.parse(out).iter() if e.tag.endswith("polyline")]) == 2
    code, _, err = cairn(capsys, "plot", str(run), "-o", str(out), "--metric", "entropy", "--metric", "nope")
    assert code != 0 and "'nope'" in err and "Traceback" not in err


def test_png_of_a_real_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    run = tmp_path / "run"
    code, _, err = cairn(
        capsys, "train", "--iterations", "3", "--checkpoint-dir", str(run), "--set", "rollout_length=64"
    )
    assert code == 0, err
    out = tmp_path / "real.png"
    code, stdout, err = cairn(capsys, "plot", str(run), "-o", str(out))
    assert code == 0, err
    assert "3 iterations, 768 env steps" in stdout
    pixels = _read_png(out)
    assert pixels.shape[:2] == (610, 900) and float(pixels[..., :3].var()) > 0.005


def test_values_beyond_floats_and_near_their_limits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """F16: 1e999 (read as infinity) is left out on either axis; values near +-1.8e308 scale without
    overflow in the SVG; matplotlib's own limit is one line naming the SVG way."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"training_iteration": 1, "num_env_steps_sampled_lifetime": 1e999, "env_runners/episode_return_mean": 5}\n'
        '{"training_iteration": 2, "num_env_steps_sampled_lifetime": 100, "env_runners/episode_return_mean": 1e999}\n'
        '{"training_iteration": 3, "num_env_steps_sampled_lifetime": 200, "env_runners/episode_return_mean": 3}\n'
        '{"training_iteration": 4, "num_env_steps_sampled_lifetime": 300, "env_runners/episode_return_mean": 4}\n'
    )
    out = tmp_path / "c.svg"
    code, stdout, err = cairn(capsys, "plot", str(run), "-o", str(out))
    assert code == 0, err
    assert stdout.strip() == f"{run}: 4 iterations, 300 env steps, env_runners/episode_return_mean last 4, best 4"
    [line] = [e for e in ET.parse(out).iter() if e.tag.endswith("polyline")]
    assert len(line.attrib["points"].split()) == 2

    (run / "metrics.jsonl").write_text(
        '{"training_iteration": 1, "num_env_steps_sampled_lifetime": -1.7e308, "episode_return_mean": -1.7e308}\n'
        '{"training_iteration": 2, "num_env_steps_sampled_lifetime": 1.7e308, "episode_return_mean": 1.7e308}\n'
    )
    code, stdout, err = cairn(capsys, "plot", str(run), "-o", str(out))
    assert code == 0, err
    assert "1.7e+308 env steps" in stdout
    svg = out.read_text()
    assert "nan" not in svg and "inf" not in svg
    [line] = [e for e in ET.parse(out).iter() if e.tag.endswith("polyline")]
    xs = [float(p.split(",")[0]) for p in line.attrib["points"].split()]
    assert xs[0] < xs[1]
    ticks = [e.text for e in ET.parse(out).iter() if e.tag.endswith("text")]
    assert "0" in ticks  # real ticks, not only the two ends

    pytest.importorskip("matplotlib")
    code, _, err = cairn(capsys, "plot", str(run), "-o", str(tmp_path / "c.png"))
    if code != 0:  # matplotlib's autoscaling overflows near the float limits (versions differ)
        assert len(err.strip().splitlines()) == 1 and "-o curves.svg" in err and "Traceback" not in err


def test_svg_ticks_are_round_numbers() -> None:
    from cairn.cli.plot import nice_ticks

    assert nice_ticks(0.0, 1000.0) == [0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]
    assert nice_ticks(-3.0, 7.0) == [-2.0, 0.0, 2.0, 4.0, 6.0]
    assert nice_ticks(1.0, 1.0) == [1.0]
    assert nice_ticks(-1.7e308, 1.7e308) == [-1e308, 0.0, 1e308]
