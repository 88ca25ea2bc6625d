"""RLlib's ``@override(ParentClass)`` (``ray.rllib.utils.annotations.override``).

RLlib's code and tests mark methods that override a base class's with it. As in RLlib 2.60,
the class fails to build when it does not subclass the class named in ``@override`` (a
copied method that names the wrong base is caught where it is written); Python reports it
(3.11) as a ``RuntimeError`` from ``__set_name__`` whose cause is the ``OverrideError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["OverrideError", "override"]

F = TypeVar("F", bound=Callable[..., Any])


class OverrideError(TypeError):
    """``@override(Parent)`` in a class that does not subclass ``Parent`` (a ``TypeError``, as RLlib raises)."""


def override(parent_cls: type) -> Callable[[F], F]:
    """Mark a method as overriding ``parent_cls``'s method of the same name.

    Checked when the class is built (RLlib's check, which also runs at class creation).

    Args:
        parent_cls: The class whose method this one overrides.

    Returns:
        A decorator that returns the method unchanged once the owning class is built.

    Raises:
        TypeError: ``parent_cls`` is not a class.
        OverrideError: (when the class is built, as the cause of Python's ``RuntimeError``) the class
            does not subclass ``parent_cls``.
    """
    if not isinstance(parent_cls, type):
        raise TypeError(f"@override({parent_cls!r}): give the parent class, e.g. @override(ConnectorV2).")

    def decorator(method: F) -> F:
        return _OverrideCheck(method, parent_cls)  # type: ignore[return-value]

    return decorator


class _OverrideCheck:
    """Stands in for the method until the class is built, checks its bases, then puts the method back."""

    def __init__(self, method: Callable[..., Any], parent_cls: type) -> None:
        self.method = method
        self.parent_cls = parent_cls

    def __set_name__(self, owner: type, name: str) -> None:
        if not issubclass(owner, self.parent_cls):
            raise OverrideError(
                f"{owner.__qualname__}.{name} is marked @override({self.parent_cls.__qualname__}), which "
                f"{owner.__qualname__} does not subclass: name one of its bases in @override."
            )
        setattr(owner, name, self.method)
