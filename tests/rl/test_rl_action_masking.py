"""Dict observations handed unflattened to a module that takes them (RLlib's action masking, issue 27 item 2).

ActionMaskEnv raises on any action its mask does not allow, so every env step of these runs
(sampling and greedy evaluation) checks that no masked action is taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.spaces import Box, Discrete

import cairn
from cairn.errors import CheckpointError
from cairn.rl import PPO
from cairn.rl.algorithms.dqn import DQNConfig
from cairn.rl.algorithms.ppo import PPOConfig
from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.apis.value_function_api import ValueFunctionAPI
from cairn.rl.core.rl_module.rl_module import RLModuleSpec
from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule
from cairn.rl.env.env_state import register_env_state_handler
from cairn.rl.env.multi_agent_env import ALL_AGENTS, MultiAgentEnv
from cairn.rl.examples.envs.classes.action_mask_env import ActionMaskEnv
from cairn.rl.examples.rl_modules.classes.action_masking_rlm import FLOAT_MIN, ActionMaskingTorchRLModule
from cairn.testing import assert_states_equal

SRC = Path(__file__).resolve().parents[2] / "src"
ENV = f"{ActionMaskEnv.__module__}:{ActionMaskEnv.__qualname__}"


@cairn.register  # configs name it by path (SPEC 8)
class LowActionsPayEnv(ActionMaskEnv):
    """ActionMaskEnv whose reward is learnable: 1 for an allowed action in the lower half, else 0."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float(int(action) < int(self.action_space.n) // 2), terminated, truncated, info


@cairn.register  # configs name it by path (SPEC 8)
class TwoMaskedAgents(MultiAgentEnv):
    """Two ActionMaskEnvs as the agents of one MultiAgentEnv (the multi-agent runner's input).

    Both draw from this env's ``np_random`` (which cairn saves); the state handler below saves
    their step counts and masks, so that episodes in flight resume exactly.
    """

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.envs = {agent: ActionMaskEnv(config) for agent in ("a0", "a1")}
        self.possible_agents = list(self.envs)
        self.agents = list(self.envs)
        self.observation_spaces = {agent: env.observation_space for agent, env in self.envs.items()}
        self.action_spaces = {agent: env.action_space for agent, env in self.envs.items()}

    def _share_rng(self) -> None:
        for env in self.envs.values():  # after a restore too: cairn may give this env a new generator
            env.np_random = self.np_random

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, Any]:
        gym.Env.reset(self, seed=seed)
        self._share_rng()
        return {agent: env.reset()[0] for agent, env in self.envs.items()}, {}

    def step(self, action_dict: dict[Any, Any]) -> tuple[Any, ...]:  # type: ignore[override]
        self._share_rng()
        steps = {a: self.envs[a].step(act) for a, act in action_dict.items()}
        done = any(step[2] for step in steps.values())
        return (
            {a: step[0] for a, step in steps.items()},
            {a: step[1] for a, step in steps.items()},
            {ALL_AGENTS: done},
            {ALL_AGENTS: False},
            {},
        )


def _two_get(env: TwoMaskedAgents) -> dict[str, Any]:
    return {a: {"steps": e.steps, "valid_actions": np.array(e.valid_actions, copy=True)} for a, e in env.envs.items()}


def _two_set(env: TwoMaskedAgents, state: dict[str, Any]) -> None:
    for agent, inner in env.envs.items():
        inner.steps = int(state[agent]["steps"])
        inner.valid_actions = np.array(state[agent]["valid_actions"], dtype=np.float32, copy=True)


register_env_state_handler(TwoMaskedAgents, _two_get, _two_set)


class DropsTheMask(ConnectorV2):
    """A broken piece: says its output is the Dict it gets, but drops the action mask."""

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, **kwargs: Any) -> Any:
        batch["obs"] = {"observations": batch["obs"]["observations"]}
        return batch


