"""PPO on CartPole in CleanRL's single-file style, checkpointed with cairn.torch.

The training code is CleanRL's ``ppo.py`` (a shared-nothing actor-critic,
GAE, clipped surrogate, Adam with an annealed learning rate); the only
additions are the ``# cairn`` lines: one ``TrainState`` holding the agent, the
optimizer, the LR schedule, the RNGs and the environments, one
``CheckpointManager``, a restore at the start and a save per iteration.
Kill it at any point (``kill -9``) and run it again with ``--resume``: it goes
on from the last committed checkpoint and ends bit for bit where a run without
a stop ends.

    python examples/cleanrl_ppo.py --checkpoint-dir runs/ppo --iterations 20
    python examples/cleanrl_ppo.py --checkpoint-dir runs/ppo --iterations 20 --resume
    cairn ls runs/ppo
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.categorical import Categorical

import cairn
import cairn.torch
from cairn.rl.env.env_state import get_env_state, set_env_state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--iterations", type=int, default=10, help="total PPO iterations (also with --resume)")
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per iteration")
    p.add_argument("--learning-rate", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--checkpoint-dir", required=True, help="the CheckpointManager's root (local path or URI)")
    p.add_argument("--keep-last", type=int, default=2)
    p.add_argument("--resume", action="store_true", help="go on from the latest checkpoint, if there is one")
    return p.parse_args(argv)


class Envs:
    """``num_envs`` environments stepped in turn, reset automatically at episode ends.

    It follows PyTorch's ``state_dict`` / ``load_state_dict`` convention, so
    ``cairn.torch.TrainState`` saves it like any other object: the physics and
    RNG of each environment (``cairn.rl.env.env_state``), the observations the next
    step starts from, and the running episode statistics.
    """

    def __init__(self, env_id: str, num_envs: int, seed: int) -> None:
        self.envs = [gym.make(env_id) for _ in range(num_envs)]
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])
        self.done = np.zeros(num_envs, dtype=np.float32)
        self.episode_return = np.zeros(num_envs)
        self.episode_length = np.zeros(num_envs, dtype=np.int64)
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, list[float]]:
        """Step every env; returns the rewards and the returns of the episodes that ended."""
        rewards = np.zeros(len(self.envs), dtype=np.float32)
        finished = []
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, _ = env.step(int(actions[i]))
            rewards[i] = reward
            self.episode_return[i] += reward
            self.episode_length[i] += 1
            self.done[i] = float(terminated or truncated)
            if terminated or truncated:
                finished.append(float(self.episode_return[i]))
                self.episode_return[i], self.episode_length[i] = 0.0, 0
                obs, _ = env.reset()
            self.obs[i] = obs
        return rewards, finished

    def state_dict(self) -> dict[str, Any]:
        return {
            "envs": [get_env_state(env) for env in self.envs],
            "obs": self.obs.copy(),
            "done": self.done.copy(),
            "episode_return": self.episode_return.copy(),
            "episode_length": self.episode_length.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for env, env_state in zip(self.envs, state["envs"], strict=True):
            set_env_state(env, env_state)
        for key in ("obs", "done", "episode_return", "episode_length"):
            getattr(self, key)[...] = state[key]


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )  # fmt: skip
        self.actor = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, n_actions), std=0.01),
        )  # fmt: skip

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        value: torch.Tensor = self.critic(x)
        return value

    def get_action_and_value(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # the same float reductions in every run

    envs = Envs(args.env_id, args.num_envs, args.seed)
    agent = Agent(int(np.prod(envs.single_observation_space.shape)), int(envs.single_action_space.n))
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: 1.0 - it / args.iterations)

    # cairn: everything a resume needs, restored in place into the objects above.
    ckpt = cairn.torch.TrainState(
        model=agent, optimizer=optimizer, scheduler=scheduler, rng=True, envs=envs, iteration=0, global_step=0
    )
    mgr = cairn.CheckpointManager(args.checkpoint_dir, keep_last=args.keep_last)
    if args.resume and mgr.restore_latest(ckpt) is not None:
        print(f"resumed from iteration {ckpt.iteration} ({mgr.latest()})", flush=True)

    obs = torch.zeros((args.num_steps, args.num_envs, *envs.single_observation_space.shape))
    actions = torch.zeros((args.num_steps, args.num_envs))
    logprobs = torch.zeros((args.num_steps, args.num_envs))
    rewards = torch.zeros((args.num_steps, args.num_envs))
    dones = torch.zeros((args.num_steps, args.num_envs))
    values = torch.zeros((args.num_steps, args.num_envs))

    for iteration in range(ckpt.iteration + 1, args.iterations + 1):
        next_obs, next_done = torch.as_tensor(envs.obs, dtype=torch.float32), torch.as_tensor(envs.done)
        episode_returns: list[float] = []
        for step in range(args.num_steps):
            ckpt.global_step += args.num_envs
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step], logprobs[step] = action, logprob
            reward, finished = envs.step(action.numpy())
            episode_returns += finished
            rewards[step] = torch.as_tensor(reward)
            next_obs, next_done = torch.as_tensor(envs.obs, dtype=torch.float32), torch.as_tensor(envs.done)

        with torch.no_grad():  # GAE
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = torch.zeros(args.num_envs)
            for t in reversed(range(args.num_steps)):
                nextnonterminal = 1.0 - (next_done if t == args.num_steps - 1 else dones[t + 1])
                nextvalues = next_value if t == args.num_steps - 1 else values[t + 1]
                delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values

        b_obs = obs.reshape((-1, *envs.single_observation_space.shape))
        b_logprobs, b_actions = logprobs.reshape(-1), actions.reshape(-1)
        b_advantages, b_returns = advantages.reshape(-1), returns.reshape(-1)
        b_inds = np.arange(batch_size)
        for _epoch in range(args.update_epochs):
            np.random.shuffle(b_inds)
            for start in range(0, batch_size, minibatch_size):
                mb = b_inds[start : start + minibatch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[mb], b_actions.long()[mb])
                ratio = (newlogprob - b_logprobs[mb]).exp()
                mb_adv = b_advantages[mb]
                mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio, -mb_adv * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)
                ).mean()
                v_loss = 0.5 * ((newvalue.view(-1) - b_returns[mb]) ** 2).mean()
                loss = pg_loss - args.ent_coef * entropy.mean() + v_loss * args.vf_coef
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
                optimizer.step()
        scheduler.step()

        # cairn: one verified, atomic checkpoint per iteration; old ones are pruned after the commit.
        ckpt.iteration = iteration
        mean_return = float(np.mean(episode_returns)) if episode_returns else float("nan")
        mgr.save(ckpt, iteration, metrics={"episode_return_mean": mean_return, "global_step": ckpt.global_step})
        print(f"iteration {iteration} saved: global_step={ckpt.global_step} return={mean_return:.1f}", flush=True)
    mgr.close()


if __name__ == "__main__":
    main()
