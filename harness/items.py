"""What the results file and the plugin say about a collected pytest item: its check metadata
(the @check spec, or one made for a plain pytest test), the suite it came from, and the session's
selection. Shared by harness.plugin (which fills the stash) and harness.run.recorder (which writes
it), below both, so that neither imports the other."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import pytest

from harness.base.jsontypes import JSONObject
from harness.base.tiers import TIERS
from harness.checking import CheckSpec

__all__ = ["describe_item", "item_spec", "reused_key", "selection_key", "suite_of", "suites_key"]

#: The suites of the session (NAME, root), from --preflight-suite.
suites_key = pytest.StashKey[list[tuple[str, Path]]]()
spec_key = pytest.StashKey[CheckSpec]()
#: The session's selection (tier, -k and -m applied) before the phase split.
selection_key = pytest.StashKey[list[pytest.Item]]()
#: The check IDs a certificate stands for this run (--preflight-reused): never run, never selected.
reused_key = pytest.StashKey[list[str]]()


def suite_of(item: pytest.Item) -> tuple[str, Path] | None:
    """(NAME, root) of the --preflight-suite the item was collected from; None: the built-in."""
    path = _resolved(str(item.path))
    for name, root in item.config.stash.get(suites_key, []):
        if path == root or root in path.parents:
            return name, root
    return None


@functools.lru_cache(maxsize=4096)  # asked for every item several times; a realpath each time
def _resolved(path: str) -> Path:
    return Path(path).resolve()


def _plain_id(item: pytest.Item) -> str:
    """A plain test's check ID: its node id, the file relative to its suite's parent folder
    (`site-checks/test_storage.py::test_fsx_mounted`), so it reads the same on every node."""
    suite = suite_of(item)
    if suite is None:
        return item.nodeid
    rest = item.nodeid.split("::", 1)[1] if "::" in item.nodeid else item.name
    return f"{_resolved(str(item.path)).relative_to(suite[1].parent).as_posix()}::{rest}"


def item_spec(item: pytest.Item) -> CheckSpec:
    """The item's @check metadata; for a plain pytest test, metadata made from the test itself
    (ID from its node id, title from its docstring, tier and exclusive from its markers)."""
    if spec_key in item.stash:
        return item.stash[spec_key]
    fn = getattr(item, "function", None)
    spec = getattr(fn, "__preflight_check__", None)
    if spec is None:
        marked = [t for t in TIERS if item.get_closest_marker(t) is not None]
        doc = inspect.getdoc(fn) if fn is not None else None
        module = getattr(getattr(item, "module", None), "__name__", "")
        spec = CheckSpec(
            id=_plain_id(item), title=(doc or item.name).splitlines()[0], tier=marked[-1] if
            marked else TIERS[0], why=doc or "", remedy="", kind="test",
            exclusive=item.get_closest_marker("exclusive") is not None,
            function=getattr(item, "originalname", item.name), module=module,
        )
    item.stash[spec_key] = spec
    return spec


def describe_item(item: pytest.Item) -> JSONObject:
    """What the results file says about a selected item (list and explain show it)."""
    spec = item_spec(item)
    suite = suite_of(item)
    return {"id": spec.id, "nodeid": item.nodeid, "title": spec.title, "tier": spec.tier,
            "exclusive": spec.exclusive, "kind": spec.kind, "suite": suite[0] if suite else "",
            "why": spec.why, "remedy": spec.remedy, "defined": f"{spec.module}.{spec.function}",
            "reads": list(spec.reads), "family": spec.family}
