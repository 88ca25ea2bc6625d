"""RLlib's ``rllib/examples/rl_modules/classes/random_rlm.py``: ``RandomRLModule``, a module that acts at random.

Written as RLlib's: a :class:`~cairn.rl.core.rl_module.torch.TorchRLModule` with no
parameters whose ``_forward`` returns ``Columns.ACTIONS`` only, and whose
``_forward_train`` refuses (leave it out of ``policies_to_train``). It gets no
optimizer and owes the env runner no ``action_logp``/``vf_preds``.

What differs from RLlib's: the draw uses the env runner's RNG
(:attr:`TorchRLModule.sampling_generator`, checkpointed), so a restored run acts
the same (RLlib: ``action_space.sample()``, unseeded); spaces are ``Discrete`` or
a bounded ``Box`` (RLlib: any space).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from cairn.rl.core.columns import Columns
from cairn.rl.core.rl_module.torch.torch_rl_module import TorchRLModule

__all__ = ["RandomRLModule"]


class RandomRLModule(TorchRLModule):
    """Uniformly random actions, for ``Discrete`` and bounded ``Box`` action spaces.

    Raises:
        ValueError: Another action space.
    """

    def setup(self) -> None:
        """Check the action space (no layers to build)."""
        space = self.action_space
        bounded = isinstance(space, gym.spaces.Box) and bool(np.all(np.isfinite(space.low) & np.isfinite(space.high)))
        if not (isinstance(space, gym.spaces.Discrete) or bounded):
            raise ValueError(f"RandomRLModule samples Discrete or bounded Box action spaces, got {space!r}.")

    def _forward(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        rows = int(torch.as_tensor(batch[Columns.OBS]).shape[0])
        generator = self.sampling_generator
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            return {Columns.ACTIONS: int(space.start) + torch.randint(0, int(space.n), (rows,), generator=generator)}
        assert isinstance(space, gym.spaces.Box)  # setup() admitted nothing else
        low = torch.as_tensor(space.low, dtype=torch.float32)
        high = torch.as_tensor(space.high, dtype=torch.float32)
        return {Columns.ACTIONS: low + (high - low) * torch.rand((rows, *space.shape), generator=generator)}

    def _forward_train(self, batch: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        # RandomRLModule should always be configured as non-trainable: policies_to_train (as in RLlib).
        raise NotImplementedError("Random RLModule: Should not be trained!")
