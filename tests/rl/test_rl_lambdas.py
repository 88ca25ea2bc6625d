"""Issue 39: configs take lambdas, closures and bound methods as RLlib does; checkpoints record none of them.

In one process a config with lambdas trains, saves and restores into the same live
algorithm; a checkpoint records only that each existed (role, qualname, module); a
new process's ``from_checkpoint`` asks for them by name in one error, and goes on
when they are passed; a forged record cannot make cairn call anything. Env creators
(``register_env(name, lambda)``, ``environment(lambda)``) and lambdas inside
``evaluation_config`` and ``algorithm_config_overrides_per_module`` follow the same rule.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from rl_helpers import forge

import cairn
import cairn.rl.env.games
from cairn.errors import CheckpointError, MissingCallableError
from cairn.registry import Unrecorded
from cairn.rl import PPO, ConnectorPipeline, PPOConfig, RLModule, RLModuleSpec, register_env
from cairn.rl.algorithms.algorithm import recorded_config
from cairn.rl.connectors.env_to_module import FlattenObservations

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

LAMBDA_ENV = "lambda-tictactoe"
register_env(LAMBDA_ENV, lambda cfg: cairn.rl.env.games.TicTacToe(cfg))  # RLlib's tune.register_env form
SRC = str(Path(cairn.__file__).resolve().parents[1])


class Sides:
    """A bound method as the mapping function (RLlib scripts pass ``self.map`` too)."""

    def __init__(self, learner_side: str) -> None:
        self.learner_side = learner_side

    def map(self, agent_id: str, episode: Any, **kwargs: Any) -> str:
        return "learner" if agent_id.endswith(self.learner_side) else "frozen"


def lambda_config(**overrides: Any) -> PPOConfig:
    """TicTacToe registered with a lambda creator, a bound-method mapping, a closure connector factory, a lambda
    callback, and lambdas inside evaluation_config and a module's overrides."""
    episodes: list[int] = []

    def make_connectors(env: Any) -> Any:  # a closure: defined in a function
        return [FlattenObservations()]

    config = PPOConfig(
        env=LAMBDA_ENV,
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
        algorithm_config_overrides_per_module={"frozen": {"lr": 1e-3, "env_to_module_connector": make_connectors}},
    ).callbacks(on_episode_end=lambda episode, **kw: episodes.append(1))
    config = config.evaluation(evaluation_config={"policy_mapping_fn": lambda agent_id, episode, **kw: "learner"})
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
        (
            "algorithm_config_overrides_per_module/frozen/env_to_module_connector",
            "lambda_config.<locals>.make_connectors",
        ),
        ("callbacks_on_episode_end", "lambda_config.<locals>.<lambda>"),
        ("env", "<lambda>"),
        ("env_to_module_connector", "lambda_config.<locals>.make_connectors"),
        ("evaluation_config/policy_mapping_fn", "lambda_config.<locals>.<lambda>"),
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
from cairn import MissingCallableError
from cairn.rl import PPO, register_env
from cairn.rl.connectors.env_to_module import FlattenObservations
from cairn.rl.env.games import TicTacToe

path = sys.argv[1]
try:
    PPO.from_checkpoint(path)
except MissingCallableError as err:
    print("ASKED:", err)