class RecurrentMaskingModule(TorchRLModule, ValueFunctionAPI):
    """A GRU policy that reads the Dict observation unflattened (``[B, T, ...]`` leaves) and masks its logits."""

    takes_nested_observations = True

    def setup(self) -> None:
        self.gru = torch.nn.GRU(3, 8, batch_first=True)
        self.pi = torch.nn.Linear(8, int(self.action_space.n))  # type: ignore[attr-defined]
        self.vf = torch.nn.Linear(8, 1)

    def get_initial_state(self) -> dict[str, Any]:
        return {"h": np.zeros(8, dtype=np.float32)}

    def _embed(self, batch: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        obs = batch[Columns.OBS]
        assert isinstance(obs, dict) and obs["observations"].dim() == 3  # [B, T, 3]: never flattened
        out, h = self.gru(obs["observations"].float(), batch[Columns.STATE_IN]["h"].unsqueeze(0))
        return out, {"h": h.squeeze(0)}

    def _forward(self, batch: Any, **kwargs: Any) -> dict[str, Any]:
        embeddings, state = self._embed(batch)
        mask = torch.clamp(torch.log(batch[Columns.OBS]["action_mask"].float()), min=FLOAT_MIN)
        return {
            Columns.ACTION_DIST_INPUTS: self.pi(embeddings) + mask,
            Columns.STATE_OUT: state,
            Columns.EMBEDDINGS: embeddings,
        }

    def compute_values(self, batch: Any, embeddings: Any | None = None) -> torch.Tensor:
        if embeddings is None:
            embeddings, _ = self._embed(batch)
        values: torch.Tensor = self.vf(embeddings).squeeze(-1)
        return values


def config(env: str = ENV, **training: Any) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env, env_config={"action_space": Discrete(10), "observation_space": Box(-1.0, 1.0, (3,))})
        .env_runners(observation_filter=None, num_envs_per_env_runner=2, rollout_length=64)
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config={"fcnet_hiddens": [16]})
        )
        .training(**{"minibatch_size": 32, "num_epochs": 2, **training})
        .debugging(seed=3)
    )


def test_no_masked_action_sampled_or_greedy_and_train_logp_of_masked_is_minus_inf() -> None:
    algo = PPO(config().evaluation(evaluation_interval=1, evaluation_duration=20))
    try:
        for _ in range(3):  # 384 sampled steps and the evaluation episodes: the env raises on a masked action
            algo.train()
        runner = algo.env_runner
        obs = runner._to_module(runner._obs, np.arange(runner.num_slots), update=False)
        assert isinstance(obs, dict) and obs["action_mask"].dtype == np.float32  # the module got the Dict
        module = algo.learner_group.get_module("default_policy")
        rng = np.random.default_rng(0)
        batch = {
            "obs": {
                "action_mask": torch.as_tensor(rng.integers(0, 2, (200, 10)).astype(np.float32)),
                "observations": torch.as_tensor(rng.uniform(-1, 1, (200, 3)).astype(np.float32)),
            }
        }
        batch["obs"]["action_mask"][:, 0] = 1.0  # at least one allowed action per row
        mask = batch["obs"]["action_mask"].bool()
        greedy = module.forward_inference(batch)["actions"]
        assert mask[torch.arange(200), greedy].all()
        sampled = module.forward_exploration(batch, generator=torch.Generator().manual_seed(0))["actions"]
        assert mask[torch.arange(200), sampled].all()
        logits = module.forward_train(batch)["action_dist_inputs"]
        logp = torch.log_softmax(logits, -1)
        assert (logp[~mask] < FLOAT_MIN / 2).all() and torch.isfinite(logp[mask]).all()
        assert (logp[mask].exp().sum() - 200).abs() < 1e-3  # all probability on the allowed actions
    finally:
        algo.stop()


def test_the_masked_run_learns() -> None:
    env = f"{LowActionsPayEnv.__module__}:LowActionsPayEnv"
    algo = PPO(config(env=env, lr=0.01, num_epochs=4).env_runners(rollout_length=128))
    obs = {"action_mask": torch.ones(500, 10), "observations": torch.zeros(500, 3)}

    def paying_share() -> float:
        module = algo.env_runner.module["default_policy"]
        actions = module.forward_exploration({"obs": obs}, generator=torch.Generator().manual_seed(1))["actions"]
        return float((actions < 5).float().mean())

    try:
        before = paying_share()
        for _ in range(10):
            algo.train()
        # Uniform over the allowed actions pays half the time; the trained policy prefers the paying half.
        assert before < 0.65 and paying_share() > 0.8
    finally:
        algo.stop()


