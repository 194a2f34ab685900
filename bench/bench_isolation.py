"""Multi-node preflight performance (issue 7), reported as medians and ratios.

1. Isolation, simulated: rounds to confirm the bad nodes, false positives and misses, by cluster
   size N and number of bad nodes (goal: 1 bad node in <= 3 rounds at N = 1024, zero false
   positives), with exact and with flaky (1% of healthy pairs measured at a third) links.
2. Control-plane overhead: one gather of every node's result (a ~3 KB summary) and the
   master's snapshot back to all, across 8 local processes over the TCPStore, against
   `all_gather_object` on the gloo group for the same payload.

Run: PYTHONPATH=. /work/venv/bin/python bench/bench_isolation.py  (BENCH_SEEDS, BENCH_ITERS)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cluster.isolate import isolate, simulate_measure


def isolation_table(seeds: int) -> None:
    print("isolation (simulated; bad nodes at 0.3x busbw, healthy noise +-5%)")
    print(f"{'N':>5} {'bad':>4} {'flaky':>6} {'rounds med':>10} {'rounds max':>10} "
          f"{'found by rnd max':>16} {'false pos':>9} {'missed':>6}")
    for flake in (0.0, 0.01):
        for n in (16, 64, 256, 1024):
            for num_bad in (0, 1, 2, 4, 8):
                rounds, found, fp, missed = [], [], 0, 0
                for seed in range(seeds):
                    bad = random.Random(seed * 7919 + n).sample(range(n), num_bad)
                    res = isolate(range(n), simulate_measure(
                        bad_nodes={b: 0.3 for b in bad}, flake_rate=flake, seed=seed), seed=seed)
                    rounds.append(len(res.rounds))
                    found.extend(res.found_in_round)
                    fp += len(set(res.bad_nodes) - set(bad))
                    missed += len(set(bad) - set(res.bad_nodes))
                print(f"{n:>5} {num_bad:>4} {flake:>6.0%} {statistics.median(rounds):>10g} "
                      f"{max(rounds):>10} {max(found, default=0):>16} {fp:>9} {missed:>6}")


def _node(rank: int, n: int, port: int, iters: int, out: mp.Queue) -> None:
    from datetime import timedelta

    import torch.distributed as dist

    from harness.cluster.plane import ControlPlane
    from harness.topology.model import Topology

    topo = Topology(node_rank=rank, num_nodes=n, master_addr="127.0.0.1", port=port,
                    source="bench")
    plane = ControlPlane.join(topo, 60.0)
    payload = {"rank": rank, "host": f"node{rank}", "verdict": "pass",
               "failed": [{"id": "PF-X", "outcome": "fail", "message": "x" * 500}] * 4,
               "facts": {"torch": "2.13.0", "nccl": "2.21.5"}, "env": {"NCCL_DEBUG": "WARN"}}
    store_s = []
    for i in range(iters):
        t0 = time.perf_counter()
        plane.publish(f"r/{i}/{rank}", payload, counter=f"c/{i}")
        if rank == 0:
            found, _ = plane.gather({r: f"r/{i}/{r}" for r in range(n)}, f"c/{i}",
                                    time.monotonic() + 60)
            plane.publish(f"s/{i}", found)
        else:
            plane.wait_for(f"s/{i}", time.monotonic() + 60)
        store_s.append(time.perf_counter() - t0)
    dist.init_process_group("gloo", store=dist.PrefixStore("pg/", plane.store), rank=rank,
                            world_size=n, timeout=timedelta(seconds=60))
    coll_s = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        gathered: list = [None] * n
        dist.all_gather_object(gathered, payload)
        coll_s.append(time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()
    out.put((rank, statistics.median(store_s), statistics.median(coll_s)))


def gather_overhead(n: int, iters: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_node, args=(r, n, port, iters, out)) for r in range(n)]
    for p in procs:
        p.start()
    rows = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    store = statistics.median(r[1] for r in rows)
    coll = statistics.median(r[2] for r in rows)
    print(f"\ncontrol plane, {n} local processes, ~3 KB per node, median over {iters} rounds "
          "and nodes:")
    print(f"  TCPStore publish + gather + snapshot : {store * 1000:7.1f} ms")
    print(f"  gloo all_gather_object               : {coll * 1000:7.1f} ms")
    print(f"  ratio store / collective             : {store / coll:7.2f}")


def main() -> None:
    isolation_table(int(os.environ.get("BENCH_SEEDS", "20")))
    gather_overhead(8, int(os.environ.get("BENCH_ITERS", "15")))


if __name__ == "__main__":
    main()
