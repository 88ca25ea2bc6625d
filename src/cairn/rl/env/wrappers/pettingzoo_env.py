"""RLlib's import path of the PettingZoo adapter: ``ray.rllib.env.wrappers.pettingzoo_env``.

``from cairn.rl.env.wrappers.pettingzoo_env import ParallelPettingZooEnv`` is the same
class as :class:`cairn.rl.env.pettingzoo_env.ParallelPettingZooEnv` (re-exported, not a
subclass): checkpoints keep recording it as ``cairn.rl.env.pettingzoo_env:ParallelPettingZooEnv``,
the path earlier checkpoints hold. RLlib's ``PettingZooEnv`` (the turn-based AEC adapter) is not
in cairn: wrap an AEC game with PettingZoo's ``aec_to_parallel`` and use this one.
"""

from __future__ import annotations

from cairn.rl.env.pettingzoo_env import ParallelPettingZooEnv

__all__ = ["ParallelPettingZooEnv"]
