"""Issue 33: a checkpoint names only what the program allowed, and starts no work the caller did not ask for.

Each test forges a real PPO checkpoint as an attacker would (the recorded config in
``ctor.json`` edited, every manifest re-sealed so the integrity layer lets it through)
and loads it through the public API or the ``cairn`` command.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rl_helpers import small_config
from test_rl_hostile_round4 import reseal

import cairn
from cairn.cli import main as cli_main
from cairn.errors import CheckpointError, UnsafeCheckpointError
from cairn.manifest import CTOR
from cairn.registry import CONNECTOR_FACTORY, allowed
from cairn.rl import PPO, RLModuleSpec
from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule
from connector_helpers import ScaleActions
from trust_probe_helpers import TrustProbe

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

ATTACK = {"ref": "tqdm.cli:main", "kwargs": {"argv": ["--version"]}}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trust") / "ppo"
    algo = PPO(small_config())
    algo.save_to_path(path)
    algo.stop()
    return path


def forged(saved: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``saved`` whose recorded config ``edit`` changed, re-sealed."""
    dst = tmp_path / "forged"
    shutil.copytree(saved, dst)
    ctor = json.loads((dst / CTOR).read_text())
    edit(ctor["args"][0]["value"])
    (dst / CTOR).write_text(json.dumps(ctor))
    reseal(dst)
    return dst


def set_field(**values: Any) -> Callable[[dict[str, Any]], None]:
    return lambda config: config.update(values)


def test_an_imported_framework_function_as_connector_factory_is_refused(saved: Path, tmp_path: Path) -> None:
    """The attack of issue 33: `from cairn.rl import PPO` imports tqdm, and tqdm.cli:main ends the program."""
    assert "tqdm.cli" in sys.modules  # the module is imported: that is no longer enough
    path = forged(saved, tmp_path, set_field(env_to_module_connector=ATTACK))
    with pytest.raises(UnsafeCheckpointError) as err:
        PPO.from_checkpoint(path)
    message = str(err.value)
    assert "env_to_module_connector" in message and "'tqdm.cli:main'" in message
    assert "cairn.register(tqdm.cli.main)" in message and "trusted=[main]" in message
    assert "--trust tqdm.cli:main" in message


@pytest.mark.parametrize(
    "command",
    [["upgrade", "{path}", "{out}"], ["train", "--algo", "ppo", "--resume", "--checkpoint-dir", "{root}"]],
)
def test_the_cli_refuses_the_forged_factory(
    saved: Path, tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "run"
    root.mkdir()
    path = forged(saved, root, set_field(env_to_module_connector=ATTACK))
    path = path.rename(root / "step_000000001")
    argv = [a.format(path=path, out=tmp_path / "out", root=root) for a in command]
    status = cli_main(argv)
    err = capsys.readouterr().err
    assert status != 0
    assert "tqdm.cli:main" in err and "allow-list" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("callbacks_on_train_result", ["tqdm.cli:main"]),
        ("policy_mapping_fn", "tqdm.cli:main"),
        ("evaluation_config", {"env_to_module_connector": ATTACK}),
        ("module_to_env_connector", {"ref": "cairn.tools:upgrade_checkpoint", "kwargs": {}}),
    ],
)
def test_every_recorded_reference_goes_through_the_allow_list(
    saved: Path, tmp_path: Path, field: str, value: Any
) -> None:
    path = forged(saved, tmp_path, set_field(**{field: value}))
    with pytest.raises(UnsafeCheckpointError, match="allow-list"):
        PPO.from_checkpoint(path)


def test_a_role_has_a_type(saved: Path, tmp_path: Path) -> None:
    """An allowed class in the wrong role is refused: a module class is no connector factory."""
    ref = {"ref": "cairn.rl.core.rl_module.rl_module:RLModule", "kwargs": {}}
    path = forged(saved, tmp_path, set_field(env_to_module_connector=ref))
    with pytest.raises(UnsafeCheckpointError, match=r"subclass of cairn\.rl\.connectors\.connector_v2:ConnectorV2"):
        PPO.from_checkpoint(path)


def test_trusted_allows_one_load_and_registration_allows_the_program(saved: Path, tmp_path: Path) -> None:
    # TrustProbe: a class no other test names, so the first load is refused whatever ran before.
    ref = {"ref": "trust_probe_helpers:TrustProbe", "kwargs": {"factor": 1.0}}
    path = forged(saved, tmp_path, set_field(module_to_env_connector=ref))
    with pytest.raises(UnsafeCheckpointError, match=r"trusted=\[TrustProbe\]"):
        PPO.from_checkpoint(path)
    algo = PPO.from_checkpoint(path, trusted=[TrustProbe])
    assert algo.config.module_to_env_connector["ref"] == "trust_probe_helpers:TrustProbe"
    algo.stop()
    cairn.register(TrustProbe)  # (a no-op now: the trusted load registered what it resolved)
    PPO.from_checkpoint(path).stop()


