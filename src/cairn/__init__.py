"""cairn: safe, verified, exact-resume checkpoints for reinforcement learning.

``import cairn`` stays light: it never imports torch, gymnasium or ray. The RL
stack lives in :mod:`cairn.rl`.
"""

from typing import TYPE_CHECKING, Any

from cairn._version import __version__
from cairn.checkpointable import Checkpointable
from cairn.errors import (
    CheckpointError,
    CheckpointNotFoundError,
    ComponentNotFoundError,
    CorruptCheckpointError,
    IncompatibleCheckpointError,
    MissingCallableError,
    SignatureError,
    UnreadableCheckpointError,
    UnsafeCheckpointError,
)
from cairn.manifest import FORMAT_VERSION
from cairn.registry import register, register_class_alias, register_type

if TYPE_CHECKING:
    from cairn.manager import CheckpointInfo, CheckpointManager
    from cairn.signing import sign_checkpoint, verify_signature
    from cairn.tools import verify_checkpoint

# Names whose modules need numpy are loaded on first access, so that `import cairn`
# costs a few milliseconds (numpy alone is ~0.1 s); the engine imports it when used.
_LAZY = {
    "CheckpointInfo": "cairn.manager",
    "CheckpointManager": "cairn.manager",
    "verify_checkpoint": "cairn.tools",
    # cairn.signing imports `cryptography` only inside its functions, when a key is used.
    "sign_checkpoint": "cairn.signing",
    "verify_signature": "cairn.signing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cairn' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "MissingCallableError",
    "SignatureError",
    "UnreadableCheckpointError",
    "UnsafeCheckpointError",
    "__version__",
    "register",
    "register_class_alias",
    "register_type",
    "sign_checkpoint",
    "verify_checkpoint",
    "verify_signature",
]
