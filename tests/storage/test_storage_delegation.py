"""A delegated folder (cairn.delegation) on every backend: local disk, memory:// and S3 (moto).

The delegate (a worker thread) writes its folder into the staging place while
the engine writes the rest; on object stores the root manifest, written last,
commits both, and a failed delegate leaves nothing that loads.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from storage_backends import Backend

from cairn import CheckpointNotFoundError, CorruptCheckpointError, verify_checkpoint
from cairn.manifest import PACK
from delegation_components import FailingWrite, Owner


@pytest.fixture
def owner() -> Iterator[Owner]:
    made = Owner()
    made.fill(1.0)
    yield made
    made.delegate.pool.shutdown()


def test_round_trip_and_corrupt_delegated_file(backend: Backend, owner: Owner) -> None:
    uri = owner.save_to_path(backend.uri("ckpt"), filesystem=backend.fs)
    assert verify_checkpoint(uri, filesystem=backend.fs) == []
    saved = owner.values()
    owner.fill(6.0)
    owner.restore_from_path(uri, filesystem=backend.fs)
    assert owner.values() == saved
    # A flipped byte in the delegate's tensors: nothing applied here nor in the delegate.
    target = backend.path("ckpt", "worker", PACK)
    data = bytearray(backend.fs.cat_file(target))
    data[-1] ^= 0xFF
    backend.fs.pipe_file(target, bytes(data))
    owner.fill(6.0)
    before = owner.values()
    with pytest.raises(CorruptCheckpointError, match="worker"):
        owner.restore_from_path(uri, filesystem=backend.fs)
    assert owner.values() == before


def test_a_delegate_failing_mid_save_commits_nothing(backend: Backend, owner: Owner) -> None:
    owner.delegate.fail_next_save = True
    with pytest.raises(FailingWrite):
        owner.save_to_path(backend.uri("ckpt"), filesystem=backend.fs)
    for where in ("ckpt", "ckpt/worker", "ckpt/local"):
        with pytest.raises(CheckpointNotFoundError):
            Owner().restore_from_path(backend.uri(where), filesystem=backend.fs)
