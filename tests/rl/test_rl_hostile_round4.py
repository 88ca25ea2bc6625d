"""Hostile and damaged checkpoints against the RL readers of issues 27 and 28 (round 4).

Every test writes a real checkpoint with cairn, rewrites one value of a component's
state as an attacker would (decoded with cairn's reader, encoded with its codec,
every manifest re-sealed so that the integrity layer lets it through), and restores
it into a live object. The reader must refuse it with a
:class:`~cairn.errors.CheckpointError` that names the value's path, and leave the live
object as it was (it still samples); never a raw ``KeyError`` or a numpy broadcast
error later, deep in sampling.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rl_helpers import forge, reseal, small_config

import cairn
import cairn.rl.env.games
from cairn._reader import open_checkpoint
from cairn.codec.state import encode_state
from cairn.codec.tensors import build_header
from cairn.manifest import STATE, TENSORS
from cairn.rl import PPO, MultiRLModuleSpec, PPOConfig, RLModuleSpec
from cairn.rl.connectors.connectors import MAX_FILTER_SIZE, ConnectorPipeline, MeanStdFilter
from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule
from cairn.rl.env.env_runner import EnvRunner
from cairn.rl.env.multi_agent_env_runner import MultiAgentEnvRunner
from cairn.testing import assert_states_equal
from episode_callbacks_helpers import AgentCustomData, PoleAngles

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

Edit = Callable[[dict[str, Any]], None]

# --------------------------------------------------------------------------- an attacker's tools


def rewrite(root: Path, rel: str, edit: Edit) -> Path:
    """Decode the own state of the folder ``rel`` of the checkpoint ``root``, ``edit`` it, encode and re-seal."""
    folder = root / rel if rel else root
    state = open_checkpoint(str(folder), None).state(allow_pickle=False)
    edit(state)
    encoded = encode_state(state, allow_pickle=False)
    (folder / STATE).write_bytes(encoded.skeleton)
    data = b"".join(bytes(memoryview(e.data)) for e in encoded.tensors)
    (folder / TENSORS).write_bytes(build_header(encoded.tensors, {"format": "cairn"}) + data)
    reseal(root)
    return root


def copy_of(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "hostile"
    shutil.copytree(src, dst)
    return dst


def at(*keys: Any) -> Callable[[Any], Edit]:
    """An edit that sets ``state[k1][k2]...`` to a value, or to ``value(old)`` when it is callable."""

    def make(value: Any) -> Edit:
        def edit(state: dict[str, Any]) -> None:
            node = state
            for key in keys[:-1]:
                node = node[key]
            node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value

        return edit

    return make


# --------------------------------------------------------------------------- single-agent runner

TINY = {"num_envs_per_env_runner": 2, "rollout_length": 9}


def runner_config() -> PPOConfig:
    """CartPole, two slots, frame stacks, the default MeanStdFilter and episode objects (PoleAngles)."""
    stack = functools.partial(FrameStackingEnvToModule, num_frames=3)
    return small_config(**TINY, callbacks_class=PoleAngles).env_runners(env_to_module_connector=stack)


@pytest.fixture(scope="module")
def runner_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    runner = EnvRunner(runner_config())
    try:
        runner.sample_batches()  # episodes in flight, frames stacked, metrics logged
        yield Path(runner.save_to_path(tmp_path_factory.mktemp("runner") / "ck"))
    finally:
        runner.close()


def advance(runner: EnvRunner) -> None:
    """Two samples: the live runner's state then differs from the checkpoint's (taken after one), everywhere
    (counters, RNG, environments, frames, filter, metrics), so that a partial restore would show."""
    runner.sample_batches()
    runner.sample_batches()


def refused_and_unchanged(runner: EnvRunner, restore: Callable[[], Any], match: str) -> None:
    """``restore`` raises a CheckpointError matching ``match``; the runner's state is as it was and it samples."""
    before = runner.get_state()
    with pytest.raises(cairn.CheckpointError, match=match):
        restore()
    assert_states_equal(runner.get_state(), before)
    runner.sample_batches()


FRAMES = ("env", "connectors", "env_to_module_connector", "FrameStackingEnvToModule")
EPISODE0 = ("env", "episode_api", "episodes", 0)

