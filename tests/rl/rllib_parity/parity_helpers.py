"""Helpers of the RLlib parity tests: tiny configs, a user's RLModule and MultiAgentEnv, mapping functions.

RLlib's tests build their algorithms from ``PPOConfig()`` builders on
``MultiAgentCartPole``; here the same set-ups are cairn dataclass configs on
``CartPole-v1``, its ``"multi:CartPole-v1"`` copies with a static mapping, or
:class:`MultiAgentCartPole` with a mapping function (agents ``agent_0``,
``agent_1``, ...), kept tiny so that the folder runs in seconds.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import cairn
from cairn.rl import PPO, EpisodeInfo, MultiAgentEnv, PPOConfig, RLModule

OBS_SPACE = gym.make("CartPole-v1").observation_space
"""CartPole's observation space (``Box(4,)``), as RLlib's tests take it from the env."""

ACT_SPACE = gym.make("CartPole-v1").action_space
"""CartPole's action space (``Discrete(2)``)."""


def tiny_config(**overrides: Any) -> PPOConfig:
    """PPO on CartPole with 2 envs x 16 steps per iteration, one epoch, 8-unit MLPs."""
    base = PPOConfig(
        env="CartPole-v1",
        seed=10,
        num_envs_per_env_runner=2,
        rollout_length=16,
        minibatch_size=32,
        num_epochs=1,
        model_config={"hidden_sizes": [8]},
    )
    return dataclasses.replace(base, **overrides)


def tiny_multi_config(module_ids: tuple[str, ...] = ("p0", "p1"), **overrides: Any) -> PPOConfig:
    """``tiny_config`` on ``"multi:CartPole-v1"``: agent ``agent_<i>`` plays module ``module_ids[i]``."""
    return tiny_config(
        env="multi:CartPole-v1",
        num_agents=len(module_ids),
        policies=module_ids,
        policy_mapping={f"agent_{i}": module_id for i, module_id in enumerate(module_ids)},
        **overrides,
    )


def learner_weights(algo: PPO) -> dict[str, Any]:
    """Module id -> weights of the learner's modules (what ``learner_group.get_weights()`` gives in RLlib)."""
    weights: dict[str, Any] = algo.learner_group.get_weights()
    return weights


def states_differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two RLModule states (parameter name -> tensor) differ in any parameter."""
    assert set(a) == set(b)
    return any(not torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])) for k in a)


def filter_state(connector_states: Mapping[str, Any]) -> dict[str, Any]:
    """The ``MeanStdFilter`` statistics out of an env runner's connector states."""
    state: dict[str, Any] = connector_states["env_to_module_connector"]["MeanStdFilter"]
    return state


