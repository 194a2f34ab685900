"""A stand-in for the pynvml module: the functions harness.probes.gpu calls, answering from
FakeGpu records, raising pynvml's real NVMLError subclasses. Constants come from pynvml."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

#: p5.48xlarge's GPU bus ids (0000:53..CA), so tests read like a real node.
P5_BUS_IDS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")


@dataclass
class FakeGpu:
    """One GPU's answers. `unsupported`: NVML function names that raise NotSupported;
    `failing`: names that raise Unknown; `lost`: every query raises GpuIsLost."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    memory_bytes: int = 81559 * 1024**2
    ecc_mode: tuple[int, int] = (1, 1)
    ecc_volatile: int | None = 0
    ecc_aggregate: int | None = 0
    """None: that counter answers NotSupported (the other still reads)"""
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    pending_pages: int = 0
    dbe_pages: tuple[int, ...] = ()
    temperature: int = 34
    reasons: int = 0x1
    power_mw: int = 71_520
    persistence: int = 1
    pstate: int = 0
    pcie: tuple[int, int, int, int, int] = (5, 5, 5, 16, 16)
    """current gen, link max gen, GPU max gen, current width, max width"""
    nvlink_states: tuple[int, ...] = (1,) * 18
    """NVML_NVLINK_STATE_* per link (field 165): 0 inactive, 1 active, 2 sleep, 3 active with
    traffic disabled. nvmlDeviceGetNvLinkState says enabled for 1 and 3 only (how it reports a
    sleeping link is not known without hardware: the pessimistic reading)."""
    nvlink_errors: dict[int, dict[int, int]] = field(default_factory=dict)
    """link -> counter -> value; a counter is an nvmlNvLinkErrorCounter_t constant (read by
    nvmlDeviceGetNvLinkErrorCounter) or a field id (161-163, 213-215)"""
    nvlink_error_step: dict[int, dict[int, int]] = field(default_factory=dict)
    """link -> counter -> how much it grows every time it is read"""
    capability: tuple[int, int] = (9, 0)
    """CUDA compute capability (nvmlDeviceGetCudaComputeCapability)"""
    unsupported_fields: set[int] = field(default_factory=set)
    """field ids whose value says NVML_ERROR_NOT_SUPPORTED"""
    recovery_action: int = 0
    """nvmlGpuRecoveryAction_t (0: none)"""
    reset_status: tuple[int, int] = (0, 0)
    """NVML_FI_DEV_RESET_STATUS (226) and DRAIN_AND_RESET_STATUS (227): nvidia-smi's `Reset
    Required` and `Drain and Reset Recommended`"""
    fabric: tuple[int, int] = (3, 0)
    """(nvmlGpuFabricState_t, nvmlReturn_t): registered with the fabric manager, success"""
    unsupported: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    lost: bool = False

    @property
    def bus_id(self) -> str:
        return f"00000000:{P5_BUS_IDS[self.index % 8]}:00.0"

    @property
    def serial(self) -> str:
        return f"16549220{self.index:05d}"

    @property
    def uuid(self) -> str:
        return f"GPU-5b3e2a41-7f0c-4c1e-9a77-2f1f0c3d9e{self.index:02d}"


