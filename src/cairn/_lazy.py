"""A package's names imported on first use (PEP 562), for the packages that re-export heavy modules.

``import cairn`` stays free of numpy, ``import cairn.rl`` of torch, and the command line's
parsers (the algorithm catalog) of both, while ``cairn.CheckpointManager``,
``cairn.rl.PPO`` and ``cairn.rl.algorithms.PPOConfig`` work as plain attributes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, homes: Mapping[str, str], *, also: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose names ``homes`` maps to their modules.

    A name is imported from its home on first access and then kept in the package's namespace
    (later accesses do not reach ``__getattr__``). ``also``: name -> a module to import with it
    (one that registers something the name's users need).

    Example:
        ``__getattr__, __dir__ = lazy_names(__name__, {"PPO": "cairn.rl.algorithms.ppo.ppo"})``
    """
    namespace = vars(sys.modules[package])
    extra = dict(also or {})

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        if name in extra:
            importlib.import_module(extra[name])
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__
