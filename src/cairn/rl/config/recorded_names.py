"""The classes and functions a config names, and the callables a checkpoint could not record (SPEC 8, issue 39).

:class:`RecordedNames` (a base of :class:`~cairn.rl.config.algorithm_config.AlgorithmConfig`)
lists every ``"module:qualname"`` a config records, which a checkpoint's config is checked
against (the allow-list) before anything is built, and the callables it was saved with but
does not hold, which a load takes again by their field names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

from cairn.registry import (
    CONNECTOR_FACTORY,
    MAPPING_FUNCTION,
    MODULE_CLASS,
    Role,
    Unrecorded,
    object_path,
)
from cairn.rl.config.callback_forms import callback_names
from cairn.rl.config.references import CONNECTOR_FIELDS

__all__ = ["RecordedNames"]


class RecordedNames:
    """:meth:`recorded_names` and :meth:`missing_callables` of a config; a base of ``AlgorithmConfig``."""

    def recorded_names(self) -> list[tuple[str, str, Role]]:
        """``(field, "module:qualname", role)`` of every class and function this config names (SPEC 8).

        Connector factories, callbacks classes and functions, a policy mapping
        function given by path, and module classes, also those that
        ``evaluation_config`` and ``algorithm_config_overrides_per_module`` set. A
        checkpoint's config is checked against the allow-list with these before
        anything is built (:func:`cairn.registry.check_recorded_names`).
        """
        config: Any = self  # a dataclass: AlgorithmConfig
        names: list[tuple[str, str, Role]] = []
        for name in CONNECTOR_FIELDS:
            recorded = getattr(config, name, None)
            if isinstance(recorded, Mapping) and not isinstance(recorded.get("ref"), Unrecorded):
                names.append((name, str(recorded.get("ref")), CONNECTOR_FACTORY))
        names.extend((field_name, path, role) for path, field_name, role in callback_names(config))
        if isinstance(config.policy_mapping_fn, str) and ":" in config.policy_mapping_fn:
            names.append(("policy_mapping_fn", config.policy_mapping_fn, MAPPING_FUNCTION))
        spec = config.given_rl_module_spec()
        specs = getattr(spec, "rl_module_specs", None)
        for module_id, one in specs.items() if isinstance(specs, Mapping) else [("", spec)]:
            module_class = getattr(one, "module_class", None)
            if isinstance(module_class, type):
                where = f"rl_module_spec[{module_id!r}].module_class" if module_id else "rl_module_spec.module_class"
                names.append((where, object_path(module_class), MODULE_CLASS))
        for where, overrides in [
            ("evaluation_config", config.evaluation_config),
            *(
                (f"algorithm_config_overrides_per_module[{m!r}]", o)
                for m, o in config.algorithm_config_overrides_per_module.items()
            ),
        ]:
            keys = set(overrides) & {*CONNECTOR_FIELDS, "policy_mapping_fn", "callbacks_class", "rl_module_spec"}
            keys |= {k for k in overrides if isinstance(k, str) and k.startswith("callbacks_on_")}
            if keys:
                inner = replace(
                    config,
                    evaluation_config={},
                    algorithm_config_overrides_per_module={},
                    **{k: overrides[k] for k in keys},
                )
                names.extend(
                    (f"{where}, {field_name}", path, role) for field_name, path, role in inner.recorded_names()
                )
        return names

    def missing_callables(self) -> list[Unrecorded]:
        """The callables this config was saved with but does not hold (read from a checkpoint, not passed again).

        A lambda, closure, bound method or function of a script is recorded only as
        "it existed" (:class:`~cairn.registry.Unrecorded`); the load that reads it back
        takes it again by its field name (``PPO.from_checkpoint(path, policy_mapping_fn=fn)``).
        """
        config: Any = self  # a dataclass: AlgorithmConfig
        found: list[Unrecorded] = []

        def walk(value: Any, depth: int) -> None:
            if isinstance(value, Unrecorded):
                if value.fn is None and value not in found:
                    found.append(value)
            elif depth < 4 and isinstance(value, Mapping):
                for item in value.values():
                    walk(item, depth + 1)
            elif depth < 4 and isinstance(value, list | tuple):
                for item in value:
                    walk(item, depth + 1)

        for f in fields(config):
            walk(getattr(config, f.name), 0)
        return found
