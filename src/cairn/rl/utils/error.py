"""RLlib's ``ray.rllib.utils.error``: the error an environment raises when it fails."""

from __future__ import annotations

__all__ = ["EnvError"]


class EnvError(Exception):
    """An environment failed in ``reset()`` or ``step()`` (RLlib's ``EnvError``; the example
    :class:`~cairn.rl.examples.envs.classes.cartpole_crashing.CartPoleCrashing` raises it)."""
