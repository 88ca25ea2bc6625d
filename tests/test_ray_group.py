"""The Ray tests' xdist group is applied before pytest-xdist reads it (tests/conftest.py).

pytest-xdist's worker reads each test's ``xdist_group`` in its own ``pytest_collection_modifyitems``;
the conftest hook that adds the mark must run first (``tryfirst``), or the Ray tests spread over
both workers and the second one refuses to start a second cluster. A fixture placed between the
decorator and the hook once took the ``tryfirst`` away.
"""

from __future__ import annotations

import pytest


def test_the_conftest_hook_that_groups_ray_tests_runs_first(pytestconfig: pytest.Config) -> None:
    impls = pytestconfig.pluginmanager.hook.pytest_collection_modifyitems.get_hookimpls()
    ours = [impl for impl in impls if impl.plugin_name.endswith("tests/conftest.py")]
    assert len(ours) == 1, [impl.plugin_name for impl in impls]
    assert ours[0].tryfirst
