"""examples/rllib/: RLlib's example scripts, ported to cairn, each run in-process with 1-2 iterations (issue 25).

Each script's ``main`` is imported and called with tiny settings; the checks are the
point of each example (a restore that gives back the saved counters and weights, a
module that starts from a checkpoint, a per-module learning rate, ...), not learning.
docs/rllib_parity.md lists every example and what differs from RLlib's.
"""

from __future__ import annotations

import importlib
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rllib"


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


MAX_LINES, MAX_WIDTH = 20, 120
"""What an example may print with these test settings: a few short lines (examples/rllib/example_output.py)."""


@pytest.fixture(autouse=True)
def _short_output_and_no_temporary_folder_left(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Each example prints a few aligned lines (never a result dict) and removes the temporary folders it made."""
    scratch = tmp_path / "tempdir"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where tempfile makes the examples' folders
    yield
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) <= MAX_LINES and all(len(line) <= MAX_WIDTH and "{" not in line for line in lines), out
    # torch keeps its compile cache (torchinductor_<user>) in the temporary folder: not the example's.
    assert [p.name for p in scratch.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.fixture
def examples_on_path() -> Iterator[None]:
    """The scripts import example_output.py and record classes under their own module names."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield
    finally:
        sys.path.remove(str(EXAMPLES))


def load(name: str) -> ModuleType:
    return importlib.import_module(name)


def equal_states(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def module_state(checkpoint: str, module_id: str) -> dict[str, Any]:
    from cairn.rl.core.rl_module.rl_module import RLModule

    return RLModule.from_checkpoint(f"{checkpoint}/learner_group/learner/rl_module/{module_id}").get_state()


FRESH_PROCESS_CHECK = """
import sys
import cairn, cairn.rl
from cairn._reader import open_checkpoint
from cairn.registry import check_recorded_names, resolve_class

def allow_list_stage(path):  # what from_checkpoint resolves before it builds anything
    reader = open_checkpoint(path, None)
    cls = resolve_class(reader.metadata["class"], where=reader.where("metadata.json"))
    args, kwargs = reader.ctor(False)
    check_recorded_names(cls, args, kwargs, trusted=None, where=reader.where("ctor.json"))

module, paths = sys.argv[1], sys.argv[2:]
for path in paths:
    try:
        allow_list_stage(path)
        print("ALLOWED BEFORE IMPORT", path)
    except cairn.UnsafeCheckpointError:
        pass
__import__(module)  # the example's own module: its @cairn.register lines run
for path in paths:
    allow_list_stage(path)
print("OK", len(paths))
"""


def assert_a_fresh_process_allows(module: str, checkpoints: list[Path]) -> None:
    """A new process that imports the example's module allows every name its checkpoints record (SPEC 8),
    and refuses them before that import: the example's ``@cairn.register`` lines are what allows them."""
    assert checkpoints
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(EXAMPLES)])}
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_CHECK, module, *map(str, checkpoints)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0 and out.stdout.split() == ["OK", str(len(checkpoints))], out.stdout + out.stderr


def test_every_script_is_tested() -> None:
    scripts = {p.stem for p in EXAMPLES.glob("*.py")} - {"example_output"}
    assert scripts == set(PORTED), "add the new example to PORTED (and docs/rllib_parity.md)"
    assert len(PORTED) >= 12
    # examples/README.md counts and names every script there is (issue 36: it said 12 where there were 21).
    readme = (EXAMPLES.parent / "README.md").read_text()
    own = sorted(p.name for p in EXAMPLES.parent.glob("*.py"))
    assert f"{len(own)} scripts of cairn's own, and {len(PORTED)} of RLlib's" in readme
    assert [name for name in own + [f"{s}.py" for s in scripts] if f"`{name}`" not in readme] == []


def flat(result: Any) -> dict[str, Any]:
    """train()'s nested result under "/"-joined keys."""
    return dict(result.flatten()) if hasattr(result, "flatten") else dict(result)


def check_multi_agent_returns(result: dict[str, Any], modules: list[str], iteration: int = 2) -> None:
    result = flat(result)
    assert result["training_iteration"] == iteration
    for module_id in modules:
        assert f"env_runners/module_episode_returns_mean/{module_id}" in result


