"""The terminal summary: a rich table of every check and the verdict line."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from harness.report import Report

__all__ = ["print_heartbeat", "print_progress", "print_summary"]

_STYLE = {"pass": "green", "warn": "yellow", "skip": "dim", "fail": "bold red", "error": "bold red"}
_LABEL = {"pass": "PASS", "warn": "WARN", "skip": "SKIP", "fail": "FAIL", "error": "ERROR"}


def _console(file: TextIO | None = None) -> Any:
    from rich.console import Console

    return Console(file=file or sys.stdout, highlight=False, soft_wrap=False)


def print_progress(result: dict[str, Any], file: TextIO | None = None) -> None:
    """One line as each check finishes (long runs show they are alive)."""
    from rich.markup import escape

    outcome = result["outcome"]
    _console(file).print(
        f"  [{_STYLE[outcome]}]{_LABEL[outcome]:5}[/] {result['id']:11} "
        f"{escape(result['title'])} [dim]({result['duration_s']:.1f} s)[/]"
    )


def print_heartbeat(done: int, total: int, elapsed_s: float, budget_s: float,
                    file: TextIO | None = None) -> None:
    """A plain line while a long check (a bandwidth sweep, DCGM) runs: the run is alive."""
    of = f" of {total}" if total else ""
    _console(file).print(f"  [dim]...  {done}{of} checks done, {elapsed_s:.0f} s elapsed "
                         f"(upper bound {budget_s:g} s)[/]")


def print_summary(report: Report, file: TextIO | None = None, verbose: bool = False) -> None:
    """The table (failed/warned checks with their messages) and the verdict."""
    from rich.markup import escape
    from rich.table import Table

    console = _console(file)
    table = Table(title=f"gpu-preflight: {report.host} · {report.profile} · tier {report.tier}",
                  show_lines=False, expand=False)
    table.add_column("Result", no_wrap=True)
    table.add_column("ID", no_wrap=True)
    table.add_column("Check")
    table.add_column("Detail", overflow="fold")
    for c in sorted(report.checks, key=lambda c: c["id"]):
        outcome = c["outcome"]
        detail = c["message"] if (verbose or outcome != "pass") else ""
        if outcome == "pass" and verbose and c.get("measurements"):
            detail = "; ".join(
                f"{m['what']} = {m['value']}{(' ' + m['unit']) if m['unit'] else ''}"
                for m in c["measurements"]
            )
        table.add_row(f"[{_STYLE[outcome]}]{_LABEL[outcome]}[/]", c["id"], escape(c["title"]),
                      escape(detail))
    console.print(table)
    for err in report.harness_errors:
        console.print(f"[bold red]harness error:[/] {escape(err)}")
    counts = report.counts()
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    verdict = report.verdict.upper()
    style = "bold green" if report.verdict == "pass" else "bold red"
    console.print(f"[{style}]{verdict}[/] ({tally}) in {report.duration_s:.1f} s")
