"""junit.xml from a report, for runs whose check session never wrote one (a signal before or
during it): CI systems and Slurm/Kubernetes log scrapers read junit.xml, and a missing file
reads as "no result" rather than "stopped". Standard library XML: the format is small and fixed
(the JUnit schema's testsuite/testcase/error/failure/skipped elements)."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from harness.report import Report

__all__ = ["write_junit_if_missing"]

_ELEMENT = {"fail": "failure", "error": "error", "skip": "skipped"}


def write_junit_if_missing(report: Report, path: Path,
                           env: Mapping[str, str] | None = None) -> bool:
    """Write `path` from the redacted `report` unless a junit.xml is already there; True when
    written. The checks that finished are testcases with their outcome; an unfinished run adds
    one error testcase saying why (the report's harness errors)."""
    if path.exists():
        return False
    report = report.redacted(env)
    cases = []
    for c in report.checks:
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
    return True
