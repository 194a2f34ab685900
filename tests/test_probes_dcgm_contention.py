"""DCGM contention (issue 30 item 5): `dcgmi diag` refused because another diagnostic holds the
GPUs is tried again within the check's budget, then an error naming the contention, never a
failed diagnostic. An emulated `dcgmi` on PATH answers with DCGM 4.6's own refusal (assembled
from NVIDIA/DCGM's sources: tests/data/dcgm/SOURCES.md) a given number of times, then a
recorded passing result.

What these prove: the probe reads dcgmi's refusal (JSON and text), retries, passes through to a
real result, and stops with the contention named when the budget's half is used. What they
cannot: that a live nv-hostengine words it exactly so (the sample is assembled from the source,
not captured; the match is on the words of dcgm_errors.c, not on the whole line)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.base.deadline import Deadline
from harness.base.errors import ProbeError
from harness.parsers.dcgm import parse_dcgm_diag
from harness.probes.dcgm import DcgmContentionError, run_dcgm_diag
from tests.fake_tools import empty_path, make_tool

DATA = Path(__file__).parent / "data" / "dcgm"
IN_USE = DATA / "dcgm4.6-diag-in-use-from-source.json"
RUNNING = DATA / "dcgm4.6-diag-already-running-from-source.json"
IN_USE_TEXT = DATA / "dcgmi-text-4.6-diag-in-use-from-source.txt"
PASS = DATA / "dcgm4-r3-diagnostic-pass-excerpt.json"
BUSY_WORDS = "The requested operation could not be completed because the affected resource is in use"


def busy_then(bin_dir: Path, count: Path, busy: Path, times: int, exit_busy: int = 222) -> None:
    """`dcgmi` answering `busy` (exit `exit_busy`: -34 as a byte) on its first `times` runs,
    then the recorded pass; each run appends a line to `count`."""
    make_tool(bin_dir, "dcgmi", f"""echo run >> '{count}'
n=$(wc -l < '{count}')
if [ "$n" -le {times} ]; then cat '{busy}'; exit {exit_busy}; fi
cat '{PASS}'""")


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return empty_path(tmp_path, monkeypatch)


def runs(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


@pytest.mark.parametrize("busy", [IN_USE, RUNNING, IN_USE_TEXT], ids=lambda p: p.name)
def test_contention_is_tried_again_then_the_real_result_is_read(bin_dir: Path, tmp_path: Path,
                                                                 busy: Path):
    count = tmp_path / "count"
    busy_then(bin_dir, count, busy, times=2)
    slept: list[float] = []
    diag = run_dcgm_diag(1, timeout_s=60, wait_s=0.05, sleep=slept.append)
    assert diag.passed is True
    assert runs(count) == 3 and slept == [0.05, 0.05]


def test_contention_for_the_whole_budget_is_an_error_naming_it(bin_dir: Path, tmp_path: Path):
    count = tmp_path / "count"
    busy_then(bin_dir, count, IN_USE, times=1000)
    started = time.monotonic()
    with pytest.raises(DcgmContentionError) as caught:
        run_dcgm_diag(1, timeout_s=4, wait_s=0.2)
    took = time.monotonic() - started
    message = str(caught.value)
    assert message.startswith("`dcgmi diag -r 1 -j` ran no test: another DCGM diagnostic holds "
                              "the GPUs (dcgmi: 'Error: Unable to complete diagnostic for "
                              f"entities *,cpu:*. Return: (-34) : {BUSY_WORDS}') on each of ")
    assert "not a result of these GPUs" in message and "pgrep -a nvvs" in message
    # Tried more than once, and stopped with half the budget left for the diagnostic (bounds,
    # not times: the 2 s half plus one try's start under load).
    assert runs(count) >= 2
    assert took < 4.0
    assert isinstance(caught.value, ProbeError)  # the check's outcome is `error`, not `fail`


def test_the_checks_deadline_bounds_the_tries(bin_dir: Path, tmp_path: Path):
    """A check deadline shorter than the level's cap is the budget: the error comes within it."""
    count = tmp_path / "count"
    busy_then(bin_dir, count, RUNNING, times=1000, exit_busy=217)
    started = time.monotonic()
    with pytest.raises(DcgmContentionError, match=r"A diag instance is already running.*half of "
                                                  r"the check's 3 s budget"):
        # 9 s, less the 6 s kept to stop a tool that overruns (deadline.KILL_OVERHEAD_S)
        run_dcgm_diag(1, timeout_s=120, wait_s=30, deadline=Deadline.after(9.0))
    assert time.monotonic() - started < 9.0
    assert runs(count) >= 2


def test_a_failed_diagnostic_is_not_contention(bin_dir: Path, tmp_path: Path):
    """The removal test: a real failure (no contention words) is read at once, never retried."""
    count = tmp_path / "count"
    busy_then(bin_dir, count, DATA / "dcgm4-gb10-r1-software-fail.json", times=1000,
              exit_busy=226)
    diag = run_dcgm_diag(1, timeout_s=10, wait_s=0.05, sleep=lambda s: pytest.fail("retried"))
    assert diag.passed is False and diag.contended is None
    assert runs(count) == 1


def test_other_runtime_errors_are_not_contention():
    """The old NVVS runtime error (host engine disconnected) is an error of the node, not a
    reason to wait: `contended` stays None."""
    diag = parse_dcgm_diag((DATA / "real_nvvs-2.x-runtime-error.json").read_text())
    assert diag.passed is False and diag.contended is None


def test_the_contended_document_names_dcgmis_words():
    diag = parse_dcgm_diag(IN_USE.read_text())
    assert diag.contended == (f"Error: Unable to complete diagnostic for entities *,cpu:*. "
                              f"Return: (-34) : {BUSY_WORDS}")
    assert diag.passed is False  # never a pass on its own