class VPGModule(RLModule):
    """A user's own RLModule: one shared torch MLP of ``model_config["hidden_dim"]`` units.

    The counterpart of RLlib's ``VPGTorchRLModule`` example (its tests build
    MultiRLModules out of it). Built through ``RLModuleSpec(module_class=VPGModule,
    ...)`` with its own ``model_config`` keys (issue 14 item 3).
    """

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, model_config, **kwargs)
        hidden = int(dict(model_config or {}).get("hidden_dim", 32))
        n_actions = int(action_space.n)  # type: ignore[attr-defined]
        self.net = nn.Sequential(nn.Linear(int(np.prod(observation_space.shape)), hidden), nn.ReLU())
        self.logits = nn.Linear(hidden, n_actions)
        self.value = nn.Linear(hidden, 1)

    def _heads(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        obs = torch.as_tensor(batch["obs"], dtype=torch.float32).flatten(1)
        features = self.net(obs)
        return self.logits(features), self.value(features).squeeze(-1)

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits, _ = self._heads(batch)
        return {"actions": logits.argmax(-1), "action_dist_inputs": logits}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits, values = self._heads(batch)
            dist = torch.distributions.Categorical(logits=logits)
            probs = torch.softmax(logits, dim=-1)
            actions = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
        return {
            "actions": actions,
            "action_logp": dist.log_prob(actions),
            "vf_preds": values,
            "action_dist_inputs": logits,
        }

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits, values = self._heads(batch)
        dist = torch.distributions.Categorical(logits=logits)
        actions = torch.as_tensor(batch["actions"]).long()
        return {"action_logp": dist.log_prob(actions), "entropy": dist.entropy(), "vf_preds": values}


@cairn.register  # configs name it by path (SPEC 8)
class MultiAgentCartPole(MultiAgentEnv):
    """RLlib's ``MultiAgentCartPole`` (``make_multi_agent("CartPole-v1")``): one CartPole per agent.

    Agents ``agent_0`` .. ``agent_{n-1}`` (``env_config["num_agents"]``, default 2)
    act together, each in its own CartPole; an agent whose pole fell stops
    acting, and the episode ends when every agent is done. A config names it
    ``"parity_helpers:MultiAgentCartPole"``. Its state is not saved (no
    handler registered), so restored runs start new episodes; the tests that
    use it do not compare sampling across a restore.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        num_agents = int(dict(env_config or {}).get("num_agents", 2))
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.agents = list(self.possible_agents)
        self.envs = {agent: gym.make("CartPole-v1") for agent in self.possible_agents}
        self.observation_spaces = {agent: OBS_SPACE for agent in self.possible_agents}
        self.action_spaces = {agent: ACT_SPACE for agent in self.possible_agents}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        gym.Env.reset(self, seed=seed)
        self.agents = list(self.possible_agents)
        observations = {}
        for agent, env in self.envs.items():
            observations[agent], _ = env.reset(seed=int(self.np_random.integers(2**31)))
        return observations, {}

    def step(
        self, action_dict: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        observations, rewards, terminateds, truncateds = {}, {}, {}, {}
        for agent, action in action_dict.items():
            obs, reward, terminated, truncated, _ = self.envs[agent].step(action)
            observations[agent], rewards[agent] = obs, float(reward)
            terminateds[agent], truncateds[agent] = terminated, truncated
            if terminated or truncated:
                self.agents.remove(agent)
        # The episode ends when every agent is done (each agent's own flag says how it ended).
        terminateds["__all__"] = not self.agents
        truncateds["__all__"] = False
        return observations, rewards, terminateds, truncateds, {}


# Policy mapping functions ``(agent_id, episode) -> module id``, module-level so that a
# checkpoint records them by reference (``parity_helpers:map_to_p0``); RLlib's tests use
# lambdas and closures, which cairn does not pickle. Random draws come from the episode's
# seed and the agent id (RLlib's use ``random.choice``), so that a restored run maps as the original.


def _choice(agent_id: str, episode: EpisodeInfo, options: list[str]) -> str:
    """One of ``options``, drawn per agent and episode (RLlib's lambdas call ``random.choice`` per agent)."""
    rng = np.random.default_rng([episode.seed, zlib.crc32(agent_id.encode())])
    return options[int(rng.integers(len(options)))]


def map_to_p0(agent_id: str, episode: EpisodeInfo) -> str:
    """Every agent plays ``p0``."""
    return "p0"


def map_to_p1(agent_id: str, episode: EpisodeInfo) -> str:
    """Every agent plays ``p1``."""
    return "p1"


def map_to_p0_or_p1(agent_id: str, episode: EpisodeInfo) -> str:
    """``p0`` or ``p1`` at random, per episode."""
    return _choice(agent_id, episode, ["p0", "p1"])


def map_to_p1_or_p2(agent_id: str, episode: EpisodeInfo) -> str:
    """``p1`` or ``p2`` at random, per episode."""
    return _choice(agent_id, episode, ["p1", "p2"])


def map_to_p0_or_p2(agent_id: str, episode: EpisodeInfo) -> str:
    """``p0`` or ``p2`` at random, per episode."""
    return _choice(agent_id, episode, ["p0", "p2"])


def map_agent_index(agent_id: str, episode: EpisodeInfo) -> str:
    """``agent_<i>`` plays ``p<i>`` (RLlib: ``lambda aid, *a, **kw: f"p{aid}"``)."""
    return "p" + agent_id.rsplit("_", 1)[1]


def map_agent_index_plus_one(agent_id: str, episode: EpisodeInfo) -> str:
    """``agent_<i>`` plays ``p<i+1>``."""
    return f"p{int(agent_id.rsplit('_', 1)[1]) + 1}"


def map_agent_0_to_p0_else_p1_or_p2(agent_id: str, episode: EpisodeInfo) -> str:
    """``agent_0`` plays ``p0``, the others ``p1`` or ``p2`` at random."""
    return "p0" if agent_id == "agent_0" else _choice(agent_id, episode, ["p1", "p2"])


def map_agent_0_to_p0_else_p1_p2_or_p3(agent_id: str, episode: EpisodeInfo) -> str:
    """``agent_0`` plays ``p0``, the others ``p1``, ``p2`` or ``p3`` at random."""
    return "p0" if agent_id == "agent_0" else _choice(agent_id, episode, ["p1", "p2", "p3"])


def map_to_any_of_p0_to_p3(agent_id: str, episode: EpisodeInfo) -> str:
    """Any of ``p0`` .. ``p3`` at random (a new mapping, unrelated to the checkpointed one)."""
    return _choice(agent_id, episode, ["p0", "p1", "p2", "p3"])
