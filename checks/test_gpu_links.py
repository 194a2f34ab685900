"""GPU links: every GPU pair's peer copy (one weak NVLink hides inside an 8-GPU all_reduce),
each GPU's host copies in both directions against its PCIe link, and small-message all_reduce
latency next to the bandwidth figures. Thresholds and sources: harness/judges/gpu_links.py;
docs/gpu.md and docs/bandwidth.md."""

from __future__ import annotations

from typing import Any

import pytest

from harness.base.errors import ProbeError
from harness.base.gpu_pcie import pcie_link_gen_max
from harness.checking import check, expect_none, measure, not_applicable, warn
from harness.fixtures.links import LinksResult, gpu_of, inventory_or_none
from harness.judges.gpu_links import Sourced, floors_for, host_copy_floor, pcie_model_gb_s
from harness.profiles.model import Profile

MIB = 1024**2
#: A host copy below this share of NCCL's model of its link is broken whatever the estimate
#: (healthy pinned copies measure 1.0-1.1x the model, nvbandwidth#15/#24/#42; a link trained
#: down two generations moves 0.25x): a failure, not a warning.
HOST_COPY_FAIL_SHARE = 0.25
#: Largest all_reduce counted as a small message.
SMALL_MAX_BYTES = 64 * 1024

LINK_REMEDY = ("reset GPU: `nvidia-smi -r -i N` on the GPUs named (or reboot), then look at "
               "PF-GPU-010 (NVLinks up, error counters) and `nvidia-smi nvlink -s`, "
               "`nvidia-smi topo -m`; a pair still weak after a reset: replace the node")
HOST_REMEDY = ("reboot the node (a PCIe link trains at boot; PF-GPU-009 shows its width and "
               "generation); check `nvidia-smi topo -m` and the IOMMU/ACS settings; replace the "
               "node if it stays slow")


def _require_gpus(profile: Profile) -> None:
    if not profile.has_gpus:
        not_applicable("the profile expects no GPUs")


def _require_multi_gpu(profile: Profile) -> None:
    _require_gpus(profile)
    if profile.num_gpus < 2:
        not_applicable("1 GPU: no GPU pair to copy between")


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // 1024} KiB" if n >= 1024 else f"{n} B"


def _judge_estimate(value: float, floor: Sourced, what: str) -> str | None:
    """The warning for a figure below an estimated floor (None: not below)."""
    if value >= floor.value:
        return None
    return f"{what}: {value:.1f} GB/s < {floor.value:g} GB/s (an estimate, not a failure until "\
           f"measured: {floor.source})"


