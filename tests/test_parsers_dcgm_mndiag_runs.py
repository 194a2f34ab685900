"""A log of `dcgmi mndiag` runs (the same table printed once a run): each GPU's error and each
MPI error is kept once, not once a run, so the result does not grow with the log and memory stays
flat (issue 32 item 3: before, the failed GPU's message held every run's copy, 315,000 characters
at 20 MB, and the reader's peak RSS grew from 25 to 66 MB between a 20 and a 500 MB log)."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import pytest

from harness.parsers import inspect_kinds, reader
from harness.parsers.dcgm import parse_dcgm_diag

DATA = Path(__file__).parent / "data" / "dcgm"
SAMPLES = sorted(DATA.glob("mndiag-text-*.txt"))


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_a_table_printed_once_a_run_reads_as_one_run(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    once, many = parse_dcgm_diag(text), parse_dcgm_diag(text * 7)
    assert many.results == once.results and once.results
    assert many.errors == once.errors


def test_errors_that_differ_between_runs_are_each_kept() -> None:
    text = (DATA / "mndiag-text-4.3-host1-gpu1-fail-constructed.txt").read_text(encoding="utf-8")
    assert "host 1, GPU 1" in text
    log = text + text.replace("host 1, GPU 1", "host 1, GPU 9")
    failed = [r for r in parse_dcgm_diag(log).results if r.status == "fail" and r.gpu == 1]
    assert len(failed) == 1
    assert "GPU 1" in failed[0].message and "GPU 9" in failed[0].message


def _peak(text: str) -> int:
    stream = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8", newline="")
    tracemalloc.start()
    try:
        inspect_kinds()["dcgm"](stream, profile=None)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_memory_stays_flat_in_the_number_of_runs(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "CHUNK_CHARS", 1 << 13)
    text = path.read_text(encoding="utf-8")
    _peak(text * 10)  # imports and compiled patterns out of the way
    small, large = (_peak(text * (size // len(text) + 1)) for size in (100_000, 1_600_000))
    assert large < 1.5 * small + (32 << 10), f"{small:,} -> {large:,} bytes held"
