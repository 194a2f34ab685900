"""Terminal output while a run is going: a line per finished check, and a heartbeat line when a
long check keeps the run quiet (plain lines, readable in any log)."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from harness import runner
from harness.summary import print_heartbeat


def test_heartbeat_line() -> None:
    out = io.StringIO()
    print_heartbeat(3, 12, 95.4, 7200.0, file=out)
    assert out.getvalue() == "  ...  3 of 12 checks done, 95 s elapsed (upper bound 7200 s)\n"


def test_progress_prints_results_then_heartbeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.3)
    results = tmp_path / "results.jsonl"
    records = [
        {"event": "collected", "checks": [{"id": "PF-BW-001"}, {"id": "PF-ENV-001"}]},
        {"event": "result", "id": "PF-ENV-001", "title": "env ok", "outcome": "pass",
         "duration_s": 0.1},
    ]
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    progress = runner._Progress(results, budget_s=300.0)
    progress.start()
    deadline = time.monotonic() + 10
    while progress.done < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.8)  # long enough for at least one heartbeat after the result
    progress.stop.set()
    progress.join(timeout=5)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["PASS", "PF-ENV-001", "env", "ok", "(0.1", "s)"]
    beats = [line for line in lines[1:] if "checks done" in line]
    assert beats, lines
    assert beats[0].strip().startswith("...  1 of 2 checks done")
    assert beats[0].endswith("(upper bound 300 s)")
