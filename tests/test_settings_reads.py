"""No code outside harness/base/settings.py reads a PREFLIGHT_* variable itself: every read goes
through the registry's typed accessors (harness.base.settings.get_str, get_int, ...), which parse
and validate it in one place and name the variable in any error. Read with ast, nothing
imported: a call `.get(KEY)` / `.pop(KEY)` whose value is used / `getenv(KEY)`, a subscript
`env[KEY]` that is read, or `KEY in env`, where KEY is a `"PREFLIGHT_..."` literal or a
constant that names one (`S3_URI_ENV = "PREFLIGHT_S3_URI"`). Writing one (a child's
environment being built, `env[KEY] = ...`, `{KEY: ...}`, `os.environ.pop(KEY, None)` as a
statement) is not a read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("harness", "checks")
REGISTRY = ROOT / "harness" / "settings.py"

#: (file relative to the checkout, variable): reads that must stay direct, each with why. Only
#: a mapping that is not the process's environment may be read this way, and then through
#: the registry's `parse` where the value is used as a setting.
ALLOWED: dict[tuple[str, str], str] = {
    ("harness/fixtures/core.py", "PREFLIGHT_ORIG_PYTHONPATH"):
        "restores a child's PYTHONPATH in the copy of the environment being built for it: "
        "whether the variable is present (even empty) is what matters, not its value",
}

_READERS = {"get", "pop", "setdefault", "getenv"}


def _constants(paths: list[Path]) -> set[str]:
    """Names bound anywhere to a "PREFLIGHT_..." string (module or class constants)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(
                    node.value, ast.Constant) and str(node.value.value).startswith("PREFLIGHT_"):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _key(node: ast.AST, constants: set[str], values: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and node.value.startswith("PREFLIGHT_"):
        return node.value
    name = node.id if isinstance(node, ast.Name) else \
        node.attr if isinstance(node, ast.Attribute) else None
    return values.get(name, name) if name in constants else None


def direct_reads(path: Path, constants: set[str], values: dict[str, str]) -> list[tuple[int, str]]:
    """(line, variable) of every direct read of a PREFLIGHT_* variable in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    discarded = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}
    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name in _READERS and not (name == "pop" and id(node) in discarded):
                key = _key(node.args[0], constants, values)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = _key(node.slice, constants, values)
        elif isinstance(node, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn)
                                                   for o in node.ops):
            key = _key(node.left, constants, values)
        if key is not None:
            found.append((node.lineno, key))
    return found


def _sources() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]


def _values(paths: list[Path]) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and str(
                    node.value.value).startswith("PREFLIGHT_"):
                out.update({t.id: node.value.value for t in node.targets
                            if isinstance(t, ast.Name)})
    return out


def test_no_code_reads_a_preflight_variable_around_the_registry():
    paths = _sources()
    constants, values = _constants(paths), _values(paths)
    found = [f"{path.relative_to(ROOT)}:{line}: {key}" for path in paths if path != REGISTRY
             for line, key in direct_reads(path, constants, values)
             if (path.relative_to(ROOT).as_posix(), key) not in ALLOWED]
    assert found == []


def test_every_allowed_read_still_exists():
    paths = _sources()
    constants, values = _constants(paths), _values(paths)
    seen = {(path.relative_to(ROOT).as_posix(), key) for path in paths
            for _, key in direct_reads(path, constants, values)}
    assert set(ALLOWED) - seen == set()  # a stale allowance hides nothing: drop it


@pytest.mark.parametrize(("source", "reads"), [
    ('import os\nx = os.environ.get("PREFLIGHT_TIER")\n', 1),
    ('import os\nx = os.getenv("PREFLIGHT_TIER", "")\n', 1),
    ('def f(env):\n    return env["PREFLIGHT_TIER"]\n', 1),
    ('def f(env):\n    return "PREFLIGHT_TIER" in env\n', 1),
    ('K = "PREFLIGHT_TIER"\ndef f(env):\n    return env.get(K) or env.pop(K)\n', 2),
    ('import os\nos.environ.pop("PREFLIGHT_DEADLINE", None)\n', 0),
    ('def f(env):\n    env["PREFLIGHT_TIER"] = "x"\n    return {"PREFLIGHT_NNODES": "1"}\n', 0),
])
def test_the_detector_finds_direct_reads(tmp_path, source, reads):
    path = tmp_path / "m.py"
    path.write_text(source)
    constants, values = _constants([path]), _values([path])
    assert len(direct_reads(path, constants, values)) == reads
