"""Canned link and clock facts for the PF-LINK / PF-CLOCK check tests: a healthy p5.48xlarge
(8x H100: NVLink 4 pairs ~380 GB/s as NVIDIA/nccl#1264 measured, Gen5 x16 host copies ~50 GB/s
as nvbandwidth#24 measured, clocks ~1980 MHz at ~690 W) and one scenario per problem."""

from __future__ import annotations

from typing import Any

from harness.fixtures.links import LinksResult
from harness.probes.gpu_clocks import ClockSummary, summarize
from harness.probes.gpu_links import HostCopy, PairCopy
from harness.worker.bandwidth import BenchRow, TorchBenchResult
from tests.gpu_facts import node

MIB = 1024**2
DEVICES = tuple(range(8))


def pairs(**slow: float) -> tuple[PairCopy, ...]:
    """Every ordered pair at 380 GB/s; `p2_5=150.0` sets GPU 2 -> GPU 5."""
    return tuple(PairCopy(s, d, slow.get(f"p{s}_{d}", 380.0), 256 * MIB, True)
                 for s in DEVICES for d in DEVICES if s != d)


def hosts(size: int = 256 * MIB, **slow: float) -> tuple[HostCopy, ...]:
    """h2d 53, d2h 55 GB/s on every GPU; `h3_h2d=9.0` sets GPU 3's h2d."""
    base = {"h2d": 53.0, "d2h": 55.0}
    return tuple(HostCopy(d, r, size, slow.get(f"h{d}_{r}", base[r]))
                 for d in DEVICES for r in ("h2d", "d2h"))


def latency(us_at_8: float = 28.0) -> TorchBenchResult:
    return TorchBenchResult("nccl", 8, "float32", (
        BenchRow(8, 2, us_at_8, 0.0, 0.0), BenchRow(65536, 16384, 45.0, 1.46, 2.55)),
        data_ok=True, errors=(), checked=False)


def links(**changes: Any) -> LinksResult:
    fields: dict[str, Any] = dict(devices=DEVICES, pairs=pairs(), hosts=hosts(),
                                  latency=latency(), p2p_bytes=256 * MIB,
                                  uuids={d: f"GPU-0000-{d}" for d in DEVICES})
    fields.update(changes)
    return LinksResult(**fields)


def clocks(**per_gpu: list[dict[str, Any]]) -> list[ClockSummary]:
    """Every GPU holding 1980 MHz at 690 W with SW Power Cap (0x4) set; `gpu4=[readings]`."""
    steady = [{"t_s": i * 0.1, "sm_clock_mhz": 1980, "power_w": 690.0, "event_reasons": 0x4}
              for i in range(30)]
    return [summarize({"device": d, "uuid": f"GPU-0000-{d}",
                       "readings": per_gpu.get(f"gpu{d}", steady)}) for d in DEVICES]


def _falling(mask: int | None, to_mhz: int = 990) -> list[dict[str, Any]]:
    """1980 MHz for the first half, then `to_mhz` with reasons `mask`."""
    return [{"t_s": i * 0.1, "sm_clock_mhz": 1980 if i < 15 else to_mhz, "power_w": 500.0,
             "event_reasons": 0x4 if i < 15 else mask} for i in range(30)]


HEALTHY: dict[str, Any] = {"gpu_inventory": node(), "gpu_links": links(),
                           "compute_clocks": clocks()}


def _with(**changes: Any) -> dict[str, Any]:
    return {**HEALTHY, **changes}


SCENARIOS: dict[str, dict[str, Any]] = {
    "healthy": HEALTHY,
    # GPU 2 -> 5 at 150 GB/s: under H100's sourced floor and under half the median pair.
    "weak_pair": _with(gpu_links=links(pairs=pairs(p2_5=150.0))),
    # CUDA numbers the GPUs in reverse of NVML: CUDA 2 is NVML GPU 5.
    "weak_pair_renumbered": _with(gpu_links=links(
        pairs=pairs(p2_5=150.0), uuids={d: f"GPU-0000-{7 - d}" for d in DEVICES})),
    "pair_missing": _with(gpu_links=links(pairs=pairs()[1:])),
    "slow_host_estimate": _with(gpu_links=links(hosts=hosts(h3_h2d=20.0))),
    "broken_host": _with(gpu_links=links(hosts=hosts(h3_h2d=9.0))),
    "slow_latency": _with(gpu_links=links(latency=latency(400.0))),
    "hw_slowdown": _with(compute_clocks=clocks(gpu4=_falling(0x8))),
    "power_capped_drop": _with(compute_clocks=clocks(gpu4=_falling(0x4, 1400))),
    "no_readings": _with(compute_clocks=clocks(gpu1=[{"t_s": 0.1, "sm_clock_mhz": None}],
                                               gpu2=[{"t_s": 0.1, "sm_clock_mhz": 0}])),
    "no_reasons": _with(compute_clocks=clocks(gpu6=[
        {"t_s": 0.1 * i, "sm_clock_mhz": 1980, "power_w": 690.0} for i in range(10)])),
}
