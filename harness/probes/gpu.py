"""GPU inventory probes: NVML (nvidia-ml-py) first, then `nvidia-smi -q -x`, `-q` and the
`--query-gpu` CSV, the whole chain within the check's deadline; a source that hangs is named and
not asked again. They gather facts and judge nothing. The NVML module is a parameter so that
tests pass a fake one. (`dcgmi diag`: probes/dcgm.py; the kernel log: probes/kernel_log.py.)"""

from __future__ import annotations

import ctypes
import dataclasses
import time
from collections.abc import Callable
from types import ModuleType
from typing import TypeVar

from harness.base import deadline as dl
from harness.base.errors import ProbeError
from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.probes import chain
from harness.probes.nvidia_smi import SMI_TIMEOUT_S, smi_query, smi_query_csv, smi_query_xml
from harness.probes.nvml import NvmlHandle, NvmlUnavailableError, Reader, session, text
from harness.probes.nvml_nvlink import (
    GpuCounters,
    NvlinkCounters,
    error_growth,
    link_states,
    read_counters,
)

__all__ = [
    "NVML_TIMEOUT_S",
    "GpusUnreadableError",
    "clock_event_reasons",
    "inventory",
    "nvlink_error_growth",
    "query_gpus",
    "sample_nvlink_errors",
]

T = TypeVar("T")

#: Bound on NVML's answer (nvmlInit and every device query), s: a few seconds on 8 GPUs even
#: without persistence mode; past this the driver is stuck.
NVML_TIMEOUT_S = 30.0

#: NVML clock-event bits -> nvidia-smi's names (nvmlClocksEventReason* in nvml.h).
_REASON_BITS = {
    0x1: "Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap", 0x8: "HW Slowdown",
    0x10: "Sync Boost", 0x20: "SW Thermal Slowdown", 0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown", 0x100: "Display Clock Setting",
}
def _cuda_version(raw: int | None) -> str | None:
    return None if not raw else f"{raw // 1000}.{(raw % 1000) // 10}"


def clock_event_reasons(mask: int | None) -> tuple[str, ...] | None:
    if mask is None:
        return None
    return tuple(name for bit, name in _REASON_BITS.items() if mask & bit)


#: nvmlGpuFabricState_t -> nvidia-smi's words.
_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


def _fabric(r: Reader, handle: NvmlHandle) -> tuple[str | None, str | None]:
    """(state, status) of the GPU's NVSwitch fabric registration; (None, None) unsupported."""
    struct = getattr(r.nvml, "c_nvmlGpuFabricInfo_t", None)
    if struct is None:
        return None, None
    info = struct()
    if r.get("nvmlDeviceGetGpuFabricInfo", handle, ctypes.byref(info)) is None:
        return None, None
    state = _FABRIC_STATES.get(int(info.state))
    if state is None:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        return None, None
    status = "Success" if int(info.status) == 0 else str(r.nvml.NVMLError(int(info.status)))
    return state, status


#: nvmlGpuRecoveryAction_t -> nvidia-smi's words (0, NONE, is no action).
_RECOVERY = {0: "None", 1: "GPU Reset", 2: "Node Reboot", 3: "Drain P2P", 4: "Drain and Reset",
             5: "Recover IMEX Domain", 6: "Bus Reset", 7: "System Reboot"}
#: The fields nvidia-smi's `GPU Reset Status` and `GPU Recovery Action` come from: reset
#: required (226), drain and reset recommended (227), the driver's recovery action (230, R565+;
#: nvml.h deprecates 226 in its favour).
_RESET_FIELDS = ("NVML_FI_DEV_RESET_STATUS", "NVML_FI_DEV_DRAIN_AND_RESET_STATUS",
                 "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION")


def _reset_state(r: Reader, handle: NvmlHandle) -> tuple[bool | None, str | None]:
    """(requires a reset, the driver's recovery action) from NVML's fields: True when the reset
    or drain-and-reset status says so, False when they say not, None when neither answered; the
    action's name (`None` when the driver needs nothing), None when the field did not answer."""
    ids = [getattr(r.nvml, name, None) for name in _RESET_FIELDS]
    asked = [i for i in ids if i is not None]
    got = dict(zip(asked, r.fields(handle, asked), strict=True))
    reset, drain, action = (None if i is None else got.get(i) for i in ids)
    requires = None if reset is None and drain is None else bool(reset) or bool(drain)
    recovery = None if action is None else _RECOVERY.get(int(action), f"recovery action {action}")
    return requires, recovery


