"""The component tree of a checkpointable object: its components, by validated name.

A restore builds one :class:`ComponentNode` tree for its object and passes it
down every phase (verify, decode, upgrade, check, apply), so that each object is
asked for its components once per restore and every phase sees the same objects.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.checkpointable import Checkpointable
from cairn.errors import (
    CheckpointError,
    ComponentNotFoundError,
)
from cairn.manifest import (
    MAX_COMPONENTS,
    component_name_problem,
)

if TYPE_CHECKING:
    from cairn._delegate_protocol import DelegatedComponent


def _join(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def checkpointable_components(obj: Checkpointable, *, where: str) -> dict[str, Checkpointable]:
    """``obj.get_checkpointable_components()`` as a dict, with every name validated."""
    out: dict[str, Checkpointable] = {}
    for name, comp in obj.get_checkpointable_components():
        problem = component_name_problem(name)
        if problem is not None:
            raise CheckpointError(
                f"{type(obj).__qualname__} at {where} has a component named {name!r}, which "
                f"cannot be a folder name: {problem}. Rename the component."
            )
        if name in out:
            raise CheckpointError(f"{type(obj).__qualname__} at {where} lists the component {name!r} twice.")
        if not isinstance(comp, Checkpointable):
            raise CheckpointError(
                f"Component {name!r} of {type(obj).__qualname__} at {where} is a "
                f"{type(comp).__qualname__}, not a cairn.Checkpointable."
            )
        out[name] = comp
        if len(out) > MAX_COMPONENTS:  # a checkpoint that saves must load (see MAX_COMPONENTS)
            raise CheckpointError(
                f"{type(obj).__qualname__} at {where} has more than {MAX_COMPONENTS} components, more than "
                "cairn writes into one folder. Group them under intermediate components."
            )
    return out


def delegated_components(obj: Checkpointable, *, where: str) -> dict[str, DelegatedComponent]:
    """``obj.get_delegated_components()``, each name checked to be one of ``obj``'s components."""
    offered = obj.get_delegated_components()
    if not offered:
        return {}
    return _checked_delegates(obj, offered, checkpointable_components(obj, where=where), where=where)


def _checked_delegates(
    obj: Checkpointable, offered: dict[str, DelegatedComponent], comps: dict[str, Checkpointable], *, where: str
) -> dict[str, DelegatedComponent]:
    for name in offered:
        if name not in comps:
            raise CheckpointError(
                f"{type(obj).__qualname__} at {where} delegates the component {name!r}, which is not one of "
                f"its components ({', '.join(comps) or 'none'}). A delegated folder must be a component's "
                "folder: list it in get_checkpointable_components too."
            )
    return dict(offered)


class ComponentNode:
    """One object of a component tree, with its components asked for and validated once.

    The children are asked for on first use and then kept: a part of the tree
    no phase visits (the local shape of a folder a delegate restores) is never
    asked for, and a part visited by several phases is asked for once.

    Attributes:
        obj: The object.
        path: Its ``/``-joined component path from the root of the tree ("" for the root).
    """

    def __init__(self, obj: Checkpointable, path: str = "") -> None:
        """A node for ``obj`` at ``path`` (a tree's root has the path "" or the path of a delegated folder)."""
        self.obj = obj
        self.path = path
        self._children: dict[str, ComponentNode] | None = None
        self._delegated: dict[str, DelegatedComponent] | None = None

    @property
    def label(self) -> str:
        """The path as messages name it."""
        return self.path or "<root>"

    @property
    def children(self) -> dict[str, ComponentNode]:
        """The object's components by name (``get_checkpointable_components``, validated)."""
        if self._children is None:
            comps = checkpointable_components(self.obj, where=self.label)
            self._children = {name: ComponentNode(comp, _join(self.path, name)) for name, comp in comps.items()}
        return self._children

    @property
    def delegated(self) -> dict[str, DelegatedComponent]:
        """The object's delegated components by name (``get_delegated_components``, checked)."""
        if self._delegated is None:
            offered = self.obj.get_delegated_components()
            self._delegated = (
                _checked_delegates(self.obj, offered, {n: c.obj for n, c in self.children.items()}, where=self.label)
                if offered
                else {}
            )
        return self._delegated

    def find(self, component: str) -> ComponentNode:
        """The node of the subcomponent at the ``/``-joined path ``component`` (relative to this node)."""
        current = self
        walked: list[str] = []
        for part in component.strip("/").split("/"):
            children = current.children
            if part not in children:
                here = "/".join(walked)
                known = [_join(here, n) for n in children]
                raise ComponentNotFoundError(
                    f"{type(self.obj).__qualname__} has no component {component!r}: "
                    f"{'/'.join([*walked, part])!r} does not exist. "
                    f"Components at that level: {', '.join(known) if known else '(none)'}."
                )
            current = children[part]
            walked.append(part)
        return current

    def delegations(self, prefix: str = "") -> dict[str, DelegatedComponent]:
        """Component path (relative to this node) -> delegate, for every delegated folder below it.

        Not below a delegated folder: what lies there is its delegate's.
        """
        out: dict[str, DelegatedComponent] = {}
        here = self.delegated
        for name, child in self.children.items():
            path = _join(prefix, name)
            if name in here:
                out[path] = here[name]
            else:
                out.update(child.delegations(path))
        return out

    def paths(self, prefix: str = "") -> list[str]:
        """Every component path below this node (relative to it), depth first."""
        out: list[str] = []
        for name, child in self.children.items():
            path = _join(prefix, name)
            out.append(path)
            out.extend(child.paths(path))
        return out


def find_component(obj: Checkpointable, component: str) -> Checkpointable:
    """The subcomponent of ``obj`` at the ``/``-joined path ``component``."""
    return ComponentNode(obj).find(component).obj


def component_tree(obj: Checkpointable, prefix: str = "") -> list[str]:
    """Every component path below ``obj``, depth first (each prefixed with ``prefix``)."""
    return ComponentNode(obj, prefix).paths(prefix)


def delegations(obj: Checkpointable, prefix: str = "") -> dict[str, DelegatedComponent]:
    """Component path -> delegate, for every delegated folder below ``obj`` (not below a delegated one)."""
    return ComponentNode(obj, prefix).delegations(prefix)
