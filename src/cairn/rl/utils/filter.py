"""RLlib's ``NoFilter`` (``ray.rllib.utils.filter``): the observation filter that changes nothing.

``observation_filter="NoFilter"`` means no filter in cairn's config; this class is
RLlib's object of that name for code that calls filters itself. RLlib's
``MeanStdFilter`` is cairn's connector
(:class:`cairn.rl.connectors.env_to_module.mean_std_filter.MeanStdFilter`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NoFilter"]


class NoFilter:
    """Returns each value as an array (arrays, dicts and tuples as they are); keeps no state."""

    is_concurrent = True

    def __call__(self, x: Any, update: bool = True) -> Any:
        """``x`` itself when an array, dict or tuple, else ``np.asarray(x)``.

        Raises:
            ValueError: ``x`` cannot be made an array (the message shows it).
        """
        if isinstance(x, np.ndarray | dict | tuple):
            return x
        try:
            return np.asarray(x)
        except Exception as err:  # whatever the object's __array__ raises
            raise ValueError(f"Failed to convert to array: {x!r:.200}") from err

    def apply_changes(self, other: NoFilter, *args: Any, **kwargs: Any) -> None:
        """Nothing to merge."""

    def copy(self) -> NoFilter:
        """Itself (it has no state)."""
        return self

    def sync(self, other: NoFilter) -> None:
        """Nothing to sync."""

    def reset_buffer(self) -> None:
        """Nothing to reset."""

    def as_serializable(self) -> NoFilter:
        """Itself."""
        return self
