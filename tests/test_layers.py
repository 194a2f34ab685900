"""The import graph of harness/ (read with ast, nothing imported): the layers of
docs/architecture.md import only downward, and no modules import each other in a loop,
counting the imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "harness"

#: The folders (rooms) of harness/, bottom to top, and the modules the root keeps (its doors:
#: the CLI, the pytest plugin, the check model and its records, the check catalogue).
ROOMS = ("base", "topology", "profiles", "judges", "parsers", "probes", "worker", "detect",
         "fixtures", "report", "run", "memory", "cluster", "devicecheck", "commands")
ROOT_MODULES = {"__init__", "__main__", "cli", "plugin", "checking", "results", "catalog", "items"}


def _above(*allowed: str) -> tuple[str, ...]:
    """Every room and root door but `allowed` (and the package's own __init__, `harness`)."""
    doors = tuple(f"harness.{m}" for m in sorted(ROOT_MODULES - {"__init__"}))
    return tuple(f"harness.{r}" for r in ROOMS if r not in allowed) + tuple(
        d for d in doors if d.removeprefix("harness.") not in allowed)


#: (importer prefix, imported prefixes it must never reach): docs/architecture.md's layers.
#: `harness` itself (the package face: __version__) is allowed everywhere but base/.
FORBIDDEN = [
    # foundations: nothing of the harness outside base/
    ("harness.base", ("harness",)),
    ("harness.topology", _above("base")),
    ("harness.profiles", _above("base")),
    # judges: pure functions of facts and the profile (never a probe, parser, fixture, the run,
    # a writer, a command or the cluster); the check model's records only
    ("harness.judges", _above("base", "profiles", "results")),
    # facts: parsers may call the judges for `preflight inspect`'s verdicts
    ("harness.parsers", _above("base", "topology", "profiles", "judges")),
    ("harness.probes", _above("base", "topology", "profiles", "parsers")),
    # what runs under torchrun: the probes' pure helpers and parsers, never the run
    ("harness.worker", _above("base", "topology", "profiles", "parsers", "probes")),
    ("harness.detect", _above("base", "topology", "profiles", "parsers", "probes")),
    # the checks' facts
    ("harness.fixtures", _above("base", "topology", "profiles", "judges", "parsers", "probes",
                                "worker", "detect", "checking", "results", "plugin")),
    # writers of a finished report: never the run, the commands, the cluster or a probe
    ("harness.report", _above("base", "topology", "profiles", "judges", "results", "checking")),
    ("harness.run", _above("base", "topology", "profiles", "judges", "report", "results",
                           "checking", "items")),
    # a node's memory across runs: reads the node (detect, probes), writes through report/'s
    # S3 client; never the run, the cluster or the commands
    ("harness.memory", _above("base", "topology", "profiles", "judges", "parsers", "probes",
                              "detect", "report", "results", "checking")),
    ("harness.cluster", _above("base", "topology", "profiles", "judges", "parsers", "probes",
                               "worker", "detect", "report", "run", "checking", "results")),
    ("harness.devicecheck", _above("base", "topology", "profiles", "judges", "parsers", "probes",
                                   "worker", "detect", "fixtures", "checking", "results")),
    ("harness.commands", ("harness.cli", "harness.plugin")),
]


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The harness modules `path` imports anywhere in it (functions, TYPE_CHECKING blocks
    too): `from harness.x import y` counts as harness.x.y when that is a module."""
    found: set[str] = set()
    package = _module(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # `from .x import y`, `from .. import z`: relative to the package
                base = package[:len(package) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            if not module:
                continue
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known)
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {name: _imports(path, known) - {name} for name, path in known.items()}


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def _package_face(graph: dict[str, set[str]], name: str) -> bool:
    """A package importing its own submodules (`harness.topology` re-exporting) and those
    importing a sibling through the package name is one package, not a circle of modules."""
    return name.count(".") >= 1 and any(m.startswith(name + ".") for m in graph)


def _climbing(graph: dict[str, set[str]]) -> list[str]:
    return [f"{importer} imports {imported}"
                for importer, imports in sorted(graph.items())
                for prefix, banned in FORBIDDEN
                if importer == prefix or importer.startswith(prefix + ".")
                for imported in sorted(imports)
                if any(imported == b or imported.startswith(b + ".") for b in banned)
                and not (imported == prefix or imported.startswith(prefix + "."))
                and not (imported == "harness" and prefix != "harness.base")]


def test_layers_import_only_downward():
    assert _climbing(_graph()) == []


def test_the_root_holds_only_its_doors():
    """New code goes into a room (docs/architecture.md says which), never the root."""
    assert {p.stem for p in ROOT.glob("*.py")} <= ROOT_MODULES
    assert {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()} == set(ROOMS)


def test_every_room_has_a_rule():
    assert {prefix.removeprefix("harness.") for prefix, _ in FORBIDDEN} == set(ROOMS)


def test_a_climbing_import_is_found():
    """The rules are live: a judge that imports a parser is reported, a parser calling a judge is not."""
    graph = {"harness.judges.x": {"harness.parsers.y"}, "harness.parsers.y": {"harness.judges.x"}}
    assert _climbing(graph) == ["harness.judges.x imports harness.parsers.y"]


def test_no_import_circles():
    graph = _graph()
    # A package's face re-exports its submodules; an arrow from a submodule up to its own
    # package face is the package's inside, not a loop between modules.
    inner = {name: {m for m in imports if not (_package_face(graph, m)
                                                and name.startswith(m + "."))}
             for name, imports in graph.items()}
    circles = _circles(inner)
    assert sorted(sorted(c) for c in circles) == []


@pytest.mark.parametrize("bad", [
    {"harness.a": {"harness.b"}, "harness.b": {"harness.a"}},
    {"harness.a": {"harness.b"}, "harness.b": {"harness.c"}, "harness.c": {"harness.a"}},
])
def test_the_circle_finder_finds_circles(bad):
    assert _circles(bad) == [frozenset(bad)]


def test_the_graph_sees_imports_inside_functions():
    graph = _graph()
    # harness.run.launch imports the profiles inside a function only.
    assert "harness.profiles.table" in graph["harness.run.launch"]
    assert "harness.topology.nodes" in graph["harness.probes.nccl_tests"]
    # harness.run.recorder reads the item metadata inside a hook, from harness.items.
    assert "harness.items" in graph["harness.run.recorder"]


def test_the_graph_sees_relative_imports(tmp_path):
    pkg = tmp_path / "harness" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "harness" / "__init__.py").write_text("")
    (tmp_path / "harness" / "top.py").write_text("")
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("def f():\n    from ..top import x\n    from .b import y\n")
    (pkg / "b.py").write_text("")
    global ROOT
    saved, ROOT = ROOT, tmp_path / "harness"
    try:
        known = _modules()
        assert _imports(pkg / "a.py", known) == {"harness.top", "harness.sub.b"}
        assert _imports(pkg / "__init__.py", known) == {"harness.sub", "harness.sub.a"}
    finally:
        ROOT = saved
