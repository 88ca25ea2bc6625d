"""cairn.state_checks: the one home of restored-state checks, and its declared Schema (issue 37)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cairn import Checkpointable
from cairn.errors import CorruptCheckpointError, IncompatibleCheckpointError
from cairn.state_checks import ArrayField, ById, Count, Number, Schema, count, counts_by_id, number

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


@pytest.mark.parametrize("bad", [np.nan, -np.nan])
def test_a_bound_refuses_nan_without_finite(bad: float) -> None:
    """NaN compares False with every bound, so min()/max() alone would let it through."""
    for field in (ArrayField(low=0), ArrayField(high=1), ArrayField(low=0, high=1)):
        with pytest.raises(CorruptCheckpointError, match=r"^m2: holds NaN, which is within no bound"):
            Schema({"m2": field}).read({"m2": np.array([0.5, bad])}, where="")
    assert Schema({"m2": ArrayField(low=0, high=1)}).read({"m2": np.array([0.0, 1.0])}, where="")
    with pytest.raises(CorruptCheckpointError, match=r"^m2: holds values above 1"):
        Schema({"m2": ArrayField(high=1)}).read({"m2": np.array([2.0])}, where="")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (float("nan"), r"expected a finite number, .*nan"),
        (np.float32("inf"), r"expected a finite number"),
        (-0.5, r"expected a number >= 0.0, the checkpoint holds -0.5"),
        ("0.5", r"expected a number, the checkpoint holds str"),
    ],
)
def test_numbers_by_id_declare_their_bounds(value: object, message: str) -> None:
    coeffs = ById(Number(low=0.0, finite=True))
    assert coeffs({"p0": np.float64(0.2), "p1": np.array(1)}, where="kl") == {"p0": 0.2, "p1": 1.0}
    with pytest.raises(CorruptCheckpointError, match=rf"^kl/p1: {message}"):
        coeffs({"p0": 0.2, "p1": value}, where="kl")
    with pytest.raises(CorruptCheckpointError, match=r"^kl: module ids are str"):
        coeffs({1: 0.2}, where="kl")
    assert np.isnan(number(float("nan"), where="loss"))  # unbounded: as a save records it
    with pytest.raises(CorruptCheckpointError, match=r"expected a finite number"):
        Number(high=1.0)(float("nan"), where="x")  # NaN is within no bound


def test_unique_ids_are_a_1d_array() -> None:
    with pytest.raises(ValueError, match=r"unique=True\) is for 1-D arrays of ids, declared with 2"):
        ArrayField("iu", shape=(None, 2), unique=True)
    ids = Schema({"slots": ArrayField("iu", unique=True)})
    # Two distinct rows of the same values: np.unique over the whole array would call them unique or not by value.
    with pytest.raises(CorruptCheckpointError, match=r"^slots: expected a 1-D array of ids, .*shape \(2, 2\)"):
        ids.read({"slots": np.array([[0, 1], [2, 3]])}, where="")


def test_a_merged_schema_keeps_both_sides_declarations() -> None:
    base = Schema({"steps": count})
    shaped = base | Schema({"mean": ArrayField(shape=(2,))}, unfit="another obs shape.")
    with pytest.raises(IncompatibleCheckpointError, match=r"another obs shape\.$"):
        shaped.read({"mean": np.zeros(3)}, where="")
    both = Schema({"a": count}, required=True) | Schema({"b": count}, required=True)
    with pytest.raises(CorruptCheckpointError, match=r"holds \['a'\] without \['b'\]"):
        both.read({"a": 1}, where="s")
    for left, right in [
        (base, Schema({"b": count}, required=True)),
        (Schema({"a": count}, together=True), Schema({"b": count}, together=True)),
        (Schema({"a": count}, unfit="one."), Schema({"b": count}, unfit="two.")),
    ]:
        with pytest.raises(ValueError, match=r"(change what the other side|two unfit sentences)"):
            left | right


def test_keys_declared_together_come_together() -> None:
    with pytest.raises(CorruptCheckpointError, match=r"^pipe: holds \['slots'\] without \['frames', 'size'\]"):
        WINDOWS.read({"slots": OK["slots"]}, where="pipe")


def test_required_keys_must_all_be_there() -> None:
    required = Schema({"size": count, "cursor": count}, required=True)
    assert required.read({"size": 2, "cursor": 1}, where="") == {"size": 2, "cursor": 1}
    with pytest.raises(CorruptCheckpointError, match=r"^buffer: holds \[\] without \['cursor', 'size'\]"):
        required.read({}, where="buffer")


class _Counter(Checkpointable):
    """A component that declares its state and writes no check_state."""

    state_schema = Schema({"steps": count})

    def __init__(self) -> None:
        self.steps = 0

    def get_state(self, components: object = None, *, not_components: object = None, **kwargs: object) -> dict:
        return {"steps": self.steps}

    def set_state(self, state: dict) -> None:
        self.steps = self.state_schema.read(state, where="")["steps"]

    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict]:
        return (), {}


def test_a_restore_reads_the_declared_schema_before_anything_changes(tmp_path: Path) -> None:
    saved = _Counter()
    saved.save_to_path(tmp_path / "ok")

    # The same state, with a negative count: a checkpoint whose digests are recomputed.
    class _Liar(_Counter):
        def get_state(self, components: object = None, *, not_components: object = None, **kwargs: object) -> dict:
            return {"steps": -1}

    _Liar().save_to_path(tmp_path / "bad")
    live = _Counter()
    live.steps = 7
    with pytest.raises(CorruptCheckpointError, match=r"steps: a count must be a non-negative int"):
        live.restore_from_path(tmp_path / "bad")
    assert live.steps == 7
    live.restore_from_path(tmp_path / "ok")
    assert live.steps == 0
