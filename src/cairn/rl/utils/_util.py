"""Small helpers shared by the RL components."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from cairn.manifest import component_name_problem

__all__ = ["Names", "check_component_name"]

Names = str | Collection[str] | None
"""What ``get_state`` accepts for ``components`` and ``not_components``."""


def check_component_name(name: Any, *, what: str) -> None:
    """Raise ``ValueError`` when ``name`` cannot be a component (folder) name.

    The rule itself is :func:`cairn.manifest.component_name_problem`, the one
    that saving applies: an id is refused when it is given, never accepted here
    and then refused by the save.

    Args:
        name: The id (module id, policy id, connector name).
        what: What it names, for the message (``"Module id"``).
    """
    problem = component_name_problem(name)
    if problem is not None:
        raise ValueError(f"{what} {name!r} is not a valid component name: {problem}.")
