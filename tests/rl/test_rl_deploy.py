"""A trained policy leaves the training stack (issue 35): RLlib's inference idiom, one-call Policy, export, pack.

Two tiny checkpoints are trained once for the module (one iteration each): PPO on
CartPole behind a MeanStdFilter (Discrete actions), and PPO on Pendulum (Box actions,
action clipping). Every way of acting with them must give the actions the Python
pipeline gives (``cairn evaluate``'s loop, RLlib's idiom, ``Policy``, the exported files).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

import cairn
from cairn.rl.algorithms.ppo import PPO, PPOConfig
from cairn.rl.connectors.env_to_module import EnvToModulePipeline
from cairn.rl.connectors.module_to_env import ModuleToEnvPipeline
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.rl_module import ModuleWithoutConnectorsWarning, RLModule
from cairn.rl.env.single_agent_episode import SingleAgentEpisode
from cairn.rl.inference import Policy
from cairn.rl.utils import companions
from cairn.rl.utils.nested import stack_rows

MODULE = "learner_group/learner/rl_module/default_policy"
SRC = str(Path(cairn.__file__).resolve().parents[1])


def _train(env: str, path: Path, **settings: Any) -> str:
    config = PPOConfig(
        env=env,
        seed=7,
        num_envs_per_env_runner=2,
        rollout_length=32,
        minibatch_size=32,
        num_epochs=1,
        **{"model_config": {"hidden_sizes": [16]}, **settings},
    )
    algo = PPO(config)
    try:
        algo.train()
        return str(algo.save_to_path(path))
    finally:
        algo.stop()


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO CartPole checkpoint whose env runner had a MeanStdFilter."""
    return _train("CartPole-v1", tmp_path_factory.mktemp("deploy") / "cartpole", observation_filter="MeanStdFilter")


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO Pendulum checkpoint (Box actions: the module-to-env pipeline clips), no filter."""
    return _train("Pendulum-v1", tmp_path_factory.mktemp("deploy") / "pendulum")


@pytest.fixture(scope="module")
def lstm(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO StatelessCartPole checkpoint of an LSTM module (cell size 8), no filter."""
    from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole

    if "StatelessCartPole-v1" not in gym.registry:
        gym.register("StatelessCartPole-v1", entry_point=StatelessCartPole, max_episode_steps=500)
    model_config = {"use_lstm": True, "lstm_cell_size": 8}
    return _train("StatelessCartPole-v1", tmp_path_factory.mktemp("deploy") / "lstm", model_config=model_config)


@pytest.fixture(scope="module")
def dict_obs(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO checkpoint of CartPole with Dict observations, through FlattenObservations and a MeanStdFilter."""
    import functools

    from cairn.rl.connectors.env_to_module import FlattenObservations

    env = "cairn.rl.examples.envs.classes.cartpole_with_dict_observation_space:CartPoleWithDictObservationSpace"
    return _train(env, tmp_path_factory.mktemp("deploy") / "dict_obs", observation_filter="MeanStdFilter",
                  env_to_module_connector=functools.partial(FlattenObservations))  # fmt: skip


@pytest.fixture(scope="module")
def stacked(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A PPO CartPole checkpoint behind a 3-frame stack and a MeanStdFilter (of the stacked observations)."""
    import functools

    from cairn.rl.connectors.env_to_module import FrameStackingEnvToModule

    stacking = functools.partial(FrameStackingEnvToModule, num_frames=3)
    return _train("CartPole-v1", tmp_path_factory.mktemp("deploy") / "stacked", observation_filter="MeanStdFilter",
                  env_to_module_connector=stacking)  # fmt: skip


@pytest.fixture(autouse=True)
def _fresh_notes() -> Iterator[None]:
    """Each test sees the connectors note as a new process would (it is said once per process)."""
    companions._NOTED.clear()
    yield


def rllib_idiom_actions(checkpoint: str, episodes: int, seed: int) -> tuple[list[float], list[Any]]:
    """RLlib's ``policy_inference_after_training_w_connector.py`` loop, as written there."""
    env = gym.make("CartPole-v1")
    env_to_module = EnvToModulePipeline.from_checkpoint(f"{checkpoint}/env_runner/env_to_module_connector")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModuleWithoutConnectorsWarning)
        rl_module = RLModule.from_checkpoint(f"{checkpoint}/{MODULE}")
    module_to_env = ModuleToEnvPipeline.from_checkpoint(f"{checkpoint}/env_runner/module_to_env_connector")
    returns: list[float] = []
    actions: list[Any] = []
    obs, _ = env.reset(seed=seed)
    episode = SingleAgentEpisode(observations=[obs], observation_space=env.observation_space,
                                 action_space=env.action_space)  # fmt: skip
    while len(returns) < episodes:
        shared_data: dict[str, Any] = {}
        input_dict = env_to_module(episodes=[episode], rl_module=rl_module, explore=False, shared_data=shared_data)
        rl_module_out = rl_module.forward_inference(input_dict)
        assert Columns.ACTION_DIST_INPUTS in rl_module_out  # as RLlib's modules return it
        to_env = module_to_env(
            batch=rl_module_out, episodes=[episode], rl_module=rl_module, explore=False, shared_data=shared_data
        )
        action = to_env.pop(Columns.ACTIONS)[0]
        actions.append(int(action))
        obs, reward, terminated, truncated, _ = env.step(action)
        episode.add_env_step(obs, action, reward, terminated=terminated, truncated=truncated,
                             extra_model_outputs={k: v[0] for k, v in to_env.items()})  # fmt: skip
        if episode.is_done:
            returns.append(episode.get_return())
            obs, _ = env.reset(seed=seed + len(returns))
            episode = SingleAgentEpisode(observations=[obs], observation_space=env.observation_space,
                                         action_space=env.action_space)  # fmt: skip
    assert env_to_module["MeanStdFilter"].count == cairn_filter_count(checkpoint)  # statistics not changed
    return returns, actions


