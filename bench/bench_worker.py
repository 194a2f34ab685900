"""The distributed worker against the same torch work scripted by hand in one launch
(issue 14, item 3; goal: ratio <= 1.3).

    nice -n 10 python bench/bench_worker.py [--pairs 5]

Both sides: `torchrun --standalone --nproc-per-node=2` (gloo), all_reduce of 1 and 16 MiB x 10
with a data check, then 3 steps of a small FSDP2 model. The worker side is the local preflight's
launch (harness.worker.launch.run_worker, parts bandwidth + train: its TinyLM step with the
reference and the comparisons); the hand side is `HAND` below, a bare script. Runs alternate
(pairs), so load on the shared machine hits both; the ratio is the median of the per-pair
ratios. Writes bench/out/worker.json.

    nice -n 10 python bench/bench_worker.py --whole [--pairs 5]

The WHOLE local preflight (issue 28 item 6; goal: ratio <= 1.15): `preflight run` on this
machine's default profile (detected: local-cpu without a GPU; the built-in suite, tier
preflight: CLI, check sessions, the one worker launch, reports) against `HAND` doing the torch
work that run's worker does on CPU (all_reduce of 1 and 16 MiB, 1 warm-up + 3 timed, with the
data check; the FSDP2 steps; the SDC part's short CPU workload through harness.probes.sdc's
own `run_sdc`, so both sides multiply the same matrices), both in one torchrun launch of 2
gloo ranks. Wall seconds and CPU seconds (user + sys of the process and every child it waited
for, os.wait4), each the median of per-pair ratios. `--base DIR`: the same `preflight run` from
a baseline worktree (beside this one: a tree elsewhere times differently) joins every pair, each
side first in turn. Writes bench/out/whole_preflight.json.
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
ITERS, SDC = int(os.environ.get("HAND_ITERS", "10")), os.environ.get("HAND_SDC") == "1"
STEPS = int(os.environ.get("HAND_STEPS", "3"))
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
r, w = dist.get_rank(), dist.get_world_size()
for n in (2**18, 2**22):  # 1 and 16 MiB of float32
    t = torch.full((n,), float(r + 1))
    for _ in range(ITERS):
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
for _ in range(STEPS):
    opt.zero_grad(); m(x).pow(2).mean().backward(); opt.step()
if SDC:  # the SDC part's short workload on CPU (the same GEMMs the worker's sdc part runs)
    from harness.probes.sdc import run_sdc
    run_sdc(torch.device("cpu"), "short")
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


def cpu_wall(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, str]:
    """(wall s, CPU s of the process and every child it waited for, output) of one run."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        text = out.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed: {text[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, text


def whole(pairs_n: int, base: Path | None = None) -> int:
    """The whole local preflight against the hand-scripted torch work (module docstring);
    `base`: a worktree of a baseline whose `preflight run` joins every pair (before/after)."""
    env = {**_env(), "AWS_EC2_METADATA_DISABLED": "true"}
    hand_env = {**env, "HAND_ITERS": "4", "HAND_SDC": "1", "HAND_STEPS": "5"}
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "hand.py"
        script.write_text(HAND)
        hand = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node=2", str(script)]
        run = [sys.executable, "-m", "harness", "run", "--report-dir", str(Path(tmp) / "r")]
        order = [("run", run, env), ("hand", hand, hand_env)]
        if base is not None:  # the same command with the baseline's tree first on the path
            base_env = {**env, "PYTHONPATH": os.pathsep.join(
                [str(base), *env["PYTHONPATH"].split(os.pathsep)[1:]])}
            order.append(("base", run, base_env))
        _, _, text = cpu_wall(run, env, tmp)  # warm-up (page cache, bytecode); not counted
        verdict = next((ln for ln in text.splitlines() if " in " in ln and "pass" in ln), "")
        for _, argv, e in order[1:]:
            cpu_wall(argv, e, tmp)
        for i in range(pairs_n):
            turn = order[i % len(order):] + order[:i % len(order)]  # each side first in turn
            got = {name: cpu_wall(argv, e, tmp)[:2] for name, argv, e in turn}
            (pw, pc), (hw, hc) = got["run"], got["hand"]
            pairs.append({"preflight_wall_s": round(pw, 3), "hand_wall_s": round(hw, 3),
                          "preflight_cpu_s": round(pc, 3), "hand_cpu_s": round(hc, 3),
                          "wall_ratio": round(pw / hw, 3), "cpu_ratio": round(pc / hc, 3)})
            line = (f"pair {i}: preflight {pw:.2f} s ({pc:.2f} CPU s), hand {hw:.2f} s "
                    f"({hc:.2f} CPU s), ratio wall {pw / hw:.2f} CPU {pc / hc:.2f}")
            if "base" in got:
                bw, bc = got["base"]
                pairs[-1].update({"base_wall_s": round(bw, 3), "base_cpu_s": round(bc, 3),
                                  "base_cpu_ratio": round(bc / hc, 3),
                                  "cpu_change_s": round(pc - bc, 3)})
                line += f"; base {bw:.2f} s ({bc:.2f} CPU s, ratio CPU {bc / hc:.2f})"
            print(line, flush=True)
    med = {k: statistics.median(p[k] for p in pairs) for k in pairs[0]}
    summary = {"bench": "whole_preflight", "run": verdict, "pairs": pairs, "median": med,
               "loadavg": os.getloadavg()}
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "whole_preflight.json").write_text(json.dumps(summary, indent=2) + "\n")
    if base is not None:
        print(f"base {base}: CPU {med['base_cpu_ratio']:.2f}x ({med['base_cpu_s']:.2f} CPU s); "
              f"paired change {med['cpu_change_s']:+.3f} CPU s")
    print(f"{verdict}\nwhole local preflight / hand-scripted torch work, median of {len(pairs)} "
          f"paired ratios: wall {med['wall_ratio']:.2f}x ({med['preflight_wall_s']:.1f} s vs "
          f"{med['hand_wall_s']:.1f} s), CPU {med['cpu_ratio']:.2f}x "
          f"({med['preflight_cpu_s']:.1f} vs {med['hand_cpu_s']:.1f} CPU s); goal <= 1.15; "
          f"load {os.getloadavg()[0]:.1f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--whole", action="store_true",
                        help="the whole local preflight against the hand-scripted work")
    parser.add_argument("--base", type=Path, default=None,
                        help="--whole: a baseline worktree run in the same pairs")
    args = parser.parse_args()
    if args.whole:
        return whole(args.pairs, args.base)
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
