"""The pytest plugin: options, markers, header, tiers, outcomes and exact messages."""

from __future__ import annotations

import json

import pytest

from tests.conftest import check_session, run_checks

CHECKS = '''
import pytest
from harness.checking import check, expect, expect_none, not_applicable, warn
from harness.base.errors import ProbeError

@check("PF-T-001", title="passes", why="w", remedy="r1")
def test_pass():
    expect("busbw", 500.0, ">=", 460.0, "GB/s")

@check("PF-T-002", title="fails", why="w", remedy="check the NCCL log")
def test_fail():
    expect("all_reduce busbw", 112.44, ">=", 370.0, "GB/s")

@check("PF-T-003", title="warns", why="w", remedy="r3")
def test_warn():
    warn("NCCL_PROTO=simple is outdated", remedy="unset it")

@check("PF-T-004", title="skips", why="w", remedy="r4")
def test_skip():
    not_applicable("profile has no EFA")

@check("PF-T-005", title="probe error", why="w", remedy="r5")
def test_probe_error():
    raise ProbeError("`fi_info -p efa` could not run: command not found")

@check("PF-T-006", title="bug", why="w", remedy="r6")
def test_bug():
    {}["missing"]

@check("PF-T-007", title="offenders", why="w", remedy="replace the node")
def test_offenders():
    expect_none("GPUs with uncorrected ECC errors", ["GPU 3 (0000:53:00.0, serial 1321)", "GPU 5"])

@pytest.fixture
def broken_fact():
    raise ProbeError("nvidia-smi timed out")

@check("PF-T-008", title="fixture error", why="w", remedy="r8")
def test_fixture_error(broken_fact):
    pass

@check("PF-T-009", title="plain assert", why="w", remedy="r9")
def test_plain_assert():
    assert 1 == 2, "one is not two"
'''


def test_outcomes_and_exact_messages(suite):
    suite.makepyfile(test_checks=CHECKS)
    res, by_id = run_checks(suite, "--preflight-profile", "p5.48xlarge")
    outcomes = {k: v["outcome"] for k, v in by_id.items()}
    assert outcomes == {
        "PF-T-001": "pass", "PF-T-002": "fail", "PF-T-003": "warn", "PF-T-004": "skip",
        "PF-T-005": "error", "PF-T-006": "error", "PF-T-007": "fail", "PF-T-008": "error",
        "PF-T-009": "fail",
    }
    assert by_id["PF-T-002"]["message"] == (
        "[PF-T-002] all_reduce busbw 112.4 GB/s < 370.0 GB/s required for p5.48xlarge; "
        "check the NCCL log"
    )
    assert by_id["PF-T-003"]["message"] == "[PF-T-003] NCCL_PROTO=simple is outdated; unset it"
    assert by_id["PF-T-004"]["message"] == "not applicable to p5.48xlarge: profile has no EFA"
    assert by_id["PF-T-005"]["message"] == (
        "[PF-T-005] `fi_info -p efa` could not run: command not found"
    )
    assert by_id["PF-T-006"]["message"].startswith("[PF-T-006] harness error: KeyError: ")
    assert by_id["PF-T-007"]["message"] == (
        "[PF-T-007] GPUs with uncorrected ECC errors: 2 found, none allowed for p5.48xlarge: "
        "GPU 3 (0000:53:00.0, serial 1321); GPU 5; replace the node"
    )
    assert by_id["PF-T-008"]["message"] == "[PF-T-008] nvidia-smi timed out"
    assert by_id["PF-T-009"]["message"].startswith("[PF-T-009] one is not two")
    assert by_id["PF-T-001"]["measurements"] == [
        {"what": "busbw", "value": 500.0, "unit": "GB/s", "op": ">=", "threshold": 460.0,
         "ok": True, "name": "busbw"}  # no name= given: derived from the text
    ]
    assert res.ret == 1


TIERED = '''
from harness.checking import check

@check("PF-T-101", title="fast", why="w", remedy="r")
def test_fast(): pass

@check("PF-T-102", title="nightly", why="w", remedy="r", tier="certify")
def test_nightly(): pass

@check("PF-T-103", title="deep", why="w", remedy="r", tier="diagnose", exclusive=True)
def test_deep(): pass
'''


@pytest.mark.parametrize(
    ("tier", "expected"),
    [
        ("preflight", {"PF-T-101"}),
        ("certify", {"PF-T-101", "PF-T-102"}),
        ("diagnose", {"PF-T-101", "PF-T-102", "PF-T-103"}),
    ],
)
def test_tier_selects_checks_of_that_tier_and_cheaper(suite, tier, expected):
    suite.makepyfile(test_tiers=TIERED)
    _, by_id = run_checks(suite, "--preflight-profile", "local-cpu", "--preflight-tier", tier)
    assert set(by_id) == expected


