"""The run summary for logs (CloudWatch, Slurm output files, `| tee`): used when stdout is not a
terminal. One line per result that needs attention, never wrapped, no box drawing: warnings
(identical ones grouped with the checks or GPUs they affect), what was not measured and why,
then the failures by root cause (harness.report.causes: `FAIL PF-ENV-001: message`, or one cause with
the checks it blocks), each with its fix, and the verdict last; a pass is one tally line (the
progress lines already named every check)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject

if TYPE_CHECKING:
    from harness.report.model import Report
    from harness.results import CheckResult

__all__ = ["group_failures", "print_plain_summary", "summary_data"]

_LABEL = {"pass": "PASS", "warn": "WARN", "skip": "SKIP", "fail": "FAIL", "error": "ERROR"}
_ID_PREFIX = re.compile(r"^\[[A-Z0-9-]+\]\s*")
_GPU = re.compile(r"\bGPU (\d+)\b")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def group_failures(checks: Sequence[CheckResult]) -> list[tuple[str, list[str], list[str], str]]:
    """(outcome, check IDs, GPU indices, message) per distinct cause, in first-seen order: the
    same message on many checks, or on many GPUs (`GPU 3` -> `GPU N`), is one line."""
    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for c in checks:
        if c.outcome not in ("fail", "error", "warn"):
            continue
        message = _one_line(_ID_PREFIX.sub("", c.message))
        gpus = _GPU.findall(message)
        key = (c.outcome, _GPU.sub("GPU N", message) if len(set(gpus)) == 1 else message)
        ids, seen_gpus = groups.setdefault(key, ([], []))
        if c.id not in ids:
            ids.append(c.id)
        if len(set(gpus)) == 1 and gpus[0] not in seen_gpus:
            seen_gpus.append(gpus[0])
    order = {"fail": 0, "error": 1, "warn": 2}
    out = []
    for (outcome, message), (ids, gpus) in groups.items():
        if len(gpus) == 1:  # one GPU: its own message, as it was
            message = message.replace("GPU N", f"GPU {gpus[0]}")
            gpus = []
        out.append((outcome, ids, gpus, message))
    return sorted(out, key=lambda g: order[g[0]])


def print_plain_summary(report: Report, file: TextIO | None = None,
                        env: Mapping[str, str] | None = None) -> None:
    """The summary as plain lines (see the module docstring), from the redacted report."""
    from harness.report.causes import find_causes, id_ranges
    from harness.report.summary import not_measured_text

    out = file or sys.stdout
    report = report.redacted(env)
    for outcome, ids, gpus, message in group_failures(report.checks):
        if outcome == "warn":  # failures: by cause, below
            on = f" on GPUs {','.join(gpus)}" if gpus else ""
            print(f"{_LABEL[outcome]} {id_ranges(ids)}{on}: {message or outcome}", file=out)
    for c in report.checks:
        if c.outcome == "skip" and "] not run: " in c.message:
            print(f"NOT MEASURED {c.id}: {not_measured_text(c.message)}", file=out)
    for err in report.harness_errors:
        print(f"ERROR harness: {_one_line(err)}", file=out)
    for cause in find_causes(report.checks):  # root cause first, the verdict last
        print(f"{_LABEL[cause.outcome]} {cause.line(10_000)}", file=out)
        if cause.fix:
            print(f"  fix: {cause.fix}", file=out)
    tally = ", ".join(f"{n} {k}" for k, n in report.counts().items() if n) or "no check ran"
    print(f"{report.verdict.upper()} ({tally}) in {report.duration_s:.1f} s: {report.host} "
          f"{report.profile} tier {report.tier}", file=out, flush=True)


def summary_data(report: Report, report_path: str) -> JSONObject:
    """`preflight run --format json`: the run's outcome as one JSON object on stdout (the
    progress lines go to stderr), for scripts: verdict, exit code, counts, each check that needs
    attention (grouped as in the plain summary), harness errors and where the report is."""
    from harness.report.causes import find_causes

    cluster = report.extra.get("cluster") or {}
    return {
        "verdict": report.verdict,
        "exit_code": report.exit_code,
        "host": report.host,
        "profile": report.profile,
        "tier": report.tier,
        "duration_s": round(report.duration_s, 3),
        "counts": report.counts(),
        "attention": [{"outcome": outcome, "checks": ids, "gpus": gpus, "message": message}
                      for outcome, ids, gpus, message in group_failures(report.checks)],
        "causes": [c.to_dict() for c in find_causes(report.checks)],
        "harness_errors": [_one_line(e) for e in report.harness_errors],
        "cluster": ({"verdict": cluster.get("verdict"), "text": cluster.get("text")}
                    if isinstance(cluster, Mapping) and cluster else None),
        "report": report_path,
    }
