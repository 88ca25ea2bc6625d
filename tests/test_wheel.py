"""The package as a user installs it (issue 36, "Done when"): the wheel built from this tree installs
in a clean venv, and its ``cairn`` command runs ``--version`` and ``train``.

Nothing is downloaded. The sdist is built from a copy of the tree (which so gets no ``build/`` or
egg-info) and the wheel from the sdist, as pip does, without build isolation (setuptools from the
test environment; the dev extra pins it). The venv gets the wheel alone (``--no-deps``) and sees the test
environment's packages (numpy, torch, gymnasium) through a path file, which adds a folder but
runs none of its ``.pth`` files: an editable install of cairn there stays out, and the test checks
that ``cairn`` is imported from the venv. A module or file missing from the wheel fails here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import cairn

TREE = Path(__file__).resolve().parents[1]
SKIP = (
    ".git",
    ".venv*",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".*_cache",
    ".hypothesis",
    "runs",
    "checkpoints",
)
BUILD_SDIST = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
SMALL = ["--set", "rollout_length=16", "--set", "num_envs_per_env_runner=1", "--set", "num_epochs=1"]


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing at the source tree."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (argv, result.stdout, result.stderr)
    return result


def test_the_wheel_installs_in_a_clean_venv_and_runs_cairn(tmp_path: Path) -> None:
    # The sdist of a copy of the tree, then the wheel built from the sdist (what pip does with an sdist).
    source = tmp_path / "source"
    shutil.copytree(TREE, source, ignore=shutil.ignore_patterns(*SKIP))
    sdist = _run([sys.executable, "-c", BUILD_SDIST, str(tmp_path / "dist")], source).stdout.splitlines()[-1]
    with tarfile.open(tmp_path / "dist" / sdist) as tar:
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    # The files the README names by path, and its quick start's, are in the sdist (it renders off the tree).
    assert {
        "docs/cli.md",
        "examples/README.md",
        "constraints.txt",
        ".ci/run",
        "LICENSE",
        "tests/conftest.py",
    } <= shipped
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", "dist", f"dist/{sdist}"], tmp_path)
    (wheel,) = (tmp_path / "dist").glob("cairn_rl-*.whl")

    # What `pip show cairn-rl` and PyPI show: the metadata, the README as the description, the license.
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {cairn.__version__}" in metadata
    assert "License-Expression: Apache-2.0" in metadata and "Classifier: Typing :: Typed" in metadata
    assert "Description-Content-Type: text/markdown" in metadata and "## Quick start" in metadata
    # The README is the description PyPI shows: no link or image that only resolves inside the repository.
    assert re.findall(r"\]\((?!https?://)[^)]*\)", (TREE / "README.md").read_text()) == []
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names) and "cairn/py.typed" in names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run([*pip, "--python", str(python), "install", "-q", "--no-deps", str(wheel)], tmp_path)
    site = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site.stdout.strip()) / "test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")

    where = _run([str(python), "-c", "import cairn; print(cairn.__file__)"], tmp_path).stdout.strip()
    assert where.startswith(str(venv)), where  # the wheel's cairn, not the source tree's
    version = _run([str(venv / "bin" / "cairn"), "--version"], tmp_path)
    assert version.stdout.strip() == f"cairn {cairn.__version__}"
    train = _run(
        [str(venv / "bin" / "cairn"), "train", "--iterations", "1", "--checkpoint-dir", "run", *SMALL], tmp_path
    )
    assert "iter 1/1" in train.stderr and "Traceback" not in train.stderr
    assert (tmp_path / "run" / "step_000000001" / "manifest.json").is_file()
