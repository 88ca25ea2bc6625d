"""Fixtures of the fuzz suite: one work folder, the templates and one worker process per session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fuzz_harness
import pytest

pytest.importorskip("torch")
pytest.importorskip("gymnasium")


@pytest.fixture(scope="session")
def fuzz_workdir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A folder for the templates, the cases and the worker's log."""
    return str(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="session")
def fuzz_templates(fuzz_workdir: str) -> dict[str, Any]:
    """The checkpoints to mutate, by name (the fuzz tree is written here, before the worker starts)."""
    import fuzz_components

    return fuzz_components.templates(fuzz_workdir)


@pytest.fixture(scope="session")
def fuzz_worker(fuzz_workdir: str, fuzz_templates: dict[str, Any]) -> Iterator[fuzz_harness.WorkerClient]:
    """The worker process that runs the loads (restarted after a hang, a crash or a tainting import)."""
    client = fuzz_harness.WorkerClient(fuzz_workdir)
    yield client
    client.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How many cases each fuzz test ran, and the classes of what it found."""
    fuzz_harness.terminal_summary(terminalreporter)