def run_multi_agent_cartpole(tmp_path: Path) -> None:
    check_multi_agent_returns(load("multi_agent_cartpole").main(iterations=2), ["p0", "p1"])


def run_multi_agent_pendulum(tmp_path: Path) -> None:
    result = load("multi_agent_pendulum").main(iterations=2)
    check_multi_agent_returns(result, ["p0", "p1"])
    assert result["learners/p0/num_module_steps_trained"] == 512  # train_batch_size_per_learner=512


def run_custom_heuristic_policy(tmp_path: Path) -> None:
    result = load("custom_heuristic_policy").main(iterations=2)
    check_multi_agent_returns(result, ["learnable_policy", "random"])
    assert "learners/learnable_policy/total_loss" in result
    assert "random" not in result["learners"]  # policies_to_train


def run_rock_paper_scissors_heuristic_vs_learned(tmp_path: Path) -> None:
    for use_lstm, iterations in ((False, 2), (True, 1)):  # RLlib's --use-lstm: a shared encoder and LSTM
        result = load("rock_paper_scissors_heuristic_vs_learned").main(iterations=iterations, use_lstm=use_lstm)
        check_multi_agent_returns(result, ["learned", "always_same", "beat_last"], iteration=iterations)
        assert [k for k in result.flatten() if k.startswith("learners/") and k.endswith("/total_loss")] == [
            "learners/learned/total_loss"
        ]


def run_rock_paper_scissors_learned_vs_learned(tmp_path: Path) -> None:
    """PettingZoo's rps_v2 through RLlib's wrapper path, its Discrete observations one-hot by FlattenObservations."""
    from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv

    for use_lstm in (False, True):
        out = load("rock_paper_scissors_learned_vs_learned").main(
            iterations=2, use_lstm=use_lstm, train_batch_size=64, num_epochs=1
        )
        check_multi_agent_returns(out["result"], ["p0", "p1"])
        module = out["module"]
        assert module.observation_space.shape == (4,)  # Discrete(4) one-hot
        assert module.vf_share_layers and module.is_stateful() == use_lstm
        assert {name.split(".")[0] for name, _ in module.named_parameters()} == (
            {"encoder", "lstm", "pi_head", "vf_head"} if use_lstm else {"encoder", "pi_head", "vf_head"}
        )
    assert ParallelPettingZooEnv.__module__ == "cairn.rl.env.pettingzoo_env"  # the path checkpoints record


def run_agents_act_simultaneously(tmp_path: Path) -> None:
    result = load("agents_act_simultaneously").main(iterations=2)
    check_multi_agent_returns(result, ["player1", "player2"])
    # A zero-sum game: the two players' mean returns cancel.
    assert math.isclose(
        result["env_runners/module_episode_returns_mean/player1"],
        -result["env_runners/module_episode_returns_mean/player2"],
    )


def run_mean_std_filtering(tmp_path: Path) -> None:
    result, algo = load("mean_std_filtering").main(iterations=2)
    assert result["num_env_steps_sampled_lifetime"] == 1024
    # RLlib's lines: mini_batch_size_per_learner, vf_clip_param, torch.nn.init functions recorded by name.
    assert (algo.config.minibatch_size, algo.config.vf_clip_param) == (64, 10.0)
    assert algo.config.model_config["fcnet_kernel_initializer"] == "xavier_uniform_"
    assert algo.config.model_config["fcnet_bias_initializer_kwargs"] == {"val": 0.0}
    # The filter saw every sampled observation, and its statistics are part of the checkpoint.
    state = algo.env_runner.get_state()["env_to_module_connector"]["MeanStdFilter"]
    assert state["count"] == 1024
    # RLlib's evaluation block: 10 greedy episodes per iteration, started from the training runners'
    # statistics (use_worker_filter_stats=False): the evaluation runner's filter holds the training
    # count plus this evaluation's own observations, and none of iteration 1's evaluation.
    evaluation = result["evaluation"]["env_runners"]
    assert evaluation["num_episodes"] == 10
    assert algo.config.evaluation_config["explore"] is False
    eval_state = algo.eval_env_runner.get_state()["env_to_module_connector"]["MeanStdFilter"]
    assert eval_state["count"] == 1024 + evaluation["num_env_steps_sampled"]


