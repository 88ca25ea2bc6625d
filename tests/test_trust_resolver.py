"""SPEC 8, what a checkpoint may make cairn construct: the one module resolver and the name rule.

Each test is an attack from the trust issue (13), made through the public API
on a real checkpoint whose files were edited and resealed (so that only the
resolver, not a checksum, stands between the file and the program).
Attacks that used to exit the interpreter run in a subprocess.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack
import pytest

import cairn
from cairn.manifest import FileEntry, Manifest, component_name_problem
from cairn_test_components import Tree

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

TESTS = Path(__file__).parent
ROOT = TESTS.parent
MAIN_MODULES = ["unittest.__main__", "numpy.f2py.__main__", "torch.utils.model_dump.__main__"]


# --------------------------------------------------------------------------- helpers


def reseal(folder: Path) -> None:
    """Recompute every manifest of the checkpoint at ``folder`` after its files were edited."""
    data = json.loads((folder / "manifest.json").read_text())
    for comp in data["components"]:
        reseal(folder / comp)
    files = {}
    for name in data["files"]:
        raw = (folder / name).read_bytes()
        files[name] = FileEntry.of(raw)
    manifest = Manifest(files=files, components=data["components"], format_version=data["format_version"])
    (folder / "manifest.json").write_bytes(manifest.to_bytes())


def tree_checkpoint(path: Path) -> Path:
    Tree().save_to_path(path)
    return path


def with_ctor_arg(path: Path, value: Any) -> Path:
    """A Tree checkpoint whose first constructor argument is ``value`` (a ctor.json record)."""
    tree_checkpoint(path)
    ctor = json.loads((path / "ctor.json").read_text())
    ctor["args"][0] = value
    (path / "ctor.json").write_text(json.dumps(ctor))
    reseal(path)
    return path


def with_metadata_class(path: Path, recorded: str) -> Path:
    tree_checkpoint(path)
    meta = json.loads((path / "metadata.json").read_text())
    meta["class"] = recorded
    (path / "metadata.json").write_text(json.dumps(meta))
    reseal(path)
    return path


def with_state_ext(path: Path, type_name: str) -> Path:
    """A Tree checkpoint whose state holds a custom-type extension record naming ``type_name``."""
    tree_checkpoint(path)
    ext = msgpack.ExtType(4, msgpack.packb([type_name, 1], use_bin_type=True))
    (path / "state.msgpack").write_bytes(msgpack.packb({"history": ext}, use_bin_type=True))
    reseal(path)
    return path


SITES = {
    "metadata": lambda p, t: with_metadata_class(p, t),
    "class_tag": lambda p, t: with_ctor_arg(p, {"__cairn__": "class", "class": t}),
    "enum_tag": lambda p, t: with_ctor_arg(p, {"__cairn__": "enum", "class": t, "name": "A"}),
    "registered_tag": lambda p, t: with_ctor_arg(p, {"__cairn__": "registered", "type": t, "value": 1}),
    "state_ext": lambda p, t: with_state_ext(p, t),
}


def run_python(code: str, *, cwd: Path, extra_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(TESTS)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


# --------------------------------------------------------------------------- item 1: __main__ modules


def test_no_checkpoint_field_imports_a_main_module(tmp_path: Path) -> None:
    """Metadata class, ctor class/enum/registered tags and state extensions naming `pkg.__main__:X`.

    Before: `unittest.__main__` ran a test discovery in the current folder and exited
    the program with status 0; `numpy.f2py.__main__` raised SystemExit. Now every
    case is a CheckpointError and no `__main__` module is imported.
    """
    cases = []
    for site, make in SITES.items():
        for target in [f"{m}:X" for m in MAIN_MODULES] + ["__main__:Tree"]:
            name = f"{site}|{target}"
            cases.append((name, str(make(tmp_path / f"ck{len(cases)}", target))))
    # A test file in the working folder: unittest's discovery would import and run it.
    work = tmp_path / "work"
    work.mkdir()
    marker = tmp_path / "test_file_ran"
    (work / "test_boom.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    code = textwrap.dedent(f"""
        import sys, unittest, numpy, torch, cairn
        from cairn_test_components import Tree   # also makes __main__.Tree exist
        for name, path in {cases!r}:
            try:
                if name.startswith("metadata"):
                    cairn.Checkpointable.from_checkpoint(path)
                else:
                    Tree.from_checkpoint(path)
                print(name, "LOADED")
            except cairn.CheckpointError as err:
                print(name, type(err).__name__)
            except BaseException as err:
                print(name, "ESCAPED", type(err).__name__)
        print("MAIN_MODULES", [m for m in sys.modules if m.endswith(".__main__")])
        print("DONE")
    """)
    out = run_python(code, cwd=work)
    lines = out.stdout.splitlines()
    assert lines and lines[-1] == "DONE", out.stdout[-2000:] + out.stderr[-2000:]
    results = dict(line.rsplit(" ", 1) for line in lines if "|" in line)
    assert len(results) == len(cases)
    for name, result in results.items():
        site, target = name.split("|")
        # `__main__`: refused as unsafe; a registered name is only looked up among registrations.
        expected = "IncompatibleCheckpointError" if site in ("registered_tag", "state_ext") else "UnsafeCheckpointError"
        assert result == expected, (name, result)
    assert "MAIN_MODULES []" in lines
    assert not marker.exists()


def test_main_module_refusal_names_the_fix(tmp_path: Path) -> None:
    ck = with_metadata_class(tmp_path / "ck", "unittest.__main__:X")
    match = r"metadata.json names the class 'unittest.__main__:X'.*__main__"
    with pytest.raises(cairn.UnsafeCheckpointError, match=match):
        cairn.Checkpointable.from_checkpoint(ck)
    assert "unittest.__main__" not in sys.modules


PROBE_INIT = """
import os
class Probe:
    pass
