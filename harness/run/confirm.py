"""Confirm before condemn (issue 30): a failed check of a measured family the profile names
(`confirm_families`: bandwidth, compute, links, training) is run once more, within what is left
of the run's budget, before the verdict. Failed twice: the failure stands, `confirmed`. Failed,
then passed: a `flaky` warning with both figures, counted in report.json and the metrics, never
a failure and so never a drain. A second run that could not judge (an error, no time left) leaves
the failure standing, `unconfirmed`, and says why.

The second run is one more check session (phase `confirm`; harness.run.runner builds it and hands
it in as a `Session`) selecting only those checks: their facts are measured again (session
fixtures are new), not judged again from the first figures. `run_again` decides whether it fits
in the budget, runs it and merges; the rest is pure: what to run again, and the merged results."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from harness.base.compare import fmt
from harness.base.jsontypes import JSONMapping, JSONObject
from harness.base.proc_result import ProcResult
from harness.report.model import Report
from harness.results import CheckResult, Measurement
from harness.results import results as typed_results
from harness.run.selection import Events, load_events

__all__ = ["CONFIRM_PHASE", "RESULTS_FILE", "Session", "add_isolation", "budget_line",
           "families_of", "keyword", "merge", "run_again", "to_confirm"]

CONFIRM_PHASE = "confirm"
#: The second session's results file (beside results.jsonl, which proves the first run).
RESULTS_FILE = "confirm-results.jsonl"
#: Figures quoted per run in a message (the record keeps them all).
_FIGURES_SHOWN = 4
#: What a check session takes to start before its first check (pytest, the plugin), s.
SESSION_START_S = 5.0


class Session(Protocol):
    """Runs the confirming check session: the checks `ids`, results to `results`, within
    `timeout_s`; returns its argv and how it ended."""

    def __call__(self, ids: Sequence[str], results: Path, timeout_s: float
                 ) -> tuple[list[str], ProcResult]: ...


def run_again(report: Report, events: Events, families: Sequence[str], *, deadline: float,
              budget_s: float, results: Path, session: Session, announce: bool) -> None:
    """Run the failed checks of the profile's confirm `families` once more, in what is left of
    the budget (`deadline`, monotonic), and judge each on both runs: the report's checks, its
    `confirmation` section and its `confirm` phase."""
    asked = to_confirm(report.checks, events, families)
    if not asked:
        report.extra["confirmation"] = merge(report.checks, [], {}, families)[1]
        return
    # As long again as the first run of these checks took, and a session's start.
    need = sum(c.duration_s or 0.0 for c in asked) + SESSION_START_S  # an estimate
    left = deadline - time.monotonic()
    again: dict[str, CheckResult] = {}
    why_not, took = None, 0.0
    if left < need:
        why_not = (f"{left:.0f} s were left of the run's {budget_s:g} s budget; running it "
                   f"again needs about {need:.0f} s")
    else:
        if announce:
            print(f"gpu-preflight: {', '.join(c.id for c in asked)} failed: running "
                  f"{'it' if len(asked) == 1 else 'them'} once more to confirm (up to "
                  f"{left:.0f} s left of the budget)", flush=True)
        results.unlink(missing_ok=True)
        argv, res = session([c.id for c in asked], results, left)
        took = res.duration_s
        report.phases.append({"phase": CONFIRM_PHASE, "argv": list(argv),
                              "exit_code": res.returncode, "timed_out": res.timed_out,
                              "duration_s": round(took, 3)})
        again = {r.id: r for r in typed_results(load_events(results).results)}
        if res.error or res.timed_out:
            why_not = f"the confirming session {res.describe()}"
    report.checks, report.extra["confirmation"] = merge(
        report.checks, asked, again, families, why_not=why_not, duration_s=took)


def families_of(events: Events) -> dict[str, str]:
    """Check ID -> its measured family ("" for none), from the sessions' collection records."""
    return {str(i.get("id")): str(i.get("family") or "")
            for record in events.collected for i in record.get("selected", [])}


def to_confirm(checks: Iterable[CheckResult], events: Events,
               families: Sequence[str]) -> list[CheckResult]:
    """The failed checks (outcome `fail`, not `error`: an error measured nothing to confirm)
    whose family the profile confirms."""
    family = families_of(events)
    return [c for c in checks if c.outcome == "fail" and family.get(c.id) in families]


def keyword(ids: Sequence[str], original: str | None) -> str:
    """The -k of the confirming session: exactly these checks, within the run's own -k."""
    these = " or ".join(dict.fromkeys(ids))
    return f"({original}) and ({these})" if original else these


