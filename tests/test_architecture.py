"""The shape of the house (DESIGN.md): imports run one way, checked on the source (issue 26).

The import graph is read from the source with ``ast``, not by importing: an
import inside ``if TYPE_CHECKING:`` is for the type checker only and does not
count; ``from package import module`` counts as an import of that module, not
of the package; a module is not counted as importing the package it sits in
(every package imports its own submodules to re-export them).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# Module-level cycles that exist today, each with the issue that unties it. The test fails on any
# other cycle, and on an entry here that no longer is one (remove it then).
KNOWN_MODULE_LEVEL_CYCLES: list[frozenset[str]] = []

# The engine and what it stands on (the delegation protocol test below reads it).
ENGINE = frozenset(
    {
        "cairn.checkpointable",
        "cairn._delegate_protocol",
        "cairn._tree",
        "cairn._reader",
        "cairn._save",
        "cairn._restore",
        "cairn._verify",
        "cairn.delegation",
        "cairn.storage",
        "cairn.storage.base",
        "cairn.storage.local",
        "cairn.storage.fsspec_storage",
        "cairn.storage.writers",
        "cairn.storage.resolve",
    }
)


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((SRC / "cairn").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _imports(
    body: Iterable[ast.stmt], modules: dict[str, Path], *, in_functions: bool, skip: frozenset[str] = frozenset()
) -> Iterator[str]:
    """The cairn modules the statements import when they run (module level: when the module loads).

    ``in_functions``: count imports inside functions too (those run on a call), but not
    inside the functions named in ``skip``.
    """
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse, modules, in_functions=in_functions, skip=skip)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module in modules:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    yield sub if sub in modules else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if in_functions and node.name not in skip:
                yield from _imports(node.body, modules, in_functions=True, skip=skip)
        else:
            # Class bodies, if / try / with / loop blocks: they run where they stand.
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(node, field, None)
                if isinstance(block, list):
                    yield from _imports(block, modules, in_functions=in_functions, skip=skip)


def _graph(*, in_functions: bool, skip_functions: dict[str, frozenset[str]] | None = None) -> dict[str, set[str]]:
    """Module -> the cairn modules it imports; ``skip_functions``: module -> functions whose imports are left out."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        body = ast.parse(path.read_text(encoding="utf-8")).body
        skip = (skip_functions or {}).get(name, frozenset())
        graph[name] = set(_imports(body, modules, in_functions=in_functions, skip=skip)) - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                if len(members) > 1:
                    found.append(frozenset(members))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check itself: a two-module cycle and a three-module one are found, a chain is not."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}, "g": set()}
    assert sorted(map(sorted, _cycles(graph))) == [["a", "b"], ["c", "d", "e"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle_at_module_level_in_src_cairn() -> None:
    """No two modules of src/cairn import each other, directly or around a loop, when they load."""
    cycles = _cycles(_graph(in_functions=False))
    new = [sorted(c) for c in cycles if c not in KNOWN_MODULE_LEVEL_CYCLES]
    gone = [sorted(c) for c in KNOWN_MODULE_LEVEL_CYCLES if c not in cycles]
    assert not new, f"New import cycles at module level: {new}. Move the shared part into a module below both."
    assert not gone, f"These known cycles are gone: remove them from KNOWN_MODULE_LEVEL_CYCLES: {gone}."


# The one deliberate upward import, named and justified in docs/architecture.md: ``Checkpointable``'s
# template methods hand the object to the engine (and a signed restore's root to ``signing``, through
# their helper ``_signed_root``), imported on first use so that ``import cairn`` stays light.
# Nothing else is skipped.
TEMPLATE_METHODS = {
    "cairn.checkpointable": frozenset({"save_to_path", "_restore_checkpoint", "from_checkpoint", "_signed_root"})
}


def test_no_import_cycle_anywhere_in_src_cairn_even_inside_functions() -> None:
    """Counting imports inside functions (they run on a call), no two modules import each other.

    A lazy import that closes a loop is still a loop: it only moves the failure from import time to
    the first call. The one exception is ``TEMPLATE_METHODS`` above.
    """
    cycles = _cycles(_graph(in_functions=True, skip_functions=TEMPLATE_METHODS))
    assert not cycles, (
        f"Import cycles (imports inside functions counted): {[sorted(c) for c in cycles]}. "
        "Move the shared part into a module below both (docs/architecture.md)."
    )


FLOORS: tuple[tuple[str, ...], ...] = (
    ("cairn.errors", "cairn._crc", "cairn._limits", "cairn._display", "cairn._metrics", "cairn._lazy"),
    ("cairn._version", "cairn._ctor_bounds", "cairn._unrecorded"),
    ("cairn.manifest", "cairn.registry", "cairn.codec"),
    ("cairn.storage",),
    ("cairn", "cairn.checkpointable"),
    ("cairn._tensorio", "cairn._reader", "cairn._verify", "cairn._tree", "cairn._delegate_protocol", "cairn.signing"),
    ("cairn._save", "cairn._restore"),
    ("cairn.state_checks", "cairn.delegation", "cairn.retention"),
    ("cairn.torch", "cairn.manager", "cairn.tools", "cairn.testing", "cairn.rl"),
    ("cairn.cli", "cairn.integrations", "cairn.__main__"),
)
"""The floors of src/cairn, bottom up, as docs/architecture.md draws them (a module sits on the floor of
the longest name that is it or its package; ``"cairn"`` is the package's own ``__init__``)."""

RL_FLOORS: tuple[tuple[str, ...], ...] = (
    ("cairn.rl._aliases", "cairn.rl.execution", "cairn.rl.utils"),
    ("cairn.rl.config",),
    ("cairn.rl.core",),
    ("cairn.rl.connectors",),
    ("cairn.rl.callbacks",),
    ("cairn.rl.env",),
    ("cairn.rl.distributed",),
    (
        "cairn.rl",
        "cairn.rl.algorithms",
        "cairn.rl.policy",
        "cairn.rl.inference",
        "cairn.rl.export",
        "cairn.rl.examples",
    ),
)
"""The floors of ``cairn.rl``, bottom up, as docs/architecture.md draws them."""

RL_UPWARD: dict[tuple[str, str], str] = {
    ("cairn.rl.config.algorithm_config", "cairn.rl.distributed._ray"): "whether Ray is installed (a leaf)",
    ("cairn.rl.core.learner.learner_group", "cairn.rl.distributed.learners"): "its Ray backend, built on demand",
    ("cairn.rl.env.env_runner_group", "cairn.rl.distributed.env_runners"): "its Ray backend, built on demand",
}
"""The imports of ``rl/`` that go up a floor, each inside the function that needs it (docs/architecture.md)."""


def _floor(module: str, floors: tuple[tuple[str, ...], ...]) -> int | None:
    """The index of ``module``'s floor: that of the longest name that is the module or a package of it."""
    best: tuple[int, int] | None = None
    for index, names in enumerate(floors):
        for name in names:
            if (module == name or (name != "cairn" and module.startswith(name + "."))) and (
                best is None or len(name) > best[0]
            ):
                best = (len(name), index)
    return None if best is None else best[1]


def _upward(floors: tuple[tuple[str, ...], ...], within: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The modules under ``within`` on no floor, and the imports that go up a floor (the template methods' skipped)."""
    graph = _graph(in_functions=True, skip_functions=TEMPLATE_METHODS)
    names = [m for m in graph if m == within or m.startswith(within + ".")]
    unplaced = sorted(m for m in names if _floor(m, floors) is None)
    floor = {m: _floor(m, floors) for m in graph}
    up = sorted(
        (m, d) for m in names for d in graph[m] if (f := floor[m]) is not None and (g := floor[d]) is not None and g > f
    )
    return unplaced, up


def test_imports_in_src_cairn_only_go_down_the_floors_drawn_in_docs_architecture() -> None:
    """Every module sits on a floor of ``FLOORS``; it imports only its own floor and those below."""
    unplaced, up = _upward(FLOORS, "cairn")
    assert not unplaced, f"Modules on no floor (add them to FLOORS and docs/architecture.md): {unplaced}"
    assert not up, f"Imports that go up a floor (move the shared part down): {up}"


def test_imports_in_rl_only_go_down_its_floors_but_the_named_ones() -> None:
    """Every module of ``rl/`` sits on a floor of ``RL_FLOORS``; it imports only down, but ``RL_UPWARD``."""
    unplaced, up = _upward(RL_FLOORS, "cairn.rl")
    assert not unplaced, f"rl modules on no floor (add them to RL_FLOORS and docs/architecture.md): {unplaced}"
    assert sorted(up) == sorted(RL_UPWARD), f"Imports that go up a floor of rl/ besides RL_UPWARD: {up}"


def test_docs_architecture_names_every_floor_and_exception() -> None:
    """The drawing names each module or folder of the floors, the upward imports of rl/ and the template methods."""
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = {name for names in FLOORS + RL_FLOORS for name in names} - {"cairn"}
    named |= {m for pair in RL_UPWARD for m in pair} | TEMPLATE_METHODS["cairn.checkpointable"]
    missing = sorted(name for name in named if name.rsplit(".", 1)[-1] not in text)
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)


RL_LOWER_FLOORS = (
    "cairn.rl.config",
    "cairn.rl.execution",
    "cairn.rl.utils",
    "cairn.rl.core",
    "cairn.rl.connectors",
    "cairn.rl.callbacks",
    "cairn.rl.env",
    "cairn.rl.distributed",
)
"""The folders of ``cairn.rl`` below ``rl/algorithms`` (docs/architecture.md draws them)."""


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_lower_floors_of_rl_never_import_the_algorithms() -> None:
    """Issue 37: what many modules read sits low; nothing below ``rl/algorithms`` climbs to it, not even lazily."""
    graph = _graph(in_functions=True)
    climbing = {
        name: sorted(d for d in deps if _in(d, ("cairn.rl.algorithms",)))
        for name, deps in graph.items()
        if _in(name, RL_LOWER_FLOORS)
    }
    assert {k: v for k, v in climbing.items() if v} == {}


def test_the_config_floor_reads_only_utils_and_the_ray_probe() -> None:
    """``rl/config`` is read by every floor above it, so it reads none of them (but ``utils`` and the Ray leaf)."""
    graph = _graph(in_functions=True)
    allowed = ("cairn.rl.config", "cairn.rl.utils", "cairn.rl.distributed._ray")
    outside = {
        name: sorted(d for d in deps if d.startswith("cairn.rl") and not _in(d, allowed))
        for name, deps in graph.items()
        if _in(name, ("cairn.rl.config",))
    }
    assert {k: v for k, v in outside.items() if v} == {}
    assert not {d for d in graph["cairn.rl.distributed._ray"] if d.startswith("cairn.rl")}


def test_rllibs_config_path_is_a_re_export_nothing_inside_imports() -> None:
    """``cairn.rl.algorithms.algorithm_config`` exists for scripts written for RLlib; cairn reads ``rl/config``."""
    graph = _graph(in_functions=True)
    importers = sorted(n for n, deps in graph.items() if "cairn.rl.algorithms.algorithm_config" in deps)
    assert importers == []
    assert graph["cairn.rl.algorithms.algorithm_config"] == {"cairn.rl.config.algorithm_config"}


def test_the_storage_base_never_imports_its_backends() -> None:
    """``cairn.storage.base`` is what backends derive from; building them is ``cairn.storage.resolve``'s job."""
    graph = _graph(in_functions=True)
    backends = {"cairn.storage.local", "cairn.storage.fsspec_storage", "cairn.storage.resolve"}
    assert not graph["cairn.storage.base"] & backends


def test_the_delegation_protocol_imports_nothing_of_the_engine() -> None:
    """The engine imports the protocol; the protocol imports none of the engine (nor the ABC)."""
    graph = _graph(in_functions=True)
    engine = ENGINE - {"cairn._delegate_protocol"} - {m for m in ENGINE if m.startswith("cairn.storage")}
    assert not graph["cairn._delegate_protocol"] & engine


MAX_FUNCTION_LINES = 80
"""Issue 26: no function in src/cairn longer than this (docstring included): split it, or move its
argument documentation to the class."""


def test_no_function_in_src_cairn_is_over_80_lines() -> None:
    long: list[str] = []
    for path in sorted((SRC / "cairn").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 80 lines: " + ", ".join(long)


MAX_RL_FILE_LINES = 700
"""Issue 37: no file in src/cairn/rl longer than this; split a longer one by concern (the runners'
saved state, module changes, metrics and pipelines live beside them: runner_state.py, ...)."""

# Files over the limit, each with why it is not split yet (docs/architecture.md names them): none
# since issue 37's splits. The test fails on any other long file, and on an entry here that fits.
LONG_RL_FILES: dict[str, str] = {}


def _rl_file_lengths() -> dict[str, int]:
    rl = SRC / "cairn" / "rl"
    return {
        str(path.relative_to(SRC / "cairn")): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(rl.rglob("*.py"))
    }


def test_no_file_in_rl_is_over_700_lines_beyond_the_named_exceptions() -> None:
    lengths = _rl_file_lengths()
    long = sorted(f"{name} ({n} lines)" for name, n in lengths.items() if n > MAX_RL_FILE_LINES)
    unnamed = [entry for entry in long if entry.split(" ")[0] not in LONG_RL_FILES]
    assert not unnamed, "rl/ files over 700 lines (split them by concern): " + ", ".join(unnamed)
    fits = sorted(name for name in LONG_RL_FILES if lengths.get(name, 0) <= MAX_RL_FILE_LINES)
    assert not fits, "LONG_RL_FILES entries that fit now or are gone (remove them): " + ", ".join(fits)


def test_the_long_file_exceptions_are_named_in_docs_architecture() -> None:
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = sorted(name for name in LONG_RL_FILES if name not in text)
    assert not missing, "docs/architecture.md does not name these LONG_RL_FILES: " + ", ".join(missing)
