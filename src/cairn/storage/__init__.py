"""Storage: moves bytes, knows nothing of what they mean.

Two strategies for an atomic commit:

* ``LocalStorage`` (a local disk): every file is written into a hidden sibling
  folder, fsynced, and the folder is renamed into place (swapped atomically with
  an existing checkpoint where the kernel allows it).
* ``FsspecStorage`` (object stores, memory, anything fsspec reaches): folders
  cannot be renamed, so the root ``manifest.json`` is written last and is the
  commit marker; readers treat a folder without a valid manifest as absent.
"""

from cairn.storage.base import Storage, resolve_storage
from cairn.storage.fsspec_storage import FsspecStorage
from cairn.storage.local import LocalStorage

__all__ = ["FsspecStorage", "LocalStorage", "Storage", "resolve_storage"]