def run_custom_gym_env(tmp_path: Path) -> None:
    result = load("custom_gym_env").main(iterations=2, corridor_length=5)
    assert result["training_iteration"] == 2 and result["env_runners/num_episodes_lifetime"] > 0


def run_checkpointable_guide(tmp_path: Path) -> None:
    out = load("checkpointable_guide").main(iterations=1, checkpoint_dir=str(tmp_path))
    assert out["restored_iteration"] == 1 and out["restored_env_steps"] == out["saved_env_steps"] == 128
    assert out["last_result"]["training_iteration"] == 2  # the restored algorithm trained on
    assert out["eval_results"]["env_runners"]["num_episodes"] == 10  # evaluation_duration=10 episodes
    assert "episode_return_mean" in out["last_result"]["evaluation"]["env_runners"]  # evaluation_interval=1
    assert (Path(out["checkpoint_path"]) / "learner_group" / "learner" / "rl_module" / "default_policy").is_dir()
    assert (Path(out["checkpoint_path"]) / "eval_env_runner").is_dir()
    weights = module_state(out["checkpoint_path"], "default_policy")  # vf_share_layers=True: one encoder
    assert weights["encoder.0.weight"].shape == (32, 4) and not any(k.startswith(("pi.", "vf.")) for k in weights)


def run_change_config_during_training(tmp_path: Path) -> None:
    # No checkpoint_dir: the example's own temporary folder, which it removes (the fixture checks).
    out = load("change_config_during_training").main(iterations=1, train_batch_size=500)
    first = out["first_result"]
    # The second config's first iteration goes on from the restored one, with its own settings.
    assert first["training_iteration"] == 2
    assert first["learners/default_policy/lr"] == 0.0003
    assert first["env_runners/num_env_steps_sampled"] == 500


def run_continue_training_from_checkpoint(tmp_path: Path) -> None:
    out = load("continue_training_from_checkpoint").main(iterations=2, checkpoint_dir=str(tmp_path))
    assert out["crashed_at"]["iteration"] == out["resumed_at"] == 2
    assert equal_states(out["crashed_at"]["weights"], out["resumed_weights"])  # where it left off
    assert out["last_result"]["training_iteration"] == 3
    assert out["test_eval_results"]["env_runners"]["num_episodes"] == 2  # evaluate() on the restored algorithm
    # Its callbacks class and policy mapping function: registered by the module, for any process.
    assert_a_fresh_process_allows("continue_training_from_checkpoint", sorted(tmp_path.glob("iter_*"))[-1:])


def run_restore_1_of_n_agents_from_checkpoint(tmp_path: Path) -> None:
    out = load("restore_1_of_n_agents_from_checkpoint").main(iterations=1, checkpoint_dir=str(tmp_path / "ckpt"))
    start = out["start_weights"]
    assert equal_states(start["p0"], module_state(out["checkpoint_path"], "p0"))  # p0 from the checkpoint
    assert not equal_states(start["p1"], module_state(out["checkpoint_path"], "p1"))  # p1 fresh


def run_pretraining_single_agent_training_multi_agent(tmp_path: Path) -> None:
    out = load("pretraining_single_agent_training_multi_agent").main(
        pretraining_iterations=1, iterations=1, checkpoint_dir=str(tmp_path / "pre")
    )
    pretrained = module_state(out["checkpoint_path"], "default_policy")
    assert equal_states(out["start_weights"]["policy_0"], pretrained)
    assert out["start_weights"]["policy_1"]["pi.0.weight"].shape != pretrained["pi.0.weight"].shape  # 32 vs 64
    check_multi_agent_returns(out["last_result"], ["policy_0", "policy_1"], iteration=1)


