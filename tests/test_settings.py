"""The PREFLIGHT_* registry (harness.base.settings) against the README's table and the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.base.settings import (
    SETTINGS,
    SettingError,
    get_bool,
    get_float,
    get_int,
    get_list,
    get_path,
    get_str,
    given,
    parse,
    public,
    value,
)

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
    assert all(s.doc and s.type in (str, int, float, bool, Path, list) for s in SETTINGS)
    # every default parses as its own type (a default the accessor would refuse is a bug)
    assert all(parse(s, None) is None or isinstance(parse(s, None), s.type) for s in SETTINGS)


def test_value_is_typed_and_defaults():
    assert value({}, "PREFLIGHT_JOIN_TIMEOUT_S") == 300.0
    assert value({"PREFLIGHT_JOIN_TIMEOUT_S": " 12.5 "}, "PREFLIGHT_JOIN_TIMEOUT_S") == 12.5
    assert value({"PREFLIGHT_ISOLATION_ROUNDS": ""}, "PREFLIGHT_ISOLATION_ROUNDS") == 4
    assert value({"PREFLIGHT_TIER": "certify"}, "PREFLIGHT_TIER") == "certify"
    with pytest.raises(SettingError, match="PREFLIGHT_PORT='x'"):
        value({"PREFLIGHT_PORT": "x"}, "PREFLIGHT_PORT")
    with pytest.raises(KeyError):
        value({}, "PREFLIGHT_NOT_A_SETTING")


def test_each_accessor_reads_its_type_from_the_mapping_or_the_environment(monkeypatch):
    env = {"PREFLIGHT_NNODES": " 4 ", "PREFLIGHT_NCCL_FORCE_NET": "Off",
           "PREFLIGHT_SYSROOT": "/fake", "PREFLIGHT_EXTRA_CHECKS": "/a: /b ::",
           "PREFLIGHT_MPIRUN_ARGS": " --mca  btl tcp ", "PREFLIGHT_K8S_MARK": "label, taint,",
           "PREFLIGHT_XID_WINDOW_H": "1e1", "PREFLIGHT_TIER": " certify "}
    assert get_int("PREFLIGHT_NNODES", env) == 4
    assert get_bool("PREFLIGHT_NCCL_FORCE_NET", env) is False
    assert get_bool("PREFLIGHT_NCCL_FORCE_NET", {}) is True  # its default
    assert get_path("PREFLIGHT_SYSROOT", env) == Path("/fake")
    assert get_path("PREFLIGHT_SYSROOT", {}) == Path("/")
    assert get_list("PREFLIGHT_EXTRA_CHECKS", env) == ["/a", "/b"]
    assert get_list("PREFLIGHT_MPIRUN_ARGS", env) == ["--mca", "btl", "tcp"]
    assert get_list("PREFLIGHT_K8S_MARK", env) == ["label", "taint"]
    assert get_list("PREFLIGHT_K8S_MARK", {}) == []
    assert get_float("PREFLIGHT_XID_WINDOW_H", env) == 10.0
    assert get_float("PREFLIGHT_ISOLATION_ROUNDS", {"PREFLIGHT_ISOLATION_ROUNDS": "4.0"}) == 4.0
    assert get_str("PREFLIGHT_TIER", env) == "certify"
    assert get_str("PREFLIGHT_S3_URI", env) is None
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "node7")
    assert get_str("PREFLIGHT_HOSTNAME") == "node7"  # os.environ when no mapping is given


@pytest.mark.parametrize(("name", "raw", "said"), [
    ("PREFLIGHT_NNODES", "x", "PREFLIGHT_NNODES='x' is not an integer"),
    ("PREFLIGHT_NNODES", "\u0663", "is not an integer"),  # an Arabic-Indic digit: int() takes it
    ("PREFLIGHT_NNODES", "1" * 19, "is not an integer"),
    ("PREFLIGHT_JOIN_TIMEOUT_S", "nan", "PREFLIGHT_JOIN_TIMEOUT_S='nan' is not a finite number"),
    ("PREFLIGHT_JOIN_TIMEOUT_S", "inf", "is not a finite number"),
    ("PREFLIGHT_JOIN_TIMEOUT_S", "1_0", "is not a finite number"),
    ("PREFLIGHT_NCCL_FORCE_NET", "maybe", "PREFLIGHT_NCCL_FORCE_NET='maybe' is not one of"),
])
def test_a_malformed_value_is_an_error_naming_the_variable(name, raw, said):
    with pytest.raises(SettingError, match=re.escape(said)):
        parse(name, raw)


def test_the_caller_names_the_error_class_its_callers_catch():
    class TopologyLike(ValueError):
        pass

    with pytest.raises(TopologyLike, match="PREFLIGHT_PORT='x'"):
        get_int("PREFLIGHT_PORT", {"PREFLIGHT_PORT": "x"}, error=TopologyLike)


def test_an_accessor_of_another_type_is_refused():
    with pytest.raises(TypeError, match="PREFLIGHT_TIER is registered as str"):
        get_int("PREFLIGHT_TIER", {})
    with pytest.raises(KeyError):
        get_str("PREFLIGHT_NOT_A_SETTING", {})


def test_given_says_what_is_set_never_a_default():
    assert given("PREFLIGHT_SYSROOT", {}) is None
    assert given("PREFLIGHT_SYSROOT", {"PREFLIGHT_SYSROOT": " /x "}) == "/x"


def test_a_malformed_variable_read_by_the_harness_names_itself():
    """Read through the registry, a malformed node count is an error naming it (in the
    topology's own error class), no longer ignored."""
    from harness.topology.model import TopologyError
    from harness.topology.nodes import count_nodes

    with pytest.raises(TopologyError, match=re.escape("PREFLIGHT_NUM_NODES='two' is not an integer")):
        count_nodes({"PREFLIGHT_NUM_NODES": "two"})
    assert count_nodes({"PREFLIGHT_NUM_NODES": "3"}).num_nodes == 3
