"""What a healthy GPU's links move, per GPU SKU (profiles.toml [skus] names): the per-pair
peer copy floor (NVLink or PCIe P2P), the host link (PCIe generation and width) whose host-GPU
copy is judged, and a ceiling on small-message all_reduce latency. Data, each value with its
source; a value marked `estimate` has no public measured basis for this method and is judged
as a warning, never a failure, until `scripts/device-check` measures it (as profiles.toml's
`estimates`). Kept apart from profiles.toml so these link figures can change without touching
every instance profile; `floors_for(profile)` looks them up by the profile's `sku`.

Copy figures are one direction (bytes moved / seconds, GB = 1e9), the unit of
`p2pBandwidthLatencyTest`'s unidirectional matrix and of nvbandwidth's CE memcpy tests."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HOST_COPY_SHARE", "LinkFloors", "Sourced", "floors_for", "pcie_model_gb_s"]


@dataclass(frozen=True, slots=True)
class Sourced:
    """A threshold and where it comes from."""

    value: float
    source: str
    estimate: bool = False


@dataclass(frozen=True, slots=True)
class LinkFloors:
    sku: str
    p2p_gb_s_min: Sourced | None = None
    """Copy GB/s every ordered GPU pair must reach (one pair at a time)."""
    p2p_relative_min: float | None = None
    """On NVSwitch nodes every pair takes the same path: a pair below this share of the median
    pair is weak whatever the absolute floor (None: PCIe trees, where pairs differ by design)."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_source: str = ""
    host_link: str = "pcie"
    """`pcie`, or `c2c` (Grace-Hopper/Blackwell: the host is reached over NVLink-C2C)."""
    latency_us_max: Sourced | None = None
    """Ceiling on a single-node all_reduce at 8 bytes (torch.distributed, NCCL), us."""


#: NCCL's bandwidth model of one x16 PCIe link by generation, GB/s
#: (NVIDIA/nccl@5067397c src/graph/topo.cc: Gen3 12, Gen4 24, Gen5 48). Gen6 is Gen5 doubled,
#: as the PCIe 6.0 spec doubles the per-lane rate (an estimate: no NCCL figure).
_PCIE_X16_GB_S = {3: 12.0, 4: 24.0, 5: 48.0, 6: 96.0}

#: Share of NCCL's link model a pinned host-GPU copy must reach. Measured CE copies land at
#: 1.0-1.1x the model: RTX 4090 Gen4 24-27 GB/s both ways (NVIDIA/nvbandwidth#15), A100 SXM
#: Gen4 25.1 GB/s H2D (nvbandwidth#42), H100 Gen5 52.8 GB/s D2H (nvbandwidth#24). 0.6 is below
#: any of them and above what a link trained down one generation or to half width moves (0.5).
HOST_COPY_SHARE = 0.6
_HOST_COPY_SOURCE = ("estimate: 0.6 x NCCL's PCIe model (nccl src/graph/topo.cc: x16 Gen4 24, "
                     "Gen5 48 GB/s); CE copies measure 1.0-1.1x it (NVIDIA/nvbandwidth#15, #24, "
                     "#42); a link one generation down or at half width moves 0.5x")


def pcie_model_gb_s(gen: int, width: int) -> float | None:
    """NCCL's model of a PCIe link, GB/s, scaled by width; None for an unknown generation."""
    per_x16 = _PCIE_X16_GB_S.get(gen)
    return None if per_x16 is None or width <= 0 else per_x16 * width / 16


_H100_P2P = Sourced(320.0, "85% of the 376-380 GB/s unidirectional peer copy measured on HGX "
                    "H100 SXM NVLink 4 (p2pBandwidthLatencyTest, NVIDIA/nccl#1264; 450 GB/s "
                    "each way by spec [mlc40])")
_NVL4_EST = Sourced(320.0, "estimate: H100's floor (NVIDIA/nccl#1264) on the same NVLink 4 "
                    "(900 GB/s both ways [mlc40]); no published per-pair figure", True)
_NVL3_EST = Sourced(210.0, "estimate: 70% of NVLink 3's 300 GB/s each way (12 links x 25 GB/s "
                    "[awsome-cheat]); no published per-pair figure", True)
_NVL5_EST = Sourced(630.0, "estimate: 70% of NVLink 5's 900 GB/s each way (18 links [mlc61]); "
                    "no published per-pair figure", True)


def _pcie_p2p(gen: int) -> Sourced:
    model = _PCIE_X16_GB_S[gen]
    return Sourced(model * 0.5, f"estimate: half NCCL's x16 Gen{gen} model ({model:g} GB/s); "
                   "peer copies over a PCIe tree measured 21.8-26.3 GB/s on Gen4 A6000s "
                   "(NVIDIA/nvbandwidth#50), lower across CPU sockets", True)


