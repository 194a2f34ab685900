"""dumps_indented writes json.dumps(indent=2, default=str)'s text byte for byte (issue 32 item 3:
`preflight inspect --json` of a 10,000-row table spent more on its output than on its parse).

Checked on every recorded sample's `inspect --json` result (each file under tests/data/<kind> and
tests/samples/<kind>, read by its kind and redacted as cmd_inspect does; and every JSON file under
tests/data, a report among them) and on random structures with every member type json writes:
nested objects and arrays, tuples, empty ones, non-str keys, str and int subclasses, NaN and the
infinities, non-ASCII and control characters, and objects only `default=str` can write.
"""

from __future__ import annotations

import json
import math
import random
from enum import IntEnum
from pathlib import Path

import pytest

from harness.base import jsonout
from harness.base.jsonout import dumps_indented
from harness.base.redact import Redactor
from harness.parsers import ParseError, inspect_kind
from harness.profiles.table import get_profile

TESTS = Path(__file__).parent
ROOTS = (TESTS / "data", TESTS / "samples")


def _reference(value: object) -> str:
    return json.dumps(value, indent=2, default=str)


def _samples() -> list[tuple[str, Path]]:
    out = []
    for root in ROOTS:
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            kind = folder.name.replace("_", "-")
            if inspect_kind(kind) is None:
                continue
            out += [(kind, p) for p in sorted(folder.rglob("*")) if p.is_file()
                    and p.suffix != ".md" and not p.name.endswith(".expect.json")]
    return out


def test_every_recorded_sample_is_written_as_json_writes_it() -> None:
    profile = get_profile("local-cpu")
    written = 0
    for kind, path in _samples():
        with open(path, encoding="utf-8", errors="replace", newline="") as stream:
            try:
                result = inspect_kind(kind)(stream, profile=profile)  # type: ignore[misc]
            except ParseError:
                continue
        result = Redactor().obj(result)
        assert dumps_indented(result) == _reference(result), path
        written += 1
    assert written >= 250, written  # the samples are found and read (not all refused)


def test_every_recorded_json_file_is_written_as_json_writes_it() -> None:
    seen = 0
    for path in sorted(p for root in ROOTS for p in root.rglob("*.json")):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            continue
        assert dumps_indented(value) == _reference(value), path
        seen += 1
    assert seen >= 100, seen


class _Str(str):
    pass


class _Level(IntEnum):
    HIGH = 3


_LEAVES = ["", "a", "é ü", "\u2028 \x00 \t \"q\" \\", "ǅ" * 3, 0, -7, 2**70, 0.1, -0.0, 1e300,
           math.nan, math.inf, -math.inf, True, False, None, _Str("sub"), _Level.HIGH,
           Path("/tmp/x"), b"bytes", {1, 2}.__class__.__name__]
_KEYS = ["k", "é", "", "a b", 1, 2.5, True, None]


def _random(rng: random.Random, depth: int) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.35:
        return rng.choice(_LEAVES)
    size = rng.choice([0, 1, 2, 5])
    if roll < 0.65:
        keys = _KEYS if rng.random() < 0.2 else _KEYS[:4]
        return {rng.choice(keys): _random(rng, depth + 1) for _ in range(size)}
    items = [_random(rng, depth + 1) for _ in range(size)]
    return tuple(items) if rng.random() < 0.2 else items


@pytest.mark.parametrize("seed", range(4))
def test_random_structures_are_written_as_json_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(1500):
        value = _random(rng, 0)
        assert dumps_indented(value) == _reference(value), value


def test_the_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flat row encoded with the separators of the level above is not json's text."""
    rows = {"rows": [{"a": 1, "b": {"c": 2.5, "d": "x"}}]}
    assert dumps_indented(rows) == _reference(rows)
    one_up = jsonout._encoder.__wrapped__
    monkeypatch.setattr(jsonout, "_encoder", lambda level: one_up(max(level - 1, 0)))
    assert dumps_indented(rows) != _reference(rows)


#: Scalars a table's cells may hold, with what could be mistaken for the column and object
#: separators the table writer splits at, and `%` (its row template's marker).
_CELLS = ["", "},\n      {", ",\n", "%s", "100%", '"q"', "é", 0, -7, 2**70, 0.1, -0.0, 1e300,
          math.nan, math.inf, True, False, None]
_COLUMNS = ["size", "%s", "a%%b", "},\n{", "é", ""]


def _table(rng: random.Random) -> list[object]:
    """An array of objects with the same keys, each key's values scalars or objects of scalars
    with the same keys (a table's rows), now and then with one row out of that shape."""
    keys = rng.sample(_COLUMNS, rng.randint(1, 4))
    inside = {k: rng.sample(_COLUMNS, rng.randint(1, 3)) if rng.random() < 0.4 else None
              for k in keys}
    rows: list[object] = [
        {k: rng.choice(_CELLS) if inside[k] is None else {s: rng.choice(_CELLS) for s in inside[k]}
         for k in keys} for _ in range(rng.choice([2, 3, 10]))]
    roll, last = rng.random(), rows[-1]
    assert isinstance(last, dict)
    if roll < 0.1:
        rows[-1] = dict(reversed(last.items()))  # another key order
    elif roll < 0.2:
        last[keys[0]] = rng.choice([*_LEAVES, [1, 2], {}, {"x": [1]}])  # another member type
    elif roll < 0.25:
        rows.append("not an object")
    return rows


@pytest.mark.parametrize("seed", range(3))
def test_tables_are_written_as_json_writes_them(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(600):
        value = _table(rng) if rng.random() < 0.5 else {"rows": _table(rng), "n": [_table(rng)]}
        assert dumps_indented(value) == _reference(value), value


def test_a_table_is_written_column_by_column(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"size": 8, "oop": {"time_us": 1.5, "wrong": 0}},
            {"size": 16, "oop": {"time_us": 2.5, "wrong": None}}]
    assert jsonout._rows(rows, 1) is not None  # the column path takes it
    assert dumps_indented({"rows": rows}) == _reference({"rows": rows})
    one_up = jsonout._encoder.__wrapped__
    monkeypatch.setattr(jsonout, "_encoder", lambda level: one_up(max(level - 1, 0)))
    assert dumps_indented({"rows": rows}) != _reference({"rows": rows})
