"""junit.xml from a report, for every run whose check session did not write its own: a signal
before or during it, a session that died (`os._exit` in a check, a crash, the run's budget),
a harness error before the checks ran. CI systems and Slurm/Kubernetes log scrapers read
junit.xml, and a missing file reads as "no result" rather than "stopped" or "failed".
Standard library XML: the format is small and fixed (the JUnit schema's
testsuite/testcase/error/failure/skipped elements)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.report import Report
from harness.results import CheckResult
from harness.selection import load_events, phases_of

__all__ = ["JUNIT_FILES", "junit_path", "write_missing_junit"]

#: Each check session's junit file, by phase (harness.runner.pytest_phases).
JUNIT_FILES = {"checks": "junit.xml", "node-local": "junit.xml", "exclusive": "junit-exclusive.xml",
               "confirm": "junit-confirm.xml"}
_ELEMENT = {"fail": "failure", "error": "error", "skip": "skipped"}


def junit_path(report_dir: Path, phase: str) -> Path:
    return report_dir / JUNIT_FILES[phase]


def _written(path: Path, since: float) -> bool:
    """A whole junit file written by this run (not an earlier run's, not cut mid-write)."""
    try:
        if path.stat().st_mtime < since:
            return False
        ET.parse(path)
    except (OSError, ET.ParseError):
        return False
    return True


def write_missing_junit(report: Report, report_dir: Path, *, since: float,
                        env: Mapping[str, str] | None = None) -> list[Path]:
    """Write, from the redacted `report`, each junit file of the run that no check session wrote since
    `since` (wall clock): junit.xml always, junit-exclusive.xml when a check of the report ran
    in that phase (the sessions' collection records say which); an earlier run's file of a phase
    this run did not have is removed. Returns the files written; raises OSError."""
    report = report.redacted(env)
    phases = _phases(report_dir / "results.jsonl", since)
    files: dict[str, list[CheckResult]] = {JUNIT_FILES["checks"]: []}
    for c in report.checks:
        files.setdefault(JUNIT_FILES.get(phases.get(c.nodeid, ""), "junit.xml"), []).append(c)
    written = []
    for name, checks in files.items():
        path = report_dir / name
        if not _written(path, since):
            _write(path, checks, report)
            written.append(path)
    for name in set(JUNIT_FILES.values()) - set(files):  # an earlier run's, of a phase not run
        path = report_dir / name
        if path.exists() and path.stat().st_mtime < since:
            path.unlink()
    return written


def _phases(results: Path, since: float) -> Mapping[str, str]:
    """nodeid -> phase, from this run's results file (none before `since`: an earlier run's)."""
    try:
        if results.stat().st_mtime < since:
            return {}
    except OSError:
        return {}
    return phases_of(load_events(results))


def _write(path: Path, checks: Sequence[CheckResult], report: Report) -> None:
    """The checks as testcases with their outcome; the report's harness errors (a run cut
    short says why there) as one more error testcase, `run`."""
    cases = []
    for c in checks:
        case = ET.Element("testcase", classname="gpu-preflight", name=c.id,
                          time=f"{c.duration_s:.3f}")
        tag = _ELEMENT.get(c.outcome)
        if tag:
            ET.SubElement(case, tag, message=c.message[:2000])
        cases.append(case)
    if report.harness_errors:
        case = ET.Element("testcase", classname="gpu-preflight", name="run", time="0")
        ET.SubElement(case, "error", message="; ".join(report.harness_errors)[:4000])
        cases.append(case)
    counts = {k: sum(1 for c in cases if c.find(_ELEMENT[k]) is not None) for k in _ELEMENT}
    suite = ET.Element("testsuite", name="gpu-preflight", tests=str(len(cases)),
                       failures=str(counts["fail"]), errors=str(counts["error"]),
                       skipped=str(counts["skip"]), time=f"{report.duration_s:.3f}",
                       hostname=report.host)
    suite.extend(cases)
    tree = ET.ElementTree(ET.Element("testsuites"))
    tree.getroot().append(suite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)
