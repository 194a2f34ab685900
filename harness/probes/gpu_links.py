"""GPU link copies: every ordered GPU pair's peer copy bandwidth (NVLink or PCIe P2P) and each
GPU's pinned host-to-device and device-to-host copy bandwidth, timed with CUDA events; and the
pure logic the checks judge them with (the matrix, weak pairs, missing figures). torch is
imported inside the CUDA functions; the rest is plain arithmetic, tested on synthetic numbers.

Why one process measures every pair (local rank 0 of the worker, the other ranks waiting):
a copy between two GPUs needs one CUDA context on each of them in the same process (peer
access is enabled per context pair), so 8 ranks each copying to every peer would open 64
contexts; and pairs measured one at a time (as nvbandwidth and CUDA's p2pBandwidthLatencyTest
do) name a weak link, where 8 copies at once would share the NVSwitch planes and a slow host
path. Copies go through `Tensor.copy_`: a contiguous same-dtype copy between devices is one
`CUDACachingAllocator::memcpyAsync` (cudaMemcpyAsync, or cudaMemcpyPeerAsync without P2P) on
the source device's current stream, between event barriers with the destination's current
stream (pytorch/pytorch aten/src/ATen/native/cuda/Copy.cu, copy_device_to_device), so events
recorded on the source's current stream bracket the copies; a pinned host tensor copied with
`non_blocking=True` is one `cudaMemcpyAsync` on the CUDA device's current stream (same file,
copy_kernel_cuda).

Host buffers sit on each GPU's own NUMA node: the pinned buffer is allocated while the thread
runs on that node's CPUs (Linux places a page where the thread that first touches it runs, and
the driver pins it at allocation), and the pinned allocator's cache is emptied between GPUs so
that a buffer of the previous GPU's node is not reused. One process serving every GPU from rank
0's node made half the GPUs of a two-socket host look slow."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.base.jsontypes import JSONObject

__all__ = ["HostCopy", "PairCopy", "WeakPair", "copy_gb_s", "host_outliers", "matrix_lines",
           "measure_host", "measure_links", "measure_pair", "missing_pairs", "numa_node_cpus",
           "on_numa_node", "pci_bus_id", "weak_pairs"]

MIB = 1024**2


def copy_gb_s(nbytes: int, iters: int, elapsed_ms: float) -> float:
    """One-direction copy bandwidth, GB/s (1e9 bytes): `iters` copies of `nbytes` in
    `elapsed_ms` (a CUDA event pair's `elapsed_time`, milliseconds)."""
    if elapsed_ms <= 0 or iters <= 0:
        raise ValueError(f"elapsed_ms and iters must be > 0, got {elapsed_ms}, {iters}")
    return nbytes * iters / (elapsed_ms / 1e3) / 1e9


@dataclass(frozen=True, slots=True)
class PairCopy:
    """One ordered pair: `src` copies `size_bytes` to `dst` (CUDA device indices)."""

    src: int
    dst: int
    gb_s: float | None
    size_bytes: int = 0
    peer_access: bool | None = None
    """`torch.cuda.can_device_access_peer(src, dst)`: False means the copy bounces through host
    memory (no P2P over NVLink or PCIe)."""
    error: str | None = None

    def to_dict(self) -> JSONObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class HostCopy:
    """One GPU, one direction (`h2d`, `d2h`), one size, pinned host memory."""

    device: int
    direction: str
    size_bytes: int
    gb_s: float | None
    error: str | None = None
    numa_node: int | None = None
    """The NUMA node the host buffer was allocated on (the GPU's); None: sysfs did not say."""

    def to_dict(self) -> JSONObject:
        return asdict(self)


def missing_pairs(pairs: Iterable[PairCopy], devices: Sequence[int]) -> list[tuple[int, int]]:
    """Ordered pairs of `devices` with no figure (not measured, or their copy failed)."""
    have = {(p.src, p.dst) for p in pairs if p.gb_s is not None}
    return [(s, d) for s in devices for d in devices if s != d and (s, d) not in have]


@dataclass(frozen=True, slots=True)
class WeakPair:
    pair: PairCopy
    why: str
    below_floor: bool
    below_median: bool


def weak_pairs(pairs: Iterable[PairCopy], floor: float | None,
               relative: float | None) -> list[WeakPair]:
    """Every measured pair below `floor` GB/s, or below `relative` x the median of all
    measured pairs (a weak link among equals; None: not judged that way), with why."""
    measured = [p for p in pairs if p.gb_s is not None]
    median = statistics.median(p.gb_s for p in measured) if measured else None  # type: ignore[misc]
    out = []
    for p in sorted(measured, key=lambda p: (p.src, p.dst)):
        value = float(p.gb_s)  # type: ignore[arg-type]
        low = floor is not None and value < floor
        weak = bool(relative is not None and median and len(measured) > 2
                    and value < relative * median)
        why = [f"< {floor:g} GB/s floor"] if low else []
        if weak:
            why.append(f"< {relative:g} x the median pair ({median:.1f} GB/s)")
        if why:
            out.append(WeakPair(p, " and ".join(why), low, weak))
    return out


def host_outliers(copies: Iterable[HostCopy], relative: float = 0.75) -> list[HostCopy]:
    """Host copies below `relative` x the median of the same direction and size on the node's
    other GPUs (a slot, riser or switch slower than its siblings)."""
    groups: dict[tuple[str, int], list[HostCopy]] = {}
    for c in copies:
        if c.gb_s is not None:
            groups.setdefault((c.direction, c.size_bytes), []).append(c)
    out = []
    for group in groups.values():
        if len(group) < 3:
            continue
        median = statistics.median(c.gb_s for c in group)  # type: ignore[misc]
        out += [c for c in group if c.gb_s < relative * median]  # type: ignore[operator]
    return sorted(out, key=lambda c: (c.device, c.direction, c.size_bytes))


def matrix_lines(pairs: Iterable[PairCopy], devices: Sequence[int]) -> list[str]:
    """The copy matrix as text (rows: source, columns: destination, GB/s; `-` on the diagonal,
    `?` where no figure)."""
    cell = {(p.src, p.dst): p.gb_s for p in pairs}
    lines = ["src\\dst " + " ".join(f"{d:>7}" for d in devices)]
    for s in devices:
        row = []
        for d in devices:
            v = cell.get((s, d))
            row.append("      -" if s == d else "      ?" if v is None else f"{v:7.1f}")
        lines.append(f"{s:>7} " + " ".join(row))
    return lines


# ------------------------------------------------------------------ NUMA

def _cpulist(text: str) -> set[int]:
    """`0-3,8-11` -> {0, 1, 2, 3, 8, 9, 10, 11}."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def numa_node_cpus(bus_id: str, sysroot: Path = Path("/")) -> tuple[int | None, set[int]]:
    """(NUMA node, its CPUs) of the PCI device `bus_id` (`0000:53:00.0`), from sysfs; (None,
    set()) where sysfs does not say (no file, or -1: one node)."""
    try:
        node = int((sysroot / "sys/bus/pci/devices" / bus_id.lower() / "numa_node").read_text())
        if node < 0:
            return None, set()
        cpus = (sysroot / f"sys/devices/system/node/node{node}/cpulist").read_text()
    except (OSError, ValueError):
        return None, set()
    return node, _cpulist(cpus)


@contextlib.contextmanager
def on_numa_node(bus_id: str | None, sysroot: Path = Path("/")) -> Iterator[int | None]:
    """Run the block on the CPUs of `bus_id`'s NUMA node (this thread only, and only those this
    process may use: a container's cpuset); the node, or None where it is unknown."""
    node, cpus = numa_node_cpus(bus_id, sysroot) if bus_id else (None, set())
    before = os.sched_getaffinity(0)
    usable = cpus & before
    if node is None or not usable:
        yield None
        return
    os.sched_setaffinity(0, usable)
    try:
        yield node
    finally:
        os.sched_setaffinity(0, before)


def pci_bus_id(device: int) -> str | None:
    """`0000:53:00.0` of CUDA device `device` (torch's properties), or None."""
    import torch

    props = torch.cuda.get_device_properties(device)
    try:
        return (f"{int(props.pci_domain_id):04x}:{int(props.pci_bus_id):02x}:"
                f"{int(props.pci_device_id):02x}.0")
    except (AttributeError, TypeError, ValueError):  # torch without the PCI ids
        return None


# ------------------------------------------------------------------ CUDA (marked `gpu` in tests)

def _timed(device: int, fn: Callable[[], object], iters: int, warmup: int) -> float:
    """Milliseconds of `iters` calls of `fn` on `device`'s current stream (CUDA events)."""
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(iters):
            fn()
        end.record(stream)
        end.synchronize()
        return float(start.elapsed_time(end))


def measure_pair(src: int, dst: int, *, nbytes: int, iters: int, warmup: int = 2) -> PairCopy:
    """`dst_tensor.copy_(src_tensor)` from GPU `src` to GPU `dst`, timed on `src`'s stream."""
    import torch

    try:
        peer = bool(torch.cuda.can_device_access_peer(src, dst))
        a = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", src))
        b = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", dst))
        ms = _timed(src, lambda: b.copy_(a), iters, warmup)
        torch.cuda.synchronize(dst)
        return PairCopy(src, dst, round(copy_gb_s(nbytes, iters, ms), 2), nbytes, peer)
    except Exception as exc:  # an illegal address, out of memory: a figure this pair lacks
        return PairCopy(src, dst, None, nbytes, None, f"{type(exc).__name__}: {exc}"[:300])


def measure_host(device: int, direction: str, *, nbytes: int, iters: int,
                 warmup: int = 2) -> HostCopy:
    """Pinned host memory on GPU `device`'s NUMA node to the GPU (`h2d`) or back (`d2h`),
    `non_blocking` copies on the device's current stream."""
    import torch

    node = None
    try:
        with on_numa_node(pci_bus_id(device)) as node:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", device))
        if direction == "h2d":
            ms = _timed(device, lambda: dev.copy_(host, non_blocking=True), iters, warmup)
        else:
            ms = _timed(device, lambda: host.copy_(dev, non_blocking=True), iters, warmup)
        return HostCopy(device, direction, nbytes, round(copy_gb_s(nbytes, iters, ms), 2),
                        numa_node=node)
    except Exception as exc:
        return HostCopy(device, direction, nbytes, None, f"{type(exc).__name__}: {exc}"[:300],
                        numa_node=node)
    finally:
        host = None  # the pinned block back to the cache, then the cache emptied (next GPU)
        empty = getattr(torch._C, "_host_emptyCache", None)
        if empty is not None:
            empty()


def measure_links(
    devices: Sequence[int], *, p2p_bytes: int, p2p_iters: int, host_sizes: Sequence[int],
    host_iters: int, budget_s: float,
    pair: Callable[..., PairCopy] = measure_pair, host: Callable[..., HostCopy] = measure_host,
    clock: Callable[[], float] = time.monotonic,
) -> JSONObject:
    """Host copies of every GPU (each size, both directions), then every ordered pair (when
    `p2p_bytes`), one at a time, until `budget_s` is spent; what was not reached is listed in
    `skipped` (never silently absent). `pair`/`host` are the measuring functions (fakes in
    tests)."""
    t0 = clock()
    hosts: list[HostCopy] = []
    pairs: list[PairCopy] = []
    skipped: list[str] = []
    jobs: list[tuple[str, Callable[[], None]]] = []
    for d in devices:
        for size in host_sizes:
            for direction in ("h2d", "d2h"):
                jobs.append((f"GPU {d} {direction} {size // MIB} MiB",
                             lambda d=d, s=size, r=direction: hosts.append(
                                 host(d, r, nbytes=s, iters=host_iters))))
    if p2p_bytes:
        for s in devices:
            for d in devices:
                if s != d:
                    jobs.append((f"GPU {s} -> GPU {d}", lambda s=s, d=d: pairs.append(
                        pair(s, d, nbytes=p2p_bytes, iters=p2p_iters))))
    for name, job in jobs:
        if clock() - t0 > budget_s:
            skipped.append(name)
            continue
        job()
    return {"devices": list(devices), "host": [h.to_dict() for h in hosts],
            "p2p": [p.to_dict() for p in pairs], "p2p_bytes": p2p_bytes,
            "skipped": skipped, "budget_s": budget_s, "elapsed_s": round(clock() - t0, 3)}
