"""nvidia-smi as the GPU inventory's fallback: `-q -x` XML, `-q` text and the `--query-gpu` CSV,
each within its timeout and the check's deadline; what it prints is read even on a non-zero exit
when it names a lost GPU, and refused when it is empty, garbled or shows fewer GPUs than it says
are attached."""

from __future__ import annotations

from collections.abc import Callable

from harness.base import deadline as dl
from harness.base.errors import ProbeError
from harness.base.gpu_record import GpuInventory
from harness.base.proc_result import ProcResult
from harness.parsers import ParseError
from harness.probes import chain

__all__ = ["SMI_CSV_FIELDS", "SMI_TIMEOUT_S", "smi_query", "smi_query_csv", "smi_query_xml"]

#: Bound on one nvidia-smi call, s. One call that hangs stops the chain: every later nvidia-smi
#: call would wait on the same stuck driver.
SMI_TIMEOUT_S = 60.0


def _smi(args: list[str], timeout_s: float, deadline: dl.Deadline | None,
         parse: Callable[[str], GpuInventory], what: str) -> GpuInventory:
    res, note = chain.run(["nvidia-smi", *args], deadline, timeout_s)
    return _smi_reading(res, lambda: parse(res.stdout), what, note)


def smi_query_xml(timeout_s: float = SMI_TIMEOUT_S, *,
                  deadline: dl.Deadline | None = None) -> GpuInventory:
    """`nvidia-smi -q -x`, parsed; ProbeError when it cannot run or prints something else."""
    from harness.parsers.nvidia_smi_xml import parse_smi_xml

    return _smi(["-q", "-x"], timeout_s, deadline, parse_smi_xml, "`nvidia-smi -q -x`")


def smi_query(timeout_s: float = SMI_TIMEOUT_S, *,
              deadline: dl.Deadline | None = None) -> GpuInventory:
    """`nvidia-smi -q`, parsed; ProbeError when it cannot run or prints something else."""
    from harness.parsers.nvidia_smi_query import parse_smi_query

    return _smi(["-q"], timeout_s, deadline, parse_smi_query, "`nvidia-smi -q`")


def _smi_reading(res: ProcResult, parse: Callable[[], GpuInventory], what: str,
                 note: str = "") -> GpuInventory:
    """The inventory nvidia-smi printed. A non-zero exit is a ProbeError, unless what it
    printed names a lost GPU (`Unable to determine the device handle for GPU...`): nvidia-smi
    may exit non-zero then, and the lost GPU is the finding, not a reason to discard it. So is
    an answer with fewer GPUs than the `Attached GPUs` it states (its output was cut short)."""
    if res.timed_out or res.error is not None:
        raise ProbeError(chain.describe(res, note))
    if res.incomplete and res.returncode == 0:
        # Cut output would read as fewer GPUs (a false "GPU missing"), or as nothing.
        raise ProbeError(f"{res.describe()}: its answer cannot be trusted whole")
    try:
        inv = parse()
    except ParseError as exc:
        raise ProbeError(res.describe() if not res.ok
                         else f"{what} printed something unexpected: {exc}") from None
    if not res.ok and not any(g.requires_reset for g in inv.gpus):
        raise ProbeError(res.describe())
    if inv.num_attached is not None and len(inv.gpus) < inv.num_attached:
        raise ProbeError(f"{what} says {inv.num_attached} GPUs are attached but shows "
                         f"{len(inv.gpus)}: its output is incomplete (cut short?)")
    return inv


#: The `--query-gpu` fields the CSV fallback asks for (the `clocks_throttle_reasons.*` names
#: are the ones every driver since R450 accepts; R535+ also knows `clocks_event_reasons.*`).
SMI_CSV_FIELDS = (
    "index", "name", "uuid", "serial", "pci.bus_id", "driver_version", "memory.total",
    "ecc.mode.current", "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.uncorrected.aggregate.total", "retired_pages.pending", "temperature.gpu",
    "power.draw", "persistence_mode", "pstate", "pcie.link.gen.current", "pcie.link.gen.max",
    "pcie.link.width.current", "pcie.link.width.max", "clocks_throttle_reasons.hw_slowdown",
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown",
)


def smi_query_csv(timeout_s: float = SMI_TIMEOUT_S, *,
                  deadline: dl.Deadline | None = None) -> GpuInventory:
    """`nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, parsed."""
    from harness.parsers.nvidia_smi_csv import parse_smi_csv

    args = [f"--query-gpu={','.join(SMI_CSV_FIELDS)}", "--format=csv,noheader,nounits"]
    return _smi(args, timeout_s, deadline,
                lambda text: parse_smi_csv(text, columns=SMI_CSV_FIELDS).inventory,
                "`nvidia-smi --query-gpu`")
