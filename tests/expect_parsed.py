"""`expect_parsed` in a sample's X.expect.json: what the parser reads that its `inspect` kind does
not show (a driver version, a row's root, per-GPU power...), hand-read like the rest.

tests/test_parsers_samples.py judges `expect` / `expect_paths` against the `inspect` result; a
parser module's own test reads `expect_parsed` of its folder through `cases()` and judges it
against the parser's records (each module says the shape it reads). A fact that `inspect` comes
to show moves from `expect_parsed` to `expect_paths`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest


def cases(folder: Path) -> list[Any]:
    """pytest params (sample file name, its `expect_parsed`) for the samples under `folder`."""
    out = []
    for exp in sorted(folder.glob("*.expect.json")):
        spec = json.loads(exp.read_text(encoding="utf-8"))
        if "expect_parsed" in spec:
            name = exp.name.removesuffix(".expect.json")
            out.append(pytest.param(name, spec["expect_parsed"], id=name))
    return out


def get(obj: Any, dotted: str) -> Any:
    """`obj`'s value at `dotted` (attributes, dict keys, list/tuple indices); tuples and
    dataclasses come back as JSON would hold them (lists, dicts)."""
    for part in dotted.split("."):
        if isinstance(obj, list | tuple):
            obj = obj[int(part)]
        elif isinstance(obj, dict):
            obj = obj[part]
        else:
            obj = getattr(obj, part)
    return as_json(obj)


def as_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value
