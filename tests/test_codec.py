"""State and constructor-argument codecs: every supported value round-trips with its type."""

from __future__ import annotations

import dataclasses
import enum
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cairn
from cairn.testing import assert_states_equal


class Holder(cairn.Checkpointable):
    """Holds an arbitrary state and constructor arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs
        self.state: dict[str, Any] = {}

    def get_state(self, components: Any = None, *, not_components: Any = None, **kw: Any) -> dict[str, Any]:
        return self.state

    def set_state(self, state: dict[str, Any]) -> None:
        self.state = state

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return self.args, self.kwargs


def round_trip(state: dict[str, Any], tmp_path: Path, **kw: Any) -> dict[str, Any]:
    h = Holder()
    h.state = state
    path = h.save_to_path(tmp_path / "ck", **kw)
    out = Holder()
    out.restore_from_path(path, **kw)
    return out.state


NUMPY_DTYPES = [
    np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
    np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128, np.clongdouble,
    "datetime64[ns]", "timedelta64[s]", "U7", "S5", ">f4", ">i8", "V3",
    [("x", "<f4"), ("y", "<i2", (2,))],
]  # fmt: skip


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 3), (4, 5)])
def test_numpy_every_dtype_and_shape(tmp_path: Path, dtype: Any, shape: tuple[int, ...]) -> None:
    dt = np.dtype(dtype)
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    arr = raw.view(dt).reshape(shape) if dt.itemsize else np.zeros(shape, dt)
    out = round_trip({"a": arr}, tmp_path)["a"]
    assert type(out) is np.ndarray and out.dtype == dt and out.shape == shape
    assert out.tobytes() == arr.tobytes()


def test_numpy_views_scalars_and_sharing(tmp_path: Path) -> None:
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    state = {"view": base[:, ::2], "t": base.T, "same": base, "again": base,
             "s32": np.float32(1.5), "i8": np.int8(-3), "b": np.bool_(True), "c": np.complex64(1 + 2j)}  # fmt: skip
    out = round_trip(state, tmp_path)
    assert_states_equal(out, state)
    assert out["same"] is out["again"]  # one array saved once, shared again on load
    assert type(out["s32"]) is np.float32


TORCH_DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
    torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
    torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
]  # fmt: skip


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4)])
def test_torch_every_dtype(tmp_path: Path, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(0)
    n = int(np.prod(shape))
    raw = torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8, generator=g)
    t = raw.view(dtype).reshape(shape) if n else torch.empty(shape, dtype=dtype)
    out = round_trip({"t": t}, tmp_path)["t"]
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and tuple(out.shape) == shape
    assert out.device.type == "cpu"
    if n:
        assert torch.equal(out.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8))


def test_torch_views_and_shared_storage(tmp_path: Path) -> None:
    base = torch.arange(20, dtype=torch.float32).reshape(4, 5)
    state = {"T": base.t(), "step": base[:, ::2], "row": base[1], "conj": torch.ones(3, dtype=torch.complex64).conj(),
             "param": torch.nn.Parameter(torch.ones(2)), "a": base, "b": base}  # fmt: skip
    out = round_trip(state, tmp_path)
    assert torch.equal(out["T"], base.t()) and torch.equal(out["step"], base[:, ::2])
    assert torch.equal(out["row"], base[1])
    assert torch.equal(out["conj"], torch.ones(3, dtype=torch.complex64).conj().resolve_conj())
    assert out["a"] is out["b"]
    assert not out["param"].requires_grad


def test_python_values_keep_their_types(tmp_path: Path) -> None:
    state = {
        "i": 3, "neg": -(2**63), "big": 2**64, "huge": -(10**40), "f": 0.1, "nan": math.nan, "inf": -math.inf,
        "b": True, "s": "héllo", "bytes": b"\x00\xff", "none": None, "tuple": (1, (2, 3), []),
        "list": [1, "a", None, (4.5,)], "int_keys": {1: "a", -2: "b", None: "c"}, "nested": {"x": {"y": {"z": []}}},
        "empty": {}, "empty_t": (),
    }  # fmt: skip
    out = round_trip(state, tmp_path)
    assert_states_equal(out, state)
    assert type(out["tuple"]) is tuple and type(out["tuple"][2]) is list
    assert list(out["int_keys"]) == [1, -2, None]


class Opaque:
    pass


def test_unsupported_value_names_path_and_both_ways_out(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError) as info:
        round_trip({"a": {"b": [1, Opaque()]}}, tmp_path)
    msg = str(info.value)
    assert "'a/b/1'" in msg and "register_type" in msg and "allow_pickle=True" in msg
    assert not (tmp_path / "ck").exists()


def test_bad_keys_refused(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match="keys must be str, int or None"):
        round_trip({"a": {(1, 2): 3}}, tmp_path)


def test_pickle_opt_in_recorded_and_refused_without_flag(tmp_path: Path) -> None:
    h = Holder()
    h.state = {"obj": Opaque(), "x": 1}
    path = h.save_to_path(tmp_path / "ck", allow_pickle=True)
    with pytest.raises(cairn.UnsafeCheckpointError, match="allow_pickle=True"):
        Holder().restore_from_path(path)
    out = Holder()
    out.restore_from_path(path, allow_pickle=True)
    assert isinstance(out.state["obj"], Opaque)
    from cairn.tools import inspect_checkpoint

    assert inspect_checkpoint(path)[0].uses_pickle


@dataclasses.dataclass
class Unregistered:
    x: int = 1


@cairn.register_type
@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float


class Mode(enum.IntEnum):
    A = 1
    B = 2


def test_registered_types_in_state(tmp_path: Path) -> None:
    out = round_trip({"p": Point(1.0, 2.0), "ps": [Point(0, 0)]}, tmp_path)
    assert out["p"] == Point(1.0, 2.0) and out["ps"] == [Point(0, 0)]


def test_custom_encoder(tmp_path: Path) -> None:
    from fractions import Fraction

    cairn.register_type(Fraction, encode=lambda f: [f.numerator, f.denominator], decode=lambda v: Fraction(*v))
    assert round_trip({"f": Fraction(3, 7)}, tmp_path)["f"] == Fraction(3, 7)


def test_ctor_args_type_tags(tmp_path: Path) -> None:
    from gymnasium import spaces

    obs = spaces.Box(low=-np.ones(3, np.float32), high=np.ones(3, np.float32), dtype=np.float32)
    args = (
        obs, spaces.Discrete(4, start=1), spaces.MultiDiscrete([2, 3]), spaces.MultiBinary(5),
        spaces.Tuple([spaces.Discrete(2), obs]), spaces.Dict({"a": spaces.Discrete(3)}),
        Point(1.0, 2.5), Mode.B, Holder, (1, 2), {1: "a"}, b"raw", math.inf, np.arange(3), torch.ones(2),
        torch.float16, np.dtype("int16"), {"__cairn__": "not a tag"},
    )  # fmt: skip
    h = Holder(*args, key=Point(0.0, 0.0))
    path = h.save_to_path(tmp_path / "ck")
    rebuilt = Holder.from_checkpoint(path)
    assert rebuilt.args[0] == obs and rebuilt.args[1] == spaces.Discrete(4, start=1)
    assert rebuilt.args[2] == spaces.MultiDiscrete([2, 3]) and rebuilt.args[3] == spaces.MultiBinary(5)
    assert rebuilt.args[4] == args[4] and rebuilt.args[5] == args[5]
    assert rebuilt.args[6] == Point(1.0, 2.5) and rebuilt.args[7] is Mode.B and rebuilt.args[8] is Holder
    assert rebuilt.args[9] == (1, 2) and rebuilt.args[10] == {1: "a"} and rebuilt.args[11] == b"raw"
    assert rebuilt.args[12] == math.inf and np.array_equal(rebuilt.args[13], np.arange(3))
    assert torch.equal(rebuilt.args[14], torch.ones(2)) and rebuilt.args[15] is torch.float16
    assert rebuilt.args[16] == np.dtype("int16") and rebuilt.args[17] == {"__cairn__": "not a tag"}
    assert rebuilt.kwargs == {"key": Point(0.0, 0.0)}


@cairn.register_type
@dataclasses.dataclass
class Box2:
    payload: Any


def test_a_registered_ctor_arg_shared_by_folders_of_one_save_is_encoded_as_each_would_be() -> None:
    """One save encodes a shared config once (its memo); each folder's JSON and pickle flag stay its own."""
    from cairn.codec.ctor import encode_ctor

    plain, shared = Box2([1, 2]), Box2(Unregistered())  # the second needs pickle
    memo: dict[int, Any] = {}
    alone = [encode_ctor((v,), {"n": i}, allow_pickle=True) for i, v in enumerate((plain, shared))]
    for _ in range(2):
        together = [encode_ctor((v,), {"n": i}, allow_pickle=True, memo=memo) for i, v in enumerate((plain, shared))]
        assert together == alone and [p for _, p in together] == [False, True]
    assert encode_ctor((plain, shared, plain), {}, allow_pickle=True, memo=memo)[1] is True
    plain.payload = [3]  # another save (a fresh memo) sees the change
    assert encode_ctor((plain,), {}, allow_pickle=True, memo={})[0] != alone[0][0]


