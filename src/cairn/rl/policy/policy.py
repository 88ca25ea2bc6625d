"""RLlib's ``ray.rllib.policy.policy.PolicySpec``, for ``multi_agent(policies={"p0": PolicySpec(), ...})``.

The class lives in :mod:`cairn.rl.config.policy_spec` (the config floor reads it); this
module re-exports it at RLlib's path.
"""

from __future__ import annotations

from cairn.rl.config.policy_spec import PolicySpec

__all__ = ["PolicySpec"]
