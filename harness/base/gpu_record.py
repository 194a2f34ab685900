"""One GPU's record (GpuInfo: what it reports about itself, None where the source gave no value)
and the node's inventory (GpuInventory, from one source), with the PCI address spellings they are
matched by and the label every message names a GPU with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONObject

__all__ = ["GpuInfo", "GpuInventory", "gpu_label", "pci_key"]

_PCI = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-9a-fA-F]))?$"
)


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of the spellings NVML, nvidia-smi and the
    kernel use: `00000000:53:00.0`, `0000:53:00`, `PCI:0000:53:00`, `53:00.0`."""
    if not bus_id:
        return None
    m = _PCI.match(bus_id.strip())
    if not m:
        return None
    return int(m["domain"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What one GPU reports about itself. None: the source did not report the fact (N/A in
    nvidia-smi, NotSupported from NVML, or the query failed: see `query_errors`). None is never
    healthy: harness.base.gpu_facts says, per fact, whether it was read, is not supported on the
    profile's SKU (a sourced table), or is unread (an error naming the sources tried)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    bus_id: str | None = None
    memory_total_gib: float | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_pending: bool | None = None
    retired_pages_dbe: int | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] | None = None
    """Active clock event reasons, in nvidia-smi's words (`HW Thermal Slowdown`); () when the
    reasons were read and none is active, None when they were not read."""
    power_draw_w: float | None = None
    persistence_mode: bool | None = None
    performance_state: str | None = None
    """`P0` (busy) ... `P8` (idle): PCIe links train down to gen 1 when idle."""
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    """The link's maximum (the lower of what the GPU and the slot support: NVML's
    nvmlDeviceGetMaxPcieLinkGeneration, nvidia-smi's `pcie.link.gen.max`)."""
    pcie_gen_device_max: int | None = None
    """What the GPU itself supports (nvmlDeviceGetGpuMaxPcieLinkGeneration, `Device Max`,
    `pcie.link.gen.gpumax`); above the link's maximum means the slot limits it."""
    pcie_gen_host_max: int | None = None
    """What the slot's root port supports (nvidia-smi's `Host Max`, `pcie.link.gen.hostmax`;
    NVML has no call for it). 0 or None: not reported."""
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlinks_active: tuple[int, ...] | None = None
    """Link numbers that are up: active, or asleep (NVLink low-power idle, woken by traffic);
    None when NVLink is not reported."""
    nvlinks_sleeping: tuple[int, ...] = ()
    """The up links in state SLEEP (NVML_NVLINK_STATE_SLEEP): up, not down."""
    nvlinks_inactive: tuple[int, ...] = ()
    """Links down: inactive, or active with traffic disabled."""
    nvlink_errors: dict[int, dict[str, int]] = field(default_factory=dict)
    """link -> {counter: value}: `replay`, `recovery`, `crc_flit`, `crc_data` (before
    Blackwell), `recovery_successful`, `recovery_failed`, `recovery_events` (NVLink5)."""
    fabric_state: str | None = None
    """NVSwitch fabric registration (fabric manager): `Completed`, `In Progress`, `Not Started`;
    None where the GPU does not report it (pre-Hopper, PCIe GPUs)."""
    fabric_status: str | None = None
    """`Success`, or the error the fabric manager returned."""
    recovery_action: str | None = None
    """What the driver says the GPU needs (R565+: `None`, `GPU Reset`, `Node Reboot`, `Drain
    P2P`, `Drain and Reset` ...); `None` (the word) when it needs nothing, None (no value) when
    the source does not say."""
    requires_reset: bool | None = None
    """True: the GPU is lost or says it needs a reset (`[GPU requires reset]`, Reset Required:
    Yes); False: the source says it does not (Reset Required: No, NVML's reset status 0); None:
    not read."""
    query_errors: tuple[str, ...] = ()

    @property
    def unreadable(self) -> bool:
        """The source could not read this GPU at all: no name, UUID or bus id, and errors saying
        why. Its facts are unknown, never healthy (a lost GPU is `requires_reset` instead)."""
        return (bool(self.query_errors) and not self.requires_reset and self.name is None
                and self.uuid is None and self.bus_id is None)

    def to_dict(self) -> JSONObject:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """Every GPU of the node, from one source (`nvml`, `nvidia-smi -q`, `nvidia-smi csv`)."""

    source: str
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuInfo, ...]
    num_attached: int | None = None
    """How many GPUs the source says the node has (nvidia-smi's `Attached GPUs`), when it says."""
    tried: tuple[str, ...] = ()
    """The sources tried before this one and why each gave nothing (`NVML could not start:
    ...`): what a fact this source did not report was also not read from."""

    def by_pci(self, bus_id: str | None) -> GpuInfo | None:
        """The GPU at a PCI address, in any spelling (see `pci_key`)."""
        key = pci_key(bus_id)
        if key is None:
            return None
        for gpu in self.gpus:
            gkey = pci_key(gpu.bus_id)
            # The kernel prints a 4-digit domain, NVML an 8-digit one: compare bus and device,
            # and the domain only where both sides give one that is not zero.
            if gkey and gkey[1:] == key[1:] and (not gkey[0] or not key[0] or gkey[0] == key[0]):
                return gpu
        return None

    def by_index(self, index: int | None) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def by_uuid(self, uuid: str | None) -> GpuInfo | None:
        """The GPU with this UUID (`GPU-5b3e...`; the `GPU-` prefix is optional)."""
        if not uuid:
            return None
        want = uuid.lower().removeprefix("gpu-")
        return next((g for g in self.gpus
                     if g.uuid and g.uuid.lower().removeprefix("gpu-") == want), None)


def gpu_label(gpu: GpuInfo | None, index: int | None = None, bus_id: str | None = None) -> str:
    """`GPU 3 (bus 00000000:53:00.0, serial 1654922010387)`: how every message names a GPU."""
    if gpu is None:
        if index is None:
            return f"GPU at bus {bus_id}" if bus_id else "GPU (unknown)"
        return f"GPU {index} (bus {bus_id})" if bus_id else f"GPU {index}"
    return f"GPU {gpu.index} (bus {gpu.bus_id or '?'}, serial {gpu.serial or 'unknown'})"