RUNNER_ATTACKS: list[Any] = [
    ("counter_nan", at("counters", "num_env_steps_sampled_lifetime")(float("nan")), r"counters/num_env_steps_sampled"),
    ("counter_negative", at("counters", "num_episodes_lifetime")(-3), r"counters/num_episodes_lifetime.*-3"),
    ("counter_str", at("counters", "num_agent_steps_sampled_lifetime")("7"), r"non-negative int.*'7'"),
    ("rng_truncated", at("rng", "torch")(lambda t: t[:100]), r"env_runner/rng/torch.*generator's state"),
    ("window_nan_length", at("episodes", "recent_lengths")([float("nan")]), r"episodes/recent_lengths/0"),
    ("returns_wrong_length", at("env", "episode_returns")(np.zeros(3)), r"env/episode_returns: has shape \(3,\)"),
    ("starts_wrong_length", at("env", "episode_starts")(np.zeros(5, np.bool_)), r"env/episode_starts: has shape"),
    ("lengths_negative", at("env", "episode_lengths")(np.array([-1, 2])), r"env/episode_lengths: holds negative"),
    ("autoreset_strings", at("env", "autoreset")(np.array(["a", "b"])), r"env/autoreset: expected an array of bool"),
    ("obs_strings", at("env", "obs")(np.full((2, 4), "x")), r"env/obs: the current observations are not arrays"),
    ("cartpole_state_shape", at("env", "sub_envs", 0, "env", "state", "value")(np.zeros(7)), r"sub_envs/0.*\(7,\)"),
    ("cartpole_state_nan", at("env", "sub_envs", 1, "env", "state", "value")(np.full(4, np.nan)), r"NaN or infinite"),
    ("env_rng_foreign", at("env", "sub_envs", 0, "np_random")({"bit_generator": "X"}), r"sub_envs/0.*RNG state"),
    ("time_limit_negative", at("env", "sub_envs", 0, "time_limit_steps")([-4]), r"TimeLimit step counters \[-4\]"),
    (
        "env_attribute_injection",
        at("env", "sub_envs", 0, "env", "render_mode")({"kind": "py", "value": "human"}),
        r"sets the attribute 'render_mode'",
    ),
    (
        "frames_wrong_shape",
        at(*FRAMES, "frames")(lambda f: f[:, :1]),
        r"FrameStackingEnvToModule: frames has shape \(2, 1, 4\) in the checkpoint, but this object keeps \(2, 2, 4\)",
    ),
    ("frames_foreign_slot", at(*FRAMES, "slots")(np.array([0, 99])), r"frames of slot 99.*slots are 0..1"),
    (
        "frames_strings",
        at(*FRAMES, "frames")(lambda f: np.full(f.shape, "x")),
        r"FrameStackingEnvToModule: frames: expected an array of numbers",
    ),
    ("episode_other_slot", at(*EPISODE0, "env_index")(1), r"episode_api/episodes/0: is the episode of env 1"),
    ("episode_int_agent", at(*EPISODE0, "agent_id")(0), r"agent 0; slot 0 runs agent 'default_agent'"),
    ("episode_unknown_module", at(*EPISODE0, "module_id")("nope"), r"acts with module 'nope'"),
    ("episode_custom_data_list", at(*EPISODE0, "custom_data")([1, 2]), r"episode_api/episodes/0: is not an episode"),
    ("episode_numbers_negative", at("env", "episode_api", "numbers")([-1, 0]), r"episode_api/numbers/0"),
    ("episode_length_huge", at(*EPISODE0, "length")(10**12), r"history's lengths do not match"),
    (
        "episode_history_obs_shape",
        at(*EPISODE0, "observations")(lambda o: {"stacked": o["stacked"][:, :1]}),
        r"episodes/0/observations: an item of the episode's history has shape \(1,\)",
    ),
    ("window_string", at("episodes", "recent_returns")(["x"]), r"episodes/recent_returns/0: expected a number"),
    (
        "module_window_no_list",
        at("episodes", "recent_module_returns")({"default_policy": 3.0}),
        r"episodes/recent_module_returns/default_policy: expected a list",
    ),
    ("metrics_not_a_dict", at("metrics")([1, 2]), r"env_runner/metrics: expected a metrics logger's state"),
    (
        "metrics_key_clash",
        at("metrics", "stats")(lambda s: [*s, {**s[0], "key": [*s[0]["key"], "sub"]}]),
        r"metrics: Metric .* clashes with",
    ),
]


