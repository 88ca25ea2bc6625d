"""The algorithms cairn ships, in one table: where each one's classes live.

``from cairn.rl import PPO`` (the lazy names of :mod:`cairn.rl`), ``cairn train --algo``
and ``cairn evaluate`` all read :data:`ALGORITHMS`; nothing here imports an algorithm
until :meth:`CatalogEntry.load` is called, so reading the table costs no torch import.

Adding an algorithm: write its package under ``cairn/rl/algorithms/`` (config,
learner, default module, algorithm, as ``ppo/`` does), add one :class:`CatalogEntry`
below, and its names to ``cairn.rl.__all__``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cairn.rl.algorithms.algorithm import Algorithm
    from cairn.rl.config.algorithm_config import AlgorithmConfig

__all__ = ["ALGORITHMS", "CatalogEntry", "algorithm_of_class", "get_trainable_cls"]


@dataclass(frozen=True)
class CatalogEntry:
    """One algorithm: its ``--algo`` name and the modules and names of its classes.

    Attributes:
        name: The name ``cairn train --algo`` takes (lower case).
        module: The module of the algorithm class and its config class.
        algorithm: The algorithm class's name in ``module``.
        config: The config class's name in ``module``.
        learner_module: The module of the learner class (the loss).
        learner: The learner class's name.
        default_module_module: The module of the default RLModule class.
        default_module: The default RLModule class's name.
    """

    name: str
    module: str
    algorithm: str
    config: str
    learner_module: str
    learner: str
    default_module_module: str
    default_module: str

    def homes(self) -> dict[str, str]:
        """Public name -> the module that defines it, for :mod:`cairn.rl`'s lazy names."""
        return {
            self.algorithm: self.module,
            self.config: self.module,
            self.learner: self.learner_module,
            self.default_module: self.default_module_module,
        }

    def load(self) -> tuple[type[Algorithm], type[AlgorithmConfig]]:
        """Import the algorithm (torch, gymnasium and the whole training stack) and return its two classes."""
        module = importlib.import_module(self.module)
        algorithm: type[Algorithm] = getattr(module, self.algorithm)
        config: type[AlgorithmConfig] = getattr(module, self.config)
        return algorithm, config


def _entry(name: str, algorithm: str, *, learner: str, default_module: str) -> CatalogEntry:
    """The entry of an algorithm laid out as RLlib lays them out: ``algorithms/<name>/<name>.py`` and so on."""
    package = f"cairn.rl.algorithms.{name}"
    return CatalogEntry(
        name=name,
        module=f"{package}.{name}",
        algorithm=algorithm,
        config=f"{algorithm}Config",
        learner_module=f"{package}.{name}_learner",
        learner=learner,
        default_module_module=f"{package}.default_{name}_rl_module",
        default_module=default_module,
    )


ALGORITHMS: Mapping[str, CatalogEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            _entry("ppo", "PPO", learner="PPOLearner", default_module="DefaultPPORLModule"),
            _entry("dqn", "DQN", learner="DQNLearner", default_module="DefaultDQNRLModule"),
            _entry("sac", "SAC", learner="SACLearner", default_module="DefaultSACRLModule"),
        )
    }
)
"""``--algo`` name -> :class:`CatalogEntry`, in the order ``cairn train --help`` lists them."""


def algorithm_of_class(class_path: str) -> CatalogEntry | None:
    """The entry whose algorithm a checkpoint's recorded class (``"module:Class"``) is, or None.

    Only the module is compared, as checkpoints record the class that wrote them
    (``cairn.rl.algorithms.ppo.ppo:PPO``); a user's subclass elsewhere matches nothing.
    """
    module = class_path.partition(":")[0]
    return next((entry for entry in ALGORITHMS.values() if entry.module == module), None)


def get_trainable_cls(name: str) -> type[Algorithm]:
    """The algorithm class of ``name`` (``"PPO"``, ``"DQN"``, ``"SAC"``, any case): RLlib's
    ``ray.tune.registry.get_trainable_cls``, as RLlib's example scripts call it
    (``get_trainable_cls("PPO").get_default_config()``).

    Raises:
        ValueError: No algorithm of that name (the message lists cairn's).
    """
    entry = ALGORITHMS.get(name.lower()) if isinstance(name, str) else None
    if entry is None:
        names = ", ".join(repr(e.algorithm) for e in ALGORITHMS.values())
        raise ValueError(f"No algorithm {name!r:.80}: cairn's are {names}.")
    return entry.load()[0]
