"""A component tree with a delegated folder, and a delegate that is not Ray: a worker thread.

The ``worker`` component's real state lives in the delegate (as it would in another
process); the owner's ``worker`` object is only its shape.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

import cairn
from cairn import CheckpointError
from cairn.delegation import DelegatedComponent, DelegatedFolder, LoadedComponent, Waiter, read_folder, write_folder
from cairn.manifest import FileEntry


class Worker(cairn.Checkpointable):
    """Numpy weights and a counter; offers its weights for in-place restores."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.weights = np.zeros(size, dtype=np.float32)
        self.counter = 0

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"weights": self.weights, "counter": self.counter}

    def get_state_buffers(self) -> dict[str, Any]:
        return {"weights": self.weights}

    def set_state(self, state: dict[str, Any]) -> None:
        if "weights" in state:
            np.copyto(self.weights, state["weights"])
        self.counter = state.get("counter", self.counter)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.size,), {}


class FailingWrite(CheckpointError):
    """The delegate's injected failure."""


class ThreadDelegate:
    """Holds the real worker and writes and reads its folder on a thread of its own."""

    restores_local_copy = False

    def __init__(self, size: int) -> None:
        self.held = Worker(size)  # the real state, as in another process
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="delegate")
        self.pending: LoadedComponent | None = None
        self.fail_next_save = False
        self.calls: list[str] = []

    def start_save(self, folder: DelegatedFolder, *, allow_pickle: bool) -> Waiter:
        self.calls.append("save")
        # Taken now: the owner may go on changing the worker as soon as this returns.
        state = {"weights": self.held.weights.copy(), "counter": self.held.counter}
        fail, self.fail_next_save = self.fail_next_save, False

        def write() -> FileEntry:
            entry = write_folder(self.held, folder, allow_pickle=allow_pickle, state=state)
            if fail:  # mid-save: the folder is written, the save is not done
                raise FailingWrite(f"the worker thread failed while writing {folder.uri()}")
            return entry

        return self.pool.submit(write).result

    def start_load(self, folder: DelegatedFolder, *, component: str | None, allow_pickle: bool) -> Waiter:
        self.calls.append("load")

        def read() -> None:
            self.pending = read_folder(self.held, folder, component=component, allow_pickle=allow_pickle)

        return self.pool.submit(read).result

    def finish_load(self, *, apply: bool) -> None:
        self.calls.append("apply" if apply else "drop")
        pending, self.pending = self.pending, None
        if apply and pending is not None:
            self.pool.submit(pending.apply).result()


class Owner(cairn.Checkpointable):
    """A step counter, a part of its own (``local``), and a delegated ``worker``."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.step = 0
        self.local = Worker(size)
        self.worker_shape = Worker(size)
        self.delegate = ThreadDelegate(size)

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [("local", self.local), ("worker", self.worker_shape)]

    def get_delegated_components(self) -> dict[str, DelegatedComponent]:
        return {"worker": self.delegate}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        state: dict[str, Any] = {"step": self.step}
        if self._check_component("local", components, not_components):
            state["local"] = self.local.get_state()
        if self._check_component("worker", components, not_components):
            state["worker"] = self.delegate.held.get_state()  # gathered: only for state=... saves
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        self.step = state.get("step", self.step)
        if "local" in state:
            self.local.set_state(state["local"])
        if "worker" in state:
            self.delegate.held.set_state(state["worker"])

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.size,), {}

    def fill(self, value: float) -> None:
        """Give every part recognisable values."""
        self.step = int(value)
        self.local.weights[:] = value
        self.local.counter = int(value)
        self.delegate.held.weights[:] = value + 0.5
        self.delegate.held.counter = int(value) + 100

    def values(self) -> tuple[int, list[float], list[float], int, list[float]]:
        held = self.delegate.held
        shape = self.worker_shape.weights.tolist()
        return self.step, self.local.weights.tolist(), held.weights.tolist(), held.counter, shape