@pytest.mark.parametrize(("name", "edit", "match"), RUNNER_ATTACKS, ids=[a[0] for a in RUNNER_ATTACKS])
def test_a_hostile_runner_state_is_refused_and_the_runner_is_unchanged(
    runner_ckpt: Path, tmp_path: Path, name: str, edit: Edit, match: str
) -> None:
    ck = rewrite(copy_of(runner_ckpt, tmp_path), "", edit)
    runner = EnvRunner(runner_config())
    try:
        advance(runner)
        refused_and_unchanged(runner, lambda: runner.restore_from_path(ck), match)
        # The state handed over directly (a remote runner's own state, EnvRunnerActor.set_own_state).
        state = runner.get_state()
        edit(state)
        refused_and_unchanged(runner, lambda: runner.set_state(state), match)
    finally:
        runner.close()
    # from_checkpoint refuses it too (and drops the object it built).
    with pytest.raises(cairn.CheckpointError, match=match):
        EnvRunner.from_checkpoint(ck)


def test_the_untouched_runner_checkpoint_still_restores_exactly(runner_ckpt: Path, tmp_path: Path) -> None:
    """The attacker's tools change nothing by themselves: a rewrite without an edit restores and resumes."""
    ck = rewrite(copy_of(runner_ckpt, tmp_path), "", lambda state: None)
    a, b = EnvRunner.from_checkpoint(runner_ckpt), EnvRunner.from_checkpoint(ck)
    try:
        assert_states_equal(a.get_state(), b.get_state())
        for module_id, batch in a.sample_batches().items():
            np.testing.assert_array_equal(batch["obs"], b.sample_batches()[module_id]["obs"])
    finally:
        a.close()
        b.close()


FILTER = "env_to_module_connector/MeanStdFilter"


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (at("m2")(lambda m2: -np.ones_like(m2)), r"MeanStdFilter: m2: holds values below 0"),
        (at("mean")(lambda m: np.full_like(m, np.inf)), r"MeanStdFilter: mean: holds NaN or infinite values"),
        (
            at("count")(float("nan")),
            r"MeanStdFilter: count: a count must be a non-negative int, the checkpoint holds nan",
        ),
        (at("count")(-2), r"MeanStdFilter: count: a count must be .*holds -2"),
        (
            at("mean")(lambda m: np.full(m.shape, "a")),
            r"MeanStdFilter: mean: expected an array of numbers, the checkpoint holds an array of <U1",
        ),
    ],
    ids=["m2_negative", "mean_inf", "count_nan", "count_negative", "mean_strings"],
)
def test_a_hostile_filter_state_is_refused_before_it_reaches_the_live_statistics(
    runner_ckpt: Path, tmp_path: Path, edit: Edit, match: str
) -> None:
    ck = rewrite(copy_of(runner_ckpt, tmp_path), FILTER, edit)
    runner = EnvRunner(runner_config())
    try:
        advance(runner)
        # The filter reads its arrays in place (get_state_buffers): values it refuses are put back.
        refused_and_unchanged(runner, lambda: runner.restore_from_path(ck), match)
        pipeline = ck / FILTER.split("/")[0]
        refused_and_unchanged(runner, lambda: runner.env_to_module.restore_from_path(pipeline), match)
        filter_ = runner.env_to_module["MeanStdFilter"]
        refused_and_unchanged(runner, lambda: filter_.restore_from_path(ck / FILTER), match)
    finally:
        runner.close()


def test_a_filter_recording_a_huge_shape_is_refused_before_it_allocates(tmp_path: Path) -> None:
    """A checkpoint's recorded factory arguments or pipeline arguments name the filter's shape."""
    with pytest.raises(ValueError, match=rf"normalises {10**12} numbers per observation, more than {MAX_FILTER_SIZE}"):
        MeanStdFilter(shape=[10**6, 10**6])
    pipeline = ConnectorPipeline([(MeanStdFilter, {"shape": [4]})])
    ck = Path(pipeline.save_to_path(tmp_path / "pipe"))
    forge(ck, "ctor.json", lambda text: json.dumps(json.loads(text)).replace("[4]", f"[{10**6}, {10**6}]"))
    with pytest.raises(cairn.CheckpointError, match=r"more than 16777216 \(MAX_FILTER_SIZE\)"):
        ConnectorPipeline.from_checkpoint(ck)
    algo_ck = Path(PPO(small_config(**TINY)).save_to_path(tmp_path / "algo"))
    factory = {"ref": "cairn.rl.connectors.connectors:MeanStdFilter", "kwargs": {"shape": [10**6, 10**6]}}
    forge(
        algo_ck,
        "ctor.json",
        lambda text: text.replace(
            '"env_to_module_connector": null', f'"env_to_module_connector": {json.dumps(factory)}'
        ),
    )
    with pytest.raises((cairn.CheckpointError, ValueError), match=r"MAX_FILTER_SIZE"):
        PPO.from_checkpoint(algo_ck)


