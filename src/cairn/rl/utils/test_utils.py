"""``check``: RLlib's assertion helper for tests (``ray.rllib.utils.test_utils.check``).

Lets tests written against RLlib (``from ray.rllib.utils.test_utils import check``) run on
cairn with the import changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cairn.rl.utils.metrics.stats import StatsBase

__all__ = ["check"]


def check(
    x: Any,
    y: Any,
    decimals: int = 5,
    atol: float | None = None,
    rtol: float | None = None,
    false: bool = False,
) -> None:
    """Assert that ``x`` (the value) matches ``y`` (the expected value), as RLlib's ``check`` does.

    Dicts match key by key (as in RLlib, every key of ``x`` must be in ``y``; keys only ``y``
    has are not checked), lists and tuples item by item; bools, None, strings and int pairs
    must be equal, arrays of strings or objects item by item; other numbers (also numpy arrays,
    torch tensors and stats, which are peeked) agree to ``decimals`` places, or within
    ``atol``/``rtol`` when one is given. ``false=True`` asserts that they differ.

    Raises:
        AssertionError: They do not match (or, with ``false=True``, they do).
    """
    if isinstance(x, dict):
        assert isinstance(y, dict), f"x is a dict, y is a {type(y).__name__}: {y!r}"
        # RLlib's rule: every key of x must be in y; keys only y has are not checked.
        missing = [key for key in x if key not in y]
        assert not missing, f"y lacks x's keys {sorted(map(str, missing))}: y={y!r:.200}"
        for key, value in x.items():
            check(value, y[key], decimals=decimals, atol=atol, rtol=rtol, false=false)
        return
    if isinstance(x, list | tuple):
        assert isinstance(y, list | tuple), f"x is a {type(x).__name__}, y is a {type(y).__name__}: {y!r}"
        assert len(x) == len(y), f"lengths differ: {len(x)} vs {len(y)}"
        for a, b in zip(x, y, strict=True):
            check(a, b, decimals=decimals, atol=atol, rtol=rtol, false=false)
        return
    if isinstance(x, bool | np.bool_):
        assert (bool(x) is bool(y)) is not false, f"x ({x}) {'is' if false else 'is not'} y ({y})"
        return
    if x is None or y is None or isinstance(x, str) or (isinstance(x, int) and isinstance(y, int)):
        assert (x == y) is not false, f"x ({x!r}) {'equals' if false else 'differs from'} y ({y!r})"
        return
    if isinstance(x, bytes) or (hasattr(x, "dtype") and (x.dtype == object or str(x.dtype).startswith("<U"))):
        # RLlib's rule: arrays of strings or objects (and bytes) must be equal item by item.
        try:
            np.testing.assert_array_equal(x, y)
        except AssertionError:
            if not false:
                raise
        else:
            assert not false, f"x ({x}) is the same as y ({y})"
        return
    x, y = _numeric(x), _numeric(y)
    try:
        if atol is None and rtol is None:
            np.testing.assert_almost_equal(x, y, decimal=decimals)
        else:
            np.testing.assert_allclose(x, y, atol=atol or 0, rtol=1e-7 if rtol is None else rtol)
    except AssertionError:
        if not false:
            raise
    else:
        assert not false, f"x ({x}) is the same as y ({y})"


def _numeric(value: Any) -> Any:
    if isinstance(value, StatsBase):
        return value.peek()
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return value