def test_the_multi_agent_runner_hands_dicts_and_resumes_exactly(tmp_path: Path) -> None:
    env = f"{TwoMaskedAgents.__module__}:TwoMaskedAgents"
    for spec in (
        RLModuleSpec(module_class=ActionMaskingTorchRLModule, model_config={"fcnet_hiddens": [16]}),
        RLModuleSpec(module_class=RecurrentMaskingModule, model_config={"max_seq_len": 4}),
    ):
        algo = PPO(config(env=env).rl_module(rl_module_spec=spec))
        try:
            algo.train()  # both agents' masks obeyed (the env raises on a masked action)
            batch = algo.env_runner.sample_batches()["default_policy"]
            assert batch["obs"]["action_mask"].shape[1:] == (1, 10)  # [rows, 1, n]: the samples keep the Dict
            path = algo.save_to_path(tmp_path / type(algo.env_runner.module["default_policy"]).__name__)
            state = algo.env_runner.get_state()
            pending = state["env"]["episodes"][0]["pending"]["a0"]
            assert set(pending["obs"]) == {"action_mask", "observations"}
            # A damaged open transition (its mask of another length) is refused, naming it; nothing applied.
            bad = {**pending, "obs": {**pending["obs"], "action_mask": np.ones(3, np.float32)}}
            episodes = [dict(state["env"]["episodes"][0], pending={"a0": bad}), *state["env"]["episodes"][1:]]
            with pytest.raises(CheckpointError, match=r"pending.*obs.*has shape \(3,\)"):
                algo.env_runner.set_state(dict(state, env=dict(state["env"], episodes=episodes)))
            assert_states_equal(algo.env_runner.get_state(), state)
            went_on = algo.train().flatten(wall_clock=False)
            expected = algo.get_state()
        finally:
            algo.stop()
        resumed = PPO.from_checkpoint(path)
        try:  # the open transitions (each agent's last Dict observation, as the module saw it) resume
            assert not resumed.env_runner.episodes_restarted
            assert resumed.train().flatten(wall_clock=False) == went_on
            assert_states_equal(resumed.get_state(), expected)
        finally:
            resumed.stop()


def test_a_recurrent_module_gets_dict_sequences() -> None:
    spec = RLModuleSpec(module_class=RecurrentMaskingModule, model_config={"max_seq_len": 5})
    algo = PPO(config().rl_module(rl_module_spec=spec))
    try:
        for _ in range(2):  # the env raises on a masked action; PPO trains on zero-padded Dict sequences
            result = algo.train()
        assert np.isfinite(result["learners"]["default_policy"]["policy_loss"])
        batch = algo.env_runner.sample_batches()["default_policy"]
        assert batch["obs"]["action_mask"].shape == (64, 2, 10)  # [T, slots, n]: the samples keep the Dict
        processed = algo._postprocess(batch, "default_policy")
        sequences = processed["loss_mask"].shape[0]
        assert processed["obs"]["action_mask"].shape == (sequences, 5, 10)
        assert processed["obs"]["observations"].shape == (sequences, 5, 3)
        assert not processed["obs"]["action_mask"][~processed["loss_mask"]].any()  # padding is zeros
    finally:
        algo.stop()


def test_default_module_still_refuses_dict_and_off_policy_refuses_nested() -> None:
    with pytest.raises(ValueError, match=r"reaches the module unflattened.*takes_nested_observations"):
        PPO(config().rl_module(rl_module_spec=RLModuleSpec()))
    dqn = (
        DQNConfig()
        .environment(ENV, env_config={"action_space": Discrete(4), "observation_space": Box(-1.0, 1.0, (3,))})
        .env_runners(observation_filter=None)
        .rl_module(rl_module_spec=RLModuleSpec(module_class=ActionMaskingTorchRLModule))
    )
    with pytest.raises(ValueError, match="off-policy: its replay buffers store arrays"):
        dqn.build_algo()
    with pytest.raises(ValueError, match="observation_filter=None"):
        PPO(config().env_runners(observation_filter="MeanStdFilter"))
    # A pipeline whose output is not the Dict it announced: refused at the first step, naming it.
    broken = PPO(config().env_runners(env_to_module_connector=DropsTheMask))
    try:
        with pytest.raises(ValueError, match=r"pipeline \['DropsTheMask'\] gave observations that do not fit"):
            broken.train()
    finally:
        broken.stop()
    # The multi-agent runner (a MultiAgentEnv) hands the Dict too; a default module there is refused.
    with pytest.raises(ValueError, match=r"reaches the module unflattened"):
        PPO(config(env=f"{TwoMaskedAgents.__module__}:TwoMaskedAgents").rl_module(rl_module_spec=RLModuleSpec()))
    algo = PPO(config(env="multi:" + ENV).environment(num_agents=2))
    try:
        algo.train()  # 2 agents' slots, each with its own mask
        assert isinstance(algo.env_runner.get_state()["env"]["obs"], dict)
    finally:
        algo.stop()


