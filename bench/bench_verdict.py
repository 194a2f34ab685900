"""The cluster verdict's cost by cluster size (issue 14, item 8): `decide` on a gathered
snapshot of N nodes, each publishing the facts and a few NCCL_*/FI_* variables, one node
differing in one variable, one node failing its local checks and one node slower than the rest
in its published busbw (the work a real bad cluster gives the verdict, the straggler check's
median/MAD included). Every node computes it, so it must stay linear in N.

Prints the median time at N = 128 and N = 1024 and `ratio X` (time at 1024 / time at 128;
linear is 8, the target is <= 12). Then the same with every section a certify run with a job
layout adds (`full`, issue 28: each read through its typed record): every node's PF-GPU-020
figures (8 devices), the pairwise isolation (a round over every node, two rounds confirming the
slow node) and tp=8 job groups over the nodes (one failing, with its own sweep). The snapshot is
plain JSON built here, readable by an older tree: copy this file beside another tree's
bench/ and run it there for a paired before/after.

Run: PYTHONPATH=. .venv/bin/python bench/bench_verdict.py  (BENCH_ITERS, default 5)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS

FACTS = {"driver": "550.90.07", "cuda": "12.4", "nccl": "2.21.5", "ofi_nccl": "1.13.2",
         "libfabric": "1.22.0amzn4.0", "torch": "2.13.0", "gpu_count": 8,
         "gpu_model": "NVIDIA H100 80GB HBM3"}
ENV = {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^lo,docker", "FI_PROVIDER": "efa",
       "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_PROTO": "simple"}


def snapshot(n: int) -> dict:
    nodes = {}
    for r in range(n):
        env = dict(ENV)
        env[f"NCCL_NODE_{r % 4}"] = "1"  # variables set on some nodes only
        if r == n // 2:
            env["NCCL_PROTO"] = "LL128"
        failed = [{"id": "PF-GPU-003", "outcome": "fail", "message": "[PF-GPU-003] xid 79"}] \
            if r == n // 3 else []
        nodes[str(r)] = {"rank": r, "host": f"node{r}", "verdict": "fail" if failed else "pass",
                         "failed": failed, "num_failed": len(failed), "harness_errors": [],
                         "facts": dict(FACTS), "env": env,
                         "figures": {"node_busbw_gb_s": 400.0 if r == n // 5 else 480.0 + r % 7,
                                     "step_time_s": 0.5 + (r % 3) / 100},
                         "sdc": None, "nothing_judged": None}
    return {"num_nodes": n, "profile": "p5.48xlarge", "tier": "preflight",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(n)}, "nodes": nodes, "missing": {}}


def _pair(a: int, b: int, busbw: float) -> dict:
    return {"a": a, "b": b, "busbw_gb_s": busbw, "error": None}


def full_snapshot(n: int) -> dict:
    """`snapshot(n)` with every node's SDC figures, the isolation rounds and tp=8 groups."""
    snap = snapshot(n)
    sdc = {"spec": "sdc/v1 short cuda", "devices": {f"GPU {i}": "d" * 64 for i in range(8)},
           "outputs": {f"{t} {k}": "e" * 64 for t in ("bf16", "fp16", "fp32")
                       for k in ("gemm", "row sums")},
           "totals": {f"{t} gemm": 1.5 for t in ("bf16", "fp16", "fp32")}, "sm_count": 132,
           "outcome": "pass"}
    for node in snap["nodes"].values():
        node["sdc"] = json.loads(json.dumps(sdc))
    slow = n // 5
    first = [_pair(a, a + 1, 20.0 if slow in (a, a + 1) else 100.0) for a in range(0, n, 2)]
    peer = (slow + 2) % n
    again = [[_pair(slow, peer, 20.0), _pair(slow ^ 1, (slow + 4) % n, 100.0)],
             [_pair(slow, (peer + 2) % n, 20.0)]]
    snap["isolation"] = {"nodes": list(range(n)), "num_rounds": 3, "threshold_gb_s": 50.0,
                         "bad_nodes": [slow], "bad_links": [], "suspects": [],
                         "found_in_round": [3], "flaky": [], "rounds": [first, *again]}
    groups = [{"kind": "tp", "index": g, "nodes": list(range(g * 8, g * 8 + 8)),
               "size_bytes": 1 << 20} for g in range(n // 8)]
    snap["groups_plan"] = {"layout": "tp=8 (bench)", "error": None, "gpus_per_node": 1,
                           "groups": groups}
    results = []
    for g in groups:
        bad = slow in g["nodes"]
        sweep = None
        if bad:
            others = [x for x in g["nodes"] if x != slow]
            sweep = {"nodes": g["nodes"], "num_rounds": 1, "threshold_gb_s": 50.0,
                     "bad_nodes": [slow], "bad_links": [], "suspects": [],
                     "found_in_round": [1], "flaky": [],
                     "rounds": [[_pair(slow, x, 20.0) for x in others]]}
        results.append({**g, "busbw_gb_s": 20.0 if bad else 100.0, "alltoall_gb_s": None,
                        "error": None, "threshold_gb_s": 50.0, "passed": not bad,
                        "isolation": sweep, "isolation_not_run": None})
    snap["groups"] = {"layout": "tp=8 (bench)", "results": results}
    return snap


def timed(n: int, iters: int, build: Callable[[int], dict] = snapshot) -> float:
    snap = build(n)
    judged = decide(snap)  # a snapshot it cannot read would time the error path
    assert judged.verdict == "fail" and len(judged.checks) > 1, judged.text
    times = []
    for _ in range(iters):
        began = time.perf_counter()
        decide(snap)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    iters = int(os.environ.get("BENCH_ITERS", "5"))
    small, large = timed(128, iters), timed(1024, iters)
    print(f"decide N=128   median {small * 1e3:9.2f} ms ({iters} runs)")
    print(f"decide N=1024  median {large * 1e3:9.2f} ms ({iters} runs)")
    print(f"ratio {large / small:.1f}")
    small, large = timed(128, iters, full_snapshot), timed(1024, iters, full_snapshot)
    print(f"full N=128     median {small * 1e3:9.2f} ms ({iters} runs)")
    print(f"full N=1024    median {large * 1e3:9.2f} ms ({iters} runs)")
    print(f"full ratio {large / small:.1f}")


if __name__ == "__main__":
    main()