class FakeNvml:
    """`nvml=FakeNvml([...])` where the probe expects the pynvml module."""

    def __init__(self, gpus: list[FakeGpu], *, driver: str | None = "550.90.07",
                 cuda: int | None = 12040,
                 init_error: type[pynvml.NVMLError] | None = None) -> None:
        """`driver` / `cuda` None: the system query answers NotSupported."""
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.init_error = init_error
        self.initialised = 0

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes are pynvml's own; functions are only those defined here
        # (a missing one reads as "this NVML has no such function").
        if name.startswith(("NVML", "nvmlClocks", "c_nvml")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- lifecycle --
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        if self.driver is None:
            raise pynvml.NVMLError_NotSupported()
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda is None:
            raise pynvml.NVMLError_NotSupported()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return gpu

    # -- per device --
    def _ask(self, gpu: FakeGpu, fn: str) -> None:
        assert self.initialised > 0, f"{fn} called outside nvmlInit/nvmlShutdown"
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if fn in gpu.unsupported:
            raise pynvml.NVMLError_NotSupported()
        if fn in gpu.failing:
            raise pynvml.NVMLError_Unknown()

    def nvmlDeviceGetName(self, g: FakeGpu) -> str:
        self._ask(g, "nvmlDeviceGetName")
        return g.name

    def nvmlDeviceGetUUID(self, g: FakeGpu) -> str:
        self._ask(g, "nvmlDeviceGetUUID")
        return g.uuid

    def nvmlDeviceGetSerial(self, g: FakeGpu) -> bytes:
        self._ask(g, "nvmlDeviceGetSerial")
        return g.serial.encode()  # older nvidia-ml-py returns bytes

    def nvmlDeviceGetPciInfo(self, g: FakeGpu) -> SimpleNamespace:
        self._ask(g, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=g.bus_id)

    def nvmlDeviceGetMemoryInfo(self, g: FakeGpu) -> SimpleNamespace:
        self._ask(g, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=g.memory_bytes, used=0, free=g.memory_bytes)

    def nvmlDeviceGetEccMode(self, g: FakeGpu) -> list[int]:
        self._ask(g, "nvmlDeviceGetEccMode")
        return list(g.ecc_mode)

    def nvmlDeviceGetTotalEccErrors(self, g: FakeGpu, error_type: int, counter: int) -> int:
        self._ask(g, "nvmlDeviceGetTotalEccErrors")
        assert error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        value = g.ecc_volatile if counter == pynvml.NVML_VOLATILE_ECC else g.ecc_aggregate
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        return value

    def nvmlDeviceGetRemappedRows(self, g: FakeGpu) -> tuple[int, int, int, int]:
        self._ask(g, "nvmlDeviceGetRemappedRows")
        return g.remapped_rows

    def nvmlDeviceGetRetiredPagesPendingStatus(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetRetiredPagesPendingStatus")
        return g.pending_pages

    def nvmlDeviceGetRetiredPages(self, g: FakeGpu, cause: int) -> list[int]:
        self._ask(g, "nvmlDeviceGetRetiredPages")
        return list(g.dbe_pages) if cause == 1 else []

    def nvmlDeviceGetTemperature(self, g: FakeGpu, sensor: int) -> int:
        self._ask(g, "nvmlDeviceGetTemperature")
        return g.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetCurrentClocksEventReasons")
        return g.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetCurrentClocksThrottleReasons")
        return g.reasons

    def nvmlDeviceGetPowerUsage(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetPowerUsage")
        return g.power_mw

    def nvmlDeviceGetPersistenceMode(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetPersistenceMode")
        return g.persistence

    def nvmlDeviceGetPerformanceState(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetPerformanceState")
        return g.pstate

    def nvmlDeviceGetCurrPcieLinkGeneration(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetCurrPcieLinkGeneration")
        return g.pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetMaxPcieLinkGeneration")
        return g.pcie[1]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetGpuMaxPcieLinkGeneration")
        return g.pcie[2]

    def nvmlDeviceGetCurrPcieLinkWidth(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetCurrPcieLinkWidth")
        return g.pcie[3]

    def nvmlDeviceGetMaxPcieLinkWidth(self, g: FakeGpu) -> int:
        self._ask(g, "nvmlDeviceGetMaxPcieLinkWidth")
        return g.pcie[4]

    def nvmlDeviceGetNvLinkState(self, g: FakeGpu, link: int) -> int:
        self._ask(g, "nvmlDeviceGetNvLinkState")
        if link >= len(g.nvlink_states):
            raise pynvml.NVMLError_InvalidArgument()
        active = g.nvlink_states[link] in (pynvml.NVML_NVLINK_STATE_ACTIVE,
                                           pynvml.NVML_NVLINK_STATE_ACTIVE_TRAFFIC_DISABLED)
        return pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED

    @staticmethod
    def _counter(g: FakeGpu, link: int, counter: int) -> int:
        counts = g.nvlink_errors.setdefault(link, {})
        value = counts.get(counter, 0)
        counts[counter] = value + g.nvlink_error_step.get(link, {}).get(counter, 0)
        return value

    def nvmlDeviceGetNvLinkErrorCounter(self, g: FakeGpu, link: int, counter: int) -> int:
        self._ask(g, "nvmlDeviceGetNvLinkErrorCounter")
        if link >= len(g.nvlink_states):
            raise pynvml.NVMLError_InvalidArgument()
        return self._counter(g, link, counter)

    def nvmlDeviceGetCudaComputeCapability(self, g: FakeGpu) -> tuple[int, int]:
        self._ask(g, "nvmlDeviceGetCudaComputeCapability")
        return g.capability

    def nvmlDeviceGetGpuFabricInfo(self, g: FakeGpu, ref: Any) -> int:
        self._ask(g, "nvmlDeviceGetGpuFabricInfo")
        ref._obj.state, ref._obj.status = g.fabric  # fills the struct passed by reference
        return 0

    def nvmlDeviceGetFieldValues(self, g: FakeGpu, field_ids: list[Any]) -> list[Any]:
        """As pynvml: ids are ints or (field, scopeId); the call succeeds, each value carries
        its own nvmlReturn (nvml.h: "you must check the nvmlReturn field of each value")."""
        self._ask(g, "nvmlDeviceGetFieldValues")
        return [self._field(g, *(fid if isinstance(fid, tuple) else (fid, 0)))
                for fid in field_ids]

    def _field(self, g: FakeGpu, fid: int, scope: int) -> SimpleNamespace:
        links = len(g.nvlink_states)
        value: int | None = None
        if fid in g.unsupported_fields:
            value = None
        elif fid == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION:
            value = g.recovery_action
        elif fid == pynvml.NVML_FI_DEV_RESET_STATUS:
            value = g.reset_status[0]
        elif fid == pynvml.NVML_FI_DEV_DRAIN_AND_RESET_STATUS:
            value = g.reset_status[1]
        elif fid == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            value = links
        elif fid == pynvml.NVML_FI_DEV_NVLINK_GET_STATE and scope < links:
            value = g.nvlink_states[scope]
        elif fid in _COUNTER_FIELDS and scope < links:
            value = self._counter(g, scope, fid)
        ok = value is not None
        return SimpleNamespace(
            fieldId=fid, scopeId=scope, nvmlReturn=0 if ok else pynvml.NVML_ERROR_NOT_SUPPORTED,
            valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG if fid in _COUNTER_FIELDS
            else pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
            value=SimpleNamespace(uiVal=value or 0, ullVal=value or 0))


#: NVLink error counters as field values: NVML_FI_DEV_NVLINK_ERROR_DL_* (161-163) and the
#: NVLink5 NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_* (213-215).
_COUNTER_FIELDS = frozenset({161, 162, 163, 213, 214, 215})


def h100_node(**per_gpu: dict[str, Any]) -> list[FakeGpu]:
    """Eight healthy H100s; `gpu3={"ecc_volatile": 2}` changes GPU 3."""
    return [FakeGpu(i, **per_gpu.get(f"gpu{i}", {})) for i in range(8)]


def b200_node(**per_gpu: dict[str, Any]) -> list[FakeGpu]:
    """Eight B200s as nvml.h describes Blackwell: compute capability 10.0, 18 NVLink5 links,
    nvmlDeviceGetNvLinkErrorCounter and fields 161-163 unsupported ("unsupported for
    Blackwell+"), the link-recovery fields 213-215 readable."""
    base = {"name": "NVIDIA B200", "capability": (10, 0), "pcie": (5, 5, 6, 16, 16),
            "unsupported": {"nvmlDeviceGetNvLinkErrorCounter"},
            "unsupported_fields": {161, 162, 163}}
    return [FakeGpu(i, **{**base, **per_gpu.get(f"gpu{i}", {})}) for i in range(8)]
