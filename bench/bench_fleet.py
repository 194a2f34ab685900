"""The control plane at fleet scale (issue 33): `harness.cluster.fleet` at 128 .. 16,384 simulated
nodes, the branch against a baseline revision (a git worktree of it), in pairs, alternating which
runs first. Figures per run: seconds from the common start to every node joined (`join_s`), to
the master's snapshot (`master_snapshot_s`: the gather) and to the last node's verdict
(`all_decided_s`); the master process's CPU seconds, peak RSS, descriptors and sockets; the
descriptors per simulated node; the snapshot's bytes (the master's, and what a node receives).
Medians per size and variant go to bench/out/fleet.json and stdout.

    .venv/bin/python bench/bench_fleet.py --sizes 128,1024,4096,16384 --repeats 2 \
        --base 5f1f3fc --base-max 1024

A run that did not finish or whose nodes did not all decide has no time figures (None): a
figure that was not produced is never counted as fast.
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.cluster.fleet import FleetSpec, run_fleet  # noqa: E402

FIGURES = ("join_s", "last_result_s", "master_snapshot_s", "all_decided_s")


def one(nodes: int, tree: Path | None) -> dict:
    spec = FleetSpec(nodes=nodes, join_s=300.0, local_budget_s=60.0, gather_s=60.0,
                     collective_s=60.0, exit_s=30.0)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp:
        start = time.monotonic()
        got = run_fleet(spec, Path(tmp), tree=tree)
        got["harness"] = (Path(tmp) / "master.log").read_text().splitlines()[0]
        got["wall_s"] = round(time.monotonic() - start, 1)
        got["load_1m"] = round(os.getloadavg()[0], 1)  # the machine is shared: say how busy
    complete = got["decided"] == got["expected"] and got["verdicts"] == ["pass"]
    got["complete"] = complete
    if not complete:  # a run that failed its own fleet has no time figures
        for key in FIGURES:
            got[key] = None
    return got


def median(runs: list[dict], key: str, sub: str | None = None) -> float | None:
    values = [(r[key] or {}).get(sub) if sub else r[key] for r in runs]
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values and len(values) == len(runs) else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="128,1024,4096,16384")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--base", default="", help="baseline revision (a worktree of it is made)")
    ap.add_argument("--head", default="HEAD", help="revision measured against it (a worktree "
                    "too: editing the checkout while the bench runs does not change it)")
    ap.add_argument("--base-max", type=int, default=1024,
                    help="largest size the baseline runs at (it is O(N^2) in bytes)")
    args = ap.parse_args()
    trees = {}
    for name, rev in (("head", args.head), ("base", args.base)):
        if rev:
            trees[name] = Path(tempfile.mkdtemp(prefix=f"bench-fleet-{name}-"))
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach",
                            str(trees[name]), rev], check=True)
    if "base" in trees:  # the same simulator on both sides: only the control plane differs
        sim = "harness/cluster/fleet.py"
        (trees["base"] / sim).write_bytes((trees["head"] / sim).read_bytes())
    rows = []
    try:
        for n in [int(s) for s in args.sizes.split(",")]:
            variants = [("head", trees["head"])]
            if "base" in trees and n <= args.base_max:
                variants.append(("base", trees["base"]))
            runs: dict[str, list[dict]] = {name: [] for name, _ in variants}
            for rep in range(args.repeats):
                for name, tree in (variants if rep % 2 == 0 else variants[::-1]):
                    got = one(n, tree)
                    runs[name].append(got)
                    print(json.dumps({"nodes": n, "variant": name, "rep": rep, **{
                        k: got.get(k) for k in (*FIGURES, "wall_s", "complete", "num_bad",
                                                "master", "fds_per_node", "snapshot_bytes",
                                                "node_snapshot_bytes", "worker_cpu_s", "harness",
                                                "load_1m")}}),
                          flush=True)
            for name, rs in runs.items():
                rows.append({"nodes": n, "variant": name, "runs": len(rs),
                             "complete": sum(r["complete"] for r in rs),
                             **{k: median(rs, k) for k in FIGURES},
                             "master_cpu_s": median(rs, "master", "cpu_s"),
                             "master_peak_rss_mb": median(rs, "master", "peak_rss_mb"),
                             "master_peak_fds": median(rs, "master", "peak_fds"),
                             "master_peak_sockets": median(rs, "master", "peak_sockets"),
                             "fds_per_node": median(rs, "fds_per_node"),
                             "snapshot_bytes": median(rs, "snapshot_bytes"),
                             "node_snapshot_bytes": median(rs, "node_snapshot_bytes"),
                             "worker_cpu_s": median(rs, "worker_cpu_s"),
                             "load_1m": median(rs, "load_1m")})
                print("MEDIAN", json.dumps(rows[-1]), flush=True)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(tree)], check=False)
    out = ROOT / "bench" / "out"
    out.mkdir(exist_ok=True)
    (out / "fleet.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
