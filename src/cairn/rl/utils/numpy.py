"""RLlib's ``ray.rllib.utils.numpy.convert_to_numpy`` at RLlib's path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["convert_to_numpy"]


def convert_to_numpy(x: Any) -> Any:
    """``x`` with every torch tensor a numpy array (detached, on the CPU), through dicts, lists and tuples (RLlib's).

    Other leaves (numbers, arrays, None) are returned as they are.
    """
    if isinstance(x, Mapping):
        return {key: convert_to_numpy(value) for key, value in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(convert_to_numpy(value) for value in x))
    if isinstance(x, tuple | list):
        return type(x)(convert_to_numpy(value) for value in x)
    if type(x).__module__.startswith("torch") and hasattr(x, "detach"):
        array: np.ndarray[Any, Any] = x.detach().cpu().numpy()
        return array
    return x
