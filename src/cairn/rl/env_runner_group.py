"""EnvRunnerGroup: the env runners of an algorithm; one local EnvRunner for now.

The algorithm's checkpoint component ``env_runner`` is the local runner.
Before a save the group merges connector statistics of all runners into the
local one (:meth:`sync_connector_states_to_local`); after a restore it
spreads the local runner's state and the learner's weights to all runners
(:meth:`sync_local_state_to_others`, :meth:`sync_weights`). With one local
runner these are no-ops beyond the weight copy; a Ray version implements the
same methods with remote actors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cairn.rl.env_runner import EnvRunner, SampleBatch

if TYPE_CHECKING:
    from cairn.rl.algorithm import AlgorithmConfig

__all__ = ["EnvRunnerGroup"]


class EnvRunnerGroup:
    """A group of env runners (one local runner).

    Args:
        config: The algorithm config; ``num_env_runners`` must be 0 or 1 (both
            mean one runner in this process).

    Raises:
        NotImplementedError: ``num_env_runners`` > 1 (needs Ray, not supported yet).
    """

    def __init__(self, config: AlgorithmConfig) -> None:
        if config.num_env_runners > 1:
            raise NotImplementedError(
                f"num_env_runners={config.num_env_runners}: more than one env runner needs Ray, "
                "which cairn.rl does not support yet (Ray support is coming); use 0 or 1."
            )
        self.config = config
        self.local_env_runner = EnvRunner(config, worker_index=0)

    @property
    def num_env_runners(self) -> int:
        """How many runners sample (always 1 local runner for now)."""
        return 1

    def sample(self) -> list[dict[str, SampleBatch]]:
        """One rollout from each runner: a list of module id -> batch."""
        return [self.local_env_runner.sample()]

    def get_metrics(self) -> dict[str, float | int]:
        """Episode and counter metrics over all runners."""
        return self.local_env_runner.get_metrics()

    def sync_weights(self, weights: Mapping[str, Any]) -> None:
        """Load module weights (module id -> RLModule state) into every runner."""
        self.local_env_runner.set_weights(weights)

    def sync_connector_states_to_local(self) -> None:
        """Merge the connector statistics of all runners into the local runner."""

    def sync_local_state_to_others(self) -> None:
        """Copy the local runner's connector state and counters to all other runners."""

    def close(self) -> None:
        """Close every runner's environments."""
        self.local_env_runner.close()
