"""`dcgmi diag -r N -j`: NVIDIA's own GPU diagnostics, within the check's deadline; its output is
read whatever dcgmi's exit status (it exits non-zero when a test fails). Contention (another
diagnostic holds the GPUs: "resource in use", "a diag instance is already running") is tried
again within the check's budget, then a DcgmContentionError: an error naming it, never a failed
diagnostic."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.base import deadline as dl
from harness.base.errors import ProbeError
from harness.parsers import ParseError
from harness.probes import chain

if TYPE_CHECKING:
    from harness.parsers.dcgm_records import DcgmDiag

__all__ = ["CONTENTION_WAIT_S", "DCGM_TIMEOUT_S", "DcgmContentionError", "run_dcgm_diag"]

#: Wall-time bound per `dcgmi diag -r N` level, s (domain-facts.md: r1 seconds, r2 ~2 min,
#: r3 ~15 min, r4 45 min+), with head room for nv-hostengine start-up.
DCGM_TIMEOUT_S = {1: 120.0, 2: 600.0, 3: 1800.0, 4: 4800.0}

#: Wait between tries while another diagnostic holds the GPUs, s. DCGM's own tests wait 0.2-1.5 s
#: for a diag that is ending (testing/python3/tests/test_dcgm_diag.py, wait_host_engine_ready and
#: the memtest rerun); one that is running takes its level's time: a few tries over the budget.
CONTENTION_WAIT_S = 10.0
#: Share of the check's budget kept for the diagnostic that finally gets the GPUs: contention is
#: waited out only while at least this much of the budget would be left after the wait
#: (DCGM_TIMEOUT_S holds about twice each level's run time).
RUN_SHARE = 0.5

_INSTALL = ("install DCGM (datacenter-gpu-manager) in the image and start its host engine "
            "(`nv-hostengine`, or the nvidia-dcgm service)")
_STUCK = ("a `dcgmi diag` that does not finish means nv-hostengine or a GPU does not answer: "
          "check `systemctl status nvidia-dcgm` (or restart `nv-hostengine`) and the kernel log "
          "for Xid errors")


class DcgmContentionError(ProbeError):
    """dcgmi ran no test on any try: another DCGM diagnostic held the GPUs the whole budget."""


def run_dcgm_diag(level: int, *, timeout_s: float | None = None, host: str | None = None,
                  deadline: dl.Deadline | None = None, wait_s: float = CONTENTION_WAIT_S,
                  sleep: Callable[[float], None] = time.sleep) -> DcgmDiag:
    """`dcgmi diag -r LEVEL -j [--host HOST]`, parsed (a DcgmDiag), within `timeout_s` (default:
    the level's DCGM_TIMEOUT_S) and the `deadline`. dcgmi exits non-zero when a test fails (226
    is DCGM_ST_NVVS_ERROR), so its output is read whatever the status; ProbeError when there is
    no result to read (missing, hung, empty, truncated or garbled output). `host`: a remote
    nv-hostengine (Kubernetes' GPU operator runs it as a service), default the local one.
    Contention is tried again every `wait_s` (at most a tenth of the budget: the cap, or what is
    left of the deadline) while RUN_SHARE of the budget would be left after the wait, then
    DcgmContentionError with dcgmi's words, the tries and the time waited."""
    cap = timeout_s if timeout_s is not None else DCGM_TIMEOUT_S.get(level, 1800.0)
    argv = ["dcgmi", "diag", "-r", str(level), "-j"] + (["--host", host] if host else [])
    start, tries = time.monotonic(), 0
    budget = deadline.limit(cap) if deadline is not None else cap  # kill reserve kept
    wait = min(wait_s, budget / 10)  # a short budget still gets a few tries
    while True:
        got = _try(argv, deadline, cap - (time.monotonic() - start) if tries else cap)
        tries += 1
        if not isinstance(got, str):
            return got
        left = budget - (time.monotonic() - start)
        if left - wait < RUN_SHARE * budget:
            raise DcgmContentionError(
                f"`{' '.join(argv)}` ran no test: another DCGM diagnostic holds the GPUs "
                f"(dcgmi: {got!r}) on each of {tries} tr{'y' if tries == 1 else 'ies'} over "
                f"{time.monotonic() - start:.0f} s (tried again every {wait:g} s while half "
                f"of the check's {budget:.0f} s budget was left for the diagnostic itself); "
                "not a result of these GPUs: find the other diagnostic (`pgrep -a nvvs`, a "
                "`dcgmi diag` or `dcgmi mndiag` of another job, the GPU operator's validator) "
                "and run preflight again")
        sleep(wait)


def _try(argv: list[str], deadline: dl.Deadline | None, cap: float) -> DcgmDiag | str:
    """One dcgmi run within `cap` and the deadline: its result, or dcgmi's words when another
    diagnostic held the GPUs; ProbeError when there is no result to read."""
    from harness.parsers.dcgm import parse_dcgm_diag
    from harness.parsers.dcgm_records import contention

    res, note = chain.run(argv, deadline, cap, tool="dcgmi")
    if res.error is not None:
        hint = "" if res.error.startswith("not started") else f": {_INSTALL}"
        raise ProbeError(f"{res.describe()}{hint}")
    if res.timed_out:
        raise ProbeError(f"{chain.describe(res, note)}; {_STUCK}")
    if res.incomplete:
        raise ProbeError(f"{res.describe()}; its result may be cut short, not read")
    try:
        diag = parse_dcgm_diag(res.stdout)
    except ParseError as exc:
        if busy := contention(res.stdout):  # the text form: `Error: Unable to complete ...`
            return busy
        raise ProbeError(f"{res.describe()}; no diagnostic result in its output ({exc})") from None
    return diag.contended or diag
