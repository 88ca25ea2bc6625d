"""``cairn convert`` where RLlib is not installed: one line naming the extra to install."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest


def _rllib_importable() -> bool:
    try:
        import ray.rllib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None and _rllib_importable(), reason="RLlib is installed")
def test_convert_without_rllib_names_the_extra(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cairn", "convert", "rllib", str(tmp_path), str(tmp_path / "out"), "--allow-pickle"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "pip install 'cairn-rl[rllib]'" in out.stderr and "Traceback" not in out.stderr