def _gpu(nvml: ModuleType, index: int, nvlink: bool) -> GpuInfo:
    r = Reader(nvml)
    handle = r.get("nvmlDeviceGetHandleByIndex", index)
    if handle is None:  # an answer of "not supported" still leaves the GPU unread
        errors = r.errors or [f"nvmlDeviceGetHandleByIndex({index}) gave no handle"]
        return GpuInfo(index=index, requires_reset=True if r.lost else None,
                       query_errors=tuple(errors))
    pci = r.get("nvmlDeviceGetPciInfo", handle)
    ecc = r.get("nvmlDeviceGetEccMode", handle)
    uncorrected = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    remap = r.get("nvmlDeviceGetRemappedRows", handle)
    dbe_pages = r.get("nvmlDeviceGetRetiredPages", handle,
                      getattr(nvml, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    pending_pages = r.get("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    mask = r.get("nvmlDeviceGetCurrentClocksEventReasons", handle)
    if mask is None:
        mask = r.get("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    power_mw = r.get("nvmlDeviceGetPowerUsage", handle)
    persistence = r.get("nvmlDeviceGetPersistenceMode", handle)
    pstate = r.get("nvmlDeviceGetPerformanceState", handle)
    memory = r.get("nvmlDeviceGetMemoryInfo", handle)
    temp = r.get("nvmlDeviceGetTemperature", handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    links = link_states(r, handle) if nvlink else None
    serial = r.get("nvmlDeviceGetSerial", handle)
    fabric_state, fabric_status = _fabric(r, handle)
    requires_reset, recovery_action = _reset_state(r, handle)
    return GpuInfo(
        index=index,
        name=text(n) if (n := r.get("nvmlDeviceGetName", handle)) is not None else None,
        uuid=text(u) if (u := r.get("nvmlDeviceGetUUID", handle)) is not None else None,
        serial=text(serial) if serial is not None else None,
        bus_id=text(pci.busId) if pci is not None else None,
        memory_total_gib=None if memory is None else round(memory.total / 1024**3, 2),
        ecc_enabled=None if ecc is None else ecc[0] == enabled,
        ecc_uncorrected_volatile=r.get("nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                       getattr(nvml, "NVML_VOLATILE_ECC", 0)),
        ecc_uncorrected_aggregate=r.get("nvmlDeviceGetTotalEccErrors", handle, uncorrected,
                                        getattr(nvml, "NVML_AGGREGATE_ECC", 1)),
        remapped_rows_pending=None if remap is None else bool(remap[2]),
        remapped_rows_failure=None if remap is None else bool(remap[3]),
        retired_pages_pending=None if pending_pages is None else pending_pages == enabled,
        retired_pages_dbe=None if dbe_pages is None else len(dbe_pages),
        temperature_c=None if temp is None else float(temp),
        throttle_reasons=clock_event_reasons(mask),
        power_draw_w=None if power_mw is None else power_mw / 1000.0,
        persistence_mode=None if persistence is None else persistence == enabled,
        performance_state=None if pstate is None else f"P{pstate}",
        pcie_gen_current=r.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_gen_max=r.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_gen_device_max=r.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        pcie_width_current=r.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
        pcie_width_max=r.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
        nvlinks_active=None if links is None else links.up,
        nvlinks_sleeping=() if links is None else links.sleeping,
        nvlinks_inactive=() if links is None else links.down,
        nvlink_errors=read_counters(r, handle, links.up).values if links else {},
        fabric_state=fabric_state,
        fabric_status=fabric_status,
        recovery_action=recovery_action,
        requires_reset=True if r.lost else requires_reset,
        query_errors=tuple(r.errors),
    )


def query_gpus(nvml: object | None = None, *, nvlink: bool = True) -> GpuInventory:
    """Every GPU as NVML reports it (nvml: the pynvml module, or a stand-in with its API).
    Raises NvmlUnavailableError when NVML cannot start (no driver or library)."""
    nvml = session(nvml)
    r = Reader(nvml)
    count = r.get("nvmlDeviceGetCount")
    if count is None:
        raise NvmlUnavailableError("NVML started but could not count the GPUs: "
                                   + "; ".join(r.errors))
    gpus = tuple(_gpu(nvml, i, nvlink) for i in range(count))
    driver = r.get("nvmlSystemGetDriverVersion")
    return GpuInventory("nvml", None if driver is None else text(driver),
                        _cuda_version(r.get("nvmlSystemGetCudaDriverVersion")), gpus)


def sample_nvlink_errors(nvml: object | None = None) -> dict[int, GpuCounters]:
    """Every GPU's NVLink error counters now, on its up links. GPUs without NVLink are left
    out; a GPU NVML gives no handle for counts as unread."""
    nvml = session(nvml)
    r = Reader(nvml)
    out: dict[int, GpuCounters] = {}
    for index in range(r.get("nvmlDeviceGetCount") or 0):
        handle = r.get("nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            why = f" ({'; '.join(r.errors)[:200]})" if r.errors else ""
            out[index] = GpuCounters(error=f"NVML gave no handle for it{why}: its NVLink "
                                     "error counters are unknown")
            continue
        links = link_states(r, handle)
        if links is not None:
            out[index] = read_counters(r, handle, links.up)
    return out


def nvlink_error_growth(
    nvml: object | None = None, *, interval_s: float = 2.0, deadline: dl.Deadline | None = None
) -> NvlinkCounters:
    """How much each NVLink error counter grew over `interval_s`, and which could not be read.
    NvmlUnavailableError when NVML cannot start, did not answer within NVML_TIMEOUT_S (and the
    deadline), or hung earlier in this run."""

    def sample() -> NvlinkCounters:
        before = sample_nvlink_errors(nvml)
        time.sleep(interval_s)
        return error_growth(before, sample_nvlink_errors(nvml), interval_s)

    return _nvml_call(sample, NVML_TIMEOUT_S + interval_s, deadline, "NVML NVLink counters")


def _nvml_call(fn: Callable[[], T], cap_s: float, deadline: dl.Deadline | None,
               what: str) -> T:
    """`fn()` (NVML calls) bounded by `cap_s` and the deadline: a stuck driver blocks inside
    NVML's C code, which no timeout can interrupt, so it runs in a worker thread."""
    limit = deadline.limit(cap_s) if deadline is not None else cap_s
    try:
        return chain.bounded(fn, limit, what, tool="nvml")
    except chain.HungError as exc:
        note = deadline.note(limit, cap_s) if deadline is not None else ""
        raise NvmlUnavailableError(f"{exc}{note}: the NVIDIA driver may be stuck") from None
    except NvmlUnavailableError:
        raise
    except Exception as exc:  # a broken or mismatched libnvidia-ml: nvidia-smi may still answer
        raise NvmlUnavailableError(f"{what} failed: {type(exc).__name__}: {exc}") from None


#: What to check when the GPUs cannot be read at all, or when a source hung.
_NOT_VISIBLE = ("Is the NVIDIA driver loaded, and are /dev/nvidia* and libnvidia-ml.so visible in "
                "this container (--gpus all / the NVIDIA container toolkit)?")
_STUCK = ("A GPU source that does not answer means a stuck driver or a GPU that stopped "
          "answering: check the host's kernel log for Xid 79/119/154, then reset the GPUs or "
          "reboot the node.")


class GpusUnreadableError(ProbeError):
    """No GPU source answered. `nvml_error`: why NVML did not (an NvmlStartError when nvmlInit
    itself failed); `stuck`: a source hung (a driver is there but does not answer)."""

    def __init__(self, message: str, nvml_error: NvmlUnavailableError, stuck: bool) -> None:
        super().__init__(message)
        self.nvml_error = nvml_error
        self.stuck = stuck


def inventory(nvml: object | None = None, *, smi_timeout_s: float = SMI_TIMEOUT_S,
              deadline: dl.Deadline | None = None) -> GpuInventory:
    """The node's GPUs: NVML, else `nvidia-smi -q -x`, else `-q`, else the `--query-gpu` CSV, all
    within `deadline`; ProbeError naming every source tried and why each failed (a hung one by
    its command, the time it had and its last line): a GpusUnreadableError."""
    try:
        return _nvml_call(lambda: query_gpus(nvml), NVML_TIMEOUT_S, deadline,
                          "NVML (nvmlInit and the device queries)")
    except NvmlUnavailableError as exc:
        nvml_exc = exc
        problems = [str(exc)]
    for fallback in (smi_query_xml, smi_query, smi_query_csv):
        if deadline is not None and deadline.limit(smi_timeout_s) < chain.MIN_TRY_S:
            problems.append(f"nvidia-smi not tried: no time left of {deadline.what}")
            break
        try:
            # What it does not report was not read from NVML either: the facts say so.
            return dataclasses.replace(fallback(smi_timeout_s, deadline=deadline),
                                       tried=tuple(problems))
        except ProbeError as exc:
            problems.append(f"fallback {exc}")
            if "command not found" in str(exc) or dl.hung("nvidia-smi"):
                # No nvidia-smi at all, or a stuck one: every other query would say the same.
                break
    stuck = dl.hung("nvml") or dl.hung("nvidia-smi")
    raise GpusUnreadableError("cannot read the GPUs: " + "; ".join(problems) + ". "
                              + (_STUCK if stuck else _NOT_VISIBLE), nvml_exc, stuck)
