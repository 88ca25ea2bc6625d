"""A user's callbacks for the parity tests, recorded in checkpoints by reference (``parity_callbacks:Class``).

Imported only inside the tests that need callbacks (issue 14 item 7), so the
other tests of the folder do not fail on the missing ``RLlibCallback``.
"""

from __future__ import annotations

from typing import Any

from cairn.rl import RLlibCallback  # type: ignore[attr-defined]

NUM_EPISODES_IN_CALLBACK_LIFETIME = "num_episodes_in_callback"
"""The custom lifetime metric :class:`CountEpisodes` logs."""


class CountEpisodes(RLlibCallback):  # type: ignore[misc]
    """Counts ended episodes in a custom lifetime sum (RLlib's test counts env steps ``on_sample_end``)."""

    def on_episode_end(self, *, metrics_logger: Any, **kwargs: Any) -> None:
        metrics_logger.log_value(NUM_EPISODES_IN_CALLBACK_LIFETIME, 1, reduce="sum", clear_on_reduce=False)