def __getattr__(name):
    open(os.environ["CAIRN_PROBE_MARKER"] + "_getattr_" + name, "w").close()
    raise AttributeError(name)
"""
PROBE_SIDE = """
import os
open(os.environ["CAIRN_PROBE_MARKER"] + "_imported", "w").close()
class X:
    pass
"""


@pytest.fixture
def probe_pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An imported package whose submodule and module ``__getattr__`` leave a marker when run."""
    pkg = tmp_path / "lib" / "cairn_probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PROBE_INIT)
    (pkg / "side.py").write_text(PROBE_SIDE)
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.setenv("CAIRN_PROBE_MARKER", str(tmp_path / "marker"))
    import cairn_probe_pkg  # noqa: F401

    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("cairn_probe_pkg")]:
        del sys.modules[name]


@pytest.mark.parametrize("site", list(SITES))
def test_resolver_imports_nothing_not_even_in_an_imported_package(probe_pkg: Path, site: str) -> None:
    """SPEC 8: a name resolves only through the allow-list: nothing is imported, not even a submodule
    of an imported package, and no module ``__getattr__`` hook runs."""
    for i, target in enumerate(["cairn_probe_pkg.side:X", "cairn_probe_pkg:Lazy"]):
        ck = SITES[site](probe_pkg / f"ck{i}", target)
        loader = cairn.Checkpointable.from_checkpoint if site == "metadata" else Tree.from_checkpoint
        # A class name: refused as not allowed. A registered-type name: only looked up among registrations.
        by_type = site in ("registered_tag", "state_ext")
        refusal = cairn.IncompatibleCheckpointError if by_type else cairn.UnsafeCheckpointError
        with pytest.raises(refusal) as info:
            loader(ck)
        if target.endswith("side:X") and refusal is cairn.UnsafeCheckpointError:
            assert "not on cairn's allow-list" in str(info.value)
            assert "cairn.register(cairn_probe_pkg.side.X)" in str(info.value)  # the line that allows it
    assert sorted(p.name for p in probe_pkg.iterdir() if p.name.startswith("marker")) == []
    assert "cairn_probe_pkg.side" not in sys.modules


@pytest.mark.parametrize(
    "recorded", ["builtins:SystemExit", "builtins:KeyboardInterrupt", "cairn.errors:CheckpointError"]
)
def test_exception_classes_are_refused(tmp_path: Path, recorded: str) -> None:
    """An exception class is refused even when the caller trusts it or it is cairn's own (its role)."""
    ck = with_ctor_arg(tmp_path / "ck", {"__cairn__": "class", "class": recorded})
    module_name, _, name = recorded.partition(":")
    cls = getattr(sys.modules[module_name], name)
    match = r"ctor.json, at args/0 names the class .* an exception class"
    with pytest.raises(cairn.UnsafeCheckpointError, match=match):
        Tree.from_checkpoint(ck, trusted=[cls])
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"ctor.json, at args/0 names the class"):
        Tree.from_checkpoint(ck)