def run_cartpole_dqn(tmp_path: Path) -> None:
    from cairn.rl.utils.replay_buffers import PrioritizedReplayBuffer

    result, algo = load("cartpole_dqn").main(iterations=2, learning_starts=100)
    result = flat(result)
    assert result["num_gradient_steps"] == 20  # 100 env steps per iteration, one gradient step per 5
    buffer = algo.replay_buffer["default_policy"]
    assert isinstance(buffer, PrioritizedReplayBuffer) and (buffer.alpha, buffer.beta) == (0.6, 0.4)
    assert buffer.max_priority > 1.0  # the learner's TD errors set priorities
    module = algo.get_module("default_policy")
    assert module.dueling and module.advantage_head[0].out_features == 256
    assert algo.config.n_step == (2, 5) and algo.config.minibatch_size == 32


PORTED = {
    "cartpole_dqn": run_cartpole_dqn,
    "multi_agent_cartpole": run_multi_agent_cartpole,
    "multi_agent_pendulum": run_multi_agent_pendulum,
    "custom_heuristic_policy": run_custom_heuristic_policy,
    "rock_paper_scissors_heuristic_vs_learned": run_rock_paper_scissors_heuristic_vs_learned,
    "rock_paper_scissors_learned_vs_learned": run_rock_paper_scissors_learned_vs_learned,
    "agents_act_simultaneously": run_agents_act_simultaneously,
    "mean_std_filtering": run_mean_std_filtering,
    "custom_gym_env": run_custom_gym_env,
    "checkpointable_guide": run_checkpointable_guide,
    "change_config_during_training": run_change_config_during_training,
    "continue_training_from_checkpoint": run_continue_training_from_checkpoint,
    "restore_1_of_n_agents_from_checkpoint": run_restore_1_of_n_agents_from_checkpoint,
    "pretraining_single_agent_training_multi_agent": run_pretraining_single_agent_training_multi_agent,
}


@pytest.mark.parametrize("name", sorted(PORTED))
def test_rllib_example(name: str, tmp_path: Path, examples_on_path: None) -> None:
    PORTED[name](tmp_path)


def run_frame_stacking(tmp_path: Path) -> None:
    out = load("frame_stacking").main(iterations=1, num_frames=4, train_batch_size=32, num_epochs=1)
    assert out["observation_shape"] == (16,)  # CartPole's 4 values x 4 frames, oldest first
    assert out["frames"].shape == (2, 3, 4)  # each env slot's last 3 frames, in the checkpoint state
    assert out["result"]["training_iteration"] == 1
    wrapped = load("frame_stacking").main(
        iterations=1, num_frames=4, use_gym_wrapper_framestacking=True, train_batch_size=32, num_epochs=1
    )
    assert wrapped["observation_shape"] == (16,) and wrapped["frames"].size == 0


PORTED["frame_stacking"] = run_frame_stacking  # after the parametrized test: run by the test below


def test_rllib_example_frame_stacking(tmp_path: Path, examples_on_path: None) -> None:
    run_frame_stacking(tmp_path)


def run_different_spaces_for_agents(tmp_path: Path) -> None:
    out = load("different_spaces_for_agents").main(iterations=2, train_batch_size=64, max_episode_len=8)
    check_multi_agent_returns(out["result"], ["main0", "main1"])
    (obs0, act0), (obs1, act1) = out["spaces"]["main0"], out["spaces"]["main1"]
    assert obs0.shape == (10,) and act0.n == 2  # agent0's spaces, inferred through the mapping function
    assert obs1.shape == (20,) and act1.n == 3
    assert any(k.startswith("learners/main0/") for k in flat(out["result"]))
    assert not any(k.startswith("learners/main1/") for k in flat(out["result"]))  # policies_to_train=["main0"]


PORTED["different_spaces_for_agents"] = run_different_spaces_for_agents


def test_different_spaces_for_agents(tmp_path: Path, examples_on_path: None) -> None:
    run_different_spaces_for_agents(tmp_path)


