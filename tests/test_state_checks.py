"""cairn.state_checks: the one home of restored-state checks, and its declared Schema (issue 37)."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.errors import CorruptCheckpointError
from cairn.state_checks import Schema, count, counts_by_id, number

SCHEMA = Schema({"counters": Schema({"steps": count, "per_module": counts_by_id}), "loss": number})


def test_a_schema_reads_what_it_names_and_skips_what_the_state_does_not_hold() -> None:
    state = {"counters": {"steps": np.int64(3), "per_module": {"p0": 2}}, "other": "left to the component"}
    assert SCHEMA.read(state, where="") == {"counters": {"steps": 3, "per_module": {"p0": 2}}}
    assert SCHEMA.read({}, where="learner") == {}


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"counters": {"steps": float("nan")}}, r"^counters/steps: a count must be a non-negative int"),
        ({"counters": {"steps": True}}, r"^counters/steps: a count must be a non-negative int"),
        ({"counters": {"per_module": {"p0": -1}}}, r"^counters/per_module/p0: a count"),
        ({"counters": {"per_module": [1, 2]}}, r"^counters/per_module: expected a dict of module id"),
        ({"counters": [1]}, r"^counters: expected a dict"),
        ({"loss": "0.5"}, r"^loss: expected a number"),
        ([1], r"^state: expected a dict"),
    ],
)
def test_a_schema_refuses_a_value_naming_its_path(state: object, message: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=message):
        SCHEMA.read(state, where="")