RESUME = """
import sys
import cairn.rl.examples.envs.classes.action_mask_env, cairn.rl.examples.rl_modules.classes.action_masking_rlm
from cairn.rl import PPO
algo = PPO.from_checkpoint(sys.argv[1])
algo.train()
algo.save_to_path(sys.argv[2])
algo.stop()
"""


def test_exact_resume_with_dict_observations_in_a_new_process(tmp_path: Path) -> None:
    """Save with episodes in flight (their Dict observations), continue in a new process == continuing."""
    algo = PPO(config())
    try:
        algo.train()
        mid = algo.save_to_path(tmp_path / "mid")
        algo.train()
        algo.save_to_path(tmp_path / "straight")
    finally:
        algo.stop()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    subprocess.run(
        [sys.executable, "-c", RESUME, str(mid), str(tmp_path / "resumed")], check=True, env=env, timeout=300
    )
    straight, resumed = PPO.from_checkpoint(tmp_path / "straight"), PPO.from_checkpoint(tmp_path / "resumed")
    try:
        assert_states_equal(straight.get_state(), resumed.get_state())
        obs = straight.env_runner.get_state()["env"]["obs"]
        assert set(obs) == {"action_mask", "observations"}  # the observations in flight, as the env gave them
    finally:
        straight.stop()
        resumed.stop()


@pytest.mark.xdist_group("ray_cluster")
def test_remote_runner_and_two_learners_resume_exactly_with_dict_observations(ray_cluster: Any, tmp_path: Path) -> None:
    """On a Ray env runner, with 2 data-parallel learners (each takes its rows of every Dict minibatch)."""
    algo = PPO(config().env_runners(num_env_runners=1).learners(num_learners=2))
    try:
        algo.train()
        path = algo.save_to_path(tmp_path / "mid")
        went_on = algo.train().flatten(wall_clock=False)
        expected = algo.get_state(components="learner_group")
        algo.restore_from_path(path)
        assert algo.train().flatten(wall_clock=False) == went_on
        assert_states_equal(algo.get_state(components="learner_group"), expected)
    finally:
        algo.stop()


def test_a_saved_runner_state_with_hostile_dict_observations_is_refused(tmp_path: Path) -> None:
    algo = PPO(config())
    try:
        algo.train()
        state = algo.env_runner.get_state()
        bad = dict(
            state,
            env=dict(
                state["env"],
                obs={
                    "action_mask": np.array(["x"] * 20).reshape(2, 10),
                    "observations": state["env"]["obs"]["observations"],
                },
            ),
        )
        with pytest.raises(CheckpointError, match="env_runner/env/obs"):
            algo.env_runner.set_state(bad)
        # The mask in force of the second env: another length, or values other than 0 and 1.
        for mask, problem in ((np.ones(3, np.float32), "not 10 numbers"), (np.full(10, 0.5), "other than 0 and 1")):
            sub_envs = list(state["env"]["sub_envs"])
            sub_envs[1] = dict(sub_envs[1], env=dict(sub_envs[1]["env"], valid_actions=mask))
            with pytest.raises(CheckpointError, match=f"env_runner/env/sub_envs/1.*{problem}"):
                algo.env_runner.set_state(dict(state, env=dict(state["env"], sub_envs=sub_envs)))
        assert_states_equal(algo.env_runner.get_state(), state)  # nothing applied
        # Saved observations of another layout (a key missing) do not fit this env: its episodes restart.
        other = dict(state, env=dict(state["env"], obs={"observations": state["env"]["obs"]["observations"]}))
        algo.env_runner.set_state(other)
        assert algo.env_runner.episodes_restarted
        algo.train()  # and sampling goes on, obeying the masks
    finally:
        algo.stop()
