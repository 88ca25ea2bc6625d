"""Hostile or damaged metrics.jsonl lines give one clear error line (issue 24, finding 7; SPEC 7).

``cairn plot`` on a line of 200,000 ``[`` ended in a RecursionError traceback. Every reader of
the file (``cairn plot``, ``read_metrics``, the resume of ``cairn train`` through
``MetricsLog``) must meet deep nesting, huge lines, NaN, huge numbers, bytes that are not
UTF-8 and wrong types with one line naming the file and the line number, or, where a
value is simply unusable, leave it out.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cairn.cli import main as cairn_main
from cairn.cli.metrics_log import MAX_LINE_BYTES, METRICS_FILE, MetricsLog, read_metrics


def _row(i: int, **extra: object) -> dict[str, object]:
    return {
        "training_iteration": i,
        "num_env_steps_sampled_lifetime": 100 * i,
        "episode_return_mean": 10.0 + i,
        **extra,
    }


def _good(n: int = 3) -> bytes:
    return b"".join(json.dumps(_row(i)).encode() + b"\n" for i in range(1, n + 1))


def _plot(capsys: pytest.CaptureFixture[str], run: Path, out: Path) -> tuple[int, str, str]:
    code = cairn_main(["plot", str(run), "-o", str(out)])
    stdout, stderr = capsys.readouterr()
    return code, stdout, stderr


BAD_LINES: dict[str, bytes] = {
    "deep-brackets": b"[" * 200_000 + b"\n",
    "deep-objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"\n",
    "huge-line": b'{"training_iteration": 9, "pad": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}\n',
    "huge-integer": b'{"training_iteration": 9, "num_env_steps_sampled_lifetime": 1' + b"0" * 400 + b"}\n",
    "integer-of-5000-digits": b'{"episode_return_mean": ' + b"7" * 5000 + b"}\n",
    "not-utf8": b'{"episode_return_mean": "\xff\xfe"}\n',
    "not-an-object": b"[1, 2, 3]\n",
    "not-json": b"{'single': 'quotes'}\n",
}


@pytest.mark.parametrize("where", ["middle", "last"])
@pytest.mark.parametrize("attack", sorted(BAD_LINES))
def test_a_bad_line_is_one_error_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: str, where: str
) -> None:
    bad = BAD_LINES[attack]
    body = _good(2) + bad + (_good(1) if where == "middle" else b"")
    (tmp_path / METRICS_FILE).write_bytes(body)
    code, stdout, stderr = _plot(capsys, tmp_path, tmp_path / "c.svg")
    assert code == 1, (stdout, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[:2000]
    assert str(tmp_path / METRICS_FILE) in lines[0] and "line 3" in lines[0], lines[0][:500]
    assert len(lines[0]) < 2000  # the offending line is not echoed whole
    # The resume of cairn train reads the same file leniently: the bad line is dropped, not a crash.
    log = MetricsLog(str(tmp_path), start_iteration=2)
    log.close()
    assert [r["training_iteration"] for r in read_metrics(str(tmp_path))] == [1, 2]


def test_nan_and_wrong_types_are_left_out_of_the_curves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [
        json.dumps(_row(1)),
        '{"training_iteration": 2, "num_env_steps_sampled_lifetime": 200, "episode_return_mean": NaN}',
        '{"training_iteration": 3, "num_env_steps_sampled_lifetime": "300", "episode_return_mean": 13.0}',
        '{"training_iteration": 4, "num_env_steps_sampled_lifetime": 400, "episode_return_mean": {"x": [1]}}',
        '{"training_iteration": 5, "num_env_steps_sampled_lifetime": 500, "episode_return_mean": -Infinity}',
        '{"training_iteration": "6", "num_env_steps_sampled_lifetime": 600, "episode_return_mean": 1e400}',
        json.dumps(_row(7)),
    ]
    (tmp_path / METRICS_FILE).write_text("\n".join(lines) + "\n")
    out = tmp_path / "c.svg"
    code, stdout, stderr = _plot(capsys, tmp_path, out)
    assert code == 0, stderr
    assert "7 iterations" in stdout and "last 17" in stdout
    svg = out.read_text()
    assert svg.count("<polyline") == 1
    points = svg.split('points="')[1].split('"')[0].split()
    assert len(points) == 2  # iterations 1 and 7: the others have no usable (x, y)
    assert (
        read_metrics(str(tmp_path))[1]["env_runners/episode_return_mean"] is None
    )  # NaN reads as null; old name read as new


def test_a_cut_last_line_is_still_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / METRICS_FILE).write_bytes(_good(3) + b'{"training_iteration": 4, "episode_ret')
    code, stdout, stderr = _plot(capsys, tmp_path, tmp_path / "c.svg")
    assert code == 0 and "3 iterations" in stdout, stderr


def test_a_deep_set_value_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = cairn_main(["train", "--iterations", "0", "--set", "model_config=" + "[" * 100_000])
    _, stderr = capsys.readouterr()
    assert code == 1 and len(stderr.strip().splitlines()) == 1 and "--set model_config" in stderr, stderr[:500]