# --------------------------------------------------------------------------- multi-agent runner


def game_config(**overrides: Any) -> PPOConfig:
    """TicTacToe (iterations end mid-game), a module per player, per-agent episode objects."""
    base = PPOConfig(
        env=f"{cairn.rl.env.games.__name__}:TicTacToe",
        seed=5,
        num_envs_per_env_runner=2,
        rollout_length=7,
        minibatch_size=14,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("a", "b"),
        policy_mapping={"player_0": "a", "player_1": "b"},
        callbacks_class=AgentCustomData,
    )
    return dataclasses.replace(base, **overrides)


@pytest.fixture(scope="module")
def game_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    runner = MultiAgentEnvRunner(game_config())
    try:
        advance(runner)
        assert runner._games.episodes[0] is not None and all(runner._pending)  # games, open rows, episode objects
        yield Path(runner.save_to_path(tmp_path_factory.mktemp("game") / "ck"))
    finally:
        runner.close()


EP0 = ("env", "episodes", 0)
GAME0 = ("env", "game_episodes", 0)
PENDING = (*EP0, "pending", "player_0")


def _drop_mapping(agent: str) -> Edit:
    def edit(state: dict[str, Any]) -> None:
        del state["env"]["episodes"][0]["mapping"][agent]

    return edit


def _extra_game(state: dict[str, Any]) -> None:
    state["env"]["game_episodes"].append(dict(state["env"]["game_episodes"][0]))


GAME_ATTACKS: list[Any] = [
    ("pending_obs_shape", at(*PENDING, "obs")(np.zeros(5, np.float32)), r"pending/'player_0'/obs: module 'a'.*\(5,\)"),
    ("pending_action_strings", at(*PENDING, "action")(np.array("x")), r"pending/'player_0'/action.*not of numbers"),
    ("pending_reward_str", at(*PENDING, "reward")("1.0"), r"pending/'player_0'/reward: expected a number"),
    ("pending_unmapped", _drop_mapping("player_1"), r"'player_1' has an open transition but no module"),
    ("obs_shape", at(*EP0, "obs", "player_0")(np.zeros(3)), r"episodes/0/obs/'player_0'.*shape \(3,\)"),
    ("steps_negative", at(*EP0, "steps", "player_0")(-1), r"episodes/0/steps/'player_0'"),
    ("number_nan", at(*EP0, "number")(float("nan")), r"episodes/0/number: a count"),
    ("returns_str", at(*EP0, "returns", "player_1")("x"), r"episodes/0/returns/'player_1'"),
    ("game_int_agent", at(*GAME0, "agent_episodes", 0, 0)(0), r"game_episodes/0: is a game with agents \[0\]"),
    ("game_unknown_module", at(*GAME0, "agent_module_ids", 0, 1)("zz"), r"game_episodes/0: .*modules \['zz'\]"),
    ("game_extra_copy", _extra_game, r"game_episodes: expected one game \(or None\) per env copy, 2; found 3"),
    ("game_ended", at(*GAME0, "is_terminated")(True), r"game_episodes/0: .*a game that ended"),
    ("game_custom_data_str", at(*GAME0, "custom_data")("x"), r"game_episodes/0: is not a game's state"),
    ("board_out_of_range", at("env", "sub_envs", 1, "env", "board")(np.full(9, 7, np.int8)), r"sub_envs/1.*range"),
    ("board_shape", at("env", "sub_envs", 0, "env", "board")(np.zeros(4, np.int8)), r"board is not 9 ints"),
]


@pytest.mark.parametrize(("name", "edit", "match"), GAME_ATTACKS, ids=[a[0] for a in GAME_ATTACKS])
def test_a_hostile_multi_agent_state_is_refused_and_the_runner_is_unchanged(
    game_ckpt: Path, tmp_path: Path, name: str, edit: Edit, match: str
) -> None:
    ck = rewrite(copy_of(game_ckpt, tmp_path), "", edit)
    runner = MultiAgentEnvRunner(game_config())
    try:
        advance(runner)
        refused_and_unchanged(runner, lambda: runner.restore_from_path(ck), match)
        # The hostile state handed over directly (a remote runner's own state, EnvRunnerActor.set_own_state).
        state = open_checkpoint(str(ck), None).state(allow_pickle=False)
        refused_and_unchanged(runner, lambda: runner.set_state(state), match)
    finally:
        runner.close()


