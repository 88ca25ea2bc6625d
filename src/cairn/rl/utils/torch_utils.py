"""RLlib's ``ray.rllib.utils.torch_utils`` helpers at RLlib's path: tensors from nested data, copies, gradient clipping.

For code written against RLlib. cairn's learners clip with torch's own
``clip_grad_norm_`` (``max_grad_norm``, a global norm); :func:`clip_gradients` is
RLlib's helper with its three modes over a dict of gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

__all__ = ["clip_gradients", "compute_global_norm", "convert_to_torch_tensor", "copy_torch_tensors"]

CLIP_MODES = ("value", "norm", "global_norm")
"""RLlib's ``grad_clip_by`` values."""

_NORM_BOUND = 10e8
"""An infinite (overflowed) norm counts as this much, as in RLlib, so that clipping still scales by a finite factor."""


def _map_nested(fn: Callable[[Any], Any], data: Any) -> Any:
    """``data`` with ``fn`` applied to each leaf, through dicts, lists, tuples and named tuples."""
    if isinstance(data, Mapping):
        return {key: _map_nested(fn, value) for key, value in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map_nested(fn, value) for value in data))
    if isinstance(data, tuple | list):
        return type(data)(_map_nested(fn, value) for value in data)
    return fn(data)


def convert_to_torch_tensor(x: Any, device: str | torch.device | None = None, pin_memory: bool = False) -> Any:
    """``x`` (numbers and arrays, nested in dicts, lists and tuples) with every leaf a torch tensor (RLlib's).

    None stays None; numpy arrays of strings or objects stay as they are; a tensor that
    is already float32 (or not floating) and on ``device`` is returned itself. Floats
    become float32 (float16 stays), as in RLlib.

    Args:
        x: The (nested) data.
        device: The device of the tensors (default: the CPU).
        pin_memory: Pin the tensors' memory when ``device`` is a CUDA device (faster copies to it).
    """
    target = torch.device(device) if device is not None else torch.device("cpu")
    to_cuda = target.type == "cuda" and torch.cuda.is_available()

    def convert(item: Any) -> Any:
        if item is None:
            return None
        if isinstance(item, torch.Tensor):
            tensor = item
        elif isinstance(item, np.ndarray):
            if item.dtype == object or item.dtype.type is np.str_:
                return item
            # A read-only array (an env's, say) is shared, not copied; torch warns about that.
            tensor = torch.from_numpy(item) if item.flags.writeable else torch.from_numpy(item.copy())
        else:
            tensor = torch.from_numpy(np.asarray(item))
        if tensor.is_floating_point() and tensor.dtype not in (torch.float32, torch.float16):
            tensor = tensor.float()
        if pin_memory and to_cuda:
            tensor = tensor.pin_memory()
        return tensor.to(target, non_blocking=to_cuda)

    return _map_nested(convert, x)


def copy_torch_tensors(x: Any, device: str | torch.device | None = None) -> Any:
    """``x`` with every tensor copied (detached, dtype kept), on ``device`` if given (RLlib's).

    Other leaves are kept as they are.
    """

    def copy(item: Any) -> Any:
        if not isinstance(item, torch.Tensor):
            return item
        if device is None:
            return item.detach().clone()
        return item.detach().to(device, copy=True)

    return _map_nested(copy, x)


def compute_global_norm(gradients_list: list[torch.Tensor | None]) -> torch.Tensor:
    """The L2 norm of all the tensors together (0 for none); an overflowing norm counts as ``10e8`` (RLlib's)."""
    norms = [
        g.detach().norm(2).nan_to_num(neginf=-_NORM_BOUND, posinf=_NORM_BOUND) for g in gradients_list if g is not None
    ]
    if not norms:
        return torch.tensor(0.0)
    total: torch.Tensor = torch.stack(norms).norm(2).nan_to_num(neginf=-_NORM_BOUND, posinf=_NORM_BOUND)
    return total


def clip_gradients(
    gradients_dict: dict[Any, torch.Tensor | None],
    *,
    grad_clip: float | None = None,
    grad_clip_by: str = "value",
) -> torch.Tensor | None:
    """Clip the gradients of ``gradients_dict`` in place (RLlib's).

    ``grad_clip_by="value"``: each entry into ``[-grad_clip, grad_clip]``; ``"norm"``: each
    tensor scaled down to an L2 norm of at most ``grad_clip``; ``"global_norm"``: all
    scaled by one factor so that their joint L2 norm is at most ``grad_clip``.

    Returns:
        The global norm before clipping with ``"global_norm"``, else None (also when
        ``grad_clip`` is None: nothing is clipped).

    Raises:
        ValueError: ``grad_clip_by`` is none of ``value``, ``norm``, ``global_norm``.
    """
    if grad_clip is None:
        return None
    if grad_clip_by not in CLIP_MODES:
        raise ValueError(f"clip_gradients: grad_clip_by={grad_clip_by!r} must be one of {list(CLIP_MODES)}.")
    if grad_clip_by == "value":
        for key, grad in gradients_dict.items():
            gradients_dict[key] = None if grad is None else torch.clip(grad, -grad_clip, grad_clip)
        return None
    if grad_clip_by == "norm":
        for grad in gradients_dict.values():
            if grad is not None:
                norm = grad.detach().norm(2).nan_to_num(neginf=-_NORM_BOUND, posinf=_NORM_BOUND)
                if norm > grad_clip:
                    grad.detach().mul_(grad_clip / norm)
        return None
    grads = list(gradients_dict.values())
    total_norm = compute_global_norm(grads)
    # One factor in (0, 1] for all: grad_clip / norm when the norm is above the clip, else 1.
    factor = torch.clamp(grad_clip / torch.clamp(total_norm + 1e-6, min=grad_clip), max=1.0)
    for grad in grads:
        if grad is not None:
            grad.detach().mul_(factor.to(grad.device))
    return total_norm
