"""cairn.state_checks: the one home of restored-state checks, and its declared Schema (issue 37)."""

from __future__ import annotations

import numpy as np
import pytest

from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError
from cairn.state_checks import ArrayField, Count, Schema, count, counts_by_id, number

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


WINDOWS = Schema(
    {
        "slots": ArrayField("iu", ndim=1, low=0, unique=True),
        "frames": ArrayField(shape=("slots", 2), finite=True),
        "size": Count(low=1, high=8),
    },
    unfit="the checkpoint was taken with another num_frames.",
    together=True,
)
OK = {"slots": np.array([0, 3]), "frames": np.zeros((2, 2)), "size": 4}


def test_declared_arrays_and_ranges_read_a_state_that_fits() -> None:
    read = WINDOWS.read(OK, where="")
    assert read["size"] == 4 and read["frames"].shape == (2, 2)
    assert WINDOWS.read({}, where="") == {}


@pytest.mark.parametrize(
    ("edit", "error", "message"),
    [
        ({"slots": np.array([1, 1])}, CorruptCheckpointError, r"^pipe/slots: lists an id twice"),
        ({"slots": np.array([-1, 0])}, CorruptCheckpointError, r"^pipe/slots: holds values below 0"),
        ({"slots": np.array([0.5, 1])}, CorruptCheckpointError, r"^pipe/slots: expected an array of ints"),
        ({"slots": np.zeros((2, 1), np.int64)}, CorruptCheckpointError, r"^pipe/slots: expected 1 dimensions"),
        ({"frames": np.full((2, 2), np.nan)}, CorruptCheckpointError, r"^pipe/frames: holds NaN"),
        ({"frames": [[0, 0], [0, 0]]}, CorruptCheckpointError, r"^pipe/frames: expected an array of numbers"),
        (
            {"frames": np.zeros((3, 2))},
            IncompatibleCheckpointError,
            r"^pipe/frames has shape \(3, 2\) in the checkpoint, but this object keeps \(2, 2\): .*num_frames",
        ),
        ({"size": 9}, CorruptCheckpointError, r"^pipe/size: a count must be an int from 1 to 8, .*holds 9"),
        ({"size": 0}, CorruptCheckpointError, r"^pipe/size: a count must be an int from 1 to 8"),
    ],
)
def test_declared_arrays_and_ranges_refuse_naming_the_path(edit: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        WINDOWS.read({**OK, **edit}, where="pipe")


def test_keys_declared_together_come_together() -> None:
    with pytest.raises(CorruptCheckpointError, match=r"^pipe: holds \['slots'\] without \['frames', 'size'\]"):
        WINDOWS.read({"slots": OK["slots"]}, where="pipe")
