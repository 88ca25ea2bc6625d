"""Fixtures every test folder may use."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real local Ray cluster for the whole session (``ray.init(num_cpus=2)``, small object store).

    Starting one takes ~10 s here, so every Ray test (distributed, RLlib, Tune) shares it.
    The workers get ``tests/`` on their ``PYTHONPATH`` (pytest's ``pythonpath``), so that
    classes of the test helpers that a config names (callbacks) are found there too.
    """
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'cairn-rl[ray]')")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # The workers' temp folders share a parent of this session's own: the first worker to
        # start Ray claims it there, and a second one is a test outside the Ray group.
        claim = tmp_path_factory.getbasetemp().parent / "ray_cluster.worker"
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pytest.fail(
                f"xdist worker {os.environ['PYTEST_XDIST_WORKER']} would start a second Ray cluster "
                f"({claim.read_text()} has one): a test that asks for ray_cluster at run time must carry "
                f'pytest.mark.xdist_group("{RAY_GROUP}") (tests/conftest.py)'
            )
        os.write(fd, os.environ["PYTEST_XDIST_WORKER"].encode())
        os.close(fd)
    if not ray.is_initialized():
        from ray_session import init_test_ray

        init_test_ray(ray)
    yield ray
    ray.shutdown()


#: The ``xdist_group`` of every test on the session's Ray cluster: under ``pytest -n 2 --dist loadgroup``
#: they all run on one worker, so that one machine holds one Ray cluster (two would share 2 CPUs,
#: the object store's shared memory and Ray's port and lock files).
RAY_GROUP = "ray_cluster"  # the fixture's name, which a test can mark itself with


@pytest.fixture(autouse=True)
def _stamps_settle_in_2_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Local stamps settle in the cautious 2 s, as on a filesystem cairn does not know.

    On a local disk a stamp settles within a few clock ticks (cairn.storage.local._settle_ns),
    so whether back-to-back saves of a test link a file unread, and so which checkpoints
    retention keeps, would depend on how fast the machine ran. Tests of that rule set it.
    """
    import cairn.storage.local
    from cairn.storage.base import SETTLE_NS

    monkeypatch.setattr(cairn.storage.local, "_settle_ns", lambda _st: SETTLE_NS)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Tests marked ``loose_files`` save each small file of a folder as its own file (no ``packed.bin``).

    Their tests tamper with one file (a hostile ``state.msgpack`` or ``metadata.json``, a
    swapped ``tensors.safetensors``) to test the reader's defences against it, which stand for
    every checkpoint written before packing (format 3 without packs, formats 1 and 2). The
    packed layout has its own hostile tests (tests/storage/test_storage_hostile.py, "pack").
    Set around the whole test, so that its module's fixtures (a checkpoint saved once) see it too.
    """
    import cairn._save

    before = cairn._save.PACK_SMALL_FILES
    if item.get_closest_marker("loose_files") is not None:
        cairn._save.PACK_SMALL_FILES = False
    try:
        yield
    finally:
        cairn._save.PACK_SMALL_FILES = before


# tryfirst: pytest-xdist's worker reads the marks in its own hook of this name (which would run first).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test that uses ``ray_cluster`` in :data:`RAY_GROUP` (a test that asks for it only at
    run time, ``request.getfixturevalue``, carries ``pytest.mark.xdist_group(RAY_GROUP)`` itself)."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(RAY_GROUP))


#: The modules whose counts a folder's conftest prints at the end of the session, by folder.
#: Under pytest-xdist the counts grow in the workers while only the controller prints (and it
#: collects nothing, so those conftests are not loaded there): each worker hands its counts over
#: (``export``) and the controller adds them up (``merge``) and prints them (``terminal_summary``).
SUMMARIES = {"storage_tally": "storage", "fuzz_harness": "fuzz"}


def _summary_module(name: str) -> Any:
    folder = str(Path(__file__).resolve().parent / SUMMARIES[name])
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand the summaries' counts to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is None:
        return
    for name in SUMMARIES:
        if name in sys.modules:
            output[name] = sys.modules[name].export()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """In the xdist controller: add up a finished worker's counts."""
    for name in SUMMARIES:
        if name in getattr(node, "workeroutput", {}):
            _summary_module(name).merge(node.workeroutput[name])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """In the xdist controller: print the summed counts (each module prints once per session)."""
    for name in SUMMARIES:
        if name in sys.modules:
            sys.modules[name].terminal_summary(terminalreporter)