_LAT_NVS = Sourced(100.0, "estimate: no public single-node 8-byte all_reduce figure; 2-node "
                   "p5 runs take 65-74 us over EFA (aws-samples/awsome-distributed-training "
                   "nccl-tests README), one node over NVSwitch should be well under it", True)
_LAT_PCIE = Sourced(200.0, "estimate: twice the NVSwitch ceiling (PCIe hops and host "
                    "bounce buffers); no public figure", True)

_DCGM = "NVIDIA/DCGM@72fa3fea nvvs/diag-skus.yaml.in (PCIe minimum gen/width per SKU)"
_SXM4 = dict(pcie_gen=4, pcie_width=16, pcie_source="A100 SXM4: PCIe Gen4 x16 [" + _DCGM + "]")
_SXM5 = dict(pcie_gen=5, pcie_width=16, pcie_source="Hopper SXM5: PCIe Gen5 x16 [" + _DCGM + "]")
# B200/B300 are Gen6 devices in Gen5 hosts (docs/gpu.md): the host link moves Gen5 at most.
_BW = dict(pcie_gen=5, pcie_width=16, pcie_source="Blackwell HGX: Gen6 GPU in a Gen5 host, "
           "x16 (the slot caps it; docs/gpu.md PF-GPU-009)")

_TABLE: dict[str, LinkFloors] = {f.sku: f for f in (
    LinkFloors("A100-SXM4-40GB", _NVL3_EST, 0.5, **_SXM4, latency_us_max=_LAT_NVS),
    LinkFloors("A100-SXM4-80GB", _NVL3_EST, 0.5, **_SXM4, latency_us_max=_LAT_NVS),
    LinkFloors("H100-SXM5-80GB", _H100_P2P, 0.5, **_SXM5, latency_us_max=_LAT_NVS),
    LinkFloors("H200-SXM-141GB", _NVL4_EST, 0.5, **_SXM5, latency_us_max=_LAT_NVS),
    LinkFloors("B200", _NVL5_EST, 0.5, **_BW, latency_us_max=_LAT_NVS),
    LinkFloors("B300", _NVL5_EST, 0.5, **_BW, latency_us_max=_LAT_NVS),
    LinkFloors("GB200", _NVL5_EST, 0.5, host_link="c2c", latency_us_max=_LAT_NVS),
    LinkFloors("GB300", _NVL5_EST, 0.5, host_link="c2c", latency_us_max=_LAT_NVS),
    LinkFloors("GH200", host_link="c2c"),
    LinkFloors("A100-PCIE-40GB", _pcie_p2p(4), None, 4, 16, "A100 PCIe: Gen4 x16 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("A100-80GB-PCIe", _pcie_p2p(4), None, 4, 16, "A100 PCIe: Gen4 x16 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("H100-PCIe", _pcie_p2p(5), None, 5, 16, "H100 PCIe: Gen5 x16 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("H100-NVL", _pcie_p2p(5), None, 5, 16, "H100 NVL: Gen5 x16 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("H200-NVL", _pcie_p2p(5), None, 5, 16, "H200 NVL: Gen5 x16 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("L40S", _pcie_p2p(4), None, 4, 16, "L40S: Gen4 x16 (g6e.2xlarge trains x8 "
               "[k8sti]: the GPU's own NVML maximum wins where read)", latency_us_max=_LAT_PCIE),
    LinkFloors("L4", _pcie_p2p(4), None, 4, 16, "mlc31: L4 PCIe Gen4 x16",
               latency_us_max=_LAT_PCIE),
    LinkFloors("A10G", _pcie_p2p(4), None, 4, 8, "A10G: DCGM's minimum is x8 [" + _DCGM + "]",
               latency_us_max=_LAT_PCIE),
    LinkFloors("RTX-6000-Ada", _pcie_p2p(4), None, 4, 16, "RTX 6000 Ada: Gen4 x16 (estimate)",
               latency_us_max=_LAT_PCIE),
    LinkFloors("RTX-PRO-6000-Blackwell", _pcie_p2p(5), None, 5, 16,
               "RTX PRO 6000 Blackwell: Gen5 x16 (estimate-pcie in profiles.toml)",
               latency_us_max=_LAT_PCIE),
)}


def floors_for(sku: str | None) -> LinkFloors | None:
    """The link figures of a profile's SKU; None when the SKU has none (then nothing absolute
    is judged and the checks say so: never a silent pass)."""
    return _TABLE.get(sku) if sku else None


def host_copy_floor(gen: int | None, width: int | None, source: str) -> Sourced | None:
    """The pinned host-GPU copy floor of a link of `gen` x `width`, or None when unknown."""
    if not gen or not width:
        return None
    model = pcie_model_gb_s(gen, width)
    if model is None:
        return None
    return Sourced(round(model * HOST_COPY_SHARE, 1),
                   f"{_HOST_COPY_SOURCE}; link Gen{gen} x{width} from {source}", True)