def test_a_mapping_to_a_module_of_other_spaces_is_refused(tmp_path: Path) -> None:
    """A Dict agent mapped to the Box agent's module would feed it observations of another shape."""
    from agent_spaces_helpers import DictAndBoxEnv, flatten_d_and_stack

    config = PPOConfig(
        env=f"{DictAndBoxEnv.__module__}:DictAndBoxEnv",
        seed=11,
        num_envs_per_env_runner=1,
        rollout_length=3,
        minibatch_size=8,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("md", "mb"),
        policy_mapping={"d": "md", "b": "mb"},
    ).env_runners(env_to_module_connector=flatten_d_and_stack)
    runner = MultiAgentEnvRunner(config)
    try:
        advance(runner)
        ck = Path(runner.save_to_path(tmp_path / "ck"))
        rewrite(ck, "", at(*EP0, "mapping", "d")("mb"))
        refused_and_unchanged(runner, lambda: runner.restore_from_path(ck), r"episodes/0/mapping: .*'d'.*'mb'")
    finally:
        runner.close()


def test_a_hostile_state_of_another_remote_runner_is_refused_by_every_runner_first(
    runner_ckpt: Path, tmp_path: Path
) -> None:
    """Runner 1 writes the own states of runners 2..N under ``other_env_runners``; each applies its own. A
    hostile entry is refused by every runner's check (the driver's local copy's too) before any applies."""

    def add_peer(state: dict[str, Any]) -> None:
        peer = {"worker_index": 2, "rng": state["rng"], "env": dict(state["env"]), "metrics": state["metrics"]}
        peer["env"]["episode_returns"] = np.zeros(5)
        state["other_env_runners"] = [peer]

    ck = rewrite(copy_of(runner_ckpt, tmp_path), "", add_peer)
    runner = EnvRunner(runner_config())
    try:
        advance(runner)
        refused_and_unchanged(runner, lambda: runner.restore_from_path(ck), r"env/episode_returns: has shape \(5,\)")
    finally:
        runner.close()


# --------------------------------------------------------------------------- code named by a recorded config


@pytest.fixture(scope="module")
def algo_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    algo = PPO(small_config(**TINY))
    try:
        yield Path(algo.save_to_path(tmp_path_factory.mktemp("algo") / "ck"))
    finally:
        algo.stop()


def _record(ck: Path, field: str, value: Any) -> None:
    """Make the checkpoint's recorded config (its root ctor.json) hold ``field = value``, re-sealed."""
    forge(ck, "ctor.json", lambda text: text.replace(f'"{field}": null', f'"{field}": {json.dumps(value)}'))


def _callbacks_partial(cls: str, args: list[Any]) -> dict[str, Any]:
    """A recorded ``functools.partial(cls, *args)`` of callbacks (the codec's form of CallbackClass)."""
    return {
        "__cairn__": "registered",
        "type": "cairn.rl.callbacks:CallbackClass",
        "value": {"class": {"__cairn__": "class", "class": cls}, "args": args, "kwargs": {}},
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("env_to_module_connector", {"ref": "os:system", "kwargs": {}}),
        ("env_to_module_connector", {"ref": "builtins:eval", "kwargs": {}}),
        ("env_to_module_connector", {"ref": "subprocess:Popen", "kwargs": {"args": ["MARK"]}}),
        ("env_to_module_connector", {"ref": "subprocess:run", "kwargs": {"args": ["MARK"]}}),
        ("module_to_env_connector", {"ref": "torch.hub:load", "kwargs": {"repo_or_dir": "MARK"}}),
        ("learner_connector", {"ref": "shutil:rmtree", "kwargs": {"path": "MARK"}}),
        ("callbacks_class", _callbacks_partial("subprocess:Popen", [["MARK"]])),
        ("callbacks_class", _callbacks_partial("cairn.rl.connectors.connectors:MeanStdFilter", [])),
        ("callbacks_on_episode_end", ["os:system"]),
        ("callbacks_on_algorithm_init", ["subprocess:run"]),
    ],
    ids=lambda v: v if isinstance(v, str) else json.dumps(v)[:60],
)
def test_a_recorded_reference_never_makes_cairn_call_foreign_code(
    algo_ckpt: Path, tmp_path: Path, field: str, value: Any
) -> None:
    """Connector factories and callbacks recorded by reference obey the registry's rules: never a builtin,
    a standard-library or framework function or class, never a class that is no connector / callbacks."""
    mark = tmp_path / "ran"
    value = json.loads(json.dumps(value).replace('"MARK"', json.dumps(f"touch {mark}")))
    ck = copy_of(algo_ckpt, tmp_path)
    _record(ck, field, value)
    with pytest.raises(
        (cairn.CheckpointError, ValueError), match=r"refuse|allow-list|not a cairn connector|RLlibCallback"
    ):
        PPO.from_checkpoint(ck)
    assert not mark.exists()


