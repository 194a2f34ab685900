"""GPU inventory probes: NVML (nvidia-ml-py) first, then `nvidia-smi -q -x`, `-q` and the
`--query-gpu` CSV, the whole chain within the check's deadline; a source that hangs is named and
not asked again. They gather facts and judge nothing. The NVML module is a parameter so that
tests pass a fake one. (`dcgmi diag`: probes/dcgm.py; the kernel log: probes/kernel_log.py.)"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.checking import ProbeError
from harness.gpu import GpuInfo, GpuInventory
from harness.probes import deadline as dl
from harness.probes.dcgm import DCGM_TIMEOUT_S, run_dcgm_diag
from harness.probes.kernel_log import KERNEL_LOG_ENV, read_kernel_log
from harness.probes.nvidia_smi import SMI_TIMEOUT_S, smi_query, smi_query_csv, smi_query_xml

__all__ = [
    "DCGM_TIMEOUT_S",
    "KERNEL_LOG_ENV",
    "NVML_TIMEOUT_S",
    "SMI_TIMEOUT_S",
    "NvmlUnavailableError",
    "inventory",
    "nvlink_error_growth",
    "query_gpus",
    "query_nvlink_errors",
    "read_kernel_log",
    "run_dcgm_diag",
    "smi_query",
    "smi_query_csv",
    "smi_query_xml",
]

#: Bound on NVML's answer (nvmlInit and every device query), s: a few seconds on 8 GPUs even
#: without persistence mode; past this the driver is stuck.
NVML_TIMEOUT_S = 30.0

#: NVML clock-event bits -> nvidia-smi's names (nvmlClocksEventReason* in nvml.h).
_REASON_BITS = {
    0x1: "Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap", 0x8: "HW Slowdown",
    0x10: "Sync Boost", 0x20: "SW Thermal Slowdown", 0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown", 0x100: "Display Clock Setting",
}
#: NVLink error counters read per link (nvmlNvLinkErrorCounter_t).
_NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
                    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
                    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))


class NvmlUnavailableError(RuntimeError):
    """NVML could not start (no driver, library missing, no permission); str() says why."""


def _load(nvml: Any | None) -> Any:
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailableError(f"nvidia-ml-py is not installed ({exc})") from exc
    return pynvml


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Reader:
    """Runs NVML queries for one GPU: a fact the GPU does not support becomes None, a lost GPU
    sets `lost`, any other NVML error is kept in `errors` (and the fact is None)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.errors: list[str] = []
        self.lost = False
        self._quiet = {getattr(nvml, n, -1) for n in (
            "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND",
            "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_NOT_FOUND")}
        self._lost = {getattr(nvml, n, -1) for n in (
            "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_RESET_REQUIRED")}

    def get(self, name: str, *args: Any) -> Any:
        fn = getattr(self.nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in self._lost:
                self.lost = True
            if code not in self._quiet:
                self.errors.append(f"{name}: {exc}")
            return None


def _cuda_version(raw: int | None) -> str | None:
    return None if not raw else f"{raw // 1000}.{(raw % 1000) // 10}"


def _reasons(mask: int | None) -> tuple[str, ...]:
    if mask is None:
        return ()
    return tuple(name for bit, name in _REASON_BITS.items() if mask & bit)


def _nvlinks(r: _Reader, handle: Any) -> tuple[tuple[int, ...] | None, tuple[int, ...]]:
    """(active links, inactive links); (None, ()) when the GPU reports no NVLink."""
    nvml = r.nvml
    active, inactive = [], []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            break  # past the last link (InvalidArgument) or no NVLink at all (NotSupported)
        (active if state == getattr(nvml, "NVML_FEATURE_ENABLED", 1) else inactive).append(link)
    if not active and not inactive:
        return None, ()
    return tuple(active), tuple(inactive)


def _link_errors(r: _Reader, handle: Any, links: tuple[int, ...]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = {}
    for link in links:
        counts = {}
        for name, const in _NVLINK_COUNTERS:
            value = r.get("nvmlDeviceGetNvLinkErrorCounter", handle, link,
                          getattr(r.nvml, const, 0))
            if value is not None:
                counts[name] = int(value)
        if counts:
            out[link] = counts
    return out


#: nvmlGpuFabricState_t -> nvidia-smi's words.
_FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


def _fabric(r: _Reader, handle: Any) -> tuple[str | None, str | None]:
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
_RECOVERY = {1: "GPU Reset", 2: "Node Reboot", 3: "Drain P2P", 4: "Drain and Reset",
             5: "Recover IMEX Domain", 6: "Bus Reset", 7: "System Reboot"}


def _recovery_action(r: _Reader, handle: Any) -> str | None:
    """The driver's recommended recovery (R575+ NVML field 230); None: none needed or unknown."""
    field_id = getattr(r.nvml, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
    if field_id is None:
        return None
    values = r.get("nvmlDeviceGetFieldValues", handle, [field_id])
    if not values or int(values[0].nvmlReturn) != 0:
        return None
    code = int(values[0].value.uiVal)
    return _RECOVERY.get(code, f"recovery action {code}") if code else None


def _gpu(nvml: Any, index: int, nvlink: bool) -> GpuInfo:
    r = _Reader(nvml)
    handle = r.get("nvmlDeviceGetHandleByIndex", index)
    if handle is None:  # an answer of "not supported" still leaves the GPU unread
        errors = r.errors or [f"nvmlDeviceGetHandleByIndex({index}) gave no handle"]
        return GpuInfo(index=index, requires_reset=r.lost, query_errors=tuple(errors))
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
    active, inactive = _nvlinks(r, handle) if nvlink else (None, ())
    serial = r.get("nvmlDeviceGetSerial", handle)
    fabric_state, fabric_status = _fabric(r, handle)
    return GpuInfo(
        index=index,
        name=_text(n) if (n := r.get("nvmlDeviceGetName", handle)) is not None else None,
        uuid=_text(u) if (u := r.get("nvmlDeviceGetUUID", handle)) is not None else None,
        serial=_text(serial) if serial is not None else None,
        bus_id=_text(pci.busId) if pci is not None else None,
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
        throttle_reasons=_reasons(mask),
        power_draw_w=None if power_mw is None else power_mw / 1000.0,
        persistence_mode=None if persistence is None else persistence == enabled,
        performance_state=None if pstate is None else f"P{pstate}",
        pcie_gen_current=r.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_gen_max=r.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_gen_device_max=r.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        pcie_width_current=r.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
        pcie_width_max=r.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
        nvlinks_active=active,
        nvlinks_inactive=inactive,
        nvlink_errors=_link_errors(r, handle, active or ()),
        fabric_state=fabric_state,
        fabric_status=fabric_status,
        recovery_action=_recovery_action(r, handle),
        requires_reset=r.lost,
        query_errors=tuple(r.errors),
    )


@contextlib.contextmanager
def _session(nvml: Any) -> Iterator[_Reader]:
    """nvmlInit ... nvmlShutdown; NvmlUnavailableError when NVML cannot start."""
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailableError(f"NVML could not start: {exc} ({type(exc).__name__})") from exc
    try:
        yield _Reader(nvml)
    finally:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def query_gpus(nvml: Any | None = None, *, nvlink: bool = True) -> GpuInventory:
    """Every GPU as NVML reports it (nvml: the pynvml module, or a stand-in with its API).
    Raises NvmlUnavailableError when NVML cannot start (no driver or library)."""
    nvml = _load(nvml)
    with _session(nvml) as r:
        count = r.get("nvmlDeviceGetCount")
        if count is None:
            raise NvmlUnavailableError("NVML started but could not count the GPUs: "
                                       + "; ".join(r.errors))
        gpus = tuple(_gpu(nvml, i, nvlink) for i in range(count))
        driver = r.get("nvmlSystemGetDriverVersion")
        return GpuInventory("nvml", None if driver is None else _text(driver),
                            _cuda_version(r.get("nvmlSystemGetCudaDriverVersion")), gpus)


def query_nvlink_errors(nvml: Any | None = None) -> dict[int, dict[int, dict[str, int]]]:
    """NVLink error counters now: GPU index -> link -> counter -> value (active links only)."""
    nvml = _load(nvml)
    with _session(nvml) as r:
        out = {}
        for index in range(r.get("nvmlDeviceGetCount") or 0):
            handle = r.get("nvmlDeviceGetHandleByIndex", index)
            if handle is None:
                continue
            active, _ = _nvlinks(r, handle)
            out[index] = _link_errors(r, handle, active or ())
        return out


def nvlink_error_growth(
    nvml: Any | None = None, *, interval_s: float = 2.0, deadline: dl.Deadline | None = None
) -> dict[int, dict[int, dict[str, int]]]:
    """How much each NVLink error counter grew over `interval_s`: GPU -> link -> counter ->
    increase (only counters that grew). NvmlUnavailableError when NVML cannot start, did not
    answer within NVML_TIMEOUT_S (and the deadline), or hung earlier in this run."""

    def sample() -> dict[int, dict[int, dict[str, int]]]:
        before = query_nvlink_errors(nvml)
        time.sleep(interval_s)
        after = query_nvlink_errors(nvml)
        growth: dict[int, dict[int, dict[str, int]]] = {}
        for gpu, links in after.items():
            for link, counters in links.items():
                for name, value in counters.items():
                    delta = value - before.get(gpu, {}).get(link, {}).get(name, value)
                    if delta > 0:
                        growth.setdefault(gpu, {}).setdefault(link, {})[name] = delta
        return growth

    return _nvml_call(sample, NVML_TIMEOUT_S + interval_s, deadline, "NVML NVLink counters")


def _nvml_call(fn: Callable[[], Any], cap_s: float, deadline: dl.Deadline | None,
               what: str) -> Any:
    """`fn()` (NVML calls) bounded by `cap_s` and the deadline: a stuck driver blocks inside
    NVML's C code, which no timeout can interrupt, so it runs in a worker thread."""
    limit = deadline.limit(cap_s) if deadline is not None else cap_s
    try:
        return dl.bounded(fn, limit, what, tool="nvml")
    except dl.HungError as exc:
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


def inventory(nvml: Any | None = None, *, smi_timeout_s: float = SMI_TIMEOUT_S,
              deadline: dl.Deadline | None = None) -> GpuInventory:
    """The node's GPUs: NVML, else `nvidia-smi -q -x`, else `-q`, else the `--query-gpu` CSV, all
    within `deadline`; ProbeError naming every source tried and why each failed (a hung one by
    its command, the time it had and its last line)."""
    try:
        return _nvml_call(lambda: query_gpus(nvml), NVML_TIMEOUT_S, deadline,
                          "NVML (nvmlInit and the device queries)")
    except NvmlUnavailableError as nvml_exc:
        problems = [str(nvml_exc)]
    for fallback in (smi_query_xml, smi_query, smi_query_csv):
        if deadline is not None and deadline.limit(smi_timeout_s) < dl.MIN_TRY_S:
            problems.append(f"nvidia-smi not tried: no time left of {deadline.owner}")
            break
        try:
            return fallback(smi_timeout_s, deadline=deadline)
        except ProbeError as exc:
            problems.append(f"fallback {exc}")
            if "command not found" in str(exc) or dl.hung("nvidia-smi"):
                # No nvidia-smi at all, or a stuck one: every other query would say the same.
                break
    stuck = dl.hung("nvml") or dl.hung("nvidia-smi")
    raise ProbeError("cannot read the GPUs: " + "; ".join(problems) + ". "
                     + (_STUCK if stuck else _NOT_VISIBLE))