@pytest.mark.parametrize(
    "recorded",
    [
        "cairn_test_components:Tree\n",
        "cairn_test_components :Tree",
        "cairn_test_components:Tree.<locals>.X",
        "os.path:join(1)",
        "no_colon",
        ":Tree",
        "cairn_test_components:",
        "a" * 2000 + ":X",
    ],
)
def test_class_paths_that_are_not_plain_classes_are_refused(tmp_path: Path, recorded: str) -> None:
    ck = with_ctor_arg(tmp_path / "ck", {"__cairn__": "class", "class": recorded})
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"ctor.json, at args/0 names the class .* refuses"):
        Tree.from_checkpoint(ck)


def test_non_string_class_paths_are_refused(tmp_path: Path) -> None:
    for value in (["a", "b"], 3, None, {"x": 1}):
        ck = with_ctor_arg(tmp_path / f"ck{len(str(value))}", {"__cairn__": "class", "class": value})
        with pytest.raises(cairn.CheckpointError):
            Tree.from_checkpoint(ck)


def test_plain_data_classes_and_aliases_still_load(tmp_path: Path) -> None:
    import collections

    ck = with_ctor_arg(tmp_path / "ck", {"__cairn__": "class", "class": "collections:OrderedDict"})
    assert Tree.from_checkpoint(ck).name is collections.OrderedDict
    ck2 = with_ctor_arg(tmp_path / "ck2", {"__cairn__": "class", "class": "gone.module:Thing"})
    cairn.register_class_alias("gone.module:Thing", collections.Counter)
    assert Tree.from_checkpoint(ck2).name is collections.Counter


class ScriptCounter(cairn.Checkpointable):
    """Stands for a class defined in a script: its recorded path is `__main__:ScriptCounter`."""

    def __init__(self, start: int = 0) -> None:
        self.start, self.value = start, start

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"value": self.value}

    def set_state(self, state: dict[str, Any]) -> None:
        self.value = state.get("value", self.value)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.start,), {}


def test_the_class_the_caller_passes_may_live_in_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ScriptCounter, "__module__", "__main__")
    c = ScriptCounter(3)
    c.value = 41
    path = c.save_to_path(tmp_path / "ck")
    assert json.loads((tmp_path / "ck" / "metadata.json").read_text())["class"] == "__main__:ScriptCounter"
    assert ScriptCounter.from_checkpoint(path).value == 41  # the caller chose the class
    fresh = ScriptCounter()
    fresh.restore_from_path(path)
    assert fresh.value == 41
    with pytest.raises(cairn.UnsafeCheckpointError, match="__main__"):
        cairn.Checkpointable.from_checkpoint(path)  # the file chose it


