"""cairn.rl.utils.torch_utils: RLlib's clip modes, copies and conversions, beyond RLlib's own test of them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cairn.rl.utils.framework import convert_to_tensor
from cairn.rl.utils.torch_utils import clip_gradients, compute_global_norm, convert_to_torch_tensor, copy_torch_tensors


def _grads() -> dict[str, torch.Tensor | None]:
    return {"a": torch.tensor([3.0, -4.0]), "b": torch.tensor([0.5]), "none": None}


def test_clip_by_value_norm_and_global_norm() -> None:
    grads = _grads()
    assert clip_gradients(grads, grad_clip=1.0, grad_clip_by="value") is None
    assert torch.equal(grads["a"], torch.tensor([1.0, -1.0])) and grads["none"] is None

    grads = _grads()
    clip_gradients(grads, grad_clip=1.0, grad_clip_by="norm")
    # |a| = 5 is scaled to 1; |b| = 0.5 is under the clip and stays.
    assert torch.allclose(grads["a"], torch.tensor([0.6, -0.8])) and torch.equal(grads["b"], torch.tensor([0.5]))

    grads = _grads()
    norm = clip_gradients(grads, grad_clip=2.0, grad_clip_by="global_norm")
    assert norm is not None and torch.isclose(norm, torch.tensor(np.sqrt(25.25), dtype=torch.float32))
    assert torch.isclose(compute_global_norm(list(grads.values())), torch.tensor(2.0), atol=1e-5)
    # Under the clip nothing changes; no clip value, no clipping.
    small = {"a": torch.tensor([0.1])}
    clip_gradients(small, grad_clip=2.0, grad_clip_by="global_norm")
    assert torch.allclose(small["a"], torch.tensor([0.1]))
    assert clip_gradients(small, grad_clip=None, grad_clip_by="global_norm") is None
    assert compute_global_norm([]) == 0.0


def test_an_unknown_clip_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="grad_clip_by='l1'"):
        clip_gradients(_grads(), grad_clip=1.0, grad_clip_by="l1")


def test_copies_are_new_tensors_and_conversions_keep_strings() -> None:
    tensor = torch.ones(2, dtype=torch.float64)
    copied = copy_torch_tensors({"t": tensor, "n": 3})
    copied["t"][0] = 5.0
    assert tensor[0] == 1.0 and copied["t"].dtype == torch.float64 and copied["n"] == 3
    strings = np.array(["x", "y"])
    out = convert_to_torch_tensor({"s": strings, "f": np.zeros(2, np.float16), "ro": np.ones(2)})
    assert out["s"] is strings and out["f"].dtype == torch.float16 and out["ro"].dtype == torch.float32
    # RLlib's convert_to_tensor is convert_to_torch_tensor: floats become float32.
    assert convert_to_tensor(np.ones(3)).dtype == torch.float32
