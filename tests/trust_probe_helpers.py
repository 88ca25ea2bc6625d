"""A connector that only the allow-list's "refused, then trusted" test names (tests/rl/test_rl_trust_allowlist.py).

Allowed names last for the process, so a test that checks a refusal first must name a class
no other test registers or builds a config with; this module holds one for that test alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cairn.rl.connectors.connector_v2 import ConnectorV2


class TrustProbe(ConnectorV2):
    """A module-to-env piece that multiplies the actions by ``factor`` (stateless)."""

    def __init__(self, input_observation_space: Any = None, input_action_space: Any = None, *, factor: float = 1.0):
        self.factor = float(factor)
        super().__init__(input_observation_space, input_action_space)

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], episodes: Any, **kwargs: Any) -> Any:
        batch["actions"] = np.asarray(batch["actions"]) * self.factor
        return batch

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        _, kwargs = super().get_ctor_args_and_kwargs()
        return (), {**kwargs, "factor": self.factor}