# --------------------------------------------------------------------------- the filter companion of load_state_path

MODULE_FOLDER = "learner_group/learner/rl_module/default_policy"


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (
            at("mean")(np.zeros(7)),
            r"env_to_module_connector/MeanStdFilter: mean has shape \(7,\) in the checkpoint, but this object keeps "
            r"\(4,\)",
        ),
        (
            at("m2")(lambda m2: np.full_like(m2, -1.0)),
            r"env_to_module_connector/MeanStdFilter: m2: holds values below 0",
        ),
        (at("count")(-1), r"env_to_module_connector/MeanStdFilter: count: .*holds -1"),
    ],
    ids=["wrong_shape", "m2_negative", "count_negative"],
)
def test_a_hostile_filter_companion_is_refused_before_the_algorithm_is_built(
    algo_ckpt: Path, tmp_path: Path, edit: Edit, match: str
) -> None:
    """``load_state_path``'s module brings its filter from ``env_runner/env_to_module_connector``: a companion
    of another shape, or with values no filter saves, is refused with its path, and nothing is built."""
    ck = rewrite(copy_of(algo_ckpt, tmp_path), f"env_runner/{FILTER}", edit)
    spec = RLModuleSpec(load_state_path=str(ck / MODULE_FOLDER))
    with pytest.raises(cairn.CheckpointError, match=match):
        PPO(small_config(**TINY, rl_module_spec=spec))


# ------------------------------------------------------------- add_module / remove_module with evaluation runners


@cairn.register  # the config below names it by path
def by_player(agent_id: str, episode: Any) -> str:
    """player_0 plays module a, player_1 module b."""
    return "a" if agent_id == "player_0" else "b"


@cairn.register  # named by path below
def to_missing_module(agent_id: str, episode: Any) -> str:
    """A new mapping that sends player_1 to a module nobody has (a runner with it in flight must refuse)."""
    return "a" if agent_id == "player_0" else "gone"


def test_a_removal_the_evaluation_runners_refuse_changes_nothing_anywhere() -> None:
    """The training runners have no games in flight, the evaluation runner has: it refuses the new mapping.
    Before, the training runners had already dropped the module while the learner and config kept it, and
    the next train() failed; now every group prepares before any applies."""
    config = dataclasses.replace(
        game_config(callbacks_class=None),
        policy_mapping=None,
        policy_mapping_fn=f"{__name__}:by_player",
    ).evaluation(evaluation_interval=1, evaluation_duration=1)
    algo = PPO(config)
    try:
        algo.evaluate()  # the evaluation runner's games are in flight, the training runner's not yet
        before = algo.env_runner.get_state()
        with pytest.raises(ValueError, match=r"cannot be removed: agent 'player_1'.*env copy"):
            algo.remove_module("b", new_agent_to_module_mapping_fn=f"{__name__}:to_missing_module")
        assert algo.config.policies == ("a", "b")
        assert "b" in algo.env_runner.module and "b" in algo.eval_env_runner.module
        assert_states_equal(algo.env_runner.get_state(), before)
        algo.train()  # goes on with both modules
    finally:
        algo.stop()


def test_an_added_module_the_runners_refuse_leaves_no_trace_in_the_learner(tmp_path: Path) -> None:
    """The learner added the module before the runners refused its spec (spaces of no agent). Before, the learner
    kept it while the config did not: the next checkpoint held a module its config could not rebuild."""
    from agent_spaces_helpers import DictAndBoxEnv, flatten_d_and_stack

    config = PPOConfig(
        env=f"{DictAndBoxEnv.__module__}:DictAndBoxEnv",
        seed=11,
        num_envs_per_env_runner=1,
        rollout_length=8,
        minibatch_size=8,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
        policies=("md", "mb"),
        policy_mapping={"d": "md", "b": "mb"},
    ).env_runners(env_to_module_connector=flatten_d_and_stack)
    algo = PPO(config.evaluation(evaluation_interval=1, evaluation_duration=1))
    try:
        learner_state = algo.learner_group.get_state()
        spec = RLModuleSpec(observation_space=gym.spaces.Box(-1.0, 1.0, (13,)), action_space=gym.spaces.Discrete(2))
        with pytest.raises(ValueError, match=r"Module 'ghost': its spec's spaces"):
            algo.add_module("ghost", spec)
        assert "ghost" not in algo.learner_group.module_specs and algo.config.policies == ("md", "mb")
        assert_states_equal(algo.learner_group.get_state(), learner_state)
        algo.train()
        resumed = PPO.from_checkpoint(algo.save_to_path(tmp_path / "ck"))
        resumed.stop()
    finally:
        algo.stop()


