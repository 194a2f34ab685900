"""`preflight report SOURCE [--html FILE]`: many nodes' reports summed up, bad nodes named."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands import EXIT_FAILED, EXIT_OK, UsageError
from harness.figures import bad_nodes
from harness.html_report import ReportSourceError, load_reports, write_html

__all__ = ["cmd_report"]


def cmd_report(args: argparse.Namespace) -> int:
    try:
        reports = load_reports(args.source)
    except ReportSourceError as exc:
        raise UsageError(str(exc)) from None
    for problem in reports.problems:
        print(f"preflight report: skipped {problem}", file=sys.stderr)
    failed = [r for r in reports.reports if r.get("verdict") != "pass"]
    print(f"{len(reports.reports)} nodes, {len(failed)} failed")
    for bad in bad_nodes(reports.reports):
        print(f"  bad node {bad.host}: {'; '.join(bad.reasons)}")
    if args.html:
        print(f"html: {write_html(reports, Path(args.html))}")
    return EXIT_FAILED if failed else EXIT_OK
