"""`dcgmi diag -r N -j`: NVIDIA's own GPU diagnostics, within the check's deadline; its output is
read whatever dcgmi's exit status (it exits non-zero when a test fails)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness import deadline as dl
from harness.checking import ProbeError
from harness.parsers import ParseError
from harness.probes import chain

if TYPE_CHECKING:
    from harness.parsers.dcgm import DcgmDiag

__all__ = ["DCGM_TIMEOUT_S", "run_dcgm_diag"]

#: Wall-time bound per `dcgmi diag -r N` level, s (domain-facts.md: r1 seconds, r2 ~2 min,
#: r3 ~15 min, r4 45 min+), with head room for nv-hostengine start-up.
DCGM_TIMEOUT_S = {1: 120.0, 2: 600.0, 3: 1800.0, 4: 4800.0}

_INSTALL = ("install DCGM (datacenter-gpu-manager) in the image and start its host engine "
            "(`nv-hostengine`, or the nvidia-dcgm service)")
_STUCK = ("a `dcgmi diag` that does not finish means nv-hostengine or a GPU does not answer: "
          "check `systemctl status nvidia-dcgm` (or restart `nv-hostengine`) and the kernel log "
          "for Xid errors")


def run_dcgm_diag(level: int, *, timeout_s: float | None = None, host: str | None = None,
                  deadline: dl.Deadline | None = None) -> DcgmDiag:
    """`dcgmi diag -r LEVEL -j [--host HOST]`, parsed (a DcgmDiag), within `timeout_s` (default:
    the level's DCGM_TIMEOUT_S) and the `deadline`. dcgmi exits non-zero when a test fails (226
    is DCGM_ST_NVVS_ERROR), so its output is read whatever the status; ProbeError when there is
    no result to read (missing, hung, empty, truncated or garbled output). `host`: a remote
    nv-hostengine (Kubernetes' GPU operator runs it as a service), default the local one."""
    from harness.parsers.dcgm import parse_dcgm_diag

    cap = timeout_s if timeout_s is not None else DCGM_TIMEOUT_S.get(level, 1800.0)
    argv = ["dcgmi", "diag", "-r", str(level), "-j"] + (["--host", host] if host else [])
    res, note = chain.run(argv, deadline, cap, tool="dcgmi")
    if res.error is not None:
        hint = "" if res.error.startswith("not started") else f": {_INSTALL}"
        raise ProbeError(f"{res.describe()}{hint}")
    if res.timed_out:
        raise ProbeError(f"{chain.describe(res, note)}; {_STUCK}")
    if res.incomplete:
        raise ProbeError(f"{res.describe()}; its result may be cut short, not read")
    try:
        return parse_dcgm_diag(res.stdout)
    except ParseError as exc:
        raise ProbeError(f"{res.describe()}; no diagnostic result in its output ({exc})") from None
