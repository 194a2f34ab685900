"""One import path per name (issue 28 item 2), read with ast, nothing imported:
- no harness module re-exports a harness name it does not define: a name imported from a sibling
  is neither listed in `__all__`, nor imported from the importing module, nor read as its
  attribute (`gpu.smi_query` where probes/gpu.py only imported it), nor named through it in a
  dotted string (`"harness.cli.EXIT_OK"`, monkeypatch targets, docs): tests patch the defining
  module, and code that must see the patch calls through the owner's module attribute;
- private names stay in their module: harness/ and checks/ never `from harness.x import _y` nor
  read `x._y` across modules (a shared helper is public in the module that owns it). A private
  extension module imported by its own package's wrapper (`parsers/_nccl_scan`) is the wrapper's
  inside. tests/ may reach into a module to test its internals."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Where imports are read; tests/data and tests/samples are recorded tool output.
SOURCES = ("harness", "checks", "tests", "bench", "scripts", "container")
FROZEN = ("tests/data/", "tests/samples/")
#: The product's own code, where a private name never crosses a module boundary.
PRODUCT = ("harness/", "checks/")
#: Private names still crossing, each waiting on the branch that owns the files (issue 28 item
#: 2; delete the line when that branch lands): (importer, owner, name).
PENDING: set[tuple[str, str, str]] = set()  # every crossing fixed; keep it empty


def _module(rel: str) -> str:
    parts = rel.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Tree:
    """The parsed sources under `root`: each harness module's own names and imported names."""

    def __init__(self, root: Path) -> None:
        self.root = root
        found = (p for d in SOURCES for p in sorted((root / d).rglob("*.py")))
        self.files = {p.relative_to(root).as_posix(): p for p in found
                      if not p.relative_to(root).as_posix().startswith(FROZEN)}
        self.trees = {rel: ast.parse(p.read_text(encoding="utf-8"), rel) for rel, p in self.files.items()}
        self.modules = {_module(rel): rel for rel in self.files if rel.startswith("harness/")}
        # C extension modules (setup.py builds harness/x/_y.c into harness.x._y), built or not
        self.modules.update({_module(p.relative_to(root).as_posix().split(".")[0] + ".py"): ""
                             for pattern in ("*.so", "*.c") for p in (root / "harness").rglob(pattern)})
        #: module -> {local name: (owner module, its name)}: what it imported from the harness (a
        #: name, or a module of another package: `from harness.base import proc` in probes/network)
        self.imported = {mod: dict(self.from_imports(rel, module_level=True))
                         for mod, rel in self.modules.items() if rel}

    def from_imports(self, rel: str, module_level: bool = False) -> Iterator[tuple[str, tuple[str, str]]]:
        mod = _module(rel)
        package = mod.split(".") if rel.endswith("__init__.py") else mod.split(".")[:-1]
        nodes = ast.walk(self.trees[rel])
        if module_level:
            nodes = (n for top in self.trees[rel].body if not isinstance(top, (ast.FunctionDef, ast.ClassDef,
                                                                                ast.AsyncFunctionDef))
                     for n in ast.walk(top))
        for node in nodes:
            if not isinstance(node, ast.ImportFrom):
                continue
            owner = node.module or ""
            if node.level:
                base = package[:len(package) - node.level + 1]
                owner = ".".join([*base, owner] if owner else base)
            if not owner.startswith("harness"):
                continue
            for alias in node.names:
                yield alias.asname or alias.name, (owner, alias.name)

    def module_aliases(self, rel: str) -> dict[str, str]:
        """Local names bound to harness modules in a file (`from harness.probes import gpu`)."""
        out = {}
        for node in ast.walk(self.trees[rel]):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                            if f"{node.module}.{a.name}" in self.modules})
            elif isinstance(node, ast.Import):
                out.update({a.asname: a.name for a in node.names if a.asname and a.name in self.modules})
        return out

    def reexported(self, mod: str, name: str) -> bool:
        """`mod.name` is reached through `mod` though another module defines it (a package's own
        submodule is the package's: `harness.parsers.common`; a private binding is the module's
        inside, `private_crossings` judges those: `nccl_log_chunk._nccl_scan`, None without C)."""
        return (name in self.imported.get(mod, {}) and f"{mod}.{name}" not in self.modules
                and not name.startswith("_"))


