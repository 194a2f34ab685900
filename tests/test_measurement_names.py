"""Every measurement the built-in checks record has a stable name (`name=`), the key of its
Prometheus series (harness.report.metrics), and docs/reports.md lists them: a reworded `what` never
moves a series, and renaming one is a visible change to the documented list (read with ast,
nothing imported)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reports.md"
BEGIN, END = "<!-- measurement names: begin -->", "<!-- measurement names: end -->"
CALLS = {"measure", "expect", "expect_none"}


def _calls() -> list[tuple[str, int, ast.Call]]:
    """Every measure/expect/expect_none call of a module that imports them from the checks'
    API (harness.checking), with its file and line."""
    found = []
    for path in sorted([*ROOT.glob("checks/*.py"), *ROOT.glob("harness/**/*.py")]):
        if path.name == "checking.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(n, ast.ImportFrom) and n.module == "harness.checking"
                   and any(a.name in CALLS for a in n.names) for n in ast.walk(tree)):
            continue
        found += [(str(path.relative_to(ROOT)), n.lineno, n) for n in ast.walk(tree)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                  and n.func.id in CALLS]
    return found


def _name(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "name"), None)


def documented_names() -> list[str]:
    """The literal names, sorted (the others are built from a parameter: see their callers)."""
    names = {v.value for _, _, c in _calls() if isinstance(v := _name(c), ast.Constant)}
    return sorted(str(n) for n in names)


def test_every_builtin_measurement_has_a_stable_name():
    calls = _calls()
    assert len(calls) > 80
    missing = [f"{f}:{line}" for f, line, c in calls if _name(c) is None]
    assert missing == [], f"measurements without name= (their series would follow the text): " \
                          f"{missing}"


def test_docs_list_every_measurement_name():
    text = DOC.read_text(encoding="utf-8")
    block = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    listed = sorted(n.strip(" `") for n in block.replace("\n", " ").split(",") if n.strip())
    assert listed == documented_names(), (
        "docs/reports.md's measurement names differ from the checks'; they should read:\n"
        + ", ".join(f"`{n}`" for n in documented_names()))
