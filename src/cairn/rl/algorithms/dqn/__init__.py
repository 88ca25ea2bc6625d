"""DQN (RLlib's ``ray.rllib.algorithms.dqn``): ``from cairn.rl.algorithms.dqn import DQN, DQNConfig``.

The names are loaded on first use (PEP 562): importing a submodule of this package
(its learner, its default module) must not import the algorithm, which imports them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DQN", "DQNConfig"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from cairn.rl.algorithms.dqn import dqn as module

        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
