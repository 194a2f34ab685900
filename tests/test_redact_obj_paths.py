"""Redactor.obj's short cuts (issue 32 item 3: the 10,000 rows of `inspect --json`) redact what
the recursion without them redacted: numbers, bools and None taken as they are, objects with
no `name`/`key` key (in any case) not searched for a name/value pair, and objects whose keys
name no credential (a table's rows) copied, or only their members redacted."""

from __future__ import annotations

import random

from harness.base import redact
from harness.base.redact import Redactor
from harness.base.redact_pairs import is_secret_name
from harness.base.redact_shapes import REDACTED

#: Keys and values that reach each branch: credential names, pair keys in any case, counts.
_KEYS = ["name", "Name", "KEY", "value", "Value", "HF_TOKEN", "password", "pass", "counts",
         "size", "rows", "", "token_count"]
_LEAVES = ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "plain", "ghp_" + "a" * 36, 3, 0, 2.5, True,
           None, "x=1 password=hunter22", ("t", 1)]


def _reference(r: Redactor, value: object, parent: object = None) -> object:
    """obj before the short cuts (harness/base/redact.py at 781bf42)."""
    if isinstance(value, str):
        return r.text(value)
    if isinstance(value, dict):
        name_key, paired = _paired(value)
        return {k: (REDACTED if k == paired or (
            k != name_key and isinstance(k, str) and is_secret_name(k)
            and redact._is_scalar_value(v) and not redact._is_count(parent, k, v))
            else _reference(r, v, k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_reference(r, v, parent) for v in value]
    return value


def _paired(obj: dict[object, object]) -> tuple[object, object]:
    if len(obj) > 8:
        return None, None
    lower = {k.lower(): k for k in obj if isinstance(k, str)}
    for name_key, value_key in (("name", "value"), ("key", "value")):
        name = obj.get(lower.get(name_key, ""))
        if isinstance(name, str) and value_key in lower:
            value = lower[value_key]
            secret = is_secret_name(name) and redact._is_scalar_value(obj[value])
            return lower[name_key], value if secret else None
    return None, None


def _random(rng: random.Random, depth: int) -> object:
    if depth > 3 or rng.random() < 0.4:
        return rng.choice(_LEAVES)
    if rng.random() < 0.6:
        keys = [k for k in _KEYS if k]  # `""` with a str value breaks both (a KeyError)
        return {rng.choice(keys): _random(rng, depth + 1) for _ in range(rng.randint(0, 10))}
    return [_random(rng, depth + 1) for _ in range(rng.randint(0, 4))]


def test_obj_redacts_as_before() -> None:
    rng = random.Random(32)
    r = Redactor({"HF_TOKEN": "hf_secretvalue123"})
    redacted = 0
    for _ in range(5000):
        value = _random(rng, 0)
        assert r.obj(value) == _reference(r, value), value
        redacted += REDACTED in repr(r.obj(value))
    assert redacted > 500  # the structures reach the redacting branches
