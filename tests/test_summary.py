"""Terminal output while a run is going: a line per finished check, and a heartbeat line when a
long check keeps the run quiet (plain lines, readable in any log)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from harness.report.summary import print_heartbeat
from harness.run import progress as progress_mod


def test_heartbeat_line() -> None:
    out = io.StringIO()
    print_heartbeat(3, 12, 95.4, 7200.0, file=out)
    assert out.getvalue() == "  ...  3 of 12 checks done, 95 s elapsed (upper bound 7200 s)\n"


def test_progress_prints_results_then_heartbeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.3)
    results = tmp_path / "results.jsonl"
    records = [
        {"event": "collected", "checks": [{"id": "PF-BW-001"}, {"id": "PF-ENV-001"}]},
        {"event": "result", "id": "PF-ENV-001", "title": "env ok", "outcome": "pass",
         "duration_s": 0.1},
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    progress = progress_mod.Progress(results, budget_s=300.0, live=False)
    progress.start()
    deadline = time.monotonic() + 10
    while progress.done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.8)  # long enough for at least one heartbeat after the result
    progress.stop.set()
    progress.join(timeout=5)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "gpu-preflight: 2 checks selected, running (upper bound 300 s)"
    lines = lines[1:]
    assert lines[0].split() == ["PASS", "PF-ENV-001", "env", "ok", "(0.1", "s)"]
    beats = [line for line in lines[1:] if "checks done" in line]
    assert beats, lines
    assert beats[0].strip().startswith("...  1 of 2 checks done")
    assert beats[0].endswith("(upper bound 300 s)")


def test_id_ranges_compress_consecutive_ids() -> None:
    from harness.report.causes import id_ranges

    ids = ["PF-GPU-003", "PF-GPU-001", "PF-GPU-002", "PF-GPU-005", "PF-NET-010", "PF-NET-011",
           "odd"]
    assert id_ranges(ids) == "PF-GPU-001..003, PF-GPU-005, PF-NET-010..011, odd"


def test_summary_causes_and_verdict_last_skips_collapsed_passes_show_value() -> None:
    import io

    from harness.report.model import Report
    from harness.report.summary import print_summary
    from harness.results import results

    checks = [
        {"id": "PF-ENV-001", "title": "env ok", "outcome": "pass", "message": "",
         "measurements": [{"what": "busbw at 16 MiB", "value": 1.28, "unit": "GB/s", "op": ">=",
                           "threshold": 0.05, "ok": True}]},
        {"id": "PF-GPU-001", "title": "gpus", "outcome": "skip", "message": "not applicable"},
        {"id": "PF-GPU-002", "title": "model", "outcome": "skip", "message": "not applicable"},
        {"id": "PF-NET-005", "title": "memlock", "outcome": "fail",
         "message": "[PF-NET-005] memlock 8192 KiB < 16777216 KiB", "measurements": []},
    ]
    report = Report(host="h", profile="local-cpu", profile_source="s", tier="preflight",
                    checks=results(checks))
    out = io.StringIO()
    print_summary(report, file=out)
    text = out.getvalue()
    assert text.index("PF-ENV-001") < text.index("PF-NET-005")  # the failure on the last screen
    assert text.splitlines()[-2] == "✗ FAIL PF-NET-005: memlock 8192 KiB < 16777216 KiB"
    assert "busbw at 16 MiB = 1.28 GB/s (>= 0.05)" in text
    assert "2 not applicable to local-cpu: PF-GPU-001..002 (-v shows why)" in text
    assert "FAIL (1 pass, 2 skip, 1 fail)" in text


def _records(path: Path, *records: dict[str, object]) -> None:
    with path.open("a") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in records)


def test_status_line_says_what_runs_now(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.touch()
    p = progress_mod.Progress(results, budget_s=300.0, out=io.StringIO(), live=False)
    p.began = 100.0
    assert p.status_text(now=101.0) == "gpu-preflight: collecting the checks · 1 s of at most 300 s"
    _records(results,
             {"event": "collected", "checks": [{"nodeid": f"t.py::test_{i}", "id": f"PF-X-00{i}"}
                                               for i in range(1, 6)]},
             *({"event": "started", "nodeid": f"t.py::test_{i}"} for i in range(1, 6)),
             {"event": "result", "nodeid": "t.py::test_1", "id": "PF-X-001", "title": "one",
              "outcome": "pass", "duration_s": 0.5})
    p.poll()
    for i, nodeid in enumerate(sorted(p.running)):
        p.running[nodeid] = 90.0 + i  # started 12, 11, 10, 9 s before `now`
    assert p.status_text(now=102.0) == (
        "gpu-preflight: 1 of 5 checks done · running PF-X-002 (12 s), PF-X-003 (11 s), "
        "PF-X-004 (10 s) and 1 more · 2 s of at most 300 s")


def test_progress_of_a_check_not_timed_says_so_never_0() -> None:
    """A result without a duration (null: not measured) is shown as not timed, not as 0.0 s
    and not as a crash of the progress line."""
    from harness.report.summary import print_progress

    out = io.StringIO()
    print_progress({"outcome": "error", "id": "PF-GPU-001", "title": "gpus", "duration_s": None,
                    "message": "[PF-GPU-001] produced no result"}, out)
    assert out.getvalue().split() == ["ERROR", "PF-GPU-001", "gpus", "(not", "timed)"]


def test_verbose_progress_shows_every_value_and_why() -> None:
    from harness.report.summary import print_progress

    record = {"outcome": "skip", "id": "PF-GPU-001", "title": "gpus", "duration_s": 0.0,
              "message": "[PF-GPU-001] not applicable: profile local-cpu has no GPUs",
              "measurements": [{"what": "GPUs seen", "value": 0, "unit": ""},
                               {"what": "busbw at 16 MiB", "value": 1.28, "unit": "GB/s",
                                "op": ">=", "threshold": 0.05}]}
    quiet, loud = io.StringIO(), io.StringIO()
    print_progress(record, quiet)
    print_progress(record, loud, verbose=True)
    assert len(quiet.getvalue().splitlines()) == 1
    lines = [line.strip() for line in loud.getvalue().splitlines()]
    assert lines[1:] == ["GPUs seen = 0", "busbw at 16 MiB = 1.28 GB/s (>= 0.05 GB/s)",
                         "[PF-GPU-001] not applicable: profile local-cpu has no GPUs"]


def test_the_header_counts_the_whole_selection_whatever_the_phases(tmp_path: Path) -> None:
    """Issue 29: the header said "45 checks selected" (the node-local phase's share) where the
    verdict counted 75. Each phase's session records the whole selection; the header and the
    status line count it."""
    results = tmp_path / "results.jsonl"
    results.touch()
    out = io.StringIO()
    p = progress_mod.Progress(results, budget_s=300.0, out=out, live=False)
    selected = [{"nodeid": f"t.py::test_{i}", "id": f"PF-X-00{i}"} for i in range(1, 6)]
    _records(results,
             {"event": "collected", "phase": "node-local", "checks": selected[:3],
              "selected": selected},
             {"event": "collected", "phase": "exclusive", "checks": selected[3:],
              "selected": selected})
    p.poll()
    assert "gpu-preflight: 5 checks selected, running" in out.getvalue()
    assert p.total == 5


@pytest.mark.parametrize("verbose", [False, True])
@pytest.mark.parametrize("outcome", ["pass", "warn", "skip", "fail", "error"])
def test_a_log_gets_the_lines_rich_prints_without_importing_it(outcome: str, verbose: bool) -> None:
    """Not on a terminal the progress and heartbeat lines are written plainly (start-up: rich is
    not imported by a run in a log, tests/test_startup.py); they are the text rich prints to the
    same log, markup-like brackets and all."""
    from rich.console import Console

    from harness.report.summary import print_progress

    record = {"outcome": outcome, "id": "PF-GPU-001", "title": "gpus [bold]x[/] \\ y",
              "duration_s": 12.34, "message": "[PF-GPU-001] not  applicable:\n [dim]no[/] GPUs",
              "measurements": [{"what": "busbw at [16] MiB", "value": 1.28, "unit": "GB/s",
                                "op": ">=", "threshold": 0.05}]}
    plain, through_rich = io.StringIO(), io.StringIO()
    print_progress(record, plain, verbose=verbose)
    print_progress(record, verbose=verbose, console=Console(
        file=through_rich, highlight=False, soft_wrap=True))
    assert plain.getvalue() == through_rich.getvalue()
    assert "gpus [bold]x[/] \\ y (12.3 s)" in plain.getvalue()
    assert len(plain.getvalue().splitlines()) == (1 if not verbose else 2 if outcome == "pass"
                                                  else 3)
