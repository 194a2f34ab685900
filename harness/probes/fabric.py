"""NIC and GPU-fabric facts from sysfs and NVML, under a sysroot (PREFLIGHT_SYSROOT) so that a
fake machine is testable: RDMA devices (EFA, InfiniBand, RoCE) with their port state, physical
state and rate; GPUDirect RDMA support; NVIDIA GPUs and NVSwitches on the PCI bus; the NVLink
fabric (clique, cluster UUID) of each GPU. They gather facts and judge nothing.

Formats (Linux drivers/infiniband/core/sysfs.c): `state` is `"%d: %s"` (4: ACTIVE),
`phys_state` `"%d: %s"` (5: LinkUp), `rate` `"%d%s Gb/sec (%dX%s)"` (400 Gb/sec (4X NDR)),
`link_layer` InfiniBand | Ethernet (RoCE) | Unknown (EFA: the efa driver reports
IB_LINK_LAYER_UNSPECIFIED, linux-rdma/rdma-core#884)."""

from __future__ import annotations

import contextlib
import ctypes
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "FabricInfo",
    "PciGpu",
    "RdmaDevice",
    "RdmaPort",
    "gdr_support",
    "nvml_fabric",
    "pci_gpus",
    "rdma_devices",
]

NVIDIA_VENDOR = "0x10de"
#: PCI classes: 0x0300 VGA, 0x0302 3D controller (data-centre GPUs), 0x0680 bridge (NVSwitch).
_GPU_CLASSES = ("0x0300", "0x0302")
_NVSWITCH_CLASS = "0x0680"
#: EFA PCI vendor (amzn/amzn-drivers kernel/linux/efa/src/efa_main.c efa_pci_tbl).
EFA_VENDOR = "0x1d0f"
_RATE = re.compile(r"^\s*(?P<gbps>[0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


@dataclass(frozen=True, slots=True)
class RdmaPort:
    number: int
    state: str | None
    """`ACTIVE`, `DOWN`, `INIT`, `ARMED` (the word after `N: `); None: unreadable."""
    phys_state: str | None
    """`LinkUp`, `Polling`, `Disabled`, `Sleep` ...; None: unreadable (EFA has none)."""
    rate_gbps: float | None
    rate: str | None
    link_layer: str | None


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    name: str
    kind: str
    """`efa`, `ib`, `roce`, or `unknown`."""
    hca_type: str | None
    fw_ver: str | None
    ports: tuple[RdmaPort, ...]

    @property
    def active_ports(self) -> tuple[RdmaPort, ...]:
        return tuple(p for p in self.ports if p.state == "ACTIVE")

    @property
    def rate_gbps(self) -> float:
        return sum(p.rate_gbps or 0.0 for p in self.active_ports)


def _word(value: str | None) -> str | None:
    """`4: ACTIVE` -> `ACTIVE`; `5: LinkUp` -> `LinkUp`."""
    if value is None:
        return None
    return value.split(":", 1)[1].strip() if ":" in value else value


def _kind(sysroot: Path, entry: Path, ports: tuple[RdmaPort, ...]) -> str:
    layers = {p.link_layer for p in ports}
    vendor = _read(entry / "device" / "vendor")
    if vendor == EFA_VENDOR or entry.name.startswith("efa") or "Unknown" in layers:
        return "efa"
    if "InfiniBand" in layers:
        return "ib"
    if "Ethernet" in layers:
        return "roce"
    return "unknown"


def rdma_devices(sysroot: Path = Path("/")) -> list[RdmaDevice]:
    """Every device under /sys/class/infiniband, sorted by name (empty: none, or no sysfs)."""
    root = sysroot / "sys/class/infiniband"
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    devices = []
    for entry in entries:
        ports = []
        try:
            port_dirs = sorted((entry / "ports").iterdir(), key=lambda p: p.name)
        except OSError:
            port_dirs = []
        for port in port_dirs:
            if not port.name.isdigit():
                continue
            rate = _read(port / "rate")
            m = _RATE.match(rate or "")
            ports.append(RdmaPort(
                number=int(port.name), state=_word(_read(port / "state")),
                phys_state=_word(_read(port / "phys_state")),
                rate_gbps=float(m["gbps"]) if m else None, rate=rate,
                link_layer=_read(port / "link_layer")))
        t = tuple(ports)
        devices.append(RdmaDevice(name=entry.name, kind=_kind(sysroot, entry, t),
                                  hca_type=_read(entry / "hca_type"),
                                  fw_ver=_read(entry / "fw_ver"), ports=t))
    return devices


#: Files whose presence means peer-memory GPUDirect RDMA (NVIDIA/nccl 2.30.7
#: src/transport/net_ib/gdr.cc): the nvidia_peermem module, or the older nv_peer_mem.
PEERMEM_FILES = ("sys/kernel/mm/memory_peers/nv_mem/version",
                 "sys/kernel/mm/memory_peers/nv_mem_nc/version",
                 "sys/module/nvidia_peermem/version")


def gdr_support(sysroot: Path = Path("/")) -> str | None:
    """`peermem (PATH)` when a peer-memory file exists; None otherwise. DMA-BUF GDR (kernel 5.12+,
    open driver) needs a CUDA context to tell (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED): NCCL's log
    line `DMA-BUF is available on GPU device N` says so, read by the checks."""
    for rel in PEERMEM_FILES:
        if (sysroot / rel).exists():
            return f"peermem ({'/' + rel})"
    return None


@dataclass(frozen=True, slots=True)
class PciGpu:
    address: str
    device_id: str
    """Lower-case hex without 0x (`2330`)."""


def pci_gpus(sysroot: Path = Path("/")) -> tuple[list[PciGpu], int]:
    """(NVIDIA GPUs on the PCI bus, NVSwitch count) from /sys/bus/pci/devices."""
    root = sysroot / "sys/bus/pci/devices"
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return [], 0
    gpus, switches = [], 0
    for entry in entries:
        if _read(entry / "vendor") != NVIDIA_VENDOR:
            continue
        cls = (_read(entry / "class") or "")[:6]
        if cls in _GPU_CLASSES:
            gpus.append(PciGpu(entry.name, (_read(entry / "device") or "").lower()
                               .removeprefix("0x")))
        elif cls == _NVSWITCH_CLASS:
            switches += 1
    return gpus, switches


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """One GPU's NVLink fabric (nvmlDeviceGetGpuFabricInfoV, nvidia-ml-py 13.615.71)."""

    index: int
    state: int | None
    """NVML_GPU_FABRIC_STATE_*: 0 not supported, 1 not started, 2 in progress, 3 completed."""
    status: int | None
    cluster_uuid: str | None
    """32 hex digits; all zeros on an NVSwitch box that is not part of a multi-node domain."""
    clique_id: int | None
    health_mask: int | None
    errors: tuple[str, ...] = field(default=())

    @property
    def in_domain(self) -> bool:
        """Part of a multi-node NVLink domain: completed, success and a non-zero cluster UUID
        (NCCL's own rule, src/mnnvl.cc: a zero UUID is an HGX box, not an NVL72 domain)."""
        return (self.state == 3 and self.status == 0 and bool(self.cluster_uuid)
                and set(self.cluster_uuid) != {"0"})


def _fabric_struct(nvml: Any) -> tuple[Any, str] | None:
    """A v2 struct for nvmlDeviceGetGpuFabricInfoV (it sets its own version; it has healthMask),
    else the deprecated unversioned one ("will be removed in CUDA 14.0", nvidia-ml-py)."""
    cls = getattr(nvml, "c_nvmlGpuFabricInfo_v2_t", None)
    if cls is not None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
        return cls(), "nvmlDeviceGetGpuFabricInfoV"
    cls = getattr(nvml, "c_nvmlGpuFabricInfo_t", None)
    return (cls(), "nvmlDeviceGetGpuFabricInfo") if cls is not None else None


def nvml_fabric(nvml: object | None = None) -> list[FabricInfo]:
    """Fabric info of every GPU; [] when NVML cannot start. A GPU whose query fails has the
    error in `errors` and None facts (unknown, never a pass)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
            return []
    try:
        nvml.nvmlInit()
    except Exception:  # an NVMLError of any kind: no GPU is readable
        return []
    out = []
    try:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            made = _fabric_struct(nvml)
            if made is None:
                out.append(FabricInfo(index, None, None, None, None, None,
                                      ("this nvidia-ml-py has no fabric-info struct",)))
                continue
            info, fn = made
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                getattr(nvml, fn)(handle, ctypes.byref(info))
            except Exception as exc:
                out.append(FabricInfo(index, None, None, None, None, None, (f"{fn}: {exc}",)))
                continue
            raw = getattr(info, "clusterUuid", None)
            uuid = bytes(raw).hex() if raw is not None else None
            out.append(FabricInfo(index, int(info.state), int(info.status), uuid,
                                  _int(getattr(info, "cliqueId", None)),
                                  _int(getattr(info, "healthMask", None))))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
