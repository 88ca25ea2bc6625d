"""The component tree of a checkpointable object: its components, by validated name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cairn.errors import (
    CheckpointError,
    ComponentNotFoundError,
)
from cairn.manifest import (
    component_name_problem,
)

if TYPE_CHECKING:
    from cairn.checkpointable import Checkpointable
    from cairn.delegation import DelegatedComponent


def checkpointable_components(obj: Checkpointable, *, where: str) -> dict[str, Checkpointable]:
    """``obj.get_checkpointable_components()`` as a dict, with every name validated."""
    from cairn.checkpointable import Checkpointable

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
    return out


def find_component(obj: Checkpointable, component: str) -> Checkpointable:
    """The subcomponent of ``obj`` at the ``/``-joined path ``component``."""
    current = obj
    walked: list[str] = []
    for part in component.strip("/").split("/"):
        comps = checkpointable_components(current, where="/".join(walked) or "<root>")
        if part not in comps:
            here = "/".join(walked)
            known = [f"{here}/{n}" if here else n for n in comps]
            raise ComponentNotFoundError(
                f"{type(obj).__qualname__} has no component {component!r}: "
                f"{'/'.join([*walked, part])!r} does not exist. "
                f"Components at that level: {', '.join(known) if known else '(none)'}."
            )
        current = comps[part]
        walked.append(part)
    return current


def component_tree(obj: Checkpointable, prefix: str = "") -> list[str]:
    """Every component path below ``obj``, depth first."""
    paths: list[str] = []
    for name, comp in checkpointable_components(obj, where=prefix or "<root>").items():
        p = f"{prefix}/{name}" if prefix else name
        paths.append(p)
        paths.extend(component_tree(comp, p))
    return paths


def delegated_components(obj: Checkpointable, *, where: str) -> dict[str, DelegatedComponent]:
    """``obj.get_delegated_components()``, each name checked to be one of ``obj``'s components."""
    offered = obj.get_delegated_components()
    if not offered:
        return {}
    comps = checkpointable_components(obj, where=where)
    for name in offered:
        if name not in comps:
            raise CheckpointError(
                f"{type(obj).__qualname__} at {where} delegates the component {name!r}, which is not one of "
                f"its components ({', '.join(comps) or 'none'}). A delegated folder must be a component's "
                "folder: list it in get_checkpointable_components too."
            )
    return dict(offered)


def delegations(obj: Checkpointable, prefix: str = "") -> dict[str, DelegatedComponent]:
    """Component path -> delegate, for every delegated folder below ``obj`` (not below a delegated one)."""
    out: dict[str, DelegatedComponent] = {}
    here = delegated_components(obj, where=prefix or "<root>")
    for name, comp in checkpointable_components(obj, where=prefix or "<root>").items():
        path = f"{prefix}/{name}" if prefix else name
        if name in here:
            out[path] = here[name]
        else:
            out.update(delegations(comp, path))
    return out
