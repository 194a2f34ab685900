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
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
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
    nvlink_errors: dict[int, dict[int, int]] = field(default_factory=dict)
    """link -> counter constant -> value"""
    nvlink_error_step: dict[int, dict[int, int]] = field(default_factory=dict)
    """link -> counter -> how much it grows every time it is read"""
    recovery_action: int = 0
    """nvmlGpuRecoveryAction_t (0: none)"""
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

    def __init__(self, gpus: list[FakeGpu], *, driver: str = "550.90.07", cuda: int = 12040,
                 init_error: type[pynvml.NVMLError] | None = None) -> None:
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
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
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
        return g.ecc_volatile if counter == pynvml.NVML_VOLATILE_ECC else g.ecc_aggregate

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
        return g.nvlink_states[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, g: FakeGpu, link: int, counter: int) -> int:
        self._ask(g, "nvmlDeviceGetNvLinkErrorCounter")
        counts = g.nvlink_errors.setdefault(link, {})
        value = counts.get(counter, 0)
        counts[counter] = value + g.nvlink_error_step.get(link, {}).get(counter, 0)
        return value

    def nvmlDeviceGetGpuFabricInfo(self, g: FakeGpu, ref: Any) -> int:
        self._ask(g, "nvmlDeviceGetGpuFabricInfo")
        ref._obj.state, ref._obj.status = g.fabric  # fills the struct passed by reference
        return 0

    def nvmlDeviceGetFieldValues(self, g: FakeGpu, field_ids: list[int]) -> list[Any]:
        self._ask(g, "nvmlDeviceGetFieldValues")
        out = []
        for fid in field_ids:
            known = fid == pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
            out.append(SimpleNamespace(
                fieldId=fid, nvmlReturn=0 if known else pynvml.NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(uiVal=g.recovery_action if known else 0)))
        return out


def h100_node(**per_gpu: dict[str, Any]) -> list[FakeGpu]:
    """Eight healthy H100s; `gpu3={"ecc_volatile": 2}` changes GPU 3."""
    return [FakeGpu(i, **per_gpu.get(f"gpu{i}", {})) for i in range(8)]
