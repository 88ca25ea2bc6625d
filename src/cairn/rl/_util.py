"""Small helpers shared by the RL components."""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

import numpy as np
import torch

__all__ = ["COMPONENT_NAME_RE", "Names", "clone_tree"]

Names = str | Collection[str] | None
"""What ``get_state`` accepts for ``components`` and ``not_components``."""

COMPONENT_NAME_RE = re.compile(r"^(?!\.{1,2}$)[A-Za-z0-9_.\-]+$")
"""A valid component name: one path segment, not ``.`` or ``..``."""


def clone_tree(tree: Any) -> Any:
    """A deep copy of a state tree: tensors and arrays are copied, containers rebuilt.

    Used so that a state handed out by ``get_state`` never aliases live buffers
    that training goes on changing (an async save must see a snapshot).
    """
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, np.ndarray):
        return tree.copy()
    if isinstance(tree, dict):
        return {k: clone_tree(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [clone_tree(v) for v in tree]
    if isinstance(tree, tuple):
        return tuple(clone_tree(v) for v in tree)
    return tree