def test_readme_api_example_runs_as_a_script(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## The API in one screen\s*```python\n(.*?)```", readme, re.S)
    assert block is not None
    script = tmp_path / "example.py"
    script.write_text(block.group(1) + "\nassert c2.value == 41\nprint('OK')\n")
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr


# --------------------------------------------------------------------------- item 9c: ctor sizes


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


BAD_CTOR_VALUES = {
    "tensor_negative_shape": {"__cairn__": "tensor", "dtype": "float32", "shape": [-1, 0], "b64": ""},
    "tensor_huge_shape": {"__cairn__": "tensor", "dtype": "float32", "shape": [2**62 + 1, 4], "b64": ""},
    "tensor_shape_overflows_int64": {"__cairn__": "tensor", "dtype": "uint8", "shape": [2**40, 2**40], "b64": ""},
    "tensor_float_shape": {"__cairn__": "tensor", "dtype": "float32", "shape": [1.5], "b64": ""},
    "tensor_shape_not_list": {"__cairn__": "tensor", "dtype": "float32", "shape": "12", "b64": ""},
    "tensor_too_many_dims": {"__cairn__": "tensor", "dtype": "float32", "shape": [1] * 100, "b64": b64(b"\0" * 4)},
    "tensor_b64_not_str": {"__cairn__": "tensor", "dtype": "float32", "shape": [1], "b64": 5},
    "tensor_dtype_list": {"__cairn__": "tensor", "dtype": ["float32"], "shape": [1], "b64": b64(b"\0" * 4)},
    "ndarray_negative_shape": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [-1, 0], "b64": ""},
    "ndarray_huge_shape": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [2**62 + 1, 4], "b64": ""},
    "ndarray_zero_size_elements": {"__cairn__": "ndarray", "dtype": "|V0", "shape": [2**50], "b64": ""},
    "ndarray_huge_subarray_dtype": {
        "__cairn__": "ndarray", "dtype": [["a", "<f8", [2**31, 2**31]]], "shape": [1], "b64": "",
    },
    "ndarray_deep_dtype": {
        "__cairn__": "ndarray", "dtype": json.loads("[" * 40 + '"<f8"' + "]" * 40), "shape": [], "b64": "",
    },
    "ndarray_object_dtype": {"__cairn__": "ndarray", "dtype": "|O", "shape": [1], "b64": b64(b"\0" * 8)},
    "ndarray_dtype_number": {"__cairn__": "ndarray", "dtype": 7, "shape": [1], "b64": b64(b"\0" * 8)},
    "discrete_huge_n": {"__cairn__": "space", "space": "Discrete", "n": 10**30, "start": 0},
    "discrete_float_n": {"__cairn__": "space", "space": "Discrete", "n": 2.5, "start": 0},
    "discrete_zero_n": {"__cairn__": "space", "space": "Discrete", "n": 0, "start": 0},
    "discrete_start_overflows": {"__cairn__": "space", "space": "Discrete", "n": 10, "start": 2**63 - 2},
    "multibinary_huge": {"__cairn__": "space", "space": "MultiBinary", "n": [2**40, 2**40]},
    "multibinary_text": {"__cairn__": "space", "space": "MultiBinary", "n": "big"},
    "box_bounds_text": {"__cairn__": "space", "space": "Box", "low": "a", "high": "b", "dtype": "<f4"},
    "box_huge_shape": {
        "__cairn__": "space", "space": "Box", "dtype": "<f4",
        "low": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [2**31, 2**31], "b64": ""}, "high": 1.0,
    },
    "box_mismatched_bounds": {
        "__cairn__": "space", "space": "Box", "dtype": "<f4",
        "low": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [2], "b64": b64(b"\0" * 8)},
        "high": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [3], "b64": b64(b"\0" * 12)},
    },
    "multidiscrete_floats": {
        "__cairn__": "space", "space": "MultiDiscrete", "dtype": "<i8", "start": [0],
        "nvec": {"__cairn__": "ndarray", "dtype": "<f4", "shape": [1], "b64": b64(b"\0" * 4)},
    },
    "space_unknown": {"__cairn__": "space", "space": "Graph"},
    "space_missing_key": {"__cairn__": "space", "space": "Discrete"},
    "tuple_items_not_list": {"__cairn__": "tuple", "items": 5},
    "dict_items_not_pairs": {"__cairn__": "dict", "items": [[1, 2, 3]]},
    "dict_unhashable_key": {"__cairn__": "dict", "items": [[[1], 2]]},
    "float_not_special": {"__cairn__": "float", "value": "1e308"},
    "float_value_list": {"__cairn__": "float", "value": [1]},
    "unknown_tag": {"__cairn__": "lambda", "code": "print(1)"},
    "tag_is_list": {"__cairn__": ["tuple"], "items": []},
    "npscalar_zero_size": {"__cairn__": "npscalar", "dtype": "|V0", "b64": ""},
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD_CTOR_VALUES))
def test_bad_ctor_sizes_and_types_are_corrupt_checkpoint_errors(tmp_path: Path, case: str) -> None:
    """Item 9c: every shape, count and type is checked before anything is allocated."""
    import gymnasium  # noqa: F401 - spaces need gymnasium imported, as a program using them has
    import torch  # noqa: F401 - tensors need torch imported, as a program using them has

    ck = with_ctor_arg(tmp_path / "ck", BAD_CTOR_VALUES[case])
    size = (ck / "ctor.json").stat().st_size
    tracemalloc.start()
    try:
        with pytest.raises(cairn.CorruptCheckpointError, match=r"ctor.json, at args/0"):
            Tree.from_checkpoint(ck)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * size + 16 * 2**20, peak


