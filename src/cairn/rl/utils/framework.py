"""RLlib's ``ray.rllib.utils.framework`` helpers that torch scripts use: ``try_import_torch``, ``convert_to_tensor``."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["convert_to_tensor", "try_import_torch"]


def try_import_torch(error: bool = False) -> tuple[ModuleType | None, ModuleType | None]:
    """``(torch, torch.nn)`` (RLlib's), or ``(None, None)`` without torch (``error=True``: raise instead).

    Raises:
        ImportError: torch is not installed and ``error`` is True.
    """
    try:
        import torch
        from torch import nn
    except ImportError:
        if error:
            raise ImportError("cairn.rl needs PyTorch: pip install torch.") from None
        return None, None
    return torch, nn


def convert_to_tensor(data: Any, framework: str = "torch", device: Any = None) -> Any:
    """``data`` (numbers, numpy arrays, nested in dicts, lists and tuples) as torch tensors (RLlib's).

    Args:
        data: The (nested) data.
        framework: ``"torch"``, the only framework cairn has.
        device: A torch device for the tensors (default: the CPU).

    Raises:
        ValueError: Another framework.
    """
    if framework != "torch":
        raise ValueError(f"convert_to_tensor(framework={framework!r}): cairn.rl is torch only.")
    import torch

    def convert(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return tuple(convert(v) for v in value)
        if isinstance(value, list):
            return [convert(v) for v in value]
        if isinstance(value, torch.Tensor):
            return value if device is None else value.to(device)
        return torch.as_tensor(np.asarray(value), device=device)

    return convert(data)
