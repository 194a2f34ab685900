"""The dcgmi diag table's line readings are made once per distinct line (dcgm_text._split, kept by
table_cells up to MAX_CACHED lines): a log of dcgmi runs whose lines do not all repeat (each run's
PIDs and figures differ) reads the same with the cache as without it (issue 32 item 3)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.parsers import ParseError, dcgm_text
from harness.parsers.dcgm import parse_dcgm_diag

DATA = Path(__file__).parent / "data" / "dcgm"
SAMPLES = sorted([*DATA.glob("dcgmi-*.txt"), *DATA.glob("real_dcgmi-text*.txt")])


def _read(text: str) -> object:
    """The diag read from text, or the ParseError's message (a sample holding only an error)."""
    try:
        return parse_dcgm_diag(text)
    except ParseError as exc:
        return str(exc)


def _runs(text: str, n: int) -> str:
    """The table printed n times, each run's numbers of 2+ digits in parentheses (a child's PID)
    and its GPU list's order the same, as a log of `dcgmi diag` runs holds them."""
    return "".join(re.sub(r"\((\d{2,})\)", lambda m, i=i: f"({int(m[1]) + i})", text)
                   for i in range(n))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_log_of_runs_reads_the_same_with_and_without_the_split_cache(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _runs(path.read_text(encoding="utf-8"), 12)
    cached = _read(log)
    monkeypatch.setattr(dcgm_text, "MAX_CACHED", 0)
    assert _read(log) == cached


def test_each_run_whose_failure_names_another_pid_is_kept() -> None:
    """A failure message that differs between runs is a failure of each run (not folded into the
    first); the same message printed again is kept once."""
    text = (DATA / "dcgmi-text-4.2.3-pcie-fail.txt").read_text(encoding="utf-8")
    assert "(152)" in text
    varied = [r for r in parse_dcgm_diag(_runs(text, 5)).results if r.status == "fail"]
    repeated = [r for r in parse_dcgm_diag(text * 5).results if r.status == "fail"]
    assert len(varied) == 5 * len(repeated)
    assert {re.search(r"\((\d+)\)", r.message)[1] for r in varied} == {"152", "153", "154", "155", "156"}


def test_the_samples_are_read() -> None:
    assert len(SAMPLES) >= 8
