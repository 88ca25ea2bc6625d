"""RLlib's ``rllib/examples/rl_modules/classes/rock_paper_scissors_heuristic_rlm.py``: two hand-coded players.

Written as RLlib's: :class:`~cairn.rl.core.rl_module.torch.TorchRLModule` classes without
parameters whose ``_forward`` returns ``Columns.ACTIONS`` only and whose
``_forward_train`` refuses (leave them out of ``policies_to_train``).

What differs from RLlib's: they read cairn's ``RockPaperScissors`` observation (the
opponent's last move one-hot, rock after a reset) and keep no per-episode state,
so ``AlwaysSameHeuristicRLM`` always plays rock (RLlib's draws a first move per
episode and repeats it) and ``BeatLastHeuristicRLM`` opens with paper (RLlib's: random).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule

__all__ = ["AlwaysSameHeuristicRLM", "BeatLastHeuristicRLM"]


class _RockPaperScissorsHeuristic(TorchRLModule):
    """Base of the two players: a Discrete(3) action space, never trained."""

    def setup(self) -> None:
        """Check the action space (no layers to build)."""
        if not (isinstance(self.action_space, gym.spaces.Discrete) and int(self.action_space.n) == 3):
            raise ValueError(
                f"{type(self).__name__} plays rock-paper-scissors: Discrete(3), got {self.action_space!r}."
            )

    def _forward_train(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__}: Should not be trained!")


class AlwaysSameHeuristicRLM(_RockPaperScissorsHeuristic):
    """Always plays the same move (rock)."""

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        rows = int(torch.as_tensor(batch[Columns.OBS]).shape[0])
        return {Columns.ACTIONS: torch.zeros(rows, dtype=torch.int64)}


class BeatLastHeuristicRLM(_RockPaperScissorsHeuristic):
    """Plays what beats the opponent's last move (the observation: that move one-hot)."""

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = torch.as_tensor(batch[Columns.OBS])
        last = obs.reshape(obs.shape[0], -1)[:, :3].argmax(dim=1)
        # rock (0) -> paper (1), paper (1) -> scissors (2), scissors (2) -> rock (0)
        return {Columns.ACTIONS: (last + 1) % 3}
