"""The PREFLIGHT_* registry (harness.settings) against the README's table and the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.settings import SETTINGS, SettingError, public, value

ROOT = Path(__file__).resolve().parent.parent
NAME = re.compile(r"PREFLIGHT_[A-Z0-9_]*[A-Z0-9]")


def _readme_table() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in NAME.findall(row)}


def test_the_readme_table_lists_exactly_the_public_settings():
    assert _readme_table() == {s.name for s in public()}


def test_every_variable_the_code_names_is_registered():
    registered = {s.name for s in SETTINGS}
    spelled = {name for folder in ("harness", "checks") for path in (ROOT / folder).rglob("*.py")
               for name in NAME.findall(path.read_text(encoding="utf-8"))}
    assert spelled - registered == set()
    assert registered - spelled == set()  # a registered name nobody reads is stale


def test_names_are_unique_and_documented():
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert all(s.doc and s.type in (str, int, float) for s in SETTINGS)


def test_value_is_typed_and_defaults():
    assert value({}, "PREFLIGHT_JOIN_TIMEOUT_S") == 300.0
    assert value({"PREFLIGHT_JOIN_TIMEOUT_S": " 12.5 "}, "PREFLIGHT_JOIN_TIMEOUT_S") == 12.5
    assert value({"PREFLIGHT_ISOLATION_ROUNDS": ""}, "PREFLIGHT_ISOLATION_ROUNDS") == 4
    assert value({"PREFLIGHT_TIER": "certify"}, "PREFLIGHT_TIER") == "certify"
    with pytest.raises(SettingError, match="PREFLIGHT_PORT='x'"):
        value({"PREFLIGHT_PORT": "x"}, "PREFLIGHT_PORT")
    with pytest.raises(KeyError):
        value({}, "PREFLIGHT_NOT_A_SETTING")