def reexports(tree: Tree) -> list[str]:
    """Every place a harness name is reached through a module that only imported it."""
    found = []
    for mod, rel in tree.modules.items():
        for node in tree.trees[rel].body if rel else ():
            if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets)
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                found += [f"{rel}: __all__ lists {e.value}, imported from {tree.imported[mod][e.value][0]}"
                          for e in node.value.elts
                          if isinstance(e, ast.Constant) and tree.reexported(mod, e.value)]
    for rel in tree.files:
        for _, (owner, name) in tree.from_imports(rel):
            if tree.reexported(owner, name):
                found.append(f"{rel}: imports {name} from {owner}, which imported it from "
                             f"{tree.imported[owner][name][0]}")
        aliases = tree.module_aliases(rel)
        for node in ast.walk(tree.trees[rel]):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and tree.reexported(aliases.get(node.value.id, ""), node.attr)):
                found.append(f"{rel}:{node.lineno}: reads {node.value.id}.{node.attr} "
                             f"({aliases[node.value.id]} only imported it)")
    texts = [*tree.files, *(p.relative_to(tree.root).as_posix() for p in (tree.root / "docs").rglob("*.md"))]
    for rel in texts:
        body = (tree.root / rel).read_text(encoding="utf-8")
        for m in re.finditer(r"(?<![\w.])(harness(?:\.\w+)+)[.:](\w+)", body):
            if tree.reexported(m.group(1), m.group(2)):
                found.append(f"{rel}: names {m.group(0)} ({m.group(1)} only imported it)")
    return sorted(set(found))


def private_crossings(tree: Tree) -> list[tuple[str, str, str]]:
    """(importer, owner, name) for each private name the product reads from another module."""
    found = set()
    for rel in tree.files:
        if not rel.startswith(PRODUCT):
            continue
        me = _module(rel)
        for _, (owner, name) in tree.from_imports(rel):
            if (name.startswith("_") and not name.startswith("__") and owner != me
                    and f"{owner}.{name}" not in tree.modules):
                found.add((rel, owner, name))
        for node in ast.walk(tree.trees[rel]):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                package = me.rsplit(".", 1)[0]
                found.update((rel, node.module, a.name) for a in node.names
                             if a.name.startswith("_") and f"{node.module}.{a.name}" in tree.modules
                             and node.module != package)
        aliases = tree.module_aliases(rel)
        for node in ast.walk(tree.trees[rel]):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != me
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.add((rel, aliases[node.value.id], node.attr))
    return sorted(found)


@functools.cache
def _repo() -> Tree:
    return Tree(REPO)


def test_no_module_reexports_a_name_it_does_not_define():
    assert reexports(_repo()) == []


def test_no_private_name_crosses_a_module_boundary():
    assert [c for c in private_crossings(_repo()) if c not in PENDING] == []


def _write(root: Path, package: str, files: dict[str, str]) -> Tree:
    """A synthetic tree: harness/ and harness/`package`/ packages, and `files`."""
    for rel, text in {"harness/__init__.py": "", f"harness/{package}/__init__.py": "", **files}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Tree(root)


def test_a_reexport_is_found_every_way_it_is_read(tmp_path: Path):
    tree = _write(tmp_path, "base", {
        "harness/base/owner.py": "def helper(): ...\n",
        "harness/base/shim.py": 'from harness.base import owner\nfrom harness.base.owner import helper\n\n'
                                '__all__ = ["helper"]\n',
        "harness/user.py": "from harness.base.shim import helper\n",
        "tests/test_x.py": "from harness.base import shim\n\nshim.helper()\nshim.owner.helper()\n",
        "docs/x.md": "`harness.base.shim.helper` is the helper\n",
    })
    assert [f.split(":")[0] for f in reexports(tree)] == [
        "docs/x.md", "harness/base/shim.py", "harness/user.py", "tests/test_x.py", "tests/test_x.py"]
    (tmp_path / "harness/base/shim.py").write_text("from harness.base.owner import helper\n\nhelper()\n")
    for rel in ("harness/user.py", "tests/test_x.py", "docs/x.md"):
        (tmp_path / rel).write_text("from harness.base.owner import helper\n")
    assert reexports(Tree(tmp_path)) == []  # using an imported name is not re-exporting it


def test_a_private_name_crossing_is_found(tmp_path: Path):
    tree = _write(tmp_path, "parsers", {
        "harness/parsers/common.py": "def _lines(): ...\n", "harness/parsers/_scan.py": "",
        "harness/parsers/a.py": "from harness.parsers import _scan\nfrom .common import _lines\n",
        "harness/probes/b.py": "from harness.parsers import common\n\ncommon._lines()\n",
        "tests/test_c.py": "from harness.parsers.common import _lines\n",
    })
    assert private_crossings(tree) == [
        ("harness/parsers/a.py", "harness.parsers.common", "_lines"),
        ("harness/probes/b.py", "harness.parsers.common", "_lines"),
    ]