def run_custom_metrics_in_env_runners(tmp_path: Path) -> None:
    out = load("custom_metrics_in_env_runners").main(iterations=2, checkpoint_dir=str(tmp_path / "ckpt"))
    last = flat(out["last_result"])
    assert sum(last[f"env_runners/cart_heatmap/bin_{i}"] for i in range(8)) > 0
    assert last["env_runners/cart_mean_dist_travelled"] > 0 and 0 < last["env_runners/pole_angle"] < 0.3
    pct = [last[f"env_runners/cart_max_dist_travelled/{p}"] for p in (75, 95, 99)]
    assert 0 < pct[0] <= pct[1] <= pct[2]
    # The episodes in flight at the save kept their custom_data: the restored run logs the same numbers.
    assert out["exact"], (out["went_on"], out["resumed"])
    assert_a_fresh_process_allows("custom_metrics_in_env_runners", [tmp_path / "ckpt"])  # a partial of its class


PORTED["custom_metrics_in_env_runners"] = run_custom_metrics_in_env_runners


def test_custom_metrics_in_env_runners(tmp_path: Path, examples_on_path: None) -> None:
    run_custom_metrics_in_env_runners(tmp_path)


def run_flatten_observations_dict_space(tmp_path: Path) -> None:
    out = load("flatten_observations_dict_space").main(iterations=1, train_batch_size=64, num_epochs=1)
    assert out["observation_space"].shape == (7,)  # x-pos 1 + value 1 + one-hot 3 + velocs 2
    assert out["result"]["training_iteration"] == 1 and out["result"]["num_env_steps_sampled_lifetime"] == 64
    encoder = out["module"].encoder  # RLlib's DefaultModelConfig: one linear encoder under both heads
    assert isinstance(encoder[1], torch.nn.Identity) and encoder[0].out_features == 32


PORTED["flatten_observations_dict_space"] = run_flatten_observations_dict_space  # run by the test below


def test_rllib_example_flatten_observations_dict_space(tmp_path: Path, examples_on_path: None) -> None:
    run_flatten_observations_dict_space(tmp_path)


