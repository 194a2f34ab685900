"""InfiniBand/RoCE fabrics (HCA ports from sysfs, GPUDirect RDMA) and multi-node NVLink domains
(GB200/GB300 NVL72, p6e UltraServers: NVML fabric clique and cluster UUID, health mask, IMEX
channels). Where they do not apply (EFA, one node, an HGX box) they say why: an HGX node reports
fabric state completed with a zero cluster UUID, which is not a domain (NCCL src/mnnvl.cc)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.base.errors import ProbeError
from harness.checking import check, expect_none, measure, warn
from harness.fixtures.fabric import IMEX_CHANNELS, domain_gpus, one_domain, require_ib
from harness.parsers.nccl_mnnvl import health_faults

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.probes.fabric import FabricInfo, RdmaDevice
    from harness.profiles.model import Profile

REMEDY_PORT = ("check the cable and the switch port (`ibstat`, `iblinkinfo`), that the subnet "
               "manager runs (`sminfo`), and `mlxlink -d <dev> -m` for errors; a port stuck in "
               "Polling has no link partner")
REMEDY_DOMAIN = ("check `nvidia-smi -q | grep -A8 Fabric` on every tray, that the NVLink switch "
                 "trays are up and the fabric manager / NMX reports the domain healthy; reboot "
                 "the tray if its GPUs are not registered")
_FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def _hcas(devices: list[RdmaDevice]) -> list[RdmaDevice]:
    return [d for d in devices if d.kind in ("ib", "roce")]


@check(
    "PF-IB-001",
    title="The profile's InfiniBand/RoCE HCAs are there, every port ACTIVE with its link up",
    why="A port that is DOWN, INIT (no subnet manager) or Polling (no link partner) removes its "
    "rail: NCCL either skips the HCA (less bandwidth) or hangs connecting through it; so does "
    "an HCA missing from the node (`num_ib_devices` of the profile, when it states one).",
    remedy=REMEDY_PORT,
)
def test_ib_ports_active(profile: Profile, rdma_devices: list[RdmaDevice]):
    require_ib(profile)
    hcas = _hcas(rdma_devices)
    need = max(1, profile.num_ib_devices)
    measure("InfiniBand/RoCE HCAs in /sys/class/infiniband", len(hcas), op=">=", threshold=need,
            ok=len(hcas) >= need, name="infiniband_roce_hcas_in_sys_class_infiniband")
    if not hcas:
        raise ProbeError("no InfiniBand/RoCE device in /sys/class/infiniband: is the HCA passed "
                         "to the container (/sys/class/infiniband, /dev/infiniband)?")
    bad = [] if len(hcas) >= need else [
        f"{len(hcas)} HCAs ({', '.join(d.name for d in hcas)}), {need} required for "
        f"{profile.name}"]
    for d in hcas:
        if not d.ports:
            bad.append(f"{d.name}: no port readable")
        for p in d.ports:
            if p.state != "ACTIVE" or (p.phys_state is not None and p.phys_state != "LinkUp"):
                bad.append(f"{d.name} port {p.number}: state {p.state or 'unreadable'}, physical "
                           f"state {p.phys_state or 'unreadable'}")
    expect_none("HCAs missing or ports not ACTIVE/LinkUp", bad,
                name="hcas_missing_or_ports_not_active_linkup")


@check(
    "PF-IB-002",
    title="Every active HCA port runs at the node's fastest rate",
    why="A link that trained down (200 Gb/s on a 400 Gb/s fabric, 2X instead of 4X) halves its "
    "rail and slows every collective of the job to that rail's speed.",
    remedy=REMEDY_PORT + "; reseat or replace the cable of the slow port",
)
def test_ib_rates_match(profile: Profile, rdma_devices: list[RdmaDevice]):
    require_ib(profile)
    ports = [(d, p) for d in _hcas(rdma_devices) for p in d.active_ports]
    if not ports:
        raise ProbeError("no active InfiniBand/RoCE port to read a rate from (see PF-IB-001)")
    unreadable = [f"{d.name}/{p.number}" for d, p in ports if p.rate_gbps is None]
    if unreadable:
        raise ProbeError(f"rate unreadable on {', '.join(unreadable)}")
    top = max(p.rate_gbps or 0.0 for _, p in ports)
    for d, p in ports:
        measure(f"{d.name} port {p.number} rate", p.rate_gbps, "Gb/s", name="ib_port_rate")
    expect_none(f"ports slower than {top:g} Gb/s",
                [f"{d.name} port {p.number}: {p.rate}" for d, p in ports if p.rate_gbps != top],
                name="ports_slower_than_gb_s")


@check(
    "PF-IB-003",
    title="GPUDirect RDMA is available to the HCAs (nvidia_peermem, or DMA-BUF)",
    why="Without GDR NCCL stages every inter-node transfer through host memory (NET/IB "
    "channels without /GDRDMA), at a fraction of the rail's bandwidth.",
    remedy="load nvidia_peermem (`modprobe nvidia_peermem`) or use the open kernel modules with "
    "a kernel >= 5.12 for DMA-BUF; NCCL's log then says `GPU Direct RDMA Enabled for HCA`",
)
def test_ib_gdr_available(profile: Profile, gdr_peermem: str | None):
    require_ib(profile)
    measure("peer-memory GPUDirect RDMA", gdr_peermem or "absent",
            name="peer_memory_gpudirect_rdma")
    if gdr_peermem is None:
        warn("no peer-memory module (nvidia_peermem / nv_peer_mem): GPUDirect RDMA works only "
             "through DMA-BUF here, which needs the open GPU kernel modules and kernel >= 5.12; "
             "PF-NET-009 judges what NCCL actually used (/GDRDMA channels)")


@check(
    "PF-NVL-001",
    title="Every GPU is registered in one multi-node NVLink domain (same cluster UUID and clique)",
    why="A GPU of an NVL72/UltraServer tray that is not registered, in another clique or with a "
    "zero cluster UUID cannot use multi-node NVLink: NCCL falls back to the network or fails to "
    "initialise MNNVL on that rank.",
    remedy=REMEDY_DOMAIN,
)
def test_nvlink_domain_registered(profile: Profile, gpu_fabric: list[FabricInfo]):
    gpus = domain_gpus(profile, gpu_fabric)
    bad = []
    for f in gpus:
        if f.errors:
            bad.append(f"GPU {f.index}: {f.errors[0]}")
        elif f.state != 3 or f.status != 0:
            bad.append(f"GPU {f.index}: fabric state {_FABRIC_STATES.get(f.state, f.state)}, "
                       f"status {f.status}")
        elif not f.in_domain:
            bad.append(f"GPU {f.index}: cluster UUID is zero (not part of a domain)")
    uuids = {f.cluster_uuid for f in gpus if f.in_domain}
    cliques = {f.clique_id for f in gpus if f.in_domain}
    bad += one_domain(uuids, cliques, "GPUs")
    expect_none("GPUs outside the NVLink domain", bad, name="gpus_outside_the_nvlink_domain")


@check(
    "PF-NVL-002",
    title="No GPU's fabric health mask reports a fault",
    why="NVML's health mask says when the domain runs with degraded bandwidth, recovered or "
    "unhealthy routes, access timeouts or a wrong configuration: the domain works, slower or "
    "about to fail.",
    remedy=REMEDY_DOMAIN,
)
def test_nvlink_domain_health(profile: Profile, gpu_fabric: list[FabricInfo]):
    gpus = domain_gpus(profile, gpu_fabric)
    faults = [f"GPU {f.index}: {', '.join(health_faults(f.health_mask))} (healthMask "
              f"{f.health_mask:#x})" for f in gpus if health_faults(f.health_mask)]
    unread = [f"GPU {f.index}" + (f" ({f.errors[0]})" if f.errors else "")
              for f in gpus if f.health_mask is None]
    if unread and not faults:  # unknown is never healthy: one GPU unread is not a pass
        raise ProbeError(f"fabric health mask not read on {', '.join(unread)} "
                         "(nvmlDeviceGetGpuFabricInfoV: NotSupported, or the query failed)")
    expect_none("fabric health faults", faults, name="fabric_health_faults")


@check(
    "PF-NVL-003",
    title="IMEX channels exist where the node is part of a multi-node NVLink domain",
    why="Multi-node NVLink memory sharing goes through IMEX channels: without "
    "/dev/nvidia-caps-imex-channels/channelN NCCL says MNNVL 'is available but not working'.",
    remedy="start nvidia-imex with every node of the domain in its nodes config and create the "
    "channel (mknod with the major of nvidia-caps-imex-channels in /proc/devices); on EKS use "
    "the DRA driver's ComputeDomain, which mounts the channel into the pod",
)
def test_imex_channels(profile: Profile, gpu_fabric: list[FabricInfo], imex_channels: list[str]):
    domain_gpus(profile, gpu_fabric)
    measure("IMEX channels", len(imex_channels), op=">=", threshold=1, ok=bool(imex_channels),
            name="imex_channels")
    if not imex_channels:
        # Idle nodes of a domain (no ComputeDomain yet) legitimately have none: DCGM's IMEX
        # alarm on such nodes is a known false positive (NVIDIA/aicr#2641, NVIDIA/DCGM#308).
        warn(f"no /{IMEX_CHANNELS}/channel* in this container: multi-node NVLink will not work "
             "for this job unless the channel is added before training starts")
