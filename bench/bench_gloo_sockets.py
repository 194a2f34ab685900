"""Sockets a gloo process group holds per rank, torch's eager full mesh against
TORCH_GLOO_LAZY_INIT=1 (what the cluster step sets): N local ranks (spawned processes, a TCPStore
on loopback), sockets counted in /proc/self/fd before init_process_group, after it, and after 3
all_reduces. Checks the socket row of the gloo model in docs/multinode.md (Scale) where it can
run: eager N - 1 pairs + a listener, lazy the ring's 2 neighbours + a listener.

    .venv/bin/python bench/bench_gloo_sockets.py 8 16
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since listed
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return n


def _rank(rank: int, n: int, port: int, lazy: bool, queue: object) -> None:
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    if lazy:
        os.environ["TORCH_GLOO_LAZY_INIT"] = "1"
    import torch
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0, timeout)
    before = _sockets()
    dist.init_process_group("gloo", store=store, rank=rank, world_size=n, timeout=timeout)
    after_init = _sockets()
    t = torch.ones(1024)
    for _ in range(3):
        dist.all_reduce(t)
    queue.put((rank, after_init - before, _sockets() - before))
    dist.destroy_process_group()


def run(n: int, lazy: bool) -> dict:
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, n, port, lazy, queue)) for r in range(n)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=300) for _ in range(n)]
    for p in procs:
        p.join(60)
    init = [g[1] for g in got]
    after = [g[2] for g in got]
    return {"ranks": n, "mode": "lazy" if lazy else "eager",
            "sockets_after_init": [min(init), max(init)],
            "sockets_after_all_reduce": [min(after), max(after)]}


if __name__ == "__main__":
    for size in [int(a) for a in sys.argv[1:]] or [8, 16]:
        for mode in (False, True):
            print(json.dumps(run(size, mode)), flush=True)