def test_exclusive_marker_selects_collectives(suite):
    suite.makepyfile(test_tiers=TIERED)
    _, by_id = run_checks(suite, "--preflight-tier", "diagnose", "-m", "exclusive")
    assert set(by_id) == {"PF-T-103"}


def test_header_names_profile_source_and_tier(suite):
    suite.makepyfile(test_tiers=TIERED)
    res, _ = run_checks(suite, "--preflight-profile", "p4d.24xlarge", "--preflight-tier", "certify")
    res.stdout.fnmatch_lines(["gpu-preflight *: profile p4d.24xlarge (from --profile), tier certify"])


def test_unknown_profile_is_a_usage_error_listing_known_profiles(suite):
    suite.makepyfile(test_tiers=TIERED)
    res, _ = run_checks(suite, "--preflight-profile", "g4dn.xlarge")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown profile 'g4dn.xlarge'; did you mean *; known profiles: "
                              "g5.12xlarge, *, local-cpu, p4d.24xlarge*"])


def test_markers_are_registered_with_docs(suite):
    res = suite.runpytest_subprocess("-p", "harness.plugin", "--markers")
    res.stdout.fnmatch_lines([
        "@pytest.mark.certify: tier: nightly*",
        "@pytest.mark.exclusive: owns the GPUs or the network*",
    ])


def test_xdist_results_written_once_by_the_controller(suite):
    suite.makepyfile(test_checks=CHECKS)
    results = suite.path / "results.jsonl"
    check_session(suite, "-p", "harness.plugin", f"--preflight-results={results}",
                               "-n", "2", "--preflight-profile", "p5.48xlarge")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    ids = [r["id"] for r in records if r["event"] == "result"]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 9
    workers = {r["worker"] for r in records if r["event"] == "result"}
    assert workers <= {"gw0", "gw1"} and workers
    assert [r["event"] for r in records].count("collected") == 1


def test_duplicate_check_id_is_refused():
    from harness.checking import check

    @check("PF-T-900", title="a", why="w", remedy="r")
    def test_one():
        pass

    with pytest.raises(ValueError, match="PF-T-900 is used by test_one and test_two"):

        @check("PF-T-900", title="b", why="w", remedy="r")
        def test_two():
            pass


def test_unknown_tier_is_refused():
    from harness.checking import check

    with pytest.raises(ValueError, match="tier 'nightly' is not one of"):
        check("PF-T-901", title="a", why="w", remedy="r", tier="nightly")


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize(("expr", "expected"), [
    ("PF-T-002", {"PF-T-002"}),
    ("PF-T-00", {f"PF-T-00{i}" for i in range(1, 10)}),  # an ID prefix
    ("PF-T and not PF-T-002 and not PF-T-00 ", None),
    ("pf-t-007 or test_warn", {"PF-T-003", "PF-T-007"}),  # case-insensitive, names too
])
def test_k_selects_by_check_id_prefix_and_name(suite, expr, expected):
    suite.makepyfile(test_checks=CHECKS)
    res, by_id = run_checks(suite, "--preflight-profile", "p5.48xlarge", "-k", expr)
    if expected is None:  # "PF-T and not PF-T-00": nothing left
        assert by_id == {} and res.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    else:
        assert set(by_id) == expected


PLAIN = '''
import pytest

@pytest.fixture
def broken():
    raise OSError("no such mount")

def test_scratch_mounted():
    """Scratch space is mounted with room to spare"""
    free_gb = 50
    assert free_gb > 100

def test_fine():
    pass

def test_setup_error(broken):
    pass

def test_explicit():
    pytest.fail("the site's license server is unreachable")

@pytest.mark.xfail(reason="known", strict=True)
def test_known():
    assert False

@pytest.mark.certify
def test_nightly():
    pass
'''


def test_plain_tests_report_like_checks(suite):
    suite.mkdir("site").joinpath("test_site.py").write_text(PLAIN)
    res, by_id = run_checks(suite, "site", "--preflight-suite", f"site={suite.path / 'site'}")
    outcomes = {k: (v["outcome"], v["kind"], v["suite"]) for k, v in by_id.items()}
    assert outcomes == {
        "site/test_site.py::test_scratch_mounted": ("fail", "test", "site"),
        "site/test_site.py::test_fine": ("pass", "test", "site"),
        "site/test_site.py::test_setup_error": ("error", "test", "site"),
        "site/test_site.py::test_explicit": ("fail", "test", "site"),
        "site/test_site.py::test_known": ("skip", "test", "site"),
    }  # test_nightly: tier certify, deselected in tier preflight
    scratch = by_id["site/test_site.py::test_scratch_mounted"]
    assert scratch["message"] == ("[site/test_site.py::test_scratch_mounted] assert 50 > 100 "
                                  "(test_site.py:11)")
    assert scratch["title"] == "Scratch space is mounted with room to spare"
    assert by_id["site/test_site.py::test_setup_error"]["message"].startswith(
        "[site/test_site.py::test_setup_error] error in setup: OSError: no such mount")
    assert by_id["site/test_site.py::test_explicit"]["message"] == (
        "[site/test_site.py::test_explicit] the site's license server is unreachable "
        "(test_site.py:20)")
    assert res.ret == 1


