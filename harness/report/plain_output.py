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

if TYPE_CHECKING:
    from harness.report.model import Report

from harness.base.jsontypes import JSONMapping, JSONObject

__all__ = ["group_failures", "print_plain_summary", "summary_data"]

_LABEL = {"pass": "PASS", "warn": "WARN", "skip": "SKIP", "fail": "FAIL", "error": "ERROR"}
_ID_PREFIX = re.compile(r"^\[[A-Z0-9-]+\]\s*")
_GPU = re.compile(r"\bGPU (\d+)\b")


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def group_failures(checks: Sequence[JSONMapping]) -> list[tuple[str, list[str], list[str], str]]:
    """(outcome, check IDs, GPU indices, message) per distinct cause, in first-seen order: the
    same message on many checks, or on many GPUs (`GPU 3` -> `GPU N`), is one line."""
    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for c in checks:
        if c.get("outcome") not in ("fail", "error", "warn"):
            continue
        message = _one_line(_ID_PREFIX.sub("", str(c.get("message") or "")))
        gpus = _GPU.findall(message)
        key = (str(c["outcome"]), _GPU.sub("GPU N", message) if len(set(gpus)) == 1 else message)
        ids, seen_gpus = groups.setdefault(key, ([], []))
        if c.get("id") not in ids:
            ids.append(str(c.get("id")))
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


def print_plain_summary(report: Report | JSONMapping, file: TextIO | None = None,
                        env: Mapping[str, str] | None = None) -> None:
    """The summary as plain lines (see the module docstring), from the redacted report (or
    report.json's data, redacted the same way)."""
    from harness.base.redact import Redactor
    from harness.report.causes import id_ranges

    out = file or sys.stdout
    if isinstance(report, Mapping):
        data: JSONMapping = Redactor.of(env).obj(report)  # type: ignore[assignment]
    else:
        data = report.redacted(env).to_dict()
    from harness.report.causes import find_causes
    from harness.report.summary import not_measured_text

    checks = data.get("checks") or []
    for outcome, ids, gpus, message in group_failures(checks):
        if outcome == "warn":  # failures: by cause, below
            on = f" on GPUs {','.join(gpus)}" if gpus else ""
            print(f"{_LABEL[outcome]} {id_ranges(ids)}{on}: {message or outcome}", file=out)
    for c in checks:
        if c.get("outcome") == "skip" and "] not run: " in str(c.get("message") or ""):
            print(f"NOT MEASURED {c.get('id')}: {not_measured_text(str(c['message']))}", file=out)
    for err in data.get("harness_errors") or []:
        print(f"ERROR harness: {_one_line(err)}", file=out)
    for cause in find_causes(checks):  # root cause first, the verdict last
        print(f"{_LABEL[cause.outcome]} {cause.line(10_000)}", file=out)
        if cause.fix:
            print(f"  fix: {cause.fix}", file=out)
    counts = data.get("counts") or {}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no check ran"
    print(f"{str(data.get('verdict', 'error')).upper()} ({tally}) in "
          f"{float(data.get('duration_s') or 0):.1f} s: {data.get('host')} "
          f"{(data.get('profile') or {}).get('name', '?')} tier {data.get('tier')}",
          file=out, flush=True)


def summary_data(report: JSONMapping, report_path: str) -> JSONObject:
    """`preflight run --format json`: the run's outcome as one JSON object on stdout (the
    progress lines go to stderr), for scripts: verdict, exit code, counts, each check that needs
    attention (grouped as in the plain summary), harness errors and where the report is."""
    from harness.report.causes import find_causes

    profile = report.get("profile") or {}
    cluster = report.get("cluster") or {}
    return {
        "verdict": report.get("verdict", "error"),
        "exit_code": report.get("exit_code"),
        "host": report.get("host"),
        "profile": profile.get("name") if isinstance(profile, Mapping) else profile,
        "tier": report.get("tier"),
        "duration_s": report.get("duration_s"),
        "counts": report.get("counts") or {},
        "attention": [{"outcome": outcome, "checks": ids, "gpus": gpus, "message": message}
                      for outcome, ids, gpus, message in group_failures(report.get("checks") or [])],
        "causes": [c.to_dict() for c in find_causes(report.get("checks") or [])],
        "harness_errors": [_one_line(e) for e in report.get("harness_errors") or []],
        "cluster": ({"verdict": cluster.get("verdict"), "text": cluster.get("text")}
                    if isinstance(cluster, Mapping) and cluster else None),
        "report": report_path,
    }
