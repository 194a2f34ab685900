"""Bandwidth bench: the torch bench's busbw against a bare timing loop of the same all_reduce in
the same processes (goal: within 5%), and this machine's gloo busbw curve by size (SVG plot).

    python bench/bench_bandwidth.py [--nproc 2] [--reps 7]

Writes bench/out/bandwidth.json and bench/out/gloo_busbw_by_size.svg; prints medians and ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KIB, MIB = 1024, 1024**2
COMPARE_SIZES = (MIB, 16 * MIB)
CURVE_SIZES = tuple(4 * KIB * 4**i for i in range(8))  # 4 KiB .. 64 MiB


def _bare_busbw(size: int, iters: int, nranks: int, pipelined: bool) -> float:
    """The same all_reduce, timed with nothing around it but a barrier: either launched back
    to back and then waited for (the bench's and nccl-tests' pattern), or one blocking call
    after the other."""
    import torch
    import torch.distributed as dist

    tensor = torch.zeros(size // 4, dtype=torch.float32)
    dist.all_reduce(tensor)  # warm-up, as the bench does
    dist.barrier()
    t0 = time.perf_counter()
    if pipelined:
        for work in [dist.all_reduce(tensor, async_op=True) for _ in range(iters)]:
            work.wait()
    else:
        for _ in range(iters):
            dist.all_reduce(tensor)
    elapsed = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed)
    mean_s = float(elapsed) / nranks
    return size / mean_s / 1e9 * 2 * (nranks - 1) / nranks


def _worker(rank: int, world: int, store: str, out: str, reps: int, iters: int) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    from datetime import timedelta

    import torch.distributed as dist

    from harness.worker.bandwidth import allreduce_bench

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    runs: dict[int, list[dict[str, float]]] = {s: [] for s in COMPARE_SIZES}
    variants = {
        "bench": lambda size: allreduce_bench(sizes_bytes=(size,), warmup=1, iters=iters,
                                              check_data=False).rows[0].busbw_gb_s,
        "bare_pipelined": lambda size: _bare_busbw(size, iters, world, pipelined=True),
        "bare_blocking": lambda size: _bare_busbw(size, iters, world, pipelined=False),
    }
    names = list(variants)
    for rep in range(reps):
        for size in COMPARE_SIZES:
            # Rotate the order so that no variant always runs first (warmer caches, less load).
            order = names[rep % 3:] + names[:rep % 3]
            runs[size].append({name: variants[name](size) for name in order})
    curve = allreduce_bench(sizes_bytes=CURVE_SIZES, warmup=2, iters=iters)
    if rank == 0:
        Path(out).write_text(json.dumps({
            "nranks": world, "iters": iters, "reps": reps,
            "runs": {str(k): v for k, v in runs.items()},
            "curve": [[r.size_bytes, r.busbw_gb_s, r.time_us] for r in curve.rows],
            "curve_data_ok": curve.data_ok,
        }))
    dist.barrier()
    dist.destroy_process_group()


def _svg(curve: list[list[float]], nranks: int) -> str:
    """A log-x line plot of busbw by size, written by hand (no plotting dependency)."""
    import math

    w, h, left, bottom, top, right = 640, 400, 70, 50, 30, 20
    xs = [math.log2(c[0]) for c in curve]
    ys = [c[1] for c in curve]
    ymax = max(ys) * 1.15 or 1.0
    xmin, xmax = min(xs), max(xs)

    def px(x: float) -> float:
        return left + (x - xmin) / ((xmax - xmin) or 1) * (w - left - right)

    def py(y: float) -> float:
        return h - bottom - y / ymax * (h - bottom - top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
             'font-family="sans-serif" font-size="11">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">gloo all_reduce busbw '
             f'by size, {nranks} local processes (torch_bench)</text>',
             f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" '
             'stroke="black"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for i in range(6):
        y = ymax * i / 5
        parts.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
        parts.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{w - right}" y2="{py(y):.1f}" '
                     'stroke="#ddd"/>')
    for c, x in zip(curve, xs, strict=True):
        size = int(c[0])
        label = f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"
        parts.append(f'<text x="{px(x):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                     f'{label}</text>')
    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    for x, y in zip(xs, ys, strict=True):
        parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="#1f77b4"/>')
    parts.append(f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">message size</text>')
    parts.append(f'<text x="16" y="{h / 2}" transform="rotate(-90 16 {h / 2})" '
                 'text-anchor="middle">busbw (GB/s)</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.json"
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_worker, args=(r, args.nproc, f"{tmp}/store", str(raw),
                                                   args.reps, args.iters))
                 for r in range(args.nproc)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(600)
        for p in procs:
            if p.is_alive():
                p.kill()
        if not raw.is_file():
            print("bench failed: no result", file=sys.stderr)
            return 1
        data = json.loads(raw.read_text())
    summary: dict[str, dict[str, float]] = {}
    for size, reps in data["runs"].items():
        entry = {f"{k}_busbw_median": statistics.median(r[k] for r in reps) for k in reps[0]}
        for bare in ("bare_pipelined", "bare_blocking"):
            ratios = [r["bench"] / r[bare] for r in reps]  # same rep: same load on the machine
            entry[f"bench_over_{bare}_median"] = statistics.median(ratios)
            entry[f"bench_over_{bare}_min"] = min(ratios)
            entry[f"bench_over_{bare}_max"] = max(ratios)
        summary[size] = entry
    data["summary"] = summary
    (out_dir / "bandwidth.json").write_text(json.dumps(data, indent=2))
    (out_dir / "gloo_busbw_by_size.svg").write_text(_svg(data["curve"], data["nranks"]))
    print(f"gloo, {data['nranks']} processes, {data['iters']} iterations, {data['reps']} reps")
    for size, s in summary.items():
        print(f"  {int(size) // MIB:>3} MiB: median busbw bench {s['bench_busbw_median']:.3f}, "
              f"bare pipelined {s['bare_pipelined_busbw_median']:.3f}, bare blocking "
              f"{s['bare_blocking_busbw_median']:.3f} GB/s")
        for bare in ("bare_pipelined", "bare_blocking"):
            print(f"          bench/{bare} median {s[f'bench_over_{bare}_median']:.3f} "
                  f"(min {s[f'bench_over_{bare}_min']:.3f}, "
                  f"max {s[f'bench_over_{bare}_max']:.3f})")
    print("  busbw by size: " + ", ".join(
        f"{int(c[0]) // KIB} KiB {c[1]:.3f}" for c in data["curve"]))
    print(f"  wrote {out_dir / 'bandwidth.json'} and {out_dir / 'gloo_busbw_by_size.svg'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