# --------------------------------------------------------------------------- a kill at the worst moment

CHILD = Path(__file__).with_name("eval_kill_child.py")
ITERATIONS = 3
STALL_AT = 2  # killed inside the evaluation of iteration 2, after iteration 1's checkpoint


def _child(run: Path, *extra: str) -> list[str]:
    return [sys.executable, str(CHILD), str(run), str(ITERATIONS), *extra]


def _child_env() -> dict[str, str]:
    root = Path(__file__).resolve().parents[2]
    paths = [str(root / "src"), str(root / "tests"), str(root / "tests" / "rl")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def test_a_run_killed_inside_an_evaluation_resumes_as_if_never_stopped(tmp_path: Path) -> None:
    """SIGKILL inside ``evaluate()`` (iteration 2's ``on_evaluate_start``): the newest checkpoint is iteration 1's,
    whole; the resumed run evaluates iteration 2 again and ends where an unstopped run ends, bit for bit."""
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    unstopped = subprocess.Popen(_child(whole), stdout=subprocess.DEVNULL, env=_child_env())  # meanwhile
    proc = subprocess.Popen(
        _child(killed, "--stall-at", str(STALL_AT)), stdout=subprocess.PIPE, text=True, env=_child_env()
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.strip() == f"evaluating {STALL_AT}":
                os.kill(proc.pid, signal.SIGKILL)
                break
    finally:
        proc.kill()
        proc.wait(timeout=60)
        proc.stdout.close()
        assert unstopped.wait(timeout=600) == 0
    assert proc.returncode == -signal.SIGKILL
    steps = sorted(p.name for p in (killed / "checkpoints").glob("step_*"))
    assert steps == ["step_000000001"], steps
    subprocess.run(_child(killed, "--resume"), check=True, capture_output=True, timeout=600, env=_child_env())
    lines = (killed / "evaluation.jsonl").read_text().splitlines()
    assert lines == (whole / "evaluation.jsonl").read_text().splitlines()  # iteration 1 once, then 2 and 3
    last = f"step_{ITERATIONS:09d}"
    diff = subprocess.run(
        [sys.executable, "-m", "cairn", "diff", str(whole / "checkpoints" / last), str(killed / "checkpoints" / last)],
        capture_output=True,
        text=True,
        env=_child_env(),
    )
    assert diff.returncode == 0, diff.stdout + diff.stderr


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (at("training_iteration")(float("nan")), r"training_iteration: a count must be a non-negative int"),
        (at("training_iteration")(-1), r"training_iteration: a count"),
        (at("metrics")({"stats": [{"key": ["a"]}]}), r"metrics/stats\[0\] is not a metric record"),
    ],
    ids=["iteration_nan", "iteration_negative", "metrics_record"],
)
def test_a_hostile_algorithm_state_is_refused_before_its_runners_change(
    algo_ckpt: Path, tmp_path: Path, edit: Edit, match: str
) -> None:
    """Before, a NaN training_iteration raised a raw ValueError after the env runners had taken their state."""
    ck = rewrite(copy_of(algo_ckpt, tmp_path), "", edit)
    algo = PPO(small_config(**TINY))
    try:
        algo.train()
        before = algo.get_state()
        with pytest.raises(cairn.CheckpointError, match=match):
            algo.restore_from_path(ck)
        assert_states_equal(algo.get_state(), before)
        state = dict(before)
        edit(state)
        with pytest.raises(cairn.CheckpointError, match=match):
            algo.set_state(state)
        assert_states_equal(algo.get_state(), before)
    finally:
        algo.stop()