def test_collection_records_the_selection_and_each_phase_its_share(suite):
    suite.makepyfile(test_tiers=TIERED)
    results = suite.path / "results.jsonl"
    for phase, mine in (("node-local", ["PF-T-101", "PF-T-102"]), ("exclusive", ["PF-T-103"]),
                        ("checks", ["PF-T-101", "PF-T-102", "PF-T-103"])):
        run_checks(suite, "--preflight-tier", "diagnose", "--preflight-phase", phase)
        collected = [e for e in _events(results) if e["event"] == "collected"]
        assert len(collected) == 1 and collected[0]["phase"] == phase
        assert [c["id"] for c in collected[0]["checks"]] == mine
        assert [c["id"] for c in collected[0]["selected"]] == ["PF-T-101", "PF-T-102", "PF-T-103"]
        finished = [e for e in _events(results) if e["event"] == "finished"]
        assert finished == [{"event": "finished", "phase": phase, "exitstatus": 0,
                             "time": finished[0]["time"]}]


def test_collection_errors_are_recorded(suite):
    suite.makepyfile(test_broken="import no_such_module_xyz\n", test_tiers=TIERED)
    results = suite.path / "results.jsonl"
    res, _ = run_checks(suite)
    assert res.ret == pytest.ExitCode.INTERRUPTED
    (collected,) = [e for e in _events(results) if e["event"] == "collected"]
    assert [e["nodeid"] for e in collected["errors"]] == [str(suite.path / "test_broken.py")]
    assert "No module named 'no_such_module_xyz'" in collected["errors"][0]["message"]


ODD_VALUES = '''
import dataclasses, enum, pathlib
import numpy
from packaging.version import Version
from harness.checking import check, expect, measure

class Mode(enum.IntEnum):
    ON = 1

@dataclasses.dataclass
class Link:
    gpu: int
    path: pathlib.Path

@check("PF-T-201", title="odd values", why="w", remedy="r")
def test_odd_values():
    expect("driver", Version("550.90.07"), ">=", Version("535.54.03"))
    measure("path", pathlib.Path("/dev/nvidia0"))
    measure("record", Link(3, pathlib.Path("/sys/x")))
    measure("mode", Mode.ON)
    measure("numpy", numpy.float32(1.5), threshold=numpy.int64(2))
    measure("bytes", b"serial\\xff")
    measure("set", {3, 1, 2})
    measure("nan", float("nan"), threshold=float("inf"))

@check("PF-T-202", title="after it", why="w", remedy="r")
def test_after(record_property):
    record_property("nccl", Version("2.21.5"))
'''


def test_recorded_values_are_plain_data_across_xdist(suite):
    """A Version (PF-GPU-011's driver version) killed the worker with an INTERNALERROR."""
    suite.makepyfile(test_odd=ODD_VALUES)
    res, by_id = run_checks(suite, "-n", "2", "--preflight-profile", "p5.48xlarge")
    assert "INTERNALERROR" not in res.stdout.str() + res.stderr.str()
    assert set(by_id) == {"PF-T-201", "PF-T-202"}
    values = {m["what"]: (m["value"], m["threshold"]) for m in by_id["PF-T-201"]["measurements"]}
    assert values == {
        "driver": ("550.90.7", "535.54.3"), "path": ("/dev/nvidia0", None),
        "record": ({"gpu": 3, "path": "/sys/x"}, None), "mode": ("ON", None),
        "numpy": (1.5, 2), "bytes": ("serial\ufffd", None), "set": ([1, 2, 3], None),
        "nan": ("nan", "inf"),
    }
    assert res.ret == 0


def test_a_handed_profile_is_used_as_it_is_never_resolved_again(suite):
    """The run resolves the profile once (harness.commands.run) and hands it over: the session
    takes it even when its name is no profile it knows, and names the run's source."""
    from harness.profiles.table import BUILTIN_PROFILES

    suite.makepyfile(test_tiers=TIERED)
    custom = BUILTIN_PROFILES["p5.48xlarge"].derive(name="p5-site", net_busbw_gb_s_min=1.0)
    handed = suite.path / "profile.json"
    handed.write_text(json.dumps({"profile": custom.to_dict(), "source": "profile file x.toml"}))
    res, _ = run_checks(suite, "--preflight-profile", "p5.48xlarge",
                        "--preflight-profile-json", str(handed))
    res.stdout.fnmatch_lines(["gpu-preflight *: profile p5-site (from profile file x.toml)*"])
    handed.write_text("{}")
    res, _ = run_checks(suite, "--preflight-profile-json", str(handed))
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--preflight-profile-json *: not a resolved profile*"])
