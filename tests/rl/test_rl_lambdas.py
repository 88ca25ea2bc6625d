"""Issue 39: configs take lambdas, closures and bound methods as RLlib does; checkpoints record none of them.

In one process a config with lambdas trains, saves and restores into the same live
algorithm; a checkpoint records only that each existed (role, qualname, module); a
new process's ``from_checkpoint`` asks for them by name in one error, and goes on
when they are passed; a forged record cannot make cairn call anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cairn
import cairn.rl.env.games
from cairn.errors import CheckpointError, MissingCallableError
from cairn.manifest import MANIFEST, TENSORS, FileEntry, Manifest
from cairn.registry import Unrecorded
from cairn.rl import PPO, ConnectorPipeline, PPOConfig, RLModule, RLModuleSpec
from cairn.rl.algorithms.algorithm import recorded_config
from cairn.rl.connectors.env_to_module import FlattenObservations

TICTACTOE = f"{cairn.rl.env.games.__name__}:TicTacToe"
SRC = str(Path(cairn.__file__).resolve().parents[1])


class Sides:
    """A bound method as the mapping function (RLlib scripts pass ``self.map`` too)."""

    def __init__(self, learner_side: str) -> None:
        self.learner_side = learner_side

    def map(self, agent_id: str, episode: Any, **kwargs: Any) -> str:
        return "learner" if agent_id.endswith(self.learner_side) else "frozen"


def lambda_config(**overrides: Any) -> PPOConfig:
    """TicTacToe with a bound-method mapping, a closure connector factory and a lambda callback."""
    episodes: list[int] = []

    def make_connectors(env: Any) -> Any:  # a closure: defined in a function
        return [FlattenObservations()]

    config = PPOConfig(
        env=TICTACTOE,
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=8,
        minibatch_size=16,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("learner", "frozen"),
        policy_mapping_fn=Sides("0").map,
        policies_to_train=("learner",),
        env_to_module_connector=make_connectors,
        evaluation_interval=100,  # evaluation runners exist; evaluate() is called by the test
        evaluation_duration=1,
    ).callbacks(on_episode_end=lambda episode, **kw: episodes.append(1))
    return dataclasses.replace(config, **overrides)


def test_lambdas_train_save_and_restore_into_the_live_algorithm(tmp_path: Path) -> None:
    config = lambda_config()
    assert isinstance(config.policy_mapping_fn, Unrecorded)
    assert config.policy_mapping_fn("agent_0", None) == "learner"  # RLlib code calls it itself
    assert isinstance(config.env_to_module_connector["ref"], Unrecorded)
    algo = PPO(config)
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
        expected = [algo.train().flatten(wall_clock=False) for _ in range(2)]
        algo.restore_from_path(path)  # the live algorithm holds them: nothing is asked
        assert [algo.train().flatten(wall_clock=False) for _ in range(2)] == expected
        assert algo.evaluate()["env_runners"]["num_episodes"] >= 1  # evaluation runners call them too
        # RLlib's add_module / remove_module with a lambda as the new mapping function.
        algo.add_module(
            "third",
            RLModuleSpec(),
            new_agent_to_module_mapping_fn=lambda agent_id, episode, **kw: (
                "third" if agent_id.endswith("1") else "learner"
            ),
        )
        assert algo.train()["env_runners"]["module_episode_returns_mean"].keys() >= {"third", "learner"}
        algo.remove_module("third", new_agent_to_module_mapping_fn=Sides("1").map)
        algo.train()
    finally:
        algo.stop()
    # The checkpoint holds no code: only the records, each with role, module and qualname.
    ctor = (Path(path) / "ctor.json").read_text()
    records = [r for r in _records(json.loads(ctor))]
    roles = sorted((r["role"], r["qualname"]) for r in records)
    assert roles == [
        ("callbacks_on_episode_end", "lambda_config.<locals>.<lambda>"),
        ("env_to_module_connector", "lambda_config.<locals>.make_connectors"),
        ("policy_mapping_fn", "Sides.map"),
    ]
    assert "pickle" not in ctor and "cloudpickle" not in ctor


def _records(tree: Any) -> list[dict[str, Any]]:
    """Every Unrecorded record in a ctor.json tree."""
    found: list[dict[str, Any]] = []
    if isinstance(tree, dict):
        if set(tree) == {"role", "module", "qualname", "index"}:
            found.append(tree)
        for value in tree.values():
            found.extend(_records(value))
    elif isinstance(tree, list):
        for value in tree:
            found.extend(_records(value))
    return found


FRESH = """
import sys
import cairn.rl.env.games
from cairn import MissingCallableError
from cairn.rl import PPO
from cairn.rl.connectors.env_to_module import FlattenObservations

path = sys.argv[1]
try:
    PPO.from_checkpoint(path)
except MissingCallableError as err:
    print("ASKED:", err)
try:
    PPO.from_checkpoint(path, policy_mapping_fn=lambda a, e, **kw: "learner" if a.endswith("0") else "frozen")
