"""No command prints a raw control or bidi character from a checkpoint (issue 24, finding 6).

Class names, tensor names, component names, ``created`` stamps, metric names and values,
and error messages that quote them come from files anyone can write. The real ``cairn``
command runs on checkpoints holding escape sequences (retitle, clear screen, OSC 52
clipboard write, CSI through C1, bidi overrides); its output must hold none of them raw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import cairn
from cairn._display import safe_text
from cairn_test_components import Leaf

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS / "fuzz"))
from fuzz_mutate import reseal  # noqa: E402 - the fuzz suite's re-sealer: one home for the format

HOSTILE = [
    "\x1b]0;pwned\x07",  # retitle the terminal
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]52;c;ZWNobyBwd25lZA==\x07",  # OSC 52: write the clipboard
    "\x9b31m",  # CSI as one C1 byte
    "\u202egnp.exe",  # right-to-left override
    "a\u2066b\u2069",  # isolates
    "line\nFORGED LINE",
    "\r\x7f\x00\x08",
]
EVIL = "".join(HOSTILE)


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal could act on (newlines between lines excepted)."""
    return sorted({f"U+{ord(c):04X}" for line in text.split("\n") for c in line if not c.isprintable()})


def cairn_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path]), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        env=env,
    )


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    found = raw_controls(result.stdout) + raw_controls(result.stderr)
    assert not found, (found, result.stdout[-2000:], result.stderr[-2000:])


@pytest.mark.parametrize("s", [*HOSTILE, EVIL, "\udcff\udc80", "\U000e0041tag", "\u200bzero\ufeff"])
def test_safe_text_leaves_nothing_a_terminal_acts_on(s: str) -> None:
    shown = safe_text(s)
    assert shown.isprintable(), shown
    assert all(unicodedata.category(c)[0] != "C" for c in shown)
    shown.encode("utf-8")  # lone surrogates would not even encode


def test_safe_text_keeps_ordinary_text() -> None:
    for s in ("step_000000040", "Ünïcödé 名前 ✓", "a b", "C:\\runs\\x", 3.5, None):
        assert safe_text(s) == str(s)
    assert safe_text("a\x1bb\nc\u202e") == "a\\x1bb\\nc\\u202e"


class Evil(cairn.Checkpointable):
    """A component whose tensor names and metadata carry escape sequences, as a user's could."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {f"w{EVIL}": np.arange(3, dtype=np.float32) * self.scale, "note": EVIL}

    def set_state(self, state: dict[str, Any]) -> None:
        pass

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {"scale": self.scale}

    def get_metadata(self) -> dict[str, Any]:
        return {"label": EVIL}


def _edit_metadata(ckpt: Path, **changes: Any) -> None:
    meta = ckpt / "metadata.json"
    body = json.loads(meta.read_text())
    body.update(changes)
    meta.write_text(json.dumps(body))
    reseal(str(ckpt))


def test_inspect_diff_verify_print_tensor_names_and_classes_escaped(tmp_path: Path) -> None:
    a = Evil(1.0).save_to_path(tmp_path / "a")
    b = Evil(2.0).save_to_path(tmp_path / "b")
    _edit_metadata(Path(a), created=EVIL)
    _edit_metadata(Path(b), **{"class": f"test_display:Evil{EVIL}"})
    out = {}
    for args in (["inspect", a, "--tensors"], ["inspect", b], ["diff", a, b], ["verify", a], ["inspect", a, "--json"]):
        result = cairn_cli(*args)
        assert_clean(result)
        assert result.returncode in (0, 1), (args, result.stderr)
        out[" ".join(args[:2] if args[0] != "inspect" else [args[0], args[-1]])] = result.stdout
    tensors = out["inspect --tensors"]
    assert "\\x1b]0;pwned\\x07" in tensors and "\\u202e" in tensors  # shown, escaped
    assert "FORGED LINE" in tensors and not any(line.startswith("FORGED") for line in tensors.splitlines())
    assert "\\x9b" in out[f"inspect {b}"]
    # JSON output was escaped already, and says what the files hold.
    assert json.loads(out["inspect --json"])[0]["tensors"][0]["name"] == f"w{EVIL}"


def test_ls_prints_metrics_and_created_escaped(tmp_path: Path) -> None:
    root = tmp_path / "run"
    manager = cairn.CheckpointManager(str(root), metric=f"ret{EVIL}", mode="max")
    manager.save(Leaf(), 1, metrics={f"ret{EVIL}": 1.0, "note": EVIL})
    manager.close()
    _edit_metadata(root / "step_000000001", created=EVIL)
    for args in (
        ["ls", str(root)],
        ["ls", str(root), "--metric", "note", "--mode", "max"],
        ["ls", str(root), "--verify"],
    ):
        result = cairn_cli(*args)
        assert_clean(result)
        assert result.returncode == 0, result.stderr
    assert "\\x1b[2J" in cairn_cli("ls", str(root), "--metric", "note", "--mode", "max").stdout


def test_error_lines_quoting_hostile_names_are_escaped(tmp_path: Path) -> None:
    ckpt = Leaf().save_to_path(tmp_path / "leaf")
    _edit_metadata(Path(ckpt), **{"class": f"no_such_module{EVIL}:X"})
    for args in (
        ["upgrade", ckpt, "--dry-run"],
        ["extract", ckpt, "x" + EVIL.replace("\x00", ""), str(tmp_path / "out")],
    ):
        result = cairn_cli(*args)
        assert result.returncode != 0
        assert_clean(result)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    # A path the user typed with escapes in it (a folder name that is not even UTF-8 too).
    odd = tmp_path / ("x" + EVIL.replace("\x00", "") + os.fsdecode(b"\xff"))
    odd.mkdir()
    for args in (["verify", str(odd)], ["ls", str(odd)], ["inspect", str(odd)]):
        result = cairn_cli(*args)
        assert result.returncode == (0 if args[0] == "ls" else 2 if args[0] == "verify" else 1), result
        assert_clean(result)
        assert "\\udcff" in result.stdout + result.stderr  # the path is shown, escaped