register_env("lambda-tictactoe", lambda cfg: TicTacToe(cfg))  # as an RLlib script does before it restores
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
    evaluation_config={"policy_mapping_fn": lambda a, e, **kw: "learner"},
    algorithm_config_overrides_per_module={"frozen": {"env_to_module_connector": lambda env: [FlattenObservations()]}},
)
algo.train()
print("TRAINED", algo.iteration, bool(ends))
algo.stop()
"""


UNRECORDED_TYPE = "cairn.registry:Unrecorded"
PICKLE_MARKS = (b"cloudpickle", b"__reduce", b"c__builtin__", b"\x8c\x08builtins", b"\x80\x04\x95", b"\x80\x05\x95")
"""Bytes any pickle (cloudpickle's too) of a function or an object carries: the protocol 4/5 frame header,
the module of builtins (cloudpickle reaches ``getattr``/``exec`` through it), ``__reduce_ex__`` names."""


def unrecorded_records(tree: Any) -> list[dict[str, Any]]:
    """The value of every :class:`~cairn.registry.Unrecorded` a ctor.json tree holds, whatever keys it has."""
    found: list[dict[str, Any]] = []
    if isinstance(tree, dict):
        if tree.get("__cairn__") == "registered" and tree.get("type") == UNRECORDED_TYPE:
            found.append(tree["value"])
        for value in tree.values():
            found.extend(unrecorded_records(value))
    elif isinstance(tree, list):
        for value in tree:
            found.extend(unrecorded_records(value))
    return found


def assert_holds_no_code(checkpoint: Path) -> list[dict[str, Any]]:
    """Every file of ``checkpoint`` is free of pickle bytes, every metadata.json says ``uses_pickle: false``, and
    each lambda's record is its three names and an index, nothing callable. Returns the top-level ctor's records."""
    files = [p for p in checkpoint.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"ctor.json", "state.msgpack", "metadata.json", "manifest.json"}
    for file in files:
        data = file.read_bytes()
        # A pickle stream (PROTO 2-5; a lone 0x80 is msgpack's empty map), a torch.save zip.
        assert not data.startswith((b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05", b"PK\x03\x04")), file
        assert not [mark for mark in PICKLE_MARKS if mark in data], file
        if file.name == "metadata.json":
            assert json.loads(data).get("uses_pickle", False) is False, file
        if file.name == "ctor.json":
            for record in unrecorded_records(json.loads(data)):
                assert set(record) == {"role", "module", "qualname", "index"}, record
                assert all(isinstance(v, str) for k, v in record.items() if k != "index"), record
    return unrecorded_records(json.loads((checkpoint / "ctor.json").read_text()))


def test_a_new_process_asks_for_exactly_the_missing_callables_by_name(tmp_path: Path) -> None:
    algo = PPO(lambda_config())
    try:
        algo.train()
        path = Path(cairn.CheckpointManager(tmp_path / "run").save(algo, step=1))  # a run cairn train can resume
    finally:
        algo.stop()
    # The checkpoint holds no code: six records (the env creator and one in evaluation_config among them).
    records = assert_holds_no_code(path)
    assert sorted(r["role"] for r in records) == [
        "algorithm_config_overrides_per_module/frozen/env_to_module_connector",
        "callbacks_on_episode_end",
        "env",
        "env_to_module_connector",
        "evaluation_config/policy_mapping_fn",
        "policy_mapping_fn",
    ]
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(path)], capture_output=True, text=True, env=env, timeout=300, check=True
    ).stdout
    asked = next(line for line in out.splitlines() if line.startswith("ASKED:"))
    # One error: every role with the qualname and module it had, and the one line that passes them all.
    assert "6 callable(s)" in asked
    assert "policy_mapping_fn: 'Sides.map' of module 'test_rl_lambdas'" in asked
    assert "env_to_module_connector: 'lambda_config.<locals>.make_connectors'" in asked
    assert "callbacks_on_episode_end[0]: 'lambda_config.<locals>.<lambda>'" in asked
    assert (
        "env: '<lambda>' of module 'test_rl_lambdas' (the creator of env 'lambda-tictactoe': "
        "register_env('lambda-tictactoe', creator) before the load)" in asked
    )
    assert "evaluation_config['policy_mapping_fn']: 'lambda_config.<locals>.<lambda>'" in asked
    assert "algorithm_config_overrides_per_module['frozen']['env_to_module_connector']: 'lambda_config" in asked
    passes = asked.partition("Pass them to the load: ")[2]
    for line in [
        "PPO.from_checkpoint(path, env=<your env creator>, policy_mapping_fn=<your policy_mapping_fn>, ",
        "callbacks_on_episode_end=[<the functions of callbacks_on_episode_end, in the order the config was given "
        "them>]",
        "env_to_module_connector=<your env_to_module_connector>",
        "evaluation_config={'policy_mapping_fn': <your policy_mapping_fn>}",
        "algorithm_config_overrides_per_module={'frozen': {'env_to_module_connector': <your env_to_module_connector>}}",
    ]:
        assert line in passes
    # The env registered again and the mapping function passed: only the other four are asked for.
    again = next(line for line in out.splitlines() if line.startswith("ASKED AGAIN:"))
    assert "4 callable(s)" in again and "policy_mapping_fn:" not in again.partition("Pass them")[0].replace("['", "")
    assert "TRAINED 2 True" in out
    # The CLI: one line on stderr that names them and says what a command line can do.
    resume = cli("train", "--checkpoint-dir", str(tmp_path / "run"), "--resume", "--iterations", "3", env=env)
    assert resume.returncode == 1 and len(resume.stderr.strip().splitlines()) == 1, resume.stderr
    said = resume.stderr
    assert f"--resume: {path}: This algorithm's checkpoint was saved with 6 callable(s)" in said
    assert "env: '<lambda>' of module 'test_rl_lambdas' (the creator of env 'lambda-tictactoe'" in said
    assert "evaluation_config['policy_mapping_fn']: 'lambda_config.<locals>.<lambda>'" in said
    assert "cairn train takes no code, so it cannot pass them: continue the run from your script" in said
    evaluated = cli("evaluate", str(tmp_path / "run"), "--module", "learner", "--episodes", "1", env=env)
    assert evaluated.returncode == 1 and len(evaluated.stderr.strip().splitlines()) == 1, evaluated.stderr
    assert (
        f"{path}: its env 'lambda-tictactoe' was built by a creator function the checkpoint could not record "
        "(env: '<lambda>' of module 'test_rl_lambdas'" in evaluated.stderr
    )
    assert "Pass --env with a gymnasium id" in evaluated.stderr
    assert "PPO.from_checkpoint(path, env=creator); algo.evaluate()" in evaluated.stderr


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m cairn ARGS`` in a new process (no lambda of this one exists there)."""
    return subprocess.run(
        [sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def test_an_env_creator_lambda_trains_and_a_load_takes_it_again_as_env(tmp_path: Path) -> None:
    """RLlib's environment(creator), also inside evaluation_config: kept, recorded as existing, asked as env=."""
    made: list[int] = []

    def creator(env_config: dict[str, Any]) -> Any:  # a closure
        made.append(1)
        return gym.make("CartPole-v1")

    short = lambda cfg: gym.make("CartPole-v1", max_episode_steps=8)  # noqa: E731
    config = (
        PPOConfig(num_envs_per_env_runner=1, rollout_length=16, minibatch_size=16, num_epochs=1)
        .environment(creator)
        .rl_module(model_config={"fcnet_hiddens": [8]})
        .evaluation(evaluation_interval=1, evaluation_duration=1, evaluation_config={"env": short})
    )
    algo = PPO(config)
    try:
        result = algo.train()
        path = algo.save_to_path(tmp_path / "ckpt")
    finally:
        algo.stop()
    assert made and result["evaluation"]["env_runners"]["num_episodes"] >= 1
    with pytest.raises(MissingCallableError) as err:
        PPO.from_checkpoint(path)  # this process holds them, but a load takes only what it is given
    message = str(err.value)
    assert "env: 'test_an_env_creator_lambda_trains_and_a_load_takes_it_again_as_env.<locals>.creator'" in message
    assert "evaluation_config['env']: 'test_an_env_creator_lambda" in message and "register_env" not in message
    assert "(path, env=<your env creator>, evaluation_config={'env': <your env creator>})" in message
    made.clear()
    restored = PPO.from_checkpoint(path, env=creator, evaluation_config={"env": short})
    try:
        assert restored.train()["evaluation"]["env_runners"]["num_episodes"] >= 1 and made
        assert restored.iteration == 2
    finally:
        restored.stop()


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
    forge(path, "ctor.json", lambda _: forged)
    with pytest.raises(MissingCallableError, match="'os_system_stand_in' of module 'test_rl_lambdas'"):
        PPO.from_checkpoint(path)
    assert CALLED == []
    # A record that carries anything more than its names is refused when it is read.
    forge(path, "ctor.json", lambda _: ctor.replace(record, record + ', "fn": "test_rl_lambdas:os_system_stand_in"'))
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
    # (Not the env: this process registered its name, and a registered name brings its creator.)
    config = recorded_config(str(path))
    assert sorted(m.field_name for m in config.missing_callables()) == [
        "algorithm_config_overrides_per_module['frozen']['env_to_module_connector']",
        "callbacks_on_episode_end[0]",
        "env_to_module_connector",
        "evaluation_config['policy_mapping_fn']",
        "policy_mapping_fn",
    ]
    with pytest.raises(MissingCallableError, match=r"PPO\.from_checkpoint\(path, policy_mapping_fn="):
        PPO(config)


def test_a_forged_role_inside_another_role_still_gets_the_one_message() -> None:
    """Records are read from a file: roles ``a`` and ``a<SCOPE>b`` (one inside the other) must still give
    the message that names both, not a TypeError from building the line that passes them back."""
    from cairn._unrecorded import SCOPE, Unrecorded, missing_message

    message = missing_message(
        [Unrecorded("policy_mapping_fn", "m", "<lambda>"), Unrecorded(f"policy_mapping_fn{SCOPE}x", "m", "f")],
        where="a checkpoint",
    )
    assert "policy_mapping_fn" in message and "'<lambda>'" in message and "'f'" in message
