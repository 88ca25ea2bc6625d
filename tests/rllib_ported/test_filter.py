"""RLlib 2.60's ``rllib/utils/tests/test_filter.py``, on cairn.

One test per RLlib test, same name and steps; written for cairn from RLlib's
(Apache-2.0) with ``ray.rllib`` -> ``cairn.rl``. Failures and their reasons:
docs/rllib_parity.md.
"""

import unittest

from cairn.rl.utils.filter import NoFilter


class _BadArray:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("cannot convert")


class TestNoFilter(unittest.TestCase):
    def test_failed_array_conversion_error_message(self):
        value = _BadArray()

        with self.assertRaisesRegex(ValueError, "Failed to convert to array:"):
            NoFilter()(value)
