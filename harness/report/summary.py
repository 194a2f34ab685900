"""The terminal summary: a rich table of every check and the verdict line."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.report.causes import id_ranges
from harness.report.model import Report
from harness.results import Measurement

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["measured_lines", "not_measured_text", "print_heartbeat", "print_progress", "print_summary"]

_STYLE = {"pass": "green", "warn": "yellow", "skip": "dim", "fail": "bold red", "error": "bold red"}
_LABEL = {"pass": "PASS", "warn": "WARN", "skip": "SKIP", "fail": "FAIL", "error": "ERROR"}


def _console(file: TextIO | None = None) -> Console:
    from rich.console import Console

    out = file or sys.stdout
    # Not a terminal (a log, a pipe): soft wrap, i.e. never hard-wrapped at 80 columns mid-token.
    return Console(file=out, highlight=False, soft_wrap=not out.isatty())


def print_progress(result: JSONObject, file: TextIO | None = None, *, verbose: bool = False,
                   console: Console | None = None) -> None:
    """One line as each check finishes (long runs show they are alive). Verbose: below it every
    value the check measured, with the threshold it was judged against, and, for a check that
    did not pass or does not apply, its message (why)."""
    outcome = result["outcome"]
    took = result.get("duration_s")
    lines = [[("", "  "), (_STYLE[outcome], f"{_LABEL[outcome]:5}"),
              ("", f" {result['id']:11} {result['title']} "),
              ("dim", "(not timed)" if took is None else f"({took:.1f} s)")]]
    if verbose:
        lines += [[("", "        "), ("dim", line)]
                  for line in measured_lines(result.get("measurements") or [])]
        if outcome != "pass" and result.get("message"):
            lines.append([("", "        "), ("dim", " ".join(str(result["message"]).split()))])
    _print_styled(lines, file, console)


def _print_styled(lines: list[list[tuple[str, str]]], file: TextIO | None,
                  console: Console | None) -> None:
    """Lines of (style, text) parts: through rich on a terminal (or the live line's console);
    in a log or a pipe, where rich prints the same text without its styles, as plain lines, so
    a run that is not on a terminal never imports rich (~25 ms of start-up, issue 28 item 6;
    tests/test_summary.py holds both renderings equal)."""
    out = file or sys.stdout
    if console is None and not out.isatty():
        for parts in lines:
            print("".join(text for _, text in parts), file=out, flush=True)
        return
    from rich.markup import escape

    console = console or _console(file)
    for parts in lines:
        console.print("".join(f"[{style}]{escape(text)}[/]" if style else escape(text)
                              for style, text in parts))


def measured_lines(measurements: Sequence[JSONObject]) -> list[str]:
    """Every measurement: `busbw at 1 GiB = 412.3 GB/s (>= 370.0 GB/s)`, `GPU 3 temperature = 41 C`
    (no threshold: recorded, not judged)."""
    from harness.base.compare import fmt

    lines = []
    for m in map(Measurement.from_dict, measurements):
        judged = f" ({m.op} {fmt(m.threshold, m.unit)})" if m.op else ""
        lines.append(f"{m.what} = {fmt(m.value, m.unit)}{judged}")
    return lines


def print_heartbeat(done: int, total: int, elapsed_s: float, budget_s: float,
                    file: TextIO | None = None) -> None:
    """A plain line while a long check (a bandwidth sweep, DCGM) runs: the run is alive."""
    of = f" of {total}" if total else ""
    _print_styled([[("", "  "), ("dim", f"...  {done}{of} checks done, {elapsed_s:.0f} s "
                                        f"elapsed (upper bound {budget_s:g} s)")]], file, None)


def _judged(measurements: Sequence[Measurement]) -> str:
    """The measurements a check was judged on: `busbw at 1 GiB = 412.3 GB/s (>= 370.0)`."""
    from harness.base.compare import fmt

    judged = [m for m in measurements if m.op]
    return "; ".join(f"{m.what} = {fmt(m.value, m.unit)} ({m.op} {fmt(m.threshold)})"
                     for m in judged[:3])


_ORDER = {"error": 0, "fail": 0, "warn": 1, "pass": 2, "skip": 3}


def print_summary(report: Report, file: TextIO | None = None, verbose: bool = False,
                  env: Mapping[str, str] | None = None) -> None:
    """The table of what passed (with the value it was judged on) and warned, then what was not
    measured and why, then the root causes of the failures (harness.report.causes: one line per cause,
    the checks it blocks folded under it, its fix), and the verdict last: the last screen of a
    failing run is the verdict, its causes and their fixes. From the redacted report (a secret
    wrapped over two lines would not be found afterwards). Verbose: every check in the table."""
    from rich.markup import escape
    from rich.table import Table

    from harness.report.causes import find_causes

    report = report.redacted(env)

    console = _console(file)
    table = Table(title=f"gpu-preflight: {report.host} · {report.profile} · tier {report.tier}",
                  show_lines=False, expand=False)
    table.add_column("Result", no_wrap=True)
    table.add_column("ID", no_wrap=True)
    table.add_column("Check")
    table.add_column("Detail", overflow="fold")
    skipped = [c for c in report.checks if c.outcome == "skip"]
    not_run = [c for c in skipped if _NOT_RUN in c.message]
    shown = report.checks if verbose else [c for c in report.checks
                                           if c.outcome in ("pass", "warn")]
    for c in sorted(shown, key=lambda c: (_ORDER.get(c.outcome, 0), c.id), reverse=True):
        outcome = c.outcome
        detail = _judged(c.measurements) if outcome == "pass" else c.message
        table.add_row(f"[{_STYLE[outcome]}]{_LABEL[outcome]}[/]", c.id, escape(c.title),
                      escape(detail))
    if shown:
        console.print(table)
    inapplicable = [c for c in skipped if c not in not_run]
    if inapplicable and not verbose:
        console.print(f"[dim]{len(inapplicable)} not applicable to {report.profile}: "
                      f"{id_ranges([c.id for c in inapplicable])} (-v shows why)[/]")
    for c in not_run:
        console.print(f"[yellow]NOT MEASURED[/] {c.id}: {escape(not_measured_text(c.message))}")
    causes = find_causes(report.checks)
    if causes:
        failed = sum(len(c.ids) for c in causes)
        console.print(f"[bold]{failed} failed check{'s' if failed != 1 else ''}, "
                      f"{len(causes)} cause{'s' if len(causes) != 1 else ''}, root cause "
                      "first:[/]")
    for cause in causes:
        console.print(f"[{_STYLE[cause.outcome]}]✗ {_LABEL[cause.outcome]}[/] "
                      f"{escape(cause.line())}")
        if cause.fix:
            console.print(f"    [bold]fix:[/] {escape(cause.fix)}")
    for err in report.harness_errors:
        console.print(f"[bold red]harness error:[/] {escape(err)}")
    counts = report.counts()
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no check ran"
    verdict = report.verdict.upper()
    style = "bold green" if report.verdict == "pass" else "bold red"
    console.print(f"[{style}]{verdict}[/] ({tally}) in {report.duration_s:.1f} s")


#: What `checking.not_run` puts in a skip's message: a step that did not run (never a pass).
_NOT_RUN = "] not run: "


def not_measured_text(message: str) -> str:
    """`[PF-CLUSTER-004] not run: cluster bandwidth not measured: ...` -> what follows."""
    return " ".join(message.split(_NOT_RUN, 1)[-1].split())
