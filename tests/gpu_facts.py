"""Canned GPU facts for the check tests: a healthy p5.48xlarge (8x H100) and one scenario per
problem. A pytester conftest picks a scenario by name and overrides the fact fixtures with it."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.fixtures.reading import Reading
from harness.parsers.dcgm_records import DcgmDiag, DcgmResult
from harness.parsers.kernel_log_events import KernelLog, SxidEvent, XidEvent
from harness.parsers.kernel_log_init import InitFailure
from harness.probes.gpu_compute import ComputeResult
from harness.probes.nvml_nvlink import NvlinkCounters

BUS = ("53", "64", "75", "86", "97", "A8", "B9", "CA")


def h100(index: int, **changes: Any) -> GpuInfo:
    """A healthy H100 of a p5.48xlarge, with `changes`."""
    healthy = GpuInfo(
        index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-0000-{index}",
        serial=f"16549220{index:05d}", bus_id=f"00000000:{BUS[index]}:00.0",
        memory_total_gib=79.65, ecc_enabled=True, ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0, remapped_rows_pending=False, remapped_rows_failure=False,
        retired_pages_pending=False, retired_pages_dbe=0, temperature_c=34.0,
        throttle_reasons=("Idle",), power_draw_w=71.5, persistence_mode=True,
        performance_state="P0", pcie_gen_current=5, pcie_gen_max=5, pcie_gen_device_max=5,
        pcie_width_current=16, pcie_width_max=16, nvlinks_active=tuple(range(18)),
        fabric_state="Completed", fabric_status="Success", requires_reset=False,
        recovery_action="None",
    )
    return dataclasses.replace(healthy, **changes)


def node(**per_gpu: dict[str, Any]) -> GpuInventory:
    """Eight H100s; `gpu3={...}` changes GPU 3; `driver=`/`cuda=`/`count=` change the node."""
    driver = per_gpu.pop("driver", "550.90.07")
    cuda = per_gpu.pop("cuda", "12.4")
    count = per_gpu.pop("count", 8)
    gpus = tuple(h100(i, **per_gpu.get(f"gpu{i}", {})) for i in range(count))
    return GpuInventory("nvml", driver, cuda, gpus)  # type: ignore[arg-type]


def _xid(xid: int, bus: str, action: str, message: str) -> XidEvent:
    return XidEvent(xid, f"0000:{bus.lower()}:00", 4123, "python", message, action)


JOURNAL = "`journalctl -k -o short-iso --no-pager -b`"


def _log(events: tuple[XidEvent, ...] = (), sxids: tuple[SxidEvent, ...] = (), *,
         source: str = JOURNAL, from_boot: bool = True) -> KernelLog:
    """A kernel log of 1200 lines read from `source` with these events."""
    return KernelLog(events, 1200, sxids, first_time="2024-10-01T09:00:00+0000",
                     from_boot=from_boot, source=source)


HEALTHY: dict[str, Any] = {
    "gpu_inventory": node(),
    "nvlink_growth": NvlinkCounters({}, {}, {i: "nvmlDeviceGetNvLinkErrorCounter, 18 links"
                                              for i in range(8)}, 2.0),
    "dcgm_diag": DcgmDiag("3.3.9", "550.90.07", tuple(
        DcgmResult("GPU Memory", i, "pass") for i in range(8))),
    "kernel_log": _log(),
    "compute_sanity": ComputeResult({i: 700.0 for i in range(8)},
                                    {i: "ab" * 32 for i in range(8)},
                                    {i: 2900.0 for i in range(8)}),
}


def _growth(growth: dict[int, dict[int, dict[str, int]]]) -> NvlinkCounters:
    return NvlinkCounters(growth, {}, {}, 2.0)


def _with(**changes: Any) -> dict[str, Any]:
    return {**HEALTHY, **changes}


SCENARIOS: dict[str, dict[str, Any]] = {
    "healthy": HEALTHY,
    "missing_gpu": _with(gpu_inventory=node(count=7)),
    "wrong_model": _with(gpu_inventory=node(gpu0={"name": "NVIDIA A100-SXM4-80GB"})),
    "ecc": _with(gpu_inventory=node(gpu3={"ecc_uncorrected_volatile": 2,
                                          "ecc_uncorrected_aggregate": 5})),
    "ecc_off": _with(gpu_inventory=node(gpu5={"ecc_enabled": False})),
    "ecc_history": _with(gpu_inventory=node(gpu1={"ecc_uncorrected_aggregate": 4})),
    "remap": _with(gpu_inventory=node(gpu2={"remapped_rows_pending": True},
                                      gpu6={"remapped_rows_failure": True})),
    "retirement": _with(gpu_inventory=node(gpu4={"retired_pages_pending": True})),
    "xid": _with(kernel_log=_log((
        _xid(79, "64", "reboot", "GPU has fallen off the bus."),
        _xid(13, "53", "monitor", "Graphics Exception"),
        _xid(13, "53", "monitor", "Graphics Exception"),
        XidEvent(48, "0000:ee:00", None, None, "DBE", "reset GPU"),
    ))),
    # One code, two actions by its text: a fatal NVLink5 Xid, then a nonfatal one.
    "xid_mixed": _with(kernel_log=_log((
        XidEvent(149, "0000:ee:00", None, None, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01",
                 "reset GPU"),
        XidEvent(149, "0000:ee:00", None, None, "NETIR Nonfatal XC0 i0 Link 02", "monitor"),
    ))),
    # The same Xid, read from a saved file (PREFLIGHT_KERNEL_LOG) that starts after the boot.
    "xid_from_file": _with(kernel_log=_log(
        (_xid(79, "64", "reboot", "GPU has fallen off the bus."),),
        source="PREFLIGHT_KERNEL_LOG=/var/log/kern.log (a file, last written 2024-10-01T10:00:00Z)",
        from_boot=False)),
    # A GPU the driver could not initialise (no Xid line: gpu-operator#1146's log), three times.
    "gpu_init_failed": _with(kernel_log=dataclasses.replace(_log(), init_failures=(
        InitFailure("0000:75:00.0", "0x24:0x72:1568", "2024-10-01T09:00:10+0000", 7, 3),))),
    # A fatal SXid (twice) and a non-fatal one on another switch: fail and warn.
    "sxid": _with(kernel_log=_log(sxids=(
        SxidEvent(20034, 1, "0000:06:00.0", True, "LTSSM Fault Up on Link 48"),
        SxidEvent(20034, 1, "0000:06:00.0", True, "LTSSM Fault Up on Link 48"),
        SxidEvent(12028, 3, "0000:08:00.0", False, "egress non-posted PRIV error"),
    ))),
    "hot": _with(gpu_inventory=node(gpu7={"temperature_c": 91.0,
                                          "throttle_reasons": ("HW Slowdown",
                                                               "HW Thermal Slowdown")})),
    "persistence": _with(gpu_inventory=node(gpu0={"persistence_mode": False})),
    "query_errors": _with(gpu_inventory=node(gpu4={
        "temperature_c": None, "query_errors": ("nvmlDeviceGetTemperature: Unknown Error",)})),
    "pcie": _with(gpu_inventory=node(gpu5={"pcie_width_current": 8})),
    # PCIe Gen6 GPUs in Gen5 slots, running at gen 5: the host's design, a pass.
    "pcie_slot": _with(gpu_inventory=node(**{f"gpu{i}": {"pcie_gen_device_max": 6}
                                             for i in range(8)})),
    # One slot gives gen 4 where the others give gen 5: a warning, not a reboot.
    "pcie_slot_outlier": _with(gpu_inventory=node(gpu3={"pcie_gen_max": 4,
                                                        "pcie_gen_current": 4})),
    "nvlink": _with(
        gpu_inventory=node(gpu1={"nvlinks_active": tuple(range(16)),
                                 "nvlinks_inactive": (16, 17)}),
        nvlink_growth=_growth({3: {5: {"crc_flit": 12, "replay": 3}}})),
    # Links asleep are up; CRC errors growing slowly are a warning (DCGM's rule).
    "nvlink_sleep_crc": _with(
        gpu_inventory=node(gpu2={"nvlinks_sleeping": (0, 1, 2)}),
        nvlink_growth=_growth({4: {7: {"crc_flit": 12}}})),
    # Every counter NOT_SUPPORTED on GPU 5: unknown, never "no errors".
    "nvlink_unread": _with(nvlink_growth=NvlinkCounters(
        {}, {5: "no NVLink error counter could be read on link(s) 0, 1 (NOT_SUPPORTED or "
                "failing)"}, {}, 2.0)),
    "old_driver": _with(gpu_inventory=node(driver="525.85.12", cuda="12.0")),
    "dcgm_fail": _with(dcgm_diag=DcgmDiag("3.3.9", None, (
        DcgmResult("GPU Memory", 0, "pass"),
        DcgmResult("Targeted Power", 1, "fail", "GPU 1 Max power of 224.1 did not reach "
                   "desired power minimum"),
        DcgmResult("Persistence Mode", None, "fail", "Persistence mode for GPU 0 is disabled."),
        DcgmResult("EUD Test", None, "skip"),
    ))),
    "dcgm_skipped": _with(dcgm_diag=DcgmDiag("3.3.9", None, (
        DcgmResult("GPU Memory", 0, "skip"),))),
    # DCGM tested GPUs 0-6 only: GPU 7's health is unknown.
    "dcgm_partial": _with(dcgm_diag=DcgmDiag("3.3.9", "550.90.07", tuple(
        DcgmResult("GPU Memory", i, "pass") for i in range(7)))),
    # CUDA numbers the devices in the opposite order to NVML here (CUDA device 2 is GPU 5).
    "slow_gpu": _with(compute_sanity=ComputeResult(
        {**{i: 700.0 for i in range(8)}, 2: 310.5}, {i: "ab" * 32 for i in range(8)},
        {**{i: 2900.0 for i in range(8)}, 6: 1200.0},
        {i: f"GPU-0000-{7 - i}" for i in range(8)})),
    # The worker measured CUDA devices 0-6 only: device 7 is not "fast enough", it is unknown.
    "compute_missing_gpu": _with(compute_sanity=ComputeResult(
        {i: 700.0 for i in range(7)}, {i: "ab" * 32 for i in range(7)},
        {i: 2900.0 for i in range(7)})),
    "sdc": _with(compute_sanity=ComputeResult(
        {i: 700.0 for i in range(8)}, {**{i: "ab" * 32 for i in range(8)}, 4: "cd" * 32},
        {i: 2900.0 for i in range(8)})),
    "fabric": _with(gpu_inventory=node(gpu0={"fabric_state": "In Progress",
                                             "fabric_status": None},
                                       gpu1={"fabric_status": "Unknown Error"},
                                       gpu2={"fabric_state": None, "fabric_status": None})),
    "fabric_unread": _with(gpu_inventory=node(gpu2={"fabric_state": None,
                                                    "fabric_status": None})),
    "nvlink_17": _with(gpu_inventory=node(gpu6={"nvlinks_active": tuple(range(17)),
                                                "nvlinks_inactive": (17,)})),
    # NVML answered, but with no GPU at all: nothing is healthy, every per-GPU check errors.
    "no_gpus": _with(gpu_inventory=GpuInventory("nvml", "550.90.07", "12.4", ())),
    # NVML could not open GPU 3 (no handle, not lost): its facts are unknown, not healthy.
    "unreadable_gpu": _with(gpu_inventory=dataclasses.replace(node(), gpus=tuple(
        GpuInfo(3, query_errors=("nvmlDeviceGetHandleByIndex: Unknown Error",)) if g.index == 3
        else g for g in node().gpus))),
    "lost": _with(gpu_inventory=node(gpu6={"requires_reset": True, "name": None,
                                           "temperature_c": None, "persistence_mode": None},
                                     gpu2={"recovery_action": "Node Reboot"})),
}

# The checks that name GPUs when they can, or warn on an unreadable kernel log, take the
# readings: every scenario gives them too (`gpu_inventory`, `kernel_log` come from them).
for _facts in SCENARIOS.values():
    _facts["gpu_inventory_reading"] = Reading(_facts["gpu_inventory"])
    _facts["kernel_log_reading"] = Reading(_facts["kernel_log"])