def budget_line(families: Sequence[str]) -> str:
    """What the run's printed budget includes (its header)."""
    if not families:
        return "no failure is run again before the verdict (the profile confirms no family)"
    return (f"includes running a failed {', '.join(families)} check once more to confirm it "
            "before the verdict")


def _figures(c: CheckResult) -> str:
    """`GPU 3 bf16 matmul 310.5 TFLOP/s (< 600 TFLOP/s)`: the failed figures, else all."""
    shown: Sequence[Measurement] = [m for m in c.measurements if m.ok is False] or c.measurements
    parts = []
    for m in shown[:_FIGURES_SHOWN]:
        limit = (f" (needs {m.op} {fmt(m.threshold, m.unit)})"
                 if m.op and m.threshold is not None else "")
        parts.append(f"{m.what} {fmt(m.value, m.unit)}{limit}")
    more = len(shown) - _FIGURES_SHOWN
    text = "; ".join(parts) + (f" and {more} more" if more > 0 else "")
    return text or f"no figure ({c.outcome})"


def _run(c: CheckResult) -> JSONObject:
    return {"outcome": c.outcome, "message": c.message,
            "measurements": [m.to_dict() for m in c.measurements],
            "duration_s": None if c.duration_s is None else round(c.duration_s, 3)}


def _noted(c: CheckResult, note: JSONObject) -> JSONObject:
    """`c`'s extra keys with its `confirmation` note."""
    return {**c.extra, "confirmation": note}


def _judge(first: CheckResult, again: CheckResult | None, why_not: str | None
           ) -> tuple[str, CheckResult]:
    """(status, the merged result) of one failed check and its second run."""
    body = first.message.removeprefix(f"[{first.id}] ")
    if again is None:
        why = why_not or "the confirming session reported no result for it"
        note: JSONObject = {"status": "unconfirmed", "why": why, "first": _run(first)}
        return "unconfirmed", replace(first, message=f"{first.message} (not confirmed: {why})",
                                      extra=_noted(first, note))
    note = {"first": _run(first), "again": _run(again)}
    duration = None if first.duration_s is None or again.duration_s is None else \
        first.duration_s + again.duration_s
    if again.outcome == "fail":
        note["status"] = "confirmed"
        return "confirmed", replace(
            first, message=f"{first.message} (confirmed: failed again when run again: "
                           f"{_figures(again)})", duration_s=duration,
            extra=_noted(first, note))
    if again.outcome in ("pass", "warn"):
        note["status"] = "flaky"
        message = (f"[{first.id}] flaky: failed, then passed when run again (first: "
                   f"{_figures(first)}; again: {_figures(again)}); not condemned, not a reason "
                   f"to drain; watch this node if it recurs. The first run said: {body}")
        return "flaky", replace(first, outcome="warn", message=message,
                                warnings=(*again.warnings, message),
                                measurements=again.measurements, duration_s=duration,
                                extra=_noted(first, note))
    why = f"the second run could not judge it ({again.outcome}: {again.message})"
    note.update(status="unconfirmed", why=why)
    return "unconfirmed", replace(first, message=f"{first.message} (not confirmed: {why})",
                                  duration_s=duration, extra=_noted(first, note))


def merge(checks: Sequence[CheckResult], asked: Sequence[CheckResult],
          again: Mapping[str, CheckResult], families: Sequence[str], *,
          why_not: str | None = None, duration_s: float = 0.0
          ) -> tuple[list[CheckResult], JSONObject]:
    """(the run's results with each asked check judged on both runs, report.json's
    `confirmation` section). `again`: the second run's results by check ID; `why_not`: why
    there was no second run (no time left), for every asked check."""
    status: dict[str, list[str]] = {"confirmed": [], "flaky": [], "unconfirmed": []}
    merged = {}
    for first in asked:
        got, merged[first.nodeid] = _judge(first, again.get(first.id), why_not)
        status[got].append(first.id)
    out = [merged.get(c.nodeid, c) if c.outcome == "fail" else c for c in checks]
    section: JSONObject = {"families": list(families), "asked": [c.id for c in asked],
                           **status, "flaky_total": len(status["flaky"]),
                           "duration_s": round(duration_s, 3)}
    if why_not:
        section["why_not"] = why_not
    return out, section


def add_isolation(section: JSONMapping | None, isolation: JSONMapping | None) -> JSONObject:
    """report.json's `confirmation` with the cluster's flaky pairs (harness.cluster.isolate:
    failed, then both nodes passed) counted in: `isolation_flaky`, and in `flaky_total`."""
    out: JSONObject = dict(section or {})
    pairs = len((isolation or {}).get("flaky") or [])
    out["isolation_flaky"] = pairs
    out["flaky_total"] = len(out.get("flaky") or []) + pairs
    return out
