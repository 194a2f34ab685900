"""An all_to_all bandwidth figure inside one process group (the MoE dispatch/combine pattern:
every rank sends a slice to every other): the groups phase's expert-parallel measurement.
torch is imported inside the function."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup

__all__ = ["alltoall_gb_s"]


def alltoall_gb_s(group: ProcessGroup, size_bytes: int, device: torch.device, timeout_s: float,
                  iters: int = 3) -> float | None:
    """Bytes each rank sends and receives per all_to_all_single over the mean time, GB/s
    (nccl-tests' alltoall busbw: algbw x (n-1)/n); None when the group has one rank. The wait
    is bounded (harness.worker.bandwidth.wait_bounded raises past `timeout_s`)."""
    import torch
    import torch.distributed as dist

    from harness.worker.bandwidth import wait_bounded

    n = dist.get_world_size(group)
    if n < 2:
        return None
    count = max(n, (size_bytes // 4) // n * n)
    send = torch.ones(count, dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    wait_bounded(dist.all_to_all_single(recv, send, group=group, async_op=True), timeout_s,
                 "the warm-up all_to_all")
    start = time.perf_counter()
    for _ in range(iters):
        wait_bounded(dist.all_to_all_single(recv, send, group=group, async_op=True), timeout_s,
                     "the all_to_all")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = (time.perf_counter() - start) / iters
    return round(count * 4 / seconds / 1e9 * (n - 1) / n, 6)
