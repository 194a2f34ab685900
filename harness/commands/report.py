"""`preflight report SOURCE [--html FILE] [--json]`: many nodes' reports summed up, bad nodes
named (each with why), as text, a self-contained HTML page, or JSON on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.commands import EXIT_FAILED, EXIT_OK, UsageError
from harness.report.html.render import ReportSourceError, load_reports, write_html
from harness.report.verdicts import summarise

__all__ = ["cmd_report"]


def cmd_report(args: argparse.Namespace) -> int:
    try:
        reports = load_reports(args.source)
    except ReportSourceError as exc:
        raise UsageError(str(exc)) from None
    for problem in reports.problems:
        print(f"preflight report: skipped {problem}", file=sys.stderr)
    summary = summarise(reports.reports)
    # With --json, stdout holds the JSON document only; the text goes to stderr.
    out = sys.stderr if getattr(args, "json", False) else sys.stdout
    print(f"{summary.verdict.upper()}: {summary.line}", file=out)
    for node in summary.bad:
        by = " and ".join({"cluster": "the cluster verdict", "node": "its own checks"}.get(b, b)
                          for b in node.named_by)
        print(f"  bad node {node.host} (own checks: {node.verdict}; named by {by}): "
              f"{'; '.join(node.why)}", file=out)
    if args.html:
        print(f"html: {write_html(reports, Path(args.html))}", file=out)
    if getattr(args, "json", False):
        data = {"source": args.source, **summary.to_dict(), "problems": reports.problems}
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return EXIT_FAILED if summary.verdict != "pass" else EXIT_OK
