"""The worker's `links` part: small-message all_reduce latency over every rank (a collective),
then, on rank 0 alone (one launch per node, so rank 0 is local rank 0 and sees every GPU of
the node), each GPU's pinned host copies and every ordered GPU pair's peer copy, one at a time
(harness.probes.gpu_links says why one process). The other ranks wait on the process group's
TCP store, on the CPU, until rank 0 says it is done: an NCCL barrier would run a kernel that
spins on their GPUs (and their links) while the copies are timed. Rank 0 prints one line:
`{"schema": LINKS_SCHEMA, "latency": {...torch_bench...}, "host": [...], "p2p": [...], ...}`.

On CPU (gloo) only the latency runs (the copies need CUDA): that keeps the part's plumbing
testable under real multi-process gloo."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch
    import torch.distributed as dist

__all__ = ["LINKS_SCHEMA", "add_arguments", "run_part"]

LINKS_SCHEMA = "gpu-preflight.links/v1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lat-sizes", default="8,64K", help="all_reduce latency sizes")
    p.add_argument("--lat-iters", type=int, default=50)
    p.add_argument("--p2p-bytes", default="0", help="peer copy size per pair (0: no matrix)")
    p.add_argument("--p2p-iters", type=int, default=20)
    p.add_argument("--host-sizes", default="256M", help="host copy sizes (empty: none)")
    p.add_argument("--host-iters", type=int, default=10)
    p.add_argument("--links-budget-s", type=float, default=30.0,
                   help="seconds rank 0 may spend on copies; what is left is listed as skipped")


def _sizes(text: str) -> list[int]:
    from harness.worker.bandwidth import parse_size

    return [parse_size(s) for s in text.split(",") if s.strip()]


def run_part(args: argparse.Namespace, device: torch.device, *,
             emit: Callable[[JSONObject], None]) -> bool:
    """Every rank: the latency sweep; rank 0: the copies and the result line. False when the
    latency collective failed (the group may be broken)."""
    import torch
    import torch.distributed as dist

    from harness.probes import gpu_links
    from harness.worker import bandwidth as tb

    latency = tb.allreduce_bench(sizes_bytes=_sizes(args.lat_sizes), warmup=5,
                                 iters=args.lat_iters, check_data=False,
                                 timeout_s=args.pg_timeout_s, device=device)
    if latency.errors:
        emit({"schema": LINKS_SCHEMA, "rank": dist.get_rank(), "latency": latency.to_dict()})
        return False
    record: JSONObject = {"schema": LINKS_SCHEMA, "nranks": dist.get_world_size(),
                              "latency": latency.to_dict()}
    store = _store()
    record["others_idle"] = store is not None
    if dist.get_rank() != 0 and store is not None:
        from datetime import timedelta

        store.wait([DONE_KEY], timedelta(seconds=args.pg_timeout_s))  # off the GPU
    if dist.get_rank() == 0:
        if device.type == "cuda":
            devices = list(range(torch.cuda.device_count()))
            record.update(gpu_links.measure_links(
                devices, p2p_bytes=_sizes(args.p2p_bytes)[0] if args.p2p_bytes else 0,
                p2p_iters=args.p2p_iters, host_sizes=_sizes(args.host_sizes),
                host_iters=args.host_iters, budget_s=_budget_s(args)))
            record["uuids"] = _uuids(devices)
            for d in devices:  # give the copies' buffers back before the next part
                with torch.cuda.device(d):
                    torch.cuda.empty_cache()
        else:
            record["copies"] = "not measured: no CUDA device"
        emit(record)
        if store is not None:
            store.set(DONE_KEY, "1")
    dist.barrier()
    return True


#: The store key rank 0 sets when its copies are done (the others wait on it, off their GPUs).
DONE_KEY = "preflight/links-done"


def _store() -> dist.Store | None:
    """The default process group's store (torchrun's TCP store), or None where this torch does
    not expose it (then the ranks wait in a barrier, as before: `others_idle` false)."""
    import torch.distributed as dist

    get = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return get() if get is not None else None
    except Exception:
        return None


def _budget_s(args: argparse.Namespace) -> float:
    """Rank 0's time for the copies: its own limit, and well inside the process group's
    timeout (the other ranks wait for it in a barrier bounded by that timeout)."""
    return max(1.0, min(args.links_budget_s, 0.6 * args.pg_timeout_s))


def _uuids(devices: list[int]) -> dict[str, str]:
    """CUDA index -> `GPU-...` (to name GPUs by NVML index; CUDA numbers them its own way)."""
    import torch

    from harness.probes.gpu_compute import device_uuid

    out = {}
    for d in devices:
        uuid = device_uuid(torch.device("cuda", d))
        if uuid:
            out[str(d)] = uuid
    return out