except MissingCallableError as err:
    print("ASKED AGAIN:", err)
ends = []
algo = PPO.from_checkpoint(
    path,
    policy_mapping_fn=lambda a, e, **kw: "learner" if a.endswith("0") else "frozen",
    env_to_module_connector=lambda env: [FlattenObservations()],
    callbacks_on_episode_end=[lambda episode, **kw: ends.append(1)],
)
algo.train()
print("TRAINED", algo.iteration, bool(ends))
algo.stop()
"""


def test_a_new_process_asks_for_exactly_the_missing_callables_by_name(tmp_path: Path) -> None:
    algo = PPO(lambda_config())
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(path)], capture_output=True, text=True, env=env, timeout=300, check=True
    ).stdout
    asked = next(line for line in out.splitlines() if line.startswith("ASKED:"))
    # One error: every role with the qualname and module it had, and the one line that passes them all.
    assert "policy_mapping_fn: 'Sides.map' of module 'test_rl_lambdas'" in asked
    assert "env_to_module_connector: 'lambda_config.<locals>.make_connectors'" in asked
    assert "callbacks_on_episode_end[0]: 'lambda_config.<locals>.<lambda>'" in asked
    assert (
        "PPO.from_checkpoint(path, policy_mapping_fn=<your policy_mapping_fn>, callbacks_on_episode_end=[<the "
        "functions of callbacks_on_episode_end, in the order the config was given them>], "
        "env_to_module_connector=<your env_to_module_connector>)" in asked
    )
    again = next(line for line in out.splitlines() if line.startswith("ASKED AGAIN:"))
    assert "2 callable(s)" in again and "policy_mapping_fn" not in again.partition("Pass them")[0]
    assert "TRAINED 2 True" in out


def reseal(root: Path) -> None:
    """Rewrite every manifest under ``root`` (deepest first) with the true digests of its files (an attacker's tool)."""
    for folder in sorted((p.parent for p in root.rglob(MANIFEST)), key=lambda p: -len(p.parts)):
        body = json.loads((folder / MANIFEST).read_text())
        names = set(body["files"]) | ({TENSORS} if (folder / TENSORS).exists() else set())
        files = {name: FileEntry.of((folder / name).read_bytes()) for name in sorted(names)}
        manifest = Manifest(files=files, components=body["components"], format_version=body["format_version"])
        (folder / MANIFEST).write_bytes(manifest.to_bytes())


def test_a_forged_record_cannot_make_cairn_call_anything(tmp_path: Path) -> None:
    algo = PPO(lambda_config())
    try:
        path = Path(algo.save_to_path(tmp_path / "ckpt"))
    finally:
        algo.stop()
    ctor = (path / "ctor.json").read_text()
    record = '"role": "policy_mapping_fn", "module": "test_rl_lambdas", "qualname": "Sides.map"'
    assert record in ctor
    # A record naming os.system, even one the program registered, is only a name for the message.
    cairn.register(os_system_stand_in)
    forged = ctor.replace(
        record, '"role": "policy_mapping_fn", "module": "test_rl_lambdas", "qualname": "os_system_stand_in"'
    )
    (path / "ctor.json").write_text(forged)
    reseal(path)
    with pytest.raises(MissingCallableError, match="'os_system_stand_in' of module 'test_rl_lambdas'"):
        PPO.from_checkpoint(path)
    assert CALLED == []
    # A record that carries anything more than its names is refused when it is read.
    (path / "ctor.json").write_text(ctor.replace(record, record + ', "fn": "test_rl_lambdas:os_system_stand_in"'))
    reseal(path)
    with pytest.raises(CheckpointError) as err:
        PPO.from_checkpoint(path)
    assert not isinstance(err.value, MissingCallableError) and CALLED == []


CALLED: list[Any] = []


def os_system_stand_in(*args: Any, **kwargs: Any) -> str:
    """What an attacker would like a record to make cairn call."""
    CALLED.append(args)
    return "learner"


def test_what_does_not_need_the_callables_asks_for_nothing(tmp_path: Path) -> None:
    algo = PPO(lambda_config())
    try:
        path = Path(algo.save_to_path(tmp_path / "ckpt"))
    finally:
        algo.stop()
    module = RLModule.from_checkpoint(path / "learner_group" / "learner" / "rl_module" / "learner")
    assert module.get_state()
    pipeline = ConnectorPipeline.from_checkpoint(path / "env_runner" / "env_to_module_connector" / "learner")
    assert pipeline.connectors
    inspected = subprocess.run(
        [sys.executable, "-m", "cairn", "inspect", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert inspected.returncode == 0, inspected.stderr
    # cairn train --resume reads the recorded config and builds from it: the same one error.
    config = recorded_config(str(path))
    assert [m.field_name for m in config.missing_callables()] == [
        "policy_mapping_fn",
        "callbacks_on_episode_end[0]",
        "env_to_module_connector",
    ]
    with pytest.raises(MissingCallableError, match=r"PPO\.from_checkpoint\(path, policy_mapping_fn="):
        PPO(config)