def run_custom_lstm_rl_module(tmp_path: Path) -> None:
    out = load("custom_lstm_rl_module").main(
        iterations=2, lstm_cell_size=16, dense_layers=(16,), train_batch_size=128, num_epochs=1
    )
    assert out["result"]["training_iteration"] == 2
    assert out["module"].is_stateful() and {k: v.shape for k, v in out["state"].items()} == {"h": (16,), "c": (16,)}
    learner = out["result"]["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 128 and math.isfinite(learner["policy_loss"])


PORTED["custom_lstm_rl_module"] = run_custom_lstm_rl_module  # run by the test below


def test_rllib_example_custom_lstm_rl_module(tmp_path: Path, examples_on_path: None) -> None:
    run_custom_lstm_rl_module(tmp_path)


def run_prev_actions_prev_rewards(tmp_path: Path) -> None:
    out = load("prev_actions_prev_rewards").main(iterations=2, train_batch_size=64, num_epochs=1, max_seq_len=8)
    assert out["observation_space"].shape == (2 + 2 + 1,)  # StatelessCartPole's 2 + one-hot action 2 + reward 1
    assert out["result"]["training_iteration"] == 2
    env_state = out["env_state"]  # the last actions and the windows of the episodes in flight are checkpointed
    assert env_state["prev_actions"].shape == (4,)
    assert set(env_state["connectors"]["env_to_module_connector"]) == {"PrevActionsPrevRewards"}
    assert env_state["module_states"]["default_policy"]["h"].shape == (4, 256)  # the LSTM's memory too
    assert out["model_config"]["fcnet_kernel_initializer"] == "xavier_uniform_"  # recorded by name


PORTED["prev_actions_prev_rewards"] = run_prev_actions_prev_rewards  # run by the test below


def test_rllib_example_prev_actions_prev_rewards(tmp_path: Path, examples_on_path: None) -> None:
    run_prev_actions_prev_rewards(tmp_path)


def run_action_masking_rl_module(tmp_path: Path) -> None:
    # ActionMaskEnv raises on a masked action: every sampled and every evaluation step checks the mask.
    out = load("action_masking_rl_module").main(iterations=1, train_batch_size=64, num_epochs=1)
    assert out["result"]["training_iteration"] == 1 and out["result"]["num_env_steps_sampled_lifetime"] == 64
    assert out["result"]["evaluation"]["env_runners"]["num_episodes"] > 0
    module = out["module"]
    assert type(module).__name__ == "ActionMaskingTorchRLModule" and module.takes_nested_observations
    mask = torch.zeros(4, 100)
    mask[:, 7] = 1.0  # one allowed action
    batch = {"obs": {"action_mask": mask, "observations": torch.zeros(4, 5)}}
    assert (module.forward_inference(batch)["actions"] == 7).all()
    assert (module.forward_exploration(batch, generator=torch.Generator().manual_seed(0))["actions"] == 7).all()


PORTED["action_masking_rl_module"] = run_action_masking_rl_module  # run by the test below


def test_rllib_example_action_masking_rl_module(tmp_path: Path, examples_on_path: None) -> None:
    run_action_masking_rl_module(tmp_path)


def run_policy_inference_after_training(tmp_path: Path) -> None:
    """The module alone on raw observations: no observation filter by default (as RLlib), so no note either."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ModuleWithoutConnectorsWarning here would mean a filter was on
        out = load("policy_inference_after_training").main(
            iterations=1, train_batch_size=64, num_epochs=1, num_episodes_during_inference=2,
            checkpoint_dir=str(tmp_path),
        )  # fmt: skip
    assert len(out["returns"]) == 2 and all(r >= 1 for r in out["returns"])
    assert Path(out["checkpoint"], "env_runner", "env_to_module_connector").is_dir()
    assert not Path(out["checkpoint"], "env_runner", "env_to_module_connector", "MeanStdFilter").exists()


PORTED["policy_inference_after_training"] = run_policy_inference_after_training  # run by the test below


def test_rllib_example_policy_inference_after_training(tmp_path: Path, examples_on_path: None) -> None:
    run_policy_inference_after_training(tmp_path)


def run_policy_inference_after_training_w_connector(tmp_path: Path) -> None:
    """RLlib's idiom on an LSTM policy: the pipelines feed the module its own STATE_OUT; cairn's one-call
    Policy (which keeps the state itself) replays the same episodes with the same returns."""
    import gymnasium as gym

    from cairn.rl.inference import Policy

    module = load("policy_inference_after_training_w_connector")
    out = module.main(
        iterations=1, train_batch_size=64, num_epochs=1, num_episodes_during_inference=3, lstm_cell_size=8,
        checkpoint_dir=str(tmp_path), seed=5,
    )  # fmt: skip
    assert out["module"].is_stateful() and len(out["returns"]) == 3
    policy = Policy.from_checkpoint(out["checkpoint"])
    env = module._env_creator({})
    replayed = []
    for episode in range(3):
        obs, _ = env.reset(seed=5 + episode)
        policy.reset()
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.compute_single_action(obs))
            total, done = total + float(reward), terminated or truncated
        replayed.append(total)
    assert replayed == out["returns"]
    assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape == (2,)


PORTED["policy_inference_after_training_w_connector"] = run_policy_inference_after_training_w_connector


def test_rllib_example_policy_inference_after_training_w_connector(tmp_path: Path, examples_on_path: None) -> None:
    run_policy_inference_after_training_w_connector(tmp_path)


def run_policy_inference_after_training_with_lstm(tmp_path: Path) -> None:
    """RLlib's old-stack LSTM loop on the new stack: Algorithm.from_checkpoint, then one call per step."""
    for prev in (False, True):
        out = load("policy_inference_after_training_with_lstm").main(
            iterations=1,
            train_batch_size=64,
            num_epochs=1,
            num_episodes_during_inference=2,
            lstm_cell_size=8,
            prev_action_and_reward=prev,
        )  # fmt: skip  (no checkpoint_dir: the example's own temporary folder, removed)
        assert len(out["returns"]) == 2 and set(out["initial_state"]) == {"h", "c"}
        names = [c.name for c in out["policy"].env_to_module.connectors]
        assert names == (["PrevActionsPrevRewards", "FlattenObservations"] if prev else ["FlattenObservations"])
        assert out["policy"].keeps_state


PORTED["policy_inference_after_training_with_lstm"] = run_policy_inference_after_training_with_lstm


def test_rllib_example_policy_inference_after_training_with_lstm(tmp_path: Path, examples_on_path: None) -> None:
    run_policy_inference_after_training_with_lstm(tmp_path)
