"""RLlib 2.60's tests of its Stats classes (``rllib/utils/metrics/stats`` tests), on cairn.

One test per RLlib test, same name, same cases and expected values; written for cairn from
RLlib's (Apache-2.0) with ``ray.rllib`` -> ``cairn.rl``. The ``use_gpu=True`` variants skip
without CUDA, as in RLlib. Failures and their reasons: docs/rllib_parity.md.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pytest

from cairn.rl.utils.metrics.stats import (
    EmaStats,
    ItemSeriesStats,
    ItemStats,
    LifetimeSumStats,
    MaxStats,
    MeanStats,
    MinStats,
    PercentilesStats,
    SeriesStats,
    StatsBase,
    SumStats,
)
from cairn.rl.utils.test_utils import check

torch = pytest.importorskip("torch")

TORCH_DTYPES = ["float32", "float64", "int32", "int64", "float16"]


def get_device(use_gpu: bool) -> Any:
    if use_gpu:
        if not torch.cuda.is_available():
            pytest.skip("GPU not available")
        return torch.device("cuda")
    return torch.device("cpu")


@pytest.mark.parametrize(
    ("stats_class", "init_kwargs_list", "setup_values", "expected_reduced"),
    [
        (ItemStats, [{}], [5], 5),
        (MeanStats, [{"window": 4}, {}], [2, 4, 6], 4.0),
        (MaxStats, [{"window": 4}, {}], [1, 5, 3], 5),
        (MinStats, [{"window": 4}, {}], [1, 5, 3], 1),
        (SumStats, [{"window": 4}, {}], [1, 5, 3], 9),
        (LifetimeSumStats, [{}], [10, 20], 30),
        (EmaStats, [{"ema_coeff": 0.01}], [10, 20], 10.1),
        (ItemSeriesStats, [{"window": 4}], [1, 2, 3, 4, 5], [2, 3, 4, 5]),
    ],
)
@pytest.mark.parametrize("use_gpu", [False, True])
def test_peek_and_reduce(
    stats_class: type[StatsBase],
    init_kwargs_list: list[dict[str, Any]],
    setup_values: list[Any],
    expected_reduced: Any,
    use_gpu: bool,
) -> None:
    for init_kwargs in init_kwargs_list:
        stats = stats_class(**init_kwargs)
        for value in setup_values:
            stats.push(value)
        check(stats.peek(), expected_reduced)
        check(stats.reduce(compile=True), expected_reduced)
        if stats_class is not LifetimeSumStats:
            check(stats.peek(), None if stats_class is ItemStats else np.nan)

        device = get_device(use_gpu)
        for dtype_name in TORCH_DTYPES:
            dtype = getattr(torch, dtype_name)
            decimals = 1 if (dtype_name == "float16" and stats_class is EmaStats) else 5
            tensor_stats = stats_class(**init_kwargs)
            for value in setup_values:
                tensor_stats.push(torch.tensor(value, dtype=dtype, device=device))
            if isinstance(tensor_stats, SeriesStats | PercentilesStats):
                for value in tensor_stats.values:
                    if isinstance(value, torch.Tensor):
                        assert value.device.type == device.type
            elif isinstance(tensor_stats, EmaStats) and isinstance(tensor_stats._value, torch.Tensor):
                assert tensor_stats._value.device.type == device.type
            elif isinstance(tensor_stats, LifetimeSumStats) and isinstance(tensor_stats._lifetime_sum, torch.Tensor):
                assert tensor_stats._lifetime_sum.device.type == device.type
            result = tensor_stats.reduce(compile=True)
            if stats_class is ItemSeriesStats:
                assert isinstance(result, list) and isinstance(result[0], int | float)
            else:
                assert isinstance(result, int | float)
            check(result, expected_reduced, decimals=decimals)

            if stats_class not in (ItemSeriesStats, ItemStats):
                with_nan = stats_class(**init_kwargs)
                for value in setup_values:
                    with_nan.push(torch.tensor(value, dtype=dtype, device=device))
                with_nan.push(torch.tensor(float("nan"), device=device))
                result_with_nan = with_nan.reduce(compile=True)
                assert isinstance(result_with_nan, int | float)
                check(result_with_nan, expected_reduced, decimals=decimals)


@pytest.mark.parametrize("use_gpu", [False, True])
def test_peek_and_reduce_percentiles_stats(use_gpu: bool) -> None:
    values = list(range(1, 11))
    stats = PercentilesStats(percentiles=[0, 50, 100], window=10)
    for value in values:
        stats.push(value)
    check(stats.peek(compile=False), values)
    check(stats.peek(compile=True), {0: 1, 50: 5.5, 100: 10})
    check(stats.reduce(compile=True), {0: 1, 50: 5.5, 100: 10})

    device = get_device(use_gpu)
    for dtype_name in TORCH_DTYPES:
        tensor_stats = PercentilesStats(percentiles=[0, 50, 100], window=10)
        for value in values:
            tensor_stats.push(torch.tensor(value, dtype=getattr(torch, dtype_name), device=device))
        for value in tensor_stats.values:
            if isinstance(value, torch.Tensor):
                assert value.device.type == device.type
        result = tensor_stats.reduce(compile=True)
        check(result[0], 1, decimals=1)
        check(result[50], 5.5, decimals=1)
        check(result[100], 10, decimals=1)


def test_peek_and_reduce_item_series_stats() -> None:
    letters = list("abcdefghij")
    stats = ItemSeriesStats(window=10)
    for letter in letters:
        stats.push(letter)
    assert stats.peek(compile=False) == letters
    assert stats.peek(compile=True) == letters
    assert stats.reduce(compile=True) == letters


@pytest.mark.parametrize(
    ("stats_class", "init_kwargs", "test_values"),
    [
        (ItemStats, {}, 123),
        (MeanStats, {"window": 5}, [1, 2, 3]),
        (MaxStats, {"window": 5}, [1, 5, 3]),
        (MinStats, {"window": 5}, [5, 1, 3]),
        (SumStats, {"window": 5}, [1, 2, 3]),
        (LifetimeSumStats, {}, [10, 20]),
        (EmaStats, {"ema_coeff": 0.01}, [10, 20]),
        (PercentilesStats, {"percentiles": [50], "window": 10}, [1, 2, 3]),
        (ItemSeriesStats, {"window": 5}, ["a", "b", "c"]),
    ],
)
def test_state_save_and_load(stats_class: type[StatsBase], init_kwargs: dict[str, Any], test_values: Any) -> None:
    stats = stats_class(**init_kwargs)
    for value in test_values if isinstance(test_values, list) else [test_values]:
        stats.push(value)
    state = stats.get_state()
    check(state["stats_cls_identifier"], stats.stats_cls_identifier)
    loaded = stats_class.from_state(state)
    original, restored = stats.peek(), loaded.peek()
    if isinstance(original, dict):
        check(isinstance(restored, dict), True)
        for key in original:
            check(restored[key], original[key])
    else:
        check(restored, original)


@pytest.mark.parametrize(
    ("stats_class", "init_kwargs", "values1", "values2", "expected_result"),
    [
        (MeanStats, {"window": 10}, [1, 2, 3], [4, 5], 3.0),
        (MaxStats, {"window": 10}, [1, 2, 3], [4, 5], 5),
        (MinStats, {"window": 10}, [1, 2, 3], [4, 5], 1),
        (SumStats, {"window": 10}, [1, 2, 3], [4, 5], 15),
        (EmaStats, {"ema_coeff": 0.01}, [1, 2], [3, 4], 2.01),
        (ItemSeriesStats, {"window": 10}, [1, 2], [3, 4], [1, 2, 3, 4]),
        (LifetimeSumStats, {}, [10, 20], [30, 40], 100),
    ],
)
def test_merge(
    stats_class: type[StatsBase],
    init_kwargs: dict[str, Any],
    values1: list[Any],
    values2: list[Any],
    expected_result: Any,
) -> None:
    root = stats_class(**init_kwargs, is_root=True, is_leaf=False)
    parts = []
    for values in (values1, values2):
        part = stats_class(**init_kwargs, is_root=False, is_leaf=True)
        for value in values:
            part.push(value)
        parts.append(part)
    root.merge(parts)
    check(root.peek(), expected_result)


def test_merge_item_stats() -> None:
    root = ItemStats(is_root=True, is_leaf=False)
    for item in (42, 100):
        incoming = ItemStats(is_root=False, is_leaf=True)
        incoming.push(item)
        root.merge([incoming])
        check(root.peek(), item)
    first = ItemStats(is_root=False, is_leaf=True)
    first.push(1)
    second = ItemStats()
    second.push(2)
    with pytest.raises(AssertionError, match="should only be merged with one other"):
        root.merge([first, second])


@pytest.mark.parametrize(
    ("stats_class", "init_kwargs"),
    [
        (ItemStats, {}),
        (MeanStats, {"window": 10}),
        (MaxStats, {"window": 5}),
        (MinStats, {"window": 5}),
        (SumStats, {"window": 5}),
        (LifetimeSumStats, {}),
        (EmaStats, {"ema_coeff": 0.1}),
        (PercentilesStats, {"percentiles": [50], "window": 10}),
        (ItemSeriesStats, {"window": 5}),
    ],
)
@pytest.mark.parametrize("is_root", [True, False])
@pytest.mark.parametrize("is_leaf", [True, False])
def test_clone(stats_class: type[StatsBase], init_kwargs: dict[str, Any], is_root: bool, is_leaf: bool) -> None:
    original = stats_class(**init_kwargs, is_root=is_root, is_leaf=is_leaf)
    if original.is_leaf:
        original.push(123)
    else:
        source = stats_class(**init_kwargs, is_root=False, is_leaf=True)
        source.push(123)
        original.merge([source])
    similar = original.clone()
    for attribute in ("_window", "_ema_coeff", "_percentiles", "is_root", "is_leaf"):
        if hasattr(original, attribute) or hasattr(similar, attribute):
            check(getattr(similar, attribute), getattr(original, attribute))
    result = similar.peek()
    if stats_class is ItemStats:
        check(result, None)
    elif stats_class is LifetimeSumStats:
        check(result, 0)
    elif stats_class is ItemSeriesStats:
        check(result, [])
    elif stats_class is PercentilesStats:
        check(list(result.keys()), original._percentiles)  # type: ignore[attr-defined]
        check(list(result.values()), [None])
    elif isinstance(result, float):
        check(result, np.nan)


@pytest.mark.parametrize(
    ("stats_class", "window", "values", "expected_result"),
    [
        (MeanStats, 5, [1, 2, 3], 2.0),
        (MaxStats, 5, [1, 2, 3], 3),
        (MinStats, 5, [1, 2, 3], 1),
        (SumStats, 5, [1, 2, 3], 6),
        (MeanStats, 3, [1, 2, 3, 4, 5], 4.0),
        (MaxStats, 3, [1, 2, 3, 4, 5], 5),
        (MinStats, 3, [1, 2, 3, 4, 5], 3),
        (SumStats, 3, [1, 2, 3, 4, 5], 12),
    ],
)
def test_series_stats_windowed(
    stats_class: type[SeriesStats], window: int, values: list[int], expected_result: Any
) -> None:
    stats = stats_class(window=window)
    for value in values:
        stats.push(value)
    check(len(stats), 3)
    check(stats.peek(), expected_result)


@pytest.mark.parametrize(
    ("stats_class", "values", "expected_results"),
    [
        (MeanStats, [10, 20, 30], [10.0, 15.0, 20.0]),
        (MaxStats, [5, 10, 3], [5, 10, 10]),
        (MinStats, [5, 2, 10], [5, 2, 2]),
        (SumStats, [10, 20, 30], [10, 30, 60]),
    ],
)
def test_series_stats_no_window(stats_class: type[SeriesStats], values: list[int], expected_results: list[Any]) -> None:
    stats = stats_class(window=None)
    for value, expected in zip(values, expected_results, strict=True):
        stats.push(value)
        check(stats.peek(), expected)


@pytest.mark.wall_clock
def test_sum_stats_throughput() -> None:
    stats = SumStats(window=None, with_throughput=True)
    check(stats.has_throughputs, True)
    for first, second, expected in ((10, 20, 100), (20, 40, 200)):
        stats.push(first)
        time.sleep(0.1)
        stats.push(second)
        time.sleep(0.2)
        check(stats.throughputs, expected, atol=20)
        stats.reduce()


@pytest.mark.wall_clock
@pytest.mark.parametrize(("is_root", "is_leaf"), [(True, True), (False, True)])
def test_lifetime_sum_stats_throughput(is_root: bool, is_leaf: bool) -> None:
    stats = LifetimeSumStats(with_throughput=True, is_root=is_root, is_leaf=is_leaf)
    check(stats.has_throughputs, True)
    stats.push(10)
    time.sleep(0.1)
    stats.push(20)
    time.sleep(0.2)
    throughputs = stats.throughputs
    check(throughputs["throughput_since_last_reduce"], 100, atol=20)
    if is_root:
        check(throughputs["throughput_since_last_restore"], 100, atol=20)
    else:
        assert "throughput_since_last_restore" not in throughputs
    stats.reduce()
    stats.push(20)
    time.sleep(0.1)
    stats.push(40)
    time.sleep(0.2)
    throughputs = stats.throughputs
    check(throughputs["throughput_since_last_reduce"], 200, atol=20)
    if is_root:
        check(throughputs["throughput_since_last_restore"], 150, atol=20)
    else:
        assert "throughput_since_last_restore" not in throughputs


@pytest.mark.parametrize(
    ("stats_class", "setup_values", "expected_value"),
    [
        (MeanStats, [10, 20], 15.0),
        (MaxStats, [10, 20], 20),
        (MinStats, [10, 20], 10),
        (SumStats, [10, 20], 30),
        (EmaStats, [10, 20], 10.1),
        (LifetimeSumStats, [10, 20], 30),
    ],
)
def test_stats_numeric_operations(stats_class: type[StatsBase], setup_values: list[int], expected_value: float) -> None:
    if stats_class is EmaStats:
        stats: Any = stats_class(ema_coeff=0.01)
    elif stats_class is LifetimeSumStats:
        stats = stats_class()
    else:
        stats = stats_class(window=5)
    for value in setup_values:
        stats.push(value)
    check(float(stats), expected_value)
    check(stats + 5, expected_value + 5)
    check(stats - 5, expected_value - 5)
    check(stats * 2, expected_value * 2)
    check(stats == expected_value, True)
    check(stats > expected_value - 1, True)
    check(stats < expected_value + 1, True)
    check(stats >= expected_value, True)
    check(stats <= expected_value, True)


@pytest.mark.parametrize(
    ("stats_class", "init_kwargs", "expected_result"),
    [
        (MeanStats, {"window": 5}, np.nan),
        (MaxStats, {"window": 5}, np.nan),
        (MinStats, {"window": 5}, np.nan),
        (SumStats, {"window": 5}, np.nan),
        (LifetimeSumStats, {}, 0),
        (EmaStats, {"ema_coeff": 0.01}, np.nan),
        (ItemStats, {}, None),
        (PercentilesStats, {"percentiles": [50], "window": 10}, {50: None}),
        (ItemSeriesStats, {"window": 5}, []),
    ],
)
def test_stats_empty_reduce(stats_class: type[StatsBase], init_kwargs: dict[str, Any], expected_result: Any) -> None:
    result = stats_class(**init_kwargs).peek()
    if isinstance(expected_result, float) and np.isnan(expected_result):
        check(np.isnan(result), True)
    elif isinstance(expected_result, dict):
        assert isinstance(result, dict)
        check(list(result.keys()), list(expected_result.keys()))
        check(list(result.values()), list(expected_result.values()))
    else:
        check(result, expected_result)


PERCENTILES_FIRST = {0: 1.0, 50: 2.5, 75: 3.25, 90: 3.7, 95: 3.85, 99: 3.97, 100: 4.0}
PERCENTILES_ALL = {0: 1.0, 50: 4.0, 75: 15.0, 90: 24.0, 95: 27.0, 99: 29.4, 100: 30.0}
PERCENTILES_SECOND = {0: 10.0, 50: 20.0, 75: 25.0, 90: 28.0, 95: 29.0, 99: 29.8, 100: 30.0}


@pytest.mark.parametrize(
    (
        "stats_class",
        "kwargs",
        "expected_first",
        "expected_first_compile_false",
        "expected_second_normal",
        "expected_second_latest",
        "expected_second_compile_false",
    ),
    [
        (MeanStats, {}, 2.5, [2.5], 10.0, 20.0, [20.0]),
        (EmaStats, {"ema_coeff": 0.1}, 2.1, [2.1], 11.3, 20.5, [20.5]),
        (
            ItemSeriesStats,
            {"window": 10},
            [1.0, 2.0, 3.0, 4.0],
            [1.0, 2.0, 3.0, 4.0],
            [1.0, 2.0, 3.0, 4.0, 10.0, 20.0, 30.0],
            [10.0, 20.0, 30.0],
            [10.0, 20.0, 30.0],
        ),
        (
            PercentilesStats,
            {"window": 10},
            PERCENTILES_FIRST,
            [1.0, 2.0, 3.0, 4.0],
            PERCENTILES_ALL,
            PERCENTILES_SECOND,
            [10.0, 20.0, 30.0],
        ),
        (LifetimeSumStats, {}, 10.0, [10.0], 70.0, 60.0, [60.0]),
    ],
)
def test_latest_merged_only_stats_types(
    stats_class: type[StatsBase],
    kwargs: dict[str, Any],
    expected_first: Any,
    expected_first_compile_false: Any,
    expected_second_normal: Any,
    expected_second_latest: Any,
    expected_second_compile_false: Any,
) -> None:
    root = stats_class(**kwargs, is_root=True, is_leaf=False)

    def merge(batches: list[list[float]]) -> None:
        parts = []
        for values in batches:
            part = stats_class(**kwargs, is_root=False, is_leaf=True)
            for value in values:
                part.push(value)
            parts.append(part)
        root.merge(parts)

    merge([[1.0, 2.0], [3.0, 4.0]])
    check(root.peek(compile=True, latest_merged_only=False), expected_first)
    check(root.peek(compile=True, latest_merged_only=True), expected_first)
    check(root.peek(compile=False, latest_merged_only=True), expected_first_compile_false)
    merge([[10.0, 20.0], [30.0]])
    check(root.peek(compile=True, latest_merged_only=False), expected_second_normal)
    check(root.peek(compile=True, latest_merged_only=True), expected_second_latest)
    check(root.peek(compile=False, latest_merged_only=True), expected_second_compile_false)


def test_latest_merged_only_no_merge_yet() -> None:
    root = MeanStats(window=10, is_root=True, is_leaf=False)
    check(np.isnan(root.peek(compile=True, latest_merged_only=True)), True)
    check(np.isnan(root.peek(compile=True, latest_merged_only=False)), True)


def test_latest_merged_only_non_root_stats() -> None:
    stats = MeanStats(window=10)
    stats.push(1.0)
    with pytest.raises(ValueError, match="latest_merged_only can only be used on aggregation stats objects"):
        stats.peek(compile=True, latest_merged_only=True)


def test_ema_stats_quiet_nanmean() -> None:
    root = EmaStats(ema_coeff=0.01, is_root=True, is_leaf=False)
    root.merge([EmaStats(ema_coeff=0.01, is_root=False, is_leaf=True) for _ in range(2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        root.peek(compile=True)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning) and "Mean of empty slice" in str(w.message)]