@check(
    "PF-LINK-001",
    family="links",
    title="Every GPU pair's peer copy reaches the SKU's per-pair floor",
    why="One weak NVLink (or PCIe P2P path) hides inside an 8-GPU all_reduce figure but slows "
    "every tensor-parallel and pipeline exchange over that pair.",
    remedy=LINK_REMEDY,
    tier="certify",
    exclusive=True,
)
@pytest.mark.gpu
def test_gpu_pair_copy_bandwidth(profile: Profile, gpu_links: LinksResult,
                                 request: pytest.FixtureRequest):
    _require_multi_gpu(profile)
    from harness.probes.gpu_links import matrix_lines, missing_pairs, weak_pairs

    if not gpu_links.p2p_bytes:
        raise ProbeError("the worker's links part ran no peer copies (--p2p-bytes 0)")
    floors = floors_for(profile.sku)
    floor = floors.p2p_gb_s_min if floors else None
    relative = floors.p2p_relative_min if floors else None
    inventory = inventory_or_none(request)
    names = {d: gpu_of(inventory, gpu_links.uuids.get(d), d) for d in gpu_links.devices}
    for p in gpu_links.pairs:
        if p.gb_s is None:
            continue
        ok = floor is None or p.gb_s >= floor.value
        measure(f"GPU {names[p.src][0]} -> GPU {names[p.dst][0]} peer copy", p.gb_s, "GB/s",
                op=">=" if floor else None, threshold=floor.value if floor else None, ok=ok,
                size_bytes=p.size_bytes, gpu_index=names[p.src][0], name="gpu_gpu_peer_copy")
    fatal, found, estimated = [], [], []
    for w in weak_pairs(gpu_links.pairs, floor.value if floor else None, relative):
        p = w.pair
        if w.below_median or (floor is not None and not floor.estimate):
            fatal.append(f"{names[p.src][1]} -> {names[p.dst][1]}: {p.gb_s:.1f} GB/s {w.why}")
            found.append(names[p.src][0])
        else:  # below an estimated floor only
            estimated.append(f"GPU {names[p.src][0]} -> GPU {names[p.dst][0]} {p.gb_s:.1f}")
    if estimated and floor is not None:
        more = f" and {len(estimated) - 8} more" if len(estimated) > 8 else ""
        warn(f"{len(estimated)} GPU pair(s) below {floor.value:g} GB/s: "
             f"{'; '.join(estimated[:8])}{more} GB/s (an estimate, not a failure until "
             f"measured: {floor.source})")
    no_peer = [f"{names[p.src][1]} -> {names[p.dst][1]}: no peer access (copies bounce "
               "through host memory)" for p in gpu_links.pairs if p.peer_access is False]
    if profile.nvswitch:
        fatal += no_peer
    else:
        for text in no_peer:
            warn(text)
    if floor is None:
        warn(f"no per-pair floor for SKU {profile.sku or '(none)'}: pairs judged only against "
             "each other")
    matrix = "; ".join(matrix_lines(gpu_links.pairs, gpu_links.devices))
    expect_none(f"weak GPU pairs at {_size(gpu_links.p2p_bytes)} (matrix GB/s: {matrix})",
                fatal, gpus=found, name="weak_gpu_pairs_at_matrix_gb_s")
    missing = missing_pairs(gpu_links.pairs, gpu_links.devices)
    if missing:
        errors = {(p.src, p.dst): p.error for p in gpu_links.pairs if p.error}
        raise ProbeError(f"{len(missing)} GPU pair(s) have no figure: " + "; ".join(
            f"GPU {names[s][0]} -> GPU {names[d][0]}: "
            f"{errors.get((s, d)) or 'not reached within the part budget'}"
            for s, d in missing[:8]))


def _link_of(inventory: Any, index: int, floors: Any) -> tuple[int | None, int | None, str]:
    """(gen, width, source) of a GPU's host link: NVML's maximum for this GPU in this host
    when read (min of the GPU's, the slot's and the link's), else the SKU table's."""
    gpu = inventory.by_index(index) if inventory is not None else None
    gen = pcie_link_gen_max(gpu) if gpu is not None else None
    width = gpu.pcie_width_max if gpu is not None else None
    if gen and width:
        return gen, width, "NVML (this GPU's link maximum)"
    if floors is not None and floors.pcie_gen:
        return floors.pcie_gen, floors.pcie_width, floors.pcie_source
    return None, None, ""