def cairn_filter_count(checkpoint: str) -> int:
    from cairn.rl.connectors.connectors import ConnectorPipeline

    return int(ConnectorPipeline.from_checkpoint(f"{checkpoint}/env_runner/env_to_module_connector")[
        "MeanStdFilter"].count)  # fmt: skip


def test_rllib_idiom_policy_and_cairn_evaluate_act_alike(cartpole: str) -> None:
    from cairn.cli.evaluate import _load_filter, evaluate_module

    returns, actions = rllib_idiom_actions(cartpole, episodes=2, seed=11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModuleWithoutConnectorsWarning)
        module = RLModule.from_checkpoint(f"{cartpole}/{MODULE}")
    assert evaluate_module(module, "CartPole-v1", episodes=2, seed=11, obs_filter=_load_filter(cartpole)) == returns

    policy = Policy.from_checkpoint(cartpole)
    env = gym.make("CartPole-v1")
    replayed: list[Any] = []
    for episode in range(2):
        obs, _ = env.reset(seed=11 + episode)
        policy.reset()
        done = False
        while not done:
            replayed.append(policy.compute_single_action(obs))
            obs, _, terminated, truncated, _ = env.step(replayed[-1])
            done = terminated or truncated
    assert replayed == actions


def test_a_raw_module_acts_otherwise_and_says_so_once(cartpole: str) -> None:
    """The filter matters (this checkpoint's module acts differently on raw observations), and the
    module taken out alone says so once, with the line that applies the filter. Loading it with its
    connectors (Policy) says nothing, and does not use up the note."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = Policy.from_checkpoint(cartpole)
    with pytest.warns(ModuleWithoutConnectorsWarning, match=r"EnvToModulePipeline\.from_checkpoint\(.*env_runner/"):
        module = RLModule.from_checkpoint(f"{cartpole}/{MODULE}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RLModule.from_checkpoint(f"{cartpole}/{MODULE}")  # once per checkpoint and process
    obs = np.random.default_rng(0).normal(scale=[1.0, 2.0, 0.1, 2.0], size=(64, 4)).astype(np.float32)
    raw = module.forward_inference({"obs": torch.as_tensor(obs)})[Columns.ACTION_DIST_INPUTS].numpy()
    assert not np.allclose(raw, policy.forward(obs)[Columns.ACTION_DIST_INPUTS], atol=1e-3)


def test_cairn_extract_of_a_module_says_where_its_filter_is(cartpole: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    from cairn.cli import main

    assert main(["extract", cartpole, MODULE, str(tmp_path / "module")]) == 0
    err = capsys.readouterr().err
    assert "['MeanStdFilter']" in err and f"Policy.from_checkpoint('{cartpole}')" in err


def test_a_fresh_process_loads_without_importing_cairns_classes(cartpole: str, dict_obs: str) -> None:
    """Algorithm.from_checkpoint, RLModule.from_checkpoint and cairn evaluate in a new process, no manual import:
    the Dict-observation checkpoint names an env class of cairn's examples that nothing imports beforehand."""
    env_module = "cairn.rl.examples.envs.classes.cartpole_with_dict_observation_space"
    code = (
        "import sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from cairn.rl.core.rl_module.rl_module import RLModule\n"
        "from cairn.rl.algorithms.algorithm import Algorithm\n"
        f"assert {env_module!r} not in sys.modules\n"
        f"print(type(RLModule.from_checkpoint({cartpole + '/' + MODULE!r})).__name__)\n"
        f"algo = Algorithm.from_checkpoint({dict_obs!r})\n"
        "print(type(algo).__name__, algo.training_iteration, type(algo.env_runner.env.envs[0].unwrapped).__name__)\n"
        "algo.stop()\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["DefaultPPORLModule", "PPO", "1", "CartPoleWithDictObservationSpace"]
    evaluated = subprocess.run([sys.executable, "-m", "cairn", "evaluate", cartpole, "--episodes", "1"],
                               capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert "observation filter" in evaluated.stderr


def test_own_modules_are_found_on_the_file_not_the_name() -> None:
    """Only modules inside cairn's package folders are imported on demand; others are still refused."""
    from cairn.errors import CheckpointError
    from cairn.registry import resolve_class

    with pytest.raises(CheckpointError, match="allow-list"):
        resolve_class("cairn.no_such_module:Thing", where="test")
    with pytest.raises(CheckpointError, match="allow-list"):
        resolve_class("cairn_elsewhere.module:Thing", where="test")
    assert resolve_class("cairn.rl.algorithms.sac.sac:SAC", where="test").__name__ == "SAC"


def test_configs_follow_rllib_and_cairn_train_says_its_filter(capsys: pytest.CaptureFixture[str]) -> None:
    from cairn.cli import main
    from cairn.rl.algorithms.dqn import DQNConfig

    assert PPOConfig().observation_filter is None and DQNConfig().observation_filter is None
    assert main(["train", "--iterations", "0"]) == 0
    assert "observation filter MeanStdFilter" in capsys.readouterr().err
    assert main(["train", "--iterations", "0", "--observation-filter", "none"]) == 0
    assert "observation filter none" in capsys.readouterr().err


def test_policy_batched_equals_single_and_samples(cartpole: str, pendulum: str) -> None:
    policy = Policy.from_checkpoint(cartpole)
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    batched = policy.compute_actions(obs)
    singles = []
    for row in obs:
        policy.reset()
        singles.append(policy.compute_single_action(row))
    assert batched.tolist() == singles and all(isinstance(a, int) for a in singles)
    torch.manual_seed(0)
    sampled = policy.compute_actions(np.repeat(obs[:1], 200, axis=0), explore=True)
    assert set(sampled.tolist()) == {0, 1}  # sampled, not greedy (an untrained policy is near 50/50)

    box = Policy.from_checkpoint(pendulum)
    pend_obs = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    actions = box.compute_actions(pend_obs, explore=True)
    assert actions.shape == (4, 1) and (np.abs(actions) <= 2.0).all()  # clipped to Pendulum's bounds
    greedy = box.forward(pend_obs)
    assert greedy[Columns.ACTION_DIST_INPUTS].shape == (4, 2)  # mean and log-std, as RLlib's
    np.testing.assert_array_equal(greedy[Columns.ACTIONS], greedy[Columns.ACTION_DIST_INPUTS][:, :1])


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_files_match_the_python_pipeline(
    fmt: str, cartpole: str, pendulum: str, dict_obs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """CartPole behind a filter (Discrete), Pendulum (Box, clipped), Dict observations through FlattenObservations
    (the file takes gymnasium.spaces.flatten of each observation) and a filter."""
    from cairn.cli import main
    from cairn.rl.export import ExportedPolicy

    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
    tolerance = 1e-5 if fmt == "torchscript" else 1e-4
    for checkpoint in (cartpole, pendulum, dict_obs):
        out = tmp_path / f"{Path(checkpoint).name}.{fmt}"
        assert main(["export", checkpoint, "--format", fmt, "-o", str(out)]) == 0
        assert "outputs action_dist_inputs, actions" in capsys.readouterr().err
        policy = Policy.from_checkpoint(checkpoint)
        space = ExportedPolicy(policy).flattened_space or policy.module.observation_space
        space.seed(3)
        raw = [space.sample() for _ in range(33)]
        obs = np.stack([gym.spaces.flatten(space, o) for o in raw]).astype(np.float32)
        expected = policy.forward(obs if isinstance(space, gym.spaces.Box) else stack_rows(raw))
        if fmt == "torchscript":
            with torch.no_grad():
                inputs, actions = (t.numpy() for t in torch.jit.load(str(out))(torch.from_numpy(obs)))
        else:
            session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
            assert [i.name for i in session.get_inputs()] == ["obs"]
            assert [o.name for o in session.get_outputs()] == ["action_dist_inputs", "actions"]
            inputs, actions = session.run(None, {"obs": obs})
        assert np.abs(inputs - expected[Columns.ACTION_DIST_INPUTS]).max() < tolerance
        np.testing.assert_allclose(actions, expected[Columns.ACTIONS_FOR_ENV], atol=tolerance, rtol=0)


STATEFUL = {
    "lstm": (["obs", "state_in_c", "state_in_h"], ["action_dist_inputs", "actions", "state_out_c", "state_out_h"]),
    "stacked": (["obs", "frames"], ["action_dist_inputs", "actions", "frames_out"]),
}
"""A recurrent module and a frame stack (behind a filter): what the file takes and returns besides ``obs``."""


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("kind", sorted(STATEFUL))
def test_an_exported_policy_takes_and_returns_its_state(
    fmt: str, kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A recurrent module's state and a frame stack's history are explicit in the file: fed back step by step,
    the file acts as RLlib's idiom does (every output compared, a whole episode)."""
    from cairn.rl.examples.envs.classes.stateless_cartpole import StatelessCartPole
    from cairn.rl.export import export_policy

    if fmt == "onnx":
        ort = pytest.importorskip("onnxruntime")
    policy = Policy.from_checkpoint(request.getfixturevalue(kind))
    out = tmp_path / f"{kind}.{fmt}"
    exported = export_policy(policy, out, format=fmt)
    assert (exported.input_names, exported.output_names) == STATEFUL[kind]
    if fmt == "torchscript":
        loaded = torch.jit.load(str(out))

        def run(*inputs: np.ndarray) -> list[np.ndarray]:
            with torch.no_grad():
                return [t.numpy() for t in loaded(*(torch.from_numpy(i) for i in inputs))]
    else:
        session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])

        def run(*inputs: np.ndarray) -> list[np.ndarray]:
            return list(session.run(None, dict(zip(exported.input_names, inputs, strict=True))))

    env = StatelessCartPole() if kind == "lstm" else gym.make("CartPole-v1")
    obs, _ = env.reset(seed=3)
    episode = SingleAgentEpisode(observations=[obs], action_space=env.action_space)
    carried = [t.numpy()[:1] for t in exported.example_inputs()[1:]]  # an episode's start: zeros
    for _ in range(40):  # RLlib's idiom (through Policy's pipelines) against the file, one step at a time
        shared: dict[str, Any] = {}
        batch = policy.env_to_module(episodes=[episode], rl_module=policy.module, shared_data=shared)
        to_env = policy.module_to_env(batch=policy.module.forward_inference(batch), episodes=[episode],
                                      rl_module=policy.module, shared_data=shared)  # fmt: skip
        inputs, actions, *carried = run(obs[None].astype(np.float32), *carried)
        assert np.abs(inputs[0] - to_env[Columns.ACTION_DIST_INPUTS][0]).max() < 1e-4
        assert int(actions[0]) == int(to_env[Columns.ACTIONS][0])
        states = carried[len(carried) - len(exported.state_names) :]  # after frames_out, if any
        for name, value in zip(exported.state_names, states, strict=True):
            assert np.abs(value[0] - to_env[Columns.STATE_OUT][0][name]).max() < 1e-4
        action = to_env.pop(Columns.ACTIONS)[0]
        obs, reward, terminated, truncated, _ = env.step(action)
        episode.add_env_step(obs, action, reward, terminated=terminated, truncated=truncated,
                             extra_model_outputs={k: v[0] for k, v in to_env.items()})  # fmt: skip
        if episode.is_done:
            break


def test_pack_writes_a_verified_zip_every_loader_reads(cartpole: str, tmp_path: Path) -> None:
    from cairn.errors import CheckpointError
    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.tools import pack_checkpoint, verify_checkpoint

    packed = tmp_path / "policy.zip"
    url = pack_checkpoint(cartpole, packed)
    assert verify_checkpoint(url) == []
    with pytest.raises(FileExistsError):
        pack_checkpoint(cartpole, packed)
    obs = np.random.default_rng(4).normal(size=(6, 4)).astype(np.float32)
    np.testing.assert_array_equal(Policy.from_checkpoint(packed).compute_actions(obs),
                                  Policy.from_checkpoint(cartpole).compute_actions(obs))  # fmt: skip
    algo = Algorithm.from_checkpoint(url)
    try:
        assert algo.training_iteration == 1
    finally:
        algo.stop()

    # One flipped byte in the module's weights: the zip is refused as a folder would be.
    tampered = tmp_path / "tampered.zip"
    with zipfile.ZipFile(packed) as src, zipfile.ZipFile(tampered, "w") as dst:
        for item in src.infolist():
            data = src.read(item)
            if item.filename in (f"{MODULE}/tensors.safetensors", f"{MODULE}/packed.bin"):
                data = data[:-1] + bytes([data[-1] ^ 1])
            dst.writestr(item, data)
    with pytest.raises(CheckpointError):
        Policy.from_checkpoint(tampered)


def test_modules_load_onto_a_device(cartpole: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ModuleWithoutConnectorsWarning)
        module = RLModule.from_checkpoint(f"{cartpole}/{MODULE}", device="cpu")
    assert {p.device.type for p in module.parameters()} == {"cpu"}
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the GPU half of this test needs one")
    policy = Policy.from_checkpoint(cartpole, device="cuda")
    assert {p.device.type for p in policy.module.parameters()} == {"cuda"}
    obs = np.zeros((3, 4), np.float32)
    assert policy.compute_actions(obs).tolist() == Policy.from_checkpoint(cartpole).compute_actions(obs).tolist()


def test_episodes_built_the_rllib_way() -> None:
    """RLlib's SingleAgentEpisode docstring examples (test_single_agent_episode.py's constructor cases)."""
    episode = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[1, 2, 3], rewards=[1, 2, 3],
                                 len_lookback_buffer=0)  # fmt: skip
    assert episode.get_observations([1]) == [1] and episode.get_observations(slice(None, 2)) == [0, 1]
    episode.add_env_step(observation=4, action=4, reward=4, terminated=True)
    assert len(episode) == 4 and episode.get_return() == 10.0 and episode.is_done and episode.t == 4
    with pytest.raises(ValueError, match="is done"):
        episode.add_env_step(observation=5, action=5, reward=5)

    # "auto": what the constructor is given is the lookback buffer; the episode itself starts empty.
    lookback = SingleAgentEpisode(observations=[0, 1, 2, 3], actions=[1, 2, 3], rewards=[1.0, 2.0, 3.0])
    assert len(lookback) == 0 and lookback.get_return() == 0.0 and lookback.get_rewards() == []
    assert lookback.get_rewards(slice(-4, 0), neg_index_as_lookback=True, fill=0.0) == [0.0, 1.0, 2.0, 3.0]

    fresh = SingleAgentEpisode()
    fresh.add_env_reset(np.zeros(2, np.float32))
    fresh.add_env_step(np.ones(2, np.float32), 1, 0.5, extra_model_outputs={"action_logp": -0.1})
    assert fresh.get_extra_model_outputs("action_logp") == [-0.1] and len(fresh) == 1
    assert fresh.get_observations(-3, fill=0.0).tolist() == [0.0, 0.0]  # np.full_like the items
    with pytest.raises(ValueError, match="do not fit"):
        SingleAgentEpisode(observations=[0, 1], actions=[1, 2], rewards=[1])
    restored = SingleAgentEpisode.from_state(episode.get_state())
    assert restored.get_rewards() == [1.0, 2.0, 3.0, 4.0] and restored.agent_id is None