def test_a_config_built_in_code_needs_nothing_more(tmp_path: Path) -> None:
    """Save and continue in one process: what the user passed was registered when the config was built."""
    algo = PPO(small_config(env_to_module_connector=FrameStackingEnvToModule))
    algo.save_to_path(tmp_path / "ck")
    algo.stop()
    PPO.from_checkpoint(tmp_path / "ck").stop()


def test_a_recorded_load_state_path_is_never_followed(saved: Path, tmp_path: Path) -> None:
    spec = {
        "__cairn__": "registered",
        "type": "cairn.rl.core.rl_module.rl_module:RLModuleSpec",
        "value": {"load_state_path": "http://127.0.0.1:9/weights", "seed": 1},
    }
    path = forged(saved, tmp_path, set_field(rl_module_spec=spec))
    with pytest.raises(UnsafeCheckpointError, match="load_state_path"):
        PPO.from_checkpoint(path)
    assert RLModuleSpec(load_state_path="x").load_state_path == "x"  # the caller's code may still pass one


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_learners", 10**6),
        ("num_env_runners", 500),
        ("evaluation_num_env_runners", 500),
        ("num_torch_threads", 10**6),
        ("env_config", {"desc": ["F" * 4000]}),
        ("env_config", {"size": 10**9}),
        ("env_config", {"rows": list(range(1000))}),
    ],
)
def test_recorded_counts_are_bounded_by_the_machine(saved: Path, tmp_path: Path, field: str, value: Any) -> None:
    path = forged(saved, tmp_path, set_field(**{field: value}))
    with pytest.raises(CheckpointError) as err:
        PPO.from_checkpoint(path)
    assert field in str(err.value) and "config=config" in str(err.value)


def test_the_caller_s_config_overrides_the_machine_bound(saved: Path, tmp_path: Path) -> None:
    path = forged(saved, tmp_path, set_field(num_torch_threads=10**6))
    PPO.from_checkpoint(path, config=small_config()).stop()


def test_register_refuses_what_no_path_names_and_leaves_main_alone() -> None:
    with pytest.raises(CheckpointError, match="inside a function"):
        cairn.register(lambda: None)
    # A script's own class: returned unchanged and on no list (no checkpoint may name __main__), so
    # that a script can decorate its classes and import itself under its module name.
    script_class = type("ScriptConnector", (ScaleActions,), {"__module__": "__main__"})
    assert cairn.register(script_class) is script_class
    assert allowed("__main__:ScriptConnector", CONNECTOR_FACTORY) is None


class CliOnlyScale(ScaleActions):
    """Allowed by nothing but the command line's --trust in the test below (no other test names it)."""


class UpgradeOnlyScale(ScaleActions):
    """Allowed by nothing but upgrade_checkpoint(trusted=) in the test below."""


def test_cli_trust_allows_what_the_user_names(saved: Path, tmp_path: Path) -> None:
    name = f"{__name__}:CliOnlyScale"
    path = forged(saved, tmp_path, set_field(module_to_env_connector={"ref": name, "kwargs": {}}))
    assert cli_main(["upgrade", str(path), str(tmp_path / "o1")]) != 0  # imported is not enough
    assert cli_main(["--trust", f"{__name__}:NoSuchName", "upgrade", str(path), str(tmp_path / "o2")]) != 0
    assert cli_main(["--trust", name, "upgrade", str(path), str(tmp_path / "out")]) == 0


def test_upgrade_checkpoint_takes_trusted(saved: Path, tmp_path: Path) -> None:
    from cairn.tools import upgrade_checkpoint

    ref = {"ref": f"{__name__}:UpgradeOnlyScale", "kwargs": {}}
    path = forged(saved, tmp_path, set_field(module_to_env_connector=ref))
    with pytest.raises(UnsafeCheckpointError, match=r"trusted=\[UpgradeOnlyScale\]"):
        upgrade_checkpoint(str(path), str(tmp_path / "o1"))
    assert not (tmp_path / "o1").exists()
    upgrade_checkpoint(str(path), str(tmp_path / "out"), trusted=[UpgradeOnlyScale])
    assert (tmp_path / "out" / CTOR).exists()


def test_train_resume_takes_the_user_s_runner_count_as_the_override(
    saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint recording more runners than the machine allows resumes with --num-env-runners (SPEC 8);
    the checkpoint's other counts stay bounded."""
    root = tmp_path / "run"
    root.mkdir()
    path = forged(saved, root, set_field(num_env_runners=500, num_torch_threads=10**6))
    path.rename(root / "step_000000001")
    resume = ["train", "--resume", "--checkpoint-dir", str(root), "--iterations", "0"]
    assert cli_main(resume) != 0
    assert "num_env_runners=500" in capsys.readouterr().err
    assert cli_main([*resume, "--num-env-runners", "0"]) != 0  # the threads are still the file's
    assert "num_torch_threads=1000000" in capsys.readouterr().err
    assert cli_main([*resume, "--num-env-runners", "0", "--set", "num_torch_threads=1"]) == 0
    assert "resumed from" in capsys.readouterr().err