def test_the_evaluation_runner_refuses_by_its_own_path(tmp_path: Path) -> None:
    algo = PPO(small_config(**TINY).evaluation(evaluation_interval=1, evaluation_duration=1))
    try:
        algo.train()
        ck = Path(algo.save_to_path(tmp_path / "ck"))
    finally:
        algo.stop()
    rewrite(ck, "eval_env_runner", at("env", "episode_lengths")(np.array([3, -3])))
    with pytest.raises(cairn.CheckpointError, match=r"eval_env_runner/env/episode_lengths: holds negative counts"):
        PPO.from_checkpoint(ck)


# --------------------------------------------------------------------------- per-module spaces a config records


def test_a_recorded_module_spec_of_other_spaces_is_refused_when_the_runner_is_built(tmp_path: Path) -> None:
    """A spec's own spaces win over the env's. Before, a recorded spec of other spaces built, and the first
    sample() died in the module's forward pass (``RuntimeError: shape '[2, 7]' is invalid``)."""
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    spec = RLModuleSpec(observation_space=box, action_space=gym.spaces.Discrete(2))
    algo = PPO(small_config(**TINY, rl_module_spec=spec))  # bounds may differ from the env's: shapes fit
    ck = Path(algo.save_to_path(tmp_path / "ck"))
    algo.stop()
    assert (ck / "ctor.json").read_text().count('"n": 2') == 1
    forge(ck, "ctor.json", lambda text: text.replace('"n": 2', '"n": 3'))
    with pytest.raises(
        cairn.CheckpointError, match=r"its RLModuleSpec gives the spaces .*Discrete\(3\).*act in Discrete\(2\)"
    ):
        PPO.from_checkpoint(ck)
    games = game_config(callbacks_class=None)
    seven = RLModuleSpec(
        observation_space=gym.spaces.Box(0.0, 1.0, (7,), np.float32), action_space=gym.spaces.Discrete(9)
    )
    config = dataclasses.replace(games, rl_module_spec=MultiRLModuleSpec({"a": seven, "b": RLModuleSpec()}))
    with pytest.raises(ValueError, match=r"agent 'player_0' .* is mapped to module 'a', whose spaces are"):
        PPO(config)


# --------------------------------------------------------------------------- learners' counters


def _dqn_config() -> Any:
    from cairn.rl.algorithms.dqn import DQNConfig

    return DQNConfig(
        env="CartPole-v1",
        seed=3,
        num_envs_per_env_runner=2,
        rollout_length=16,
        replay_buffer_capacity=200,
        replay_buffer_chunk_rows=64,
        num_steps_sampled_before_learning_starts=16,
        minibatch_size=16,
        model_config={"hidden_sizes": [16]},
    )


@pytest.mark.parametrize(
    ("algorithm", "key", "value", "match"),
    [
        ("ppo", ("counters", "num_updates_lifetime"), float("nan"), r"num_updates_lifetime: a count"),
        ("ppo", ("counters", "num_module_steps_trained_lifetime", "default_policy"), -5, r"default_policy: a count"),
        ("ppo", ("counters", "num_module_steps_trained_lifetime"), [1, 2], r"expected a dict of module id"),
        ("ppo", ("rng", "torch"), np.zeros(3, np.uint8), r"rng/torch: expected the \d+ bytes"),
        ("dqn", ("counters", "num_gradient_steps", "default_policy"), "7", r"num_gradient_steps/default_policy"),
        ("dqn", ("counters", "num_gradient_steps", "default_policy"), 1.5e300, r"a count must be"),
    ],
    ids=["updates_nan", "steps_negative", "steps_not_dict", "rng_short", "gradient_steps_str", "gradient_steps_float"],
)
def test_a_hostile_learner_counter_is_refused_before_anything_changes(
    tmp_path: Path, algorithm: str, key: tuple[str, ...], value: Any, match: str
) -> None:
    """Before, the learner applied its optimizers and modules, then int() raised a raw ValueError on NaN,
    accepted "7" and a negative count, and a huge float became a 300-digit counter of target updates."""
    from cairn.rl.algorithms.dqn import DQN

    build = (lambda: PPO(small_config(**TINY))) if algorithm == "ppo" else (lambda: DQN(_dqn_config()))
    algo = build()
    try:
        algo.train()
        algo.train()
        ck = rewrite(Path(algo.save_to_path(tmp_path / "ck")), "learner_group/learner", at(*key)(value))
        algo.train()  # the live learner now differs from the checkpoint: a partial restore would show
        before = algo.get_state()
        with pytest.raises(cairn.CheckpointError, match=match):
            algo.restore_from_path(ck)
        assert_states_equal(algo.get_state(), before)
    finally:
        algo.stop()
