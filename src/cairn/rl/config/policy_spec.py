"""``PolicySpec``: RLlib's value type of ``multi_agent(policies={module_id: PolicySpec(...)})``.

On RLlib's new API stack a policy is a module id; ``PolicySpec()`` (every field left
``None``) only names it, and that is what cairn takes. One that sets only ``config`` (or
RLlib's tuple ``(None, None, None, config)``) gives that module's settings, as
``multi_agent(algorithm_config_overrides_per_module=...)`` does. One that sets a class or
spaces is RLlib's old API stack: cairn refuses it with the new stack's way to say it (a
module's spaces and class in ``rl_module(rl_module_spec=MultiRLModuleSpec(...))``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PolicySpec"]


@dataclass
class PolicySpec:
    """RLlib's ``PolicySpec(policy_class=None, observation_space=None, action_space=None, config=None)``."""

    policy_class: Any = None
    observation_space: Any = None
    action_space: Any = None
    config: Any = None

    @property
    def names_only(self) -> bool:
        """Whether it sets nothing (it only names a module, as on RLlib's new API stack)."""
        return all(v is None for v in (self.policy_class, self.observation_space, self.action_space, self.config))
