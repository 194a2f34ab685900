"""The terminal summary: a rich table of every check and the verdict line."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from harness.jsontypes import JSONObject
from harness.report import Report
from harness.results import Measurement

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["measured_lines", "print_heartbeat", "print_progress", "print_summary"]

_STYLE = {"pass": "green", "warn": "yellow", "skip": "dim", "fail": "bold red", "error": "bold red"}
_LABEL = {"pass": "PASS", "warn": "WARN", "skip": "SKIP", "fail": "FAIL", "error": "ERROR"}


def _console(file: TextIO | None = None) -> Any:
    from rich.console import Console

    out = file or sys.stdout
    # Not a terminal (a log, a pipe): soft wrap, i.e. never hard-wrapped at 80 columns mid-token.
    return Console(file=out, highlight=False, soft_wrap=not out.isatty())


def print_progress(result: JSONObject, file: TextIO | None = None, *, verbose: bool = False,
                   console: Console | None = None) -> None:
    """One line as each check finishes (long runs show they are alive). Verbose: below it every
    value the check measured, with the threshold it was judged against, and, for a check that
    did not pass or does not apply, its message (why)."""
    from rich.markup import escape

    console = console or _console(file)
    outcome = result["outcome"]
    console.print(
        f"  [{_STYLE[outcome]}]{_LABEL[outcome]:5}[/] {result['id']:11} "
        f"{escape(result['title'])} [dim]({result['duration_s']:.1f} s)[/]"
    )
    if not verbose:
        return
    for line in measured_lines(result.get("measurements") or []):
        console.print(f"        [dim]{escape(line)}[/]")
    if outcome != "pass" and result.get("message"):
        console.print(f"        [dim]{escape(' '.join(str(result['message']).split()))}[/]")


def measured_lines(measurements: Sequence[JSONObject]) -> list[str]:
    """Every measurement: `busbw at 1 GiB = 412.3 GB/s (>= 370.0 GB/s)`, `GPU 3 temperature = 41 C`
    (no threshold: recorded, not judged)."""
    from harness.checking import fmt

    lines = []
    for m in map(Measurement.from_dict, measurements):
        judged = f" ({m.op} {fmt(m.threshold, m.unit)})" if m.op else ""
        lines.append(f"{m.what} = {fmt(m.value, m.unit)}{judged}")
    return lines


def print_heartbeat(done: int, total: int, elapsed_s: float, budget_s: float,
                    file: TextIO | None = None) -> None:
    """A plain line while a long check (a bandwidth sweep, DCGM) runs: the run is alive."""
    of = f" of {total}" if total else ""
    _console(file).print(f"  [dim]...  {done}{of} checks done, {elapsed_s:.0f} s elapsed "
                         f"(upper bound {budget_s:g} s)[/]")


def id_ranges(ids: list[str]) -> str:
    """`PF-GPU-001..005, PF-NET-003`: consecutive check IDs of one area compressed."""
    groups: dict[str, list[int]] = {}
    loose: list[str] = []
    for check_id in sorted(set(ids)):
        prefix, _, number = check_id.rpartition("-")
        if prefix and number.isdigit():
            groups.setdefault(prefix, []).append(int(number))
        else:
            loose.append(check_id)
    parts = []
    for prefix, numbers in groups.items():
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            parts.append(f"{prefix}-{start:03d}" + (f"..{prev:03d}" if prev != start else ""))
            if n is not None:
                start = prev = n
    return ", ".join(parts + loose)


def _judged(measurements: Sequence[Measurement]) -> str:
    """The measurements a check was judged on: `busbw at 1 GiB = 412.3 GB/s (>= 370.0)`."""
    from harness.checking import fmt

    judged = [m for m in measurements if m.op]
    return "; ".join(f"{m.what} = {fmt(m.value, m.unit)} ({m.op} {fmt(m.threshold)})"
                     for m in judged[:3])


_ORDER = {"error": 0, "fail": 0, "warn": 1, "pass": 2, "skip": 3}


def print_summary(report: Report, file: TextIO | None = None, verbose: bool = False,
                  env: Mapping[str, str] | None = None) -> None:
    """The table (failures first, with their messages; passes with the value they were judged
    on) and the verdict, from the redacted report (a secret wrapped over two lines would not
    be found afterwards). Checks that do not apply to the profile are one line unless verbose."""
    from rich.markup import escape
    from rich.table import Table

    report = report.redacted(env)

    console = _console(file)
    table = Table(title=f"gpu-preflight: {report.host} · {report.profile} · tier {report.tier}",
                  show_lines=False, expand=False)
    table.add_column("Result", no_wrap=True)
    table.add_column("ID", no_wrap=True)
    table.add_column("Check")
    table.add_column("Detail", overflow="fold")
    skipped = [c for c in report.checks if c.outcome == "skip"]
    shown = report.checks if verbose else [c for c in report.checks if c.outcome != "skip"]
    for c in sorted(shown, key=lambda c: (_ORDER.get(c.outcome, 0), c.id)):
        outcome = c.outcome
        detail = _judged(c.measurements) if outcome == "pass" else c.message
        table.add_row(f"[{_STYLE[outcome]}]{_LABEL[outcome]}[/]", c.id, escape(c.title),
                      escape(detail))
    if shown:
        console.print(table)
    if skipped and not verbose:
        console.print(f"[dim]{len(skipped)} not applicable to {report.profile}: "
                      f"{id_ranges([c.id for c in skipped])} (-v shows why)[/]")
    for err in report.harness_errors:
        console.print(f"[bold red]harness error:[/] {escape(err)}")
    counts = report.counts()
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no check ran"
    verdict = report.verdict.upper()
    style = "bold green" if report.verdict == "pass" else "bold red"
    console.print(f"[{style}]{verdict}[/] ({tally}) in {report.duration_s:.1f} s")
