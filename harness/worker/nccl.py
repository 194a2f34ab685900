"""One rank of the network probe's collective: a short all_reduce, checked, then a clean exit.

Launched by `harness.probes.nccl_collective.run_collective` as `torchrun --standalone --nproc-per-node=N
-m harness.worker.nccl --backend nccl` (gloo for the harness's own CPU tests).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    parser.add_argument("--size-mib", type=float, default=64.0, help="all_reduce size, MiB")
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--timeout-s", type=float, default=60.0,
                        help="process-group timeout: a hung peer becomes an error")
    parser.add_argument("--stall-rank", type=int, default=None,
                        help="(tests) this rank sleeps instead of joining the all_reduce")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    from harness.worker.group import init_group

    init_group(args.backend, timeout_s=args.timeout_s)
    x = torch.ones(max(1, int(args.size_mib * 2**20 / 4)), device=device)
    if args.stall_rank == rank:
        time.sleep(args.timeout_s * 4)
    for _ in range(args.iters):
        dist.all_reduce(x)
        x /= world
    if device.type == "cuda":
        torch.cuda.synchronize()
    ok = bool(torch.all(x == 1.0))
    dist.barrier()
    dist.destroy_process_group()
    print(f"nccl_worker rank {rank}/{world} {args.backend}: all_reduce "
          f"{'ok' if ok else 'WRONG RESULT'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