def test_good_ctor_values_still_round_trip(tmp_path: Path) -> None:
    import gymnasium as gym
    import numpy as np
    import torch

    values = [
        torch.arange(6, dtype=torch.bfloat16).reshape(2, 3),
        torch.empty(0, 3),
        torch.float16,
        np.zeros((2, 0), dtype=np.float32),
        np.zeros(3, dtype="V0"),
        np.array([(1, [2.0, 3.0])], dtype=[("a", "<i4"), ("b", "<f8", (2,))]),
        np.dtype("<M8[us]"),
        gym.spaces.Discrete(2**62, start=-5),
        gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32),
        gym.spaces.MultiBinary([2, 3]),
        gym.spaces.MultiDiscrete([3, 4]),
        gym.spaces.Dict({"a": gym.spaces.Tuple([gym.spaces.Discrete(3)])}),
    ]
    t = Tree(name=values)  # type: ignore[arg-type]
    loaded = Tree.from_checkpoint(t.save_to_path(tmp_path / "ck")).name
    for a, b in zip(values, loaded, strict=True):
        if isinstance(a, torch.Tensor):
            assert a.dtype == b.dtype and torch.equal(a, b)
        elif isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
        else:
            assert a == b


# --------------------------------------------------------------------------- item 11c: no torch import


def test_ctor_tensor_in_a_program_without_torch_does_not_import_torch(tmp_path: Path) -> None:
    tensor = {"__cairn__": "tensor", "dtype": "float32", "shape": [1], "b64": b64(b"\0" * 4)}
    ck = with_ctor_arg(tmp_path / "ck", tensor)
    ck2 = with_ctor_arg(tmp_path / "ck2", {"__cairn__": "torch_dtype", "name": "float32"})
    code = textwrap.dedent(f"""
        import sys, cairn
        from cairn_test_components import Tree
        for path in ({str(ck)!r}, {str(ck2)!r}):
            try:
                Tree.from_checkpoint(path)
            except cairn.IncompatibleCheckpointError as err:
                print("refused" if "Import torch first" in str(err) else err)
        print("torch" in sys.modules)
    """)
    out = run_python(code, cwd=tmp_path)
    assert out.stdout.split() == ["refused", "refused", "False"], out.stdout + out.stderr


def test_dtype_names_never_reach_torch_getattr(tmp_path: Path) -> None:
    """A dtype `_dynamo` used to load ~300 torch modules through torch.__getattr__."""
    cases = [
        {"__cairn__": "tensor", "dtype": "_dynamo", "shape": [1], "b64": b64(b"\0" * 4)},
        {"__cairn__": "torch_dtype", "name": "_dynamo"},
        {"__cairn__": "torch_dtype", "name": "onnx"},
        {"__cairn__": "torch_dtype", "name": "nn"},
    ]
    paths = [str(with_ctor_arg(tmp_path / f"ck{i}", c)) for i, c in enumerate(cases)]
    code = textwrap.dedent(f"""
        import sys, torch, cairn
        from cairn_test_components import Tree
        before = set(sys.modules)
        for path in {paths!r}:
            try:
                Tree.from_checkpoint(path)
            except cairn.CorruptCheckpointError as err:
                print("corrupt" if "is not the name of a torch dtype" in str(err) else err)
        print(sorted(m for m in set(sys.modules) - before if m.startswith("torch")))
    """)
    out = run_python(code, cwd=tmp_path)
    assert out.stdout.split() == ["corrupt"] * 4 + ["[]"], out.stdout + out.stderr


# --------------------------------------------------------------------------- items 10a / 10c: one name rule


BAD_NAMES = ["kid\n", "..\n", ".\n", "kid\r", "é", "k\u0660", "a/b", "", ".", "..", "manifest.json", "x" * 201]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_component_name_rule_refuses(name: str) -> None:
    assert component_name_problem(name) is not None


