"""The import graph of harness/ (read with ast, nothing imported): the layers of
docs/architecture.md import only downward, and no modules import each other in a loop,
counting the imports inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "harness"

#: (importer prefix, imported prefixes it must never reach): the layers, top to bottom, are
#: the CLI and its commands; the run (runner, plugin, report, cluster); the checks' fixtures;
#: probes and parsers; topology, profiles and the small leaves.
FORBIDDEN = [
    ("harness.probes", ("harness.cluster", "harness.cli", "harness.commands", "harness.run.runner",
                        "harness.plugin", "harness.fixtures")),
    ("harness.parsers", ("harness.cluster", "harness.cli", "harness.commands", "harness.run.runner",
                         "harness.plugin", "harness.probes", "harness.fixtures")),
    ("harness.topology", ("harness.cluster", "harness.cli", "harness.commands", "harness.probes",
                          "harness.parsers", "harness.run.runner", "harness.plugin")),
    ("harness.cluster", ("harness.cli", "harness.commands")),
    ("harness.fixtures", ("harness.cli", "harness.commands", "harness.cluster")),
    ("harness.base.tiers", ("harness",)),
    ("harness.base.settings", ("harness",)),
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


def test_layers_import_only_downward():
    graph = _graph()
    climbing = [f"{importer} imports {imported}"
                for importer, imports in sorted(graph.items())
                for prefix, banned in FORBIDDEN
                if importer == prefix or importer.startswith(prefix + ".")
                for imported in sorted(imports)
                if any(imported == b or imported.startswith(b + ".") for b in banned)
                and not (imported == prefix or imported.startswith(prefix + "."))]
    assert climbing == []


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
    assert "harness.topology" in graph["harness.probes.nccl_tests"]
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
