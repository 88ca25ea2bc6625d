"""Everything a save accepts loads again: the memory bound of a state's skeleton (issue 24, finding 3).

The load refuses a ``state.msgpack`` whose decoding would take more than
``cairn._limits.decode_limit`` of its size (SPEC 8); that estimate must not be
above what decoding really takes, and a state that is over the bound is refused
by the save, with the load's reason, instead of being written and never read again.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import pytest

import cairn
from cairn.codec.state import check_skeleton, skeleton_cost
from cairn_test_components import Leaf


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param([{"r": 1} for _ in range(100_000)], id="100k {'r': 1}"),
        pytest.param([{} for _ in range(400_000)], id="400k {}"),
        pytest.param([[i, "ab", -7, 0.5] for i in range(50_000)], id="50k small lists"),
        pytest.param({f"key{i}": {"a": [], "b": {}} for i in range(40_000)}, id="40k nested dicts"),
    ],
)
def test_states_of_many_small_objects_round_trip(tmp_path: Path, extra: Any) -> None:
    # Before: every load said "corrupt or hostile" (the estimate charged 369 bytes for a {"r": 1}
    # that takes 192), although the save had accepted the state.
    leaf = Leaf()
    leaf.extra = extra
    path = leaf.save_to_path(tmp_path / "ck")
    back = Leaf.from_checkpoint(path)
    assert back.extra == extra


def test_a_state_that_no_load_would_accept_is_refused_by_the_save(tmp_path: Path) -> None:
    leaf = Leaf()
    leaf.extra = [[] for _ in range(1_000_000)]  # 1 MB of msgpack, 64 MB of lists
    with pytest.raises(cairn.CheckpointError, match=r"Cannot save the state: decoding the state would take more"):
        leaf.save_to_path(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()
    # The load's verdict on the same bytes, in the same words.
    raw = msgpack.packb({"extra": leaf.extra})
    with pytest.raises(cairn.CorruptCheckpointError, match=r"decoding the state would take more than"):
        check_skeleton(raw, where="state.msgpack")


def test_the_estimate_is_never_below_what_decoding_takes() -> None:
    """The bound holds (SPEC 8): for each shape of record, the estimate covers the memory decoding takes."""
    for one in ({}, [], {"r": 1}, {"ab": [1, 2]}, {i: i for i in range(100)}, "abcdef", "é" * 9, -100, 1.5, 2**40):
        data = msgpack.packb([one] * 20_000, use_bin_type=True)
        tracemalloc.start()
        value = msgpack.unpackb(data, raw=False, strict_map_key=False)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del value
        estimate = skeleton_cost(data, where="x", limit=sys.maxsize)
        # tracemalloc's peak also holds the decoder's own buffers: a few percent.
        assert estimate >= peak * 0.97, (one, estimate, peak)
        # Not a bound so loose that it refuses what fits: within 2x (bigger for strings of cached chars).
        assert estimate <= 2 * peak + 100_000, (one, estimate, peak)