@pytest.mark.parametrize("name", ["kid", "p-0.x_1", "...", ".hidden", "x" * 200])
def test_component_name_rule_accepts(name: str) -> None:
    assert component_name_problem(name) is None


class Holder(cairn.Checkpointable):
    def __init__(self, name: str = "kid") -> None:
        self.name = name
        self.kid = ScriptCounter()

    def get_checkpointable_components(self) -> list[tuple[str, cairn.Checkpointable]]:
        return [(self.name, self.kid)]

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict[str, Any]:
        return self._get_components_state(components, not_components=not_components)

    def set_state(self, state: dict[str, Any]) -> None:
        self._set_components_state(state)

    def get_ctor_args_and_kwargs(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (self.name,), {}


def test_save_refuses_a_component_named_with_a_trailing_newline(tmp_path: Path) -> None:
    with pytest.raises(cairn.CheckpointError, match=r"component named 'kid\\n'"):
        Holder("kid\n").save_to_path(tmp_path / "ck")


@pytest.mark.parametrize("bad", ["..\n", "kid\n"])
def test_manifest_listing_a_name_with_a_newline_is_corrupt(tmp_path: Path, bad: str) -> None:
    path = Path(Holder().save_to_path(tmp_path / "ck"))
    m = Manifest.from_bytes((path / "manifest.json").read_bytes(), where="m")
    entry = m.files.pop("kid/manifest.json")
    m.files[f"{bad}/manifest.json"] = entry
    m.components = [bad]
    (path / "manifest.json").write_bytes(m.to_bytes())
    with pytest.raises(cairn.CorruptCheckpointError, match="unsafe name"):
        Holder().restore_from_path(path)
    with pytest.raises(cairn.CorruptCheckpointError, match="unsafe name"):
        cairn.verify_checkpoint(str(path))


def test_a_recorded_callback_resolves_only_through_the_allow_list_and_its_role() -> None:
    """The rule for what a recorded config may make cairn call back (issue 24, finding 1; issue 33).

    Before issue 33, a deny-list of framework packages decided (``framework_problem``); now the
    one resolver does: a framework's function or class is refused because nobody allowed it,
    cairn's own class is refused in a role it does not fill, and what the program registered
    resolves. The RLlib bridge decodes recorded callbacks through the same resolver.
    """
    import subprocess

    import numpy as np
    import torch

    from cairn.manager import CheckpointManager
    from cairn.registry import CALLBACK_FUNCTION, CALLBACKS_CLASS, CLASS, object_path, resolve
    from cairn.rl.callbacks.callbacks import RLlibCallback

    for fn in (np.load, torch.hub.load):
        with pytest.raises(cairn.UnsafeCheckpointError, match="not on cairn's allow-list"):
            resolve(object_path(fn), where="callbacks_on_train_result", role=CALLBACK_FUNCTION)
    with pytest.raises(cairn.UnsafeCheckpointError, match="not on cairn's allow-list"):
        resolve(object_path(torch.nn.Module), where="callbacks_class", role=CALLBACKS_CLASS)
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"subclass of cairn\.rl\.callbacks\.callbacks:RLlibCallback"):
        resolve(object_path(CheckpointManager), where="callbacks_class", role=CALLBACKS_CLASS)  # cairn's own
    with pytest.raises(cairn.UnsafeCheckpointError, match="not on cairn's allow-list"):
        resolve(object_path(subprocess.Popen), where="a class", role=CLASS)
    assert resolve(object_path(RLlibCallback), where="callbacks_class", role=CALLBACKS_CLASS) is RLlibCallback

    def registered_callback() -> None:
        pass

    registered_callback.__qualname__ = "registered_callback"  # as if defined at the top level
    path = object_path(registered_callback)
    with pytest.raises(cairn.UnsafeCheckpointError, match=r"cairn.register\(test_trust_resolver.registered_callback\)"):
        resolve(path, where="callbacks_on_train_result", role=CALLBACK_FUNCTION)
    cairn.register(registered_callback)
    assert resolve(path, where="callbacks_on_train_result", role=CALLBACK_FUNCTION) is registered_callback
    with pytest.raises(cairn.UnsafeCheckpointError, match="is a function, and a callbacks class is a class"):
        resolve(path, where="callbacks_class", role=CALLBACKS_CLASS)  # allowed, but not in this role
