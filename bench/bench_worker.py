"""The distributed worker against the same torch work scripted by hand in one launch
(issue 14, item 3; goal: ratio <= 1.3).

    nice -n 10 python bench/bench_worker.py [--pairs 5]

Both sides: `torchrun --standalone --nproc-per-node=2` (gloo), all_reduce of 1 and 16 MiB x 10
with a data check, then 3 steps of a small FSDP2 model. The worker side is the local preflight's
launch (harness.worker.launch.run_worker, parts bandwidth + train: its TinyLM step with the
reference and the comparisons); the hand side is `HAND` below, a bare script. Runs alternate
(pairs), so load on the shared machine hits both; the ratio is the median of the per-pair
ratios. Writes bench/out/worker.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HAND = '''
import os, datetime, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
r, w = dist.get_rank(), dist.get_world_size()
for n in (2**18, 2**22):  # 1 and 16 MiB of float32
    t = torch.full((n,), float(r + 1))
    for _ in range(10):
        dist.all_reduce(t)
    t = torch.full((n,), float(r + 1)); dist.all_reduce(t)
    assert bool((t == w * (w + 1) / 2).all())
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
for layer in (m[0], m[2]):
    fully_shard(layer)
fully_shard(m)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(8, 64)
for _ in range(3):
    opt.zero_grad(); m(x).pow(2).mean().backward(); opt.step()
dist.barrier(); dist.destroy_process_group()
print("hand ok", flush=True)
os._exit(0)
'''


def _env() -> dict[str, str]:
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # both sides alike; see engineering-notes.md
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run_hand(script: Path) -> float:
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node=2", str(script)]
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    if out.returncode != 0 or "hand ok" not in out.stdout:
        raise SystemExit(f"hand script failed: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    return wall


def run_preflight() -> float:
    from harness.worker.launch import PartSpec, run_worker

    t0 = time.perf_counter()
    run = run_worker(2, [PartSpec("bandwidth", 120), PartSpec("train", 120)], env=_env(),
                     extra=["--device=cpu", "--pg-timeout-s=60", "--bw-sizes=1M,16M",
                            "--bw-warmup=0", "--bw-iters=10", "--steps=3"])
    wall = time.perf_counter() - t0
    bad = {n: p.status for n, p in run.parts.items() if p.status != "ok"}
    if bad:
        raise SystemExit(f"worker failed: {bad}: {run.launches[-1].output[-2000:]}")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "hand.py"
        script.write_text(HAND)
        run_hand(script)  # warm the page cache for both sides
        for i in range(args.pairs):
            first, second = (run_preflight, lambda: run_hand(script)) if i % 2 == 0 else (
                lambda: run_hand(script), run_preflight)
            a, b = first(), second()
            worker, hand = (a, b) if i % 2 == 0 else (b, a)
            pairs.append({"worker_s": round(worker, 3), "hand_s": round(hand, 3),
                          "ratio": round(worker / hand, 3)})
            print(f"pair {i}: worker {worker:.2f} s, hand {hand:.2f} s, "
                  f"ratio {worker / hand:.2f}", flush=True)
    summary = {
        "bench": "worker", "pairs": pairs,
        "median_worker_s": statistics.median(p["worker_s"] for p in pairs),
        "median_hand_s": statistics.median(p["hand_s"] for p in pairs),
        "ratio": statistics.median(p["ratio"] for p in pairs),
        "loadavg": os.getloadavg(),
    }
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "worker.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"ratio {summary['ratio']:.2f} (median of {len(pairs)} paired runs; worker "
          f"{summary['median_worker_s']:.2f} s, hand {summary['median_hand_s']:.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
