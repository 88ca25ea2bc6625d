"""LookbackBuffer: RLlib's InfiniteLookbackBuffer index rules over a list (issue 38).

The buffer is ``[4, 5, 6 | 7, 8, 9]``: three items of lookback, then the episode's three.
"""

from __future__ import annotations

import pytest

from cairn.rl.env.lookback_buffer import LookbackBuffer


def _buffer() -> LookbackBuffer:
    return LookbackBuffer([4, 5, 6, 7, 8, 9], lookback=3)


def test_ints_count_from_the_episode_start_or_back_into_the_lookback() -> None:
    buffer = _buffer()
    assert (len(buffer), buffer.get(), buffer.get(0), buffer.get(-1)) == (3, [7, 8, 9], 7, 9)
    assert buffer.get(-1, neg_index_as_lookback=True) == 6
    assert buffer.get([0, -1]) == [7, 9]
    assert buffer.get(-4, neg_index_as_lookback=True, fill=0) == 0  # before the lookback: only fill answers
    with pytest.raises(IndexError, match="give fill= to pad"):
        buffer.get(3)


def test_slices_are_cut_to_the_data_or_padded_with_fill() -> None:
    buffer = _buffer()
    assert buffer.get(slice(-2, 1), neg_index_as_lookback=True) == [5, 6, 7]
    assert buffer.get(slice(1, 5)) == [8, 9]
    assert buffer.get(slice(1, 5), fill=0) == [8, 9, 0, 0]
    assert buffer.get(slice(1, -10, -1), fill=0) == [8, 7, 6, 5, 4, 0, 0, 0]


def test_a_hanging_item_is_the_latest_and_the_last_can_be_left_out() -> None:
    buffer = _buffer()
    assert buffer.get(-1, add_last=10) == 10
    assert buffer.get(-1, ignore_last=True) == 8
    assert buffer.get() == [7, 8, 9]  # "all" is the plain data, as RLlib reads it


def test_set_writes_where_get_reads() -> None:
    buffer = _buffer()
    buffer.set(99, at_indices=-1, neg_index_as_lookback=True)
    buffer.set([98, 97], at_indices=slice(0, 2))
    assert buffer.data == [4, 5, 99, 98, 97, 9]
    with pytest.raises(IndexError, match="give one new item per index"):
        buffer.set([1, 2, 3], at_indices=[0, 1])
