"""Your own RLModule: a small CNN on image observations, trained with PPO, checkpointed, resumed exactly.

The environment is a tiny grid seen as a picture: a ``Box(0, 255, (1, 6, 6), uint8)``
image with the agent's pixel at 255 and the goal's at 128; four actions move
the agent; reaching the goal pays 1 and ends the episode (20 steps at most).
The module is a user's own :class:`cairn.rl.RLModule` subclass: one conv layer,
a policy head and a value head. PPO trains it through
``RLModuleSpec(module_class=TinyCNNModule)``; the checkpoint records the class
by reference (``custom_module:TinyCNNModule``), never by pickle, and
``@cairn.register`` allows it, so a new process that has imported this file
rebuilds it::

    python examples/custom_module.py --iterations 3 --checkpoint runs/cnn      # train, save
    python examples/custom_module.py --resume runs/cnn --iterations 2           # new process: go on

``--resume`` restores the algorithm with ``PPO.from_checkpoint`` (it continues
bit for bit where the first run stopped) and the module alone with
``RLModule.from_checkpoint``. Each iteration prints one line (iteration, env steps, mean
return); ``--metrics-out FILE`` appends its reproducible metrics to FILE as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import cairn
from cairn.rl import PPO, PPOConfig, RLModule, RLModuleSpec, register_env_state_handler

ENV_ID = "cairn_examples/PixelGrid-v0"
SIZE = 6


class PixelGridEnv(gym.Env[np.ndarray, int]):
    """Reach the goal pixel on a 6 x 6 grid, observed as a one-channel uint8 image."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(0, 255, (1, SIZE, SIZE), np.uint8)
        self.action_space = gym.spaces.Discrete(4)
        self.agent = np.zeros(2, dtype=np.int64)
        self.goal = np.zeros(2, dtype=np.int64)

    def _obs(self) -> np.ndarray:
        image = np.zeros((1, SIZE, SIZE), dtype=np.uint8)
        image[0, self.goal[0], self.goal[1]] = 128
        image[0, self.agent[0], self.agent[1]] = 255
        return image

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.agent = self.np_random.integers(0, SIZE, 2)
        self.goal = self.np_random.integers(0, SIZE, 2)
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        move = [(-1, 0), (1, 0), (0, -1), (0, 1)][int(action)]
        self.agent = np.clip(self.agent + np.asarray(move), 0, SIZE - 1)
        reached = bool((self.agent == self.goal).all())
        return self._obs(), 1.0 if reached else -0.01, reached, False, {}


def _get_env_state(env: PixelGridEnv) -> dict[str, Any]:
    return {"agent": env.agent.copy(), "goal": env.goal.copy()}


def _set_env_state(env: PixelGridEnv, state: Mapping[str, Any]) -> None:
    env.agent = np.array(state["agent"], dtype=np.int64)
    env.goal = np.array(state["goal"], dtype=np.int64)


if __name__ != "__main__":  # run as a script, this file registers under its importable name (see the end)
    # Exact resume needs the environments to go on where they were: teach cairn this env's
    # state (cairn saves its np_random and the TimeLimit counter itself).
    register_env_state_handler(PixelGridEnv, get=_get_env_state, set=_set_env_state)
    gym.register(ENV_ID, entry_point=PixelGridEnv, max_episode_steps=20)


@cairn.register
class TinyCNNModule(RLModule):
    """A user's own module: conv(1 -> channels, 3x3) + ReLU, then a policy and a value head.

    ``model_config``: ``{"channels": int}`` (default 8).
    """

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, model_config, **kwargs)
        channels = int(self.model_config.get("channels", 8))
        in_channels, height, width = observation_space.shape  # type: ignore[misc]
        self.conv = nn.Sequential(nn.Conv2d(in_channels, channels, 3, padding=1), nn.ReLU(), nn.Flatten())
        features = channels * height * width
        self.logits = nn.Linear(features, int(action_space.n))  # type: ignore[attr-defined]
        self.value = nn.Linear(features, 1)

    def _heads(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.conv(torch.as_tensor(batch["obs"], dtype=torch.float32) / 255.0)
        return self.logits(features), self.value(features).squeeze(-1)

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits, _ = self._heads(batch)
        return {"actions": logits.argmax(-1)}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            logits, values = self._heads(batch)
            # Sample with the env runner's generator only: it is checkpointed, so resume is exact.
            actions = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)
            logp = torch.log_softmax(logits, -1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return {"actions": actions, "action_logp": logp, "vf_preds": values}

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        logits, values = self._heads(batch)
        dist = torch.distributions.Categorical(logits=logits)
        actions = torch.as_tensor(batch["actions"]).long()
        return {"action_logp": dist.log_prob(actions), "entropy": dist.entropy(), "vf_preds": values}


def make_config(**overrides: Any) -> PPOConfig:
    """PPO with TinyCNNModule on PixelGrid, small enough for CI (2 envs x 32 steps per iteration)."""
    settings: dict[str, Any] = {
        "env": ENV_ID,
        "seed": 3,
        "observation_filter": None,  # the module scales the pixels itself
        "rl_module_spec": RLModuleSpec(module_class=TinyCNNModule, model_config={"channels": 4}),
        "num_envs_per_env_runner": 2,
        "rollout_length": 32,
        "minibatch_size": 32,
        "num_epochs": 2,
        "lr": 1e-3,
        "max_grad_norm": 0.5,  # CleanRL's clipping, which this example always trained with (PPOConfig: none)
        **overrides,
    }
    return PPOConfig(**settings)


def metrics(result: Mapping[str, Any]) -> dict[str, Any]:
    """The reproducible part of ``train()``'s result, flat (no wall-clock ``timers/`` or ``perf/`` keys)."""
    return result.flatten(wall_clock=False)


def main(argv: list[str] | None = None) -> None:
    """Train (or resume), printing one line per iteration (and, with --metrics-out, appending its JSON metrics)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--checkpoint", help="save the algorithm here at the end")
    parser.add_argument("--resume", help="an algorithm checkpoint to continue from")
    parser.add_argument("--metrics-out", help="append each iteration's reproducible metrics here (JSON lines)")
    args = parser.parse_args(argv)
    if args.resume:
        algo = PPO.from_checkpoint(args.resume)
        # The module alone, for serving: the user's class, rebuilt by reference.
        module = RLModule.from_checkpoint(f"{args.resume}/learner_group/learner/rl_module/default_policy")
        obs, _ = gym.make(ENV_ID).reset(seed=0)
        action = module.forward_inference({"obs": torch.as_tensor(obs[None])})["actions"]
        print(f"restored {type(module).__qualname__} from {args.resume}: greedy action {int(action[0])}", flush=True)
    else:
        algo = PPO(make_config())
    try:
        for _ in range(args.iterations):
            result = algo.train()
            steps, runners = result["num_env_steps_sampled_lifetime"], result["env_runners"]
            print(
                f"iteration {result['training_iteration']:>3}  env steps {steps:>6}  "
                f"return {runners.get('episode_return_mean', float('nan')):6.2f}",
                flush=True,
            )
            if args.metrics_out:
                with open(args.metrics_out, "a") as f:
                    f.write(json.dumps(metrics(result)) + "\n")
        if args.checkpoint:
            algo.save_to_path(args.checkpoint)
    finally:
        algo.stop()


if __name__ == "__main__":
    # A checkpoint records classes by module path, and "__main__" names another file in every
    # process: run this file's code under its importable name, so that the class recorded is
    # "custom_module:TinyCNNModule" and any process that imports custom_module finds it.
    from custom_module import main as _main

    _main(sys.argv[1:])
