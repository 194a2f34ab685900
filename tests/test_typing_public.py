"""No `Any` in a public function's signature (issue 14): every public function and method of
harness/ and checks/ says what it takes and gives. Private helpers (a leading underscore, or
a function nested in another) may keep Any where a real type costs clarity."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "checks")

#: module -> why its public functions may still have Any. Each entry must still hold (the test
#: fails on a stale one); a module not listed has none. Empty: every public signature is typed.
ALLOWED: dict[str, str] = {}


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            try:
                parsed = ast.parse(sub.value, mode="eval").body
            except SyntaxError:
                continue
            if _mentions_any(parsed):
                return True
    return False


def _public_functions(tree: ast.Module):
    """(qualified name, node) of module-level functions and methods of module-level classes
    whose names (and class names) have no leading underscore."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if not node.name.startswith("_"):
                yield node.name, node
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if (isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                        and not item.name.startswith("_")):
                    yield f"{node.name}.{item.name}", item


def _offenders() -> list[str]:
    out = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, fn in _public_functions(tree):
                args = fn.args
                annotations = [a.annotation for a in (*args.posonlyargs, *args.args,
                                                      *args.kwonlyargs)]
                annotations += [a.annotation for a in (args.vararg, args.kwarg) if a]
                if any(_mentions_any(a) for a in (*annotations, fn.returns)):
                    out.append(f"{module}:{name}")
    return out


def test_no_any_in_public_signatures():
    offenders = [o for o in _offenders() if o.split(":")[0] not in ALLOWED]
    assert offenders == [], f"{len(offenders)} public functions with Any: {offenders}"


def test_the_allow_list_has_no_stale_entry():
    still = {o.split(":")[0] for o in _offenders()}
    assert sorted(set(ALLOWED) - still) == []


def test_the_walk_finds_any_where_it_is():
    tree = ast.parse("def f(x: 'dict[str, Any]') -> int: ...\n"
                     "def _g(x: Any) -> Any: ...\n"
                     "class C:\n    def m(self, **kw: Any) -> None: ...\n")
    found = [name for name, fn in _public_functions(tree)
             if any(_mentions_any(a.annotation) for a in (*fn.args.args, fn.args.kwarg) if a)]
    assert found == ["f", "C.m"]
