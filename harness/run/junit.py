"""junit.xml from the report: one file per run, whatever the phases, with every selected check
as one testcase named by its check ID (its title as the testcase's `description` property),
a failure, an error or a skip with its message (a skip says why: not applicable to the
profile, or not run and why), and the run's harness errors as one more error testcase, `run`.
It is written from the finished report on every path (a pass, a failure, a session that died,
a signal, a harness error): CI systems and Slurm/Kubernetes log scrapers read junit.xml, and a
missing file reads as "no result" rather than "stopped" or "failed". The check sessions write
none of their own (pytest's would name pytest functions and be split per phase).
Standard library XML: the format is small and fixed (the JUnit schema's
testsuite/testcase/properties/error/failure/skipped elements)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from harness.report.model import Report

__all__ = ["JUNIT_FILE", "STALE_FILES", "write_junit"]

JUNIT_FILE = "junit.xml"
#: What earlier versions wrote beside it (the exclusive phase's pytest file): removed.
STALE_FILES = ("junit-exclusive.xml",)
_ELEMENT = {"fail": "failure", "error": "error", "skip": "skipped"}


def write_junit(report: Report, report_dir: Path, env: Mapping[str, str] | None = None) -> Path:
    """Write `report_dir/junit.xml` from the redacted `report` (atomically: a reader never sees
    half a file) and remove an earlier version's per-phase file. Raises OSError."""
    report = report.redacted(env)
    cases = []
    for c in report.checks:
        # JUnit's `time` is optional: left out where the duration was not measured, never 0
        took = {} if c.duration_s is None else {"time": f"{c.duration_s:.3f}"}
        case = ET.Element("testcase", classname=f"gpu-preflight.{c.suite or 'checks'}",
                          name=c.id, **took)
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="description", value=c.title or c.id)
        if c.nodeid:
            ET.SubElement(props, "property", name="nodeid", value=c.nodeid)
        # The whole record, as JSON (what a CI step that wants the values reads).
        ET.SubElement(props, "property", name="preflight_result",
                      value=json.dumps(c.to_dict(), default=str))
        tag = _ELEMENT.get(c.outcome)
        if tag:
            ET.SubElement(case, tag, message=(c.message or c.outcome)[:2000])
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
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / JUNIT_FILE
    tmp = path.with_name(path.name + ".tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)
    for name in STALE_FILES:
        (report_dir / name).unlink(missing_ok=True)
    return path
