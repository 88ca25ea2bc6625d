"""RLlib's ``ray.rllib.utils.framework`` helpers that torch scripts use: ``try_import_torch``, ``convert_to_tensor``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

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

    RLlib's rules: :func:`cairn.rl.utils.torch_utils.convert_to_torch_tensor` (floats become float32).

    Args:
        data: The (nested) data.
        framework: ``"torch"``, the only framework cairn has.
        device: A torch device for the tensors (default: the CPU).

    Raises:
        ValueError: Another framework.
    """
    if framework != "torch":
        raise ValueError(f"convert_to_tensor(framework={framework!r}): cairn.rl is torch only.")
    from cairn.rl.utils.torch_utils import convert_to_torch_tensor

    return convert_to_torch_tensor(data, device=device)
