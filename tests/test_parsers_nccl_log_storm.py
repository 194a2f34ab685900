"""An NCCL log whose lines do not repeat (issue 32 item 3): a failure storm where every WARN line
names its own request address. The memo of payloads read before (nccl_log.SEEN_CAP/SEEN_BYTES)
fills and starts again, so memory stays flat; before, it held every distinct payload up to 100,000
(64 MB): 9.6 -> 16.4 MB held between the 5 and the 10 MB log below."""

from __future__ import annotations

import io
import tracemalloc

import pytest

from harness.parsers import inspect_kinds
from harness.parsers.nccl_log_payloads import MAX_KEPT
from harness.parsers.nccl_log_summary import summarize


def _storm(lines: int) -> str:
    return "".join(f"ip-10-0-1-{i % 64}:{700 + i % 8}:800 [0] NCCL WARN NET/OFI Request "
                   f"0x{i * 2654435761 % (1 << 48):012x} completed with error. RC: -1. Error: 113 "
                   "(Unresponsive receiver)\n" for i in range(lines))


def _read(text: str) -> tuple[dict, int]:
    """(the result, the peak bytes held while reading it)."""
    stream = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8", newline="")
    tracemalloc.start()
    try:
        out = inspect_kinds()["nccl-log"](stream, profile=None)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return out, peak


@pytest.mark.timeout(300)
def test_a_storm_of_distinct_warn_lines_is_read_in_flat_memory() -> None:
    _read(_storm(1_000))  # imports and compiled patterns out of the way
    (small_out, small), (large_out, large) = _read(_storm(40_000)), _read(_storm(80_000))
    assert large < 1.2 * small + (256 << 10), f"{small:,} -> {large:,} bytes held"
    # the failures the catalogue names: the first MAX_KEPT distinct lines, in both
    assert len(large_out["errors"]) == MAX_KEPT
    assert large_out["errors"] == small_out["errors"]
    assert "Unresponsive receiver" in large_out["errors"][0]["line"]


def test_a_failure_after_the_kept_errors_still_reads_as_a_failure() -> None:
    """The catalogue is skipped once MAX_KEPT errors are kept: the run is still failed by what
    it kept, and a different failure first in the log is kept."""
    first = "ip-10-0-1-1:1:1 [0] NCCL WARN Cuda failure 'out of memory'\n"
    out, _ = _read(first + _storm(MAX_KEPT + 50))
    assert len(out["errors"]) == MAX_KEPT
    assert "out of memory" in out["errors"][0]["line"]


#: WARN payloads of a storm and of what a storm hides: a 1.1x plugin's provider and GDR failure
#: (aws-ofi-nccl's rules), NCCL's IB transport, a socket failure, a line past MAX_TEXT.
WARNS = (
    *(f"NET/OFI Request 0x{i:x} completed with error. RC: -1. Error: 113 (Unresponsive receiver)"
      for i in range(3)),
    "NET/OFI Selected Provider is efa, fabric is efa-direct (found 4 nics)",
    "NET/OFI GDR disabled on GDR-supported instance type",
    "NET/OFI Creating new endpoint for domain 0x1 failed: Invalid argument",
    "NET/IB : No device found.",
    "NET/IB : a second one",
    "Socket recv failed while polling for opId=0x1",
    "NET/IB : " + "x" * 1000,
    "NET/OFI Selected Provider is tcp (found 1 nics)",
)


@pytest.mark.parametrize("c_check", [True, False], ids=["holds_any", "python"])
def test_warn_lines_after_the_kept_errors_still_give_their_facts(monkeypatch, c_check) -> None:
    """Once MAX_KEPT errors and warnings are kept, a WARN line skips the catalogue (and the
    call that would try it), not what else it says: aws-ofi-nccl's rules (the provider a 1.1x
    plugin warns with, its GDR failure), the first NET/IB warning, and each line's count."""
    from harness.parsers import nccl_log_payloads

    if not c_check:
        monkeypatch.setattr(nccl_log_payloads, "_holds_any", None)
    for read in ("warn", "warns"):
        facts = nccl_log_payloads.PayloadFacts(2)
        if read == "warn":
            for text in WARNS[:8]:
                facts.warn(text)
        else:
            facts.warns(["NCCL WARN " + text for text in WARNS[:8]])
        assert len(facts.errors) == len(facts.warnings) == 2, read
        assert (facts.provider, facts.fabric, facts.ofi_nics, facts.nogdr) == (
            "efa", "efa-direct", 4, True), read
        assert facts.ib_warned == "NET/IB : No device found." and facts.ofi_seen, read
        # warn and its fault count 2 a line; an aws-ofi-nccl line no rule reads, or a GDR
        # failure's own fault, one more: the same counts as before the shortcut (5f6c6dd)
        assert facts.recognised == 9 + 2 + 3 + 3 + 2 + 2, read


@pytest.mark.parametrize("kept", [2, 5, 200])
@pytest.mark.parametrize("c_check", [True, False], ids=["holds_any", "python"])
def test_a_run_of_warn_lines_reads_as_each_line_alone(monkeypatch, c_check, kept) -> None:
    """nccl_log reads a chunk's run of plain WARN payloads by PayloadFacts.warns: every fact
    the same as warn's, line by line, before, at and after MAX_KEPT."""
    from harness.parsers import nccl_log_payloads

    if not c_check:
        monkeypatch.setattr(nccl_log_payloads, "_holds_any", None)
    texts = [*WARNS, *WARNS[::-1]]
    alone, run = nccl_log_payloads.PayloadFacts(kept), nccl_log_payloads.PayloadFacts(kept)
    for text in texts:
        alone.warn(text)
    run.warns(["NCCL WARN " + text for text in texts])
    assert vars(alone) == vars(run)
    assert summarize(alone) == summarize(run)
