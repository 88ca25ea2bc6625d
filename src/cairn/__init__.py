"""cairn: safe, verified, exact-resume checkpoints for reinforcement learning.

``import cairn`` stays light: it never imports torch, gymnasium or ray. The RL
stack lives in :mod:`cairn.rl`.
"""

from cairn._version import __version__
from cairn.checkpointable import Checkpointable
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ComponentNotFoundError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    UnsafeCheckpointError,
)
from cairn.manager import CheckpointInfo, CheckpointManager
from cairn.manifest import FORMAT_VERSION
from cairn.registry import register_class_alias, register_type
from cairn.tools import verify_checkpoint

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointNotFoundError",
    "Checkpointable",
    "ComponentNotFoundError",
    "CorruptCheckpointError",
    "IncompatibleCheckpointError",
    "UnsafeCheckpointError",
    "__version__",
    "register_class_alias",
    "register_type",
    "verify_checkpoint",
]
