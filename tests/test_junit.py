"""junit.xml, one file written from the report on every path: every selected check by its
check ID with its title as the description, skips with their reason, harness errors as `run`;
an earlier version's per-phase file removed. The check sessions write none of their own."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.report.model import Report
from harness.results import results
from harness.run.junit import write_junit


def _check(n: int, outcome: str, message: str = "") -> dict:
    return {"id": f"PF-T-{n:03d}", "nodeid": f"checks/test_t.py::test_{n}", "outcome": outcome,
            "title": f"Thing {n} is fine",
            "message": message or ("" if outcome == "pass" else f"[PF-T-{n:03d}] {outcome}")}


def _report(*checks: dict, errors: tuple[str, ...] = ()) -> Report:
    report = Report(host="node-a", profile="p5.48xlarge", profile_source="--profile",
                    tier="preflight")
    report.checks = results(checks)
    report.harness_errors = list(errors)
    return report


def _cases(path: Path) -> dict[str, str]:
    """testcase name -> its outcome element (`pass` when it has none)."""
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None
    return {c.get("name", ""): next((e.tag for e in c if e.tag != "properties"), "pass")
            for c in suite}


def test_every_check_by_its_id_with_its_title_and_skip_reason(tmp_path):
    report = _report(_check(1, "pass"), _check(2, "fail"), _check(3, "error"),
                     _check(4, "skip", "[PF-T-004] not applicable to p5.48xlarge: no NVLS"),
                     _check(5, "skip", "[PF-T-005] not run: cluster bandwidth not measured: "
                            "stopped after node3 failed its own checks"),
                     errors=("pytest phase died",))
    path = write_junit(report, tmp_path)
    assert path == tmp_path / "junit.xml"
    assert _cases(path) == {"PF-T-001": "pass", "PF-T-002": "failure", "PF-T-003": "error",
                            "PF-T-004": "skipped", "PF-T-005": "skipped", "run": "error"}
    root = ET.parse(path).getroot()
    case = root.find("testsuite/testcase[@name='PF-T-001']")
    assert case is not None
    assert case.find("properties/property[@name='description']").get("value") == \
        "Thing 1 is fine"
    assert root.find("testsuite/testcase[@name='PF-T-004']/skipped").get("message") == \
        "[PF-T-004] not applicable to p5.48xlarge: no NVLS"
    assert "stopped after node3" in root.find(
        "testsuite/testcase[@name='PF-T-005']/skipped").get("message")
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("6", "1", "2", "2")
    assert not any("test_" in (c.get("name") or "") for c in root.iter("testcase"))


def test_an_earlier_runs_file_a_torn_one_and_the_old_phase_file_are_replaced(tmp_path):
    old = tmp_path / "junit.xml"
    old.write_text("<testsuites><testsuite><testcase name='cut")  # killed mid-write
    exclusive = tmp_path / "junit-exclusive.xml"
    exclusive.write_text("<testsuites><testsuite><testcase name='last-run'/></testsuite>"
                         "</testsuites>")
    os.utime(exclusive, (time.time() - 3600, time.time() - 3600))
    write_junit(_report(_check(1, "fail")), tmp_path)
    assert _cases(old) == {"PF-T-001": "failure"}
    assert not exclusive.exists()


def test_the_check_sessions_write_no_junit_of_their_own(tmp_path):
    """One file from the report: no session is given --junitxml (pytest's would name test
    functions, one file per phase)."""
    from harness.profiles.table import get_profile
    from harness.run.runner import RunConfig, pytest_phases

    cfg = RunConfig(profile=get_profile("local-cpu"), profile_source="x", report_dir=tmp_path,
                    host="h", workers=2)
    phases = pytest_phases(cfg, tmp_path / "results.jsonl")
    assert [name for name, _ in phases] == ["node-local", "exclusive"]
    assert not any(a.startswith("--junitxml") for _, argv in phases for a in argv)


def test_a_duration_not_measured_has_no_time_never_0(tmp_path):
    timed = {**_check(1, "pass"), "duration_s": 1.5}
    root = ET.parse(write_junit(_report(timed, _check(2, "pass")), tmp_path)).getroot()
    assert root.find("testsuite/testcase[@name='PF-T-001']").get("time") == "1.500"
    assert root.find("testsuite/testcase[@name='PF-T-002']").get("time") is None
