"""GPU probes: NVML (nvidia-ml-py) first, `nvidia-smi` as the fallback, `dcgmi diag`, and the
kernel log for XIDs. They gather facts and judge nothing. The NVML module is a parameter so that
tests pass a fake one."""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import proc
from harness.checking import ProbeError
from harness.gpu import GpuInfo, GpuInventory
from harness.parsers import ParseError

__all__ = [
    "DCGM_TIMEOUT_S",
    "NvmlUnavailableError",
    "inventory",
    "nvlink_error_growth",
    "query_gpus",
    "query_nvlink_errors",
    "read_kernel_log",
    "run_dcgm_diag",
    "smi_query",
    "smi_query_csv",
]

#: Wall-time bound per `dcgmi diag -r N` level, s (domain-facts.md: r1 seconds, r2 ~2 min,
#: r3 ~15 min, r4 45 min+), with head room for nv-hostengine start-up.
DCGM_TIMEOUT_S = {1: 120.0, 2: 600.0, 3: 1800.0, 4: 4800.0}

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
    if handle is None:
        return GpuInfo(index=index, requires_reset=r.lost, query_errors=tuple(r.errors))
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
    nvml: Any | None = None, *, interval_s: float = 2.0
) -> dict[int, dict[int, dict[str, int]]]:
    """How much each NVLink error counter grew over `interval_s`: GPU -> link -> counter ->
    increase (only counters that grew)."""
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


def smi_query(timeout_s: float = 60.0) -> GpuInventory:
    """`nvidia-smi -q`, parsed; ProbeError when it cannot run or prints something else."""
    from harness.parsers.nvidia_smi import parse_smi_query

    res = proc.run(["nvidia-smi", "-q"], timeout_s=timeout_s)
    return _smi_reading(res, lambda: parse_smi_query(res.stdout), "`nvidia-smi -q`")


def _smi_reading(res: proc.ProcResult, parse: Callable[[], GpuInventory], what: str) -> GpuInventory:
    """The inventory nvidia-smi printed. A non-zero exit is a ProbeError, unless what it
    printed names a lost GPU (`Unable to determine the device handle for GPU...`): nvidia-smi
    may exit non-zero then, and the lost GPU is the finding, not a reason to discard it."""
    if res.timed_out or res.error is not None:
        raise ProbeError(res.describe())
    try:
        inv = parse()
    except ParseError as exc:
        raise ProbeError(res.describe() if not res.ok
                         else f"{what} printed something unexpected: {exc}") from None
    if not res.ok and not any(g.requires_reset for g in inv.gpus):
        raise ProbeError(res.describe())
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


def smi_query_csv(timeout_s: float = 60.0) -> GpuInventory:
    """`nvidia-smi --query-gpu=... --format=csv,noheader,nounits`, parsed."""
    from harness.parsers.nvidia_smi import parse_smi_csv

    argv = ["nvidia-smi", f"--query-gpu={','.join(SMI_CSV_FIELDS)}",
            "--format=csv,noheader,nounits"]
    res = proc.run(argv, timeout_s=timeout_s)
    return _smi_reading(res, lambda: parse_smi_csv(res.stdout, columns=SMI_CSV_FIELDS).inventory,
                        "`nvidia-smi --query-gpu`")


def inventory(nvml: Any | None = None, *, smi_timeout_s: float = 60.0) -> GpuInventory:
    """The node's GPUs: NVML, else `nvidia-smi -q`, else `nvidia-smi --query-gpu` CSV;
    ProbeError naming every failure."""
    try:
        return query_gpus(nvml)
    except NvmlUnavailableError as nvml_exc:
        problems = [str(nvml_exc)]
    for fallback in (smi_query, smi_query_csv):
        try:
            return fallback(smi_timeout_s)
        except ProbeError as exc:
            problems.append(f"fallback {exc}")
            if "command not found" in str(exc):
                break  # no nvidia-smi at all: the CSV query would say the same
    raise ProbeError(
        "cannot read the GPUs: " + "; ".join(problems) + ". Is the NVIDIA driver loaded, and "
        "are /dev/nvidia* and libnvidia-ml.so visible in this container (--gpus all / the "
        "NVIDIA container toolkit)?"
    )


def run_dcgm_diag(level: int, *, timeout_s: float | None = None,
                  host: str | None = None) -> Any:
    """`dcgmi diag -r LEVEL -j [--host HOST]`, parsed (a DcgmDiag). dcgmi exits non-zero when a
    test fails (226 is DCGM_ST_NVVS_ERROR), so its output is read whatever the status;
    ProbeError when there is no result to read. `host`: a remote nv-hostengine (Kubernetes'
    GPU operator runs it as a service), default the local one."""
    from harness.parsers.dcgm import parse_dcgm_diag

    limit = timeout_s if timeout_s is not None else DCGM_TIMEOUT_S.get(level, 1800.0)
    argv = ["dcgmi", "diag", "-r", str(level), "-j"] + (["--host", host] if host else [])
    res = proc.run(argv, timeout_s=limit)
    if res.error is not None:
        raise ProbeError(f"{res.describe()}: install DCGM (datacenter-gpu-manager) in the image "
                         "and start its host engine (`nv-hostengine`, or the nvidia-dcgm "
                         "service)")
    if res.timed_out:
        raise ProbeError(res.describe())
    try:
        return parse_dcgm_diag(res.stdout)
    except ParseError as exc:
        raise ProbeError(f"{res.describe()}; no diagnostic result in its output ({exc})") from None


#: journalctl output that means it could not see the kernel's messages.
_JOURNAL_BLIND = (
    ("No journal files were found", "no journal files in this container"),
    ("not seeing messages from other users and the system",
     "this user may not read the system journal (needs group adm or systemd-journal)"),
)

#: Environment variable naming a saved kernel log to read instead of journalctl / dmesg.
KERNEL_LOG_ENV = "PREFLIGHT_KERNEL_LOG"


def read_kernel_log(
    path: str | os.PathLike[str] | None = None,
    *,
    since: str | None = None,
    timeout_s: float = 30.0,
    env: dict[str, str] | None = None,
) -> Any:
    """XID events since boot (or `since`, a journalctl time such as `-2h`): from `path` or
    $PREFLIGHT_KERNEL_LOG, else `journalctl -k`, else `dmesg`. Returns a KernelLog; ProbeError
    when no source can be read."""
    from harness.parsers.kernel_log import parse_kernel_log

    env = dict(os.environ) if env is None else env
    path = path or env.get(KERNEL_LOG_ENV)
    if path:
        try:
            return parse_kernel_log(Path(path).read_text(errors="replace"),
                                    require_kernel_lines=False)
        except OSError as exc:
            raise ProbeError(f"cannot read kernel log {path}: {exc.strerror}") from None
    journal = ["journalctl", "-k", "-o", "short-iso", "--no-pager"]
    journal += ["--since", since] if since else ["-b"]
    tried = []
    for argv in (journal, ["dmesg"]):
        res = proc.run(argv, timeout_s=timeout_s)
        # journalctl succeeds with nothing to show when there is no journal, or when the user
        # may not read the system's messages: neither means "no XIDs".
        blind = next((why for marker, why in _JOURNAL_BLIND if marker in res.output), None)
        if res.ok and not blind:
            return parse_kernel_log(res.stdout, require_kernel_lines=False)
        tried.append(f"`{' '.join(argv)}`: {blind}" if blind else res.describe())
    raise ProbeError("cannot read the kernel log for XID errors: " + "; ".join(tried)
                     + f". Give the container CAP_SYSLOG or set {KERNEL_LOG_ENV}=FILE to a copy "
                     "of the host's kernel log")
