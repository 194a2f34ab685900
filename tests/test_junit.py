"""junit.xml written from the report for every check session that did not write its own (it
died, it never started, a signal stopped it): per phase file, this run's only, a torn file
replaced, a session's own file kept."""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.junit import write_missing_junit
from harness.report import Report
from harness.results import results


def _check(n: int, outcome: str) -> dict:
    return {"id": f"PF-T-{n:03d}", "nodeid": f"t.py::test_{n}", "outcome": outcome,
            "message": "" if outcome == "pass" else f"[PF-T-{n:03d}] {outcome}"}


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
    return {c.get("name", ""): next((e.tag for e in c), "pass") for c in suite}


def _phases(directory: Path, **phase_of: list[int]) -> None:
    """A results file whose sessions collected these checks (phase -> check numbers)."""
    lines = [{"event": "collected", "phase": phase.replace("_", "-"), "selected": [],
              "checks": [{"id": f"PF-T-{n:03d}", "nodeid": f"t.py::test_{n}"} for n in ns]}
             for phase, ns in phase_of.items()]
    (directory / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_session_that_wrote_nothing_gets_junit_from_the_report(tmp_path):
    report = _report(_check(1, "pass"), _check(2, "error"), errors=("pytest phase died",))
    assert write_missing_junit(report, tmp_path, since=time.time() - 5) == [tmp_path / "junit.xml"]
    assert _cases(tmp_path / "junit.xml") == {"PF-T-001": "pass", "PF-T-002": "error",
                                              "run": "error"}


def test_each_phase_gets_its_own_file_and_a_session_file_is_kept(tmp_path):
    since = time.time() - 5
    _phases(tmp_path, node_local=[1], exclusive=[2])
    (tmp_path / "junit.xml").write_text('<testsuites><testsuite name="pytest">'
                                        '<testcase name="from-pytest"/></testsuite></testsuites>')
    written = write_missing_junit(_report(_check(1, "pass"), _check(2, "error")), tmp_path,
                                  since=since)
    assert written == [tmp_path / "junit-exclusive.xml"]  # the node-local session wrote its own
    assert _cases(tmp_path / "junit.xml") == {"from-pytest": "pass"}
    assert _cases(tmp_path / "junit-exclusive.xml") == {"PF-T-002": "error"}


def test_an_earlier_runs_file_or_a_torn_one_is_replaced(tmp_path):
    old = tmp_path / "junit.xml"
    old.write_text("<testsuites><testsuite><testcase name='last-run'/></testsuite></testsuites>")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    write_missing_junit(_report(_check(1, "fail")), tmp_path, since=time.time() - 5)
    assert _cases(old) == {"PF-T-001": "failure"}
    old.write_text("<testsuites><testsuite><testcase name='cut")  # killed mid-write
    write_missing_junit(_report(_check(1, "fail")), tmp_path, since=time.time() - 5)
    assert _cases(old) == {"PF-T-001": "failure"}


def test_an_earlier_runs_file_of_a_phase_this_run_did_not_have_goes(tmp_path):
    """An earlier xdist run left junit-exclusive.xml; this one-session run has no such phase."""
    old = tmp_path / "junit-exclusive.xml"
    old.write_text("<testsuites><testsuite><testcase name='last-run'/></testsuite></testsuites>")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    write_missing_junit(_report(_check(1, "pass")), tmp_path, since=time.time() - 5)
    assert not old.exists() and _cases(tmp_path / "junit.xml") == {"PF-T-001": "pass"}