def test_unregistered_dataclass_ctor_arg_refused(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match="register_type"):
        Holder(Unregistered()).save_to_path(tmp_path / "ck")


def test_files_are_standard_safetensors(tmp_path: Path) -> None:
    from safetensors.numpy import load

    from pack_helpers import own_file

    h = Holder()
    h.state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.int64), "flag": np.array(True)}
    path = h.save_to_path(tmp_path / "ck")
    loaded = load(own_file(path, "tensors.safetensors"))  # a standard file, loose or packed
    assert np.array_equal(loaded["w"], h.state["w"]) and np.array_equal(loaded["b"], h.state["b"])


# ---------------------------------------------------------------- property test

leaves = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True), st.text(max_size=8), st.binary(max_size=8),
    st.builds(lambda n, s: np.arange(n).astype(s), st.integers(0, 5), st.sampled_from(["f4", "i8", "u1", "f2", "?"])),
    st.builds(lambda n, d: torch.arange(n).to(d), st.integers(0, 5),
              st.sampled_from([torch.float32, torch.bfloat16, torch.int32, torch.bool])),
)  # fmt: skip
keys = st.one_of(st.text(max_size=6), st.integers(-(2**63), 2**63 - 1), st.none())
trees = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.builds(tuple, st.lists(children, max_size=4)),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(st.text(max_size=6), trees, max_size=4))
def test_any_state_tree_round_trips(tmp_path_factory: pytest.TempPathFactory, tree: dict[str, Any]) -> None:
    out = round_trip(tree, tmp_path_factory.mktemp("prop"))
    assert_states_equal(out, tree)
