"""RLlib's ``ray.rllib.utils`` names that code imports from the package itself (``from ... import override``)."""

from cairn.rl.utils.annotations import override

__all__ = ["override"]