@check(
    "PF-LINK-002",
    family="links",
    title="Host-GPU copies (pinned, both directions) match each GPU's PCIe link",
    why="A GPU whose PCIe link moves far less than its generation and width (trained down, a "
    "bad riser, a switch shared badly) starves the data loader, checkpoint saves and offload.",
    remedy=HOST_REMEDY,
    exclusive=True,
)
@pytest.mark.gpu
def test_host_gpu_copy_bandwidth(profile: Profile, gpu_links: LinksResult,
                                 request: pytest.FixtureRequest):
    _require_gpus(profile)
    from harness.probes.gpu_links import host_outliers

    floors = floors_for(profile.sku)
    inventory = inventory_or_none(request)
    if not gpu_links.hosts:
        raise ProbeError("the worker's links part measured no host copy: "
                         + ("; ".join(gpu_links.skipped[:4]) or "none asked for"))
    largest = max(h.size_bytes for h in gpu_links.hosts)
    fatal, found, unjudged = [], [], []
    for h in sorted(gpu_links.hosts, key=lambda h: (h.device, h.direction, h.size_bytes)):
        index, label = gpu_of(inventory, gpu_links.uuids.get(h.device), h.device)
        if h.gb_s is None:
            fatal.append(f"{label} {h.direction} {_size(h.size_bytes)}: copy failed: {h.error}")
            continue
        gen, width, source = _link_of(inventory, index, floors)
        judged = h.size_bytes == largest and (floors is None or floors.host_link == "pcie")
        floor = host_copy_floor(gen, width, source) if judged else None
        measure(f"GPU {index} {h.direction} copy", h.gb_s, "GB/s",
                op=">=" if floor else None, threshold=floor.value if floor else None,
                ok=None if floor is None else h.gb_s >= floor.value,
                size_bytes=h.size_bytes, gpu_index=index, name="host_gpu_copy")
        if not judged:
            continue
        if floor is None:
            unjudged.append(f"GPU {index}")
            continue
        model = pcie_model_gb_s(gen, width) or 0.0  # type: ignore[arg-type]
        if h.gb_s < HOST_COPY_FAIL_SHARE * model:
            fatal.append(f"{label} {h.direction}: {h.gb_s:.1f} GB/s < {HOST_COPY_FAIL_SHARE:g} x "
                         f"{model:g} GB/s (Gen{gen} x{width}, {source})")
            found.append(index)
        elif (text := _judge_estimate(h.gb_s, floor, f"{label} {h.direction}")) is not None:
            warn(text)
    for h in host_outliers(gpu_links.hosts):
        index, label = gpu_of(inventory, gpu_links.uuids.get(h.device), h.device)
        warn(f"{label} {h.direction} {_size(h.size_bytes)}: {h.gb_s:.1f} GB/s, below 0.75 x the "
             "median of the node's other GPUs (a slower slot, riser or PCIe switch)")
    if floors is not None and floors.host_link == "c2c":
        warn(f"{profile.sku}: the host is reached over NVLink-C2C, not PCIe: figures recorded, "
             "no floor judged")
    elif unjudged:
        warn(f"no PCIe generation/width known for {', '.join(unjudged)} (NVML did not say and "
             f"SKU {profile.sku or '(none)'} has none): host copies recorded, not judged")
    expect_none(f"host-GPU copies at {_size(largest)} far below their PCIe link", fatal,
                gpus=found, name="host_gpu_copies_at_far_below_their_pcie_link")


@check(
    "PF-LINK-003",
    family="links",
    title="Small-message all_reduce latency on this node under the profile's ceiling",
    why="Bandwidth at 1-16 GiB says nothing about latency: a node slow at 8 bytes (a CPU-bound "
    "proxy thread, P2P off, a host bounce) slows every small collective of the step.",
    remedy="check NCCL_P2P_DISABLE / NCCL_SHM_DISABLE / NCCL_PROTO in the environment, CPU "
    "load and frequency scaling on the host, and PF-LINK-001's matrix",
    exclusive=True,
)
@pytest.mark.gpu
def test_small_message_latency(profile: Profile, gpu_links: LinksResult):
    _require_multi_gpu(profile)
    lat = gpu_links.latency
    if lat is None or lat.errors:
        raise ProbeError("no small-message all_reduce figure: "
                         + ("; ".join(lat.errors) if lat is not None else "no latency result"))
    rows = sorted((r for r in lat.rows if r.size_bytes <= SMALL_MAX_BYTES),
                  key=lambda r: r.size_bytes)
    if not rows:
        raise ProbeError("the latency sweep has no row at or below "
                         f"{_size(SMALL_MAX_BYTES)}")
    floors = floors_for(profile.sku)
    ceiling = floors.latency_us_max if floors else None
    smallest = rows[0]
    for r in rows:
        judged = ceiling is not None and r is smallest
        measure(f"all_reduce latency at {_size(r.size_bytes)} ({lat.nranks} ranks, "
                f"torch.distributed {lat.backend})", round(r.time_us, 1), "us",
                op="<=" if judged else None, threshold=ceiling.value if judged else None,
                ok=(r.time_us <= ceiling.value) if judged else None,  # type: ignore[union-attr]
                size_bytes=r.size_bytes, name="small_all_reduce_latency")
    if ceiling is None:
        warn(f"no latency ceiling for SKU {profile.sku or '(none)'}: figure recorded, not judged")
    elif smallest.time_us > ceiling.value:
        text = (f"all_reduce at {_size(smallest.size_bytes)} took {smallest.time_us:.1f} us > "
                f"{ceiling.value:g} us")
        if ceiling.estimate:
            warn(f"{text} (an estimate, not a failure until measured: {ceiling.source})")
        else:
            expect_none("small-message latency above the ceiling", [text],
                        name="small_message_latency_above_the_ceiling")
