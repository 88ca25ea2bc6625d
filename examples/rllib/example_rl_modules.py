"""RLlib's example RLModules that the ported examples use, written for cairn's ``RLModule`` API.

RLlib ships them under ``ray.rllib.examples.rl_modules.classes``: ``random_rlm.RandomRLModule``
(acts at random) and ``rock_paper_scissors_heuristic_rlm.AlwaysSameHeuristicRLM`` /
``BeatLastHeuristicRLM`` (hand-coded rock-paper-scissors players). cairn has no
``cairn.rl.examples.rl_modules`` (docs/rllib_parity.md lists the gap), so they live here,
in a module of their own: a checkpoint records a module class by reference
(``"example_rl_modules:RandomRLModule"``), and loading one needs this module imported.

What differs from RLlib's classes:

* cairn's ``RLModule`` has three public forward passes (``forward_inference``,
  ``forward_exploration(batch, *, generator)``, ``forward_train``) instead of RLlib's
  ``_forward_*``; random draws use the env runner's ``generator`` (checkpointed), so
  a restored run acts the same (RLlib: ``action_space.sample()``, unseeded).
* cairn's PPO env runner reads ``action_logp`` and ``vf_preds`` from every module's
  ``forward_exploration``, also from modules that are not trained; these modules give
  the log-probability of their choice and a zero value (RLlib: actions only).
* A module without parameters still gets an optimizer in cairn's learner, which torch
  refuses for an empty parameter list: each module holds one unused scalar parameter.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from cairn.rl.core.rl_module.rl_module import RLModule

__all__ = ["AlwaysSameHeuristicRLM", "BeatLastHeuristicRLM", "RandomRLModule"]


class _ActsWithoutLearning(RLModule):
    """Base of the modules below: no forward_train (they are never trained), log-probs and zero values."""

    def __init__(
        self,
        observation_space: gym.Space[Any],
        action_space: gym.Space[Any],
        model_config: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(observation_space, action_space, model_config, **kwargs)
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ValueError(f"{type(self).__name__} needs a Discrete action space, got {action_space!r}.")
        self.num_actions = int(action_space.n)
        # Unused: cairn's learner builds an optimizer for every module, and torch refuses an empty one.
        self._unused = nn.Parameter(torch.zeros(()))

    def _choose(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        raise NotImplementedError

    def _logp(self) -> float:
        return 0.0  # deterministic choice

    def forward_inference(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The module's action for each row."""
        with torch.no_grad():
            return {"actions": self._choose(batch["obs"], None)}

    def forward_exploration(
        self, batch: Mapping[str, torch.Tensor], *, generator: torch.Generator | None = None
    ) -> dict[str, torch.Tensor]:
        """The action, its log-probability and a zero value (what cairn's PPO env runner reads)."""
        with torch.no_grad():
            actions = self._choose(batch["obs"], generator)
            rows = actions.shape[0]
            return {
                "actions": actions,
                "action_logp": torch.full((rows,), self._logp()),
                "vf_preds": torch.zeros(rows),
            }

    def forward_train(self, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Never called: leave this module out of ``policies_to_train`` (as in RLlib)."""
        raise NotImplementedError(f"{type(self).__name__}: Should not be trained!")


class RandomRLModule(_ActsWithoutLearning):
    """RLlib's ``RandomRLModule``: a uniformly random action (discrete action spaces)."""

    def _choose(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return torch.randint(0, self.num_actions, (obs.shape[0],), generator=generator)

    def _logp(self) -> float:
        return -math.log(self.num_actions)


class AlwaysSameHeuristicRLM(_ActsWithoutLearning):
    """RLlib's ``AlwaysSameHeuristicRLM``: always plays the same move.

    RLlib's picks a random first move per episode (its env observes "no move yet" after a
    reset) and repeats it; cairn's ``RockPaperScissors`` observes rock after a reset (as
    RLlib's own env class) and cairn's modules keep no per-episode state, so this one
    always plays rock.
    """

    def _choose(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        return torch.zeros(obs.shape[0], dtype=torch.int64)


class BeatLastHeuristicRLM(_ActsWithoutLearning):
    """RLlib's ``BeatLastHeuristicRLM``: plays what beats the opponent's last move.

    The observation is the opponent's last move one-hot (cairn's ``RockPaperScissors``,
    which observes rock after a reset: the first move is paper; RLlib's first move is random).
    """

    def _choose(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        last = obs.reshape(obs.shape[0], -1)[:, :3].argmax(dim=1)
        # rock (0) -> paper (1), paper (1) -> scissors (2), scissors (2) -> rock (0)
        return (last + 1) % 3
