"""The worker's `sdc` part: every rank runs the same deterministic GEMMs and reductions
(harness.probes.sdc) on its own device at once, in the launch's one process group (no extra
NCCL start); rank 0 gathers every rank's digests and prints one line:
`{"schema": SDC_SCHEMA, "spec": ..., "ranks": [{rank, device, uuid, digest, outputs, ...}]}`.

On CPU the same code runs on the gloo ranks. Two ways to corrupt a result on purpose, both
flipping one bit of the first product: `--sdc-flip-rank R` (one rank: the tests) and the
selftest's PREFLIGHT_SELFTEST_FAULT=sdc (every rank of that node: `preflight selftest cluster
--inject sdc=K`, which only the cross-node comparison can catch)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject, JSONValue
from harness.base.settings import get_str
from harness.probes.sdc import LEVELS, SDC_SCHEMA

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch

__all__ = ["SDC_FAULT", "add_arguments", "run_part"]

#: The selftest fault (PREFLIGHT_SELFTEST_FAULT) that flips one bit on every rank of a node.
SDC_FAULT = "sdc"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sdc-level", default="short", choices=sorted(LEVELS),
                   help="the SDC cross-check's work: short (preflight) or long (certify)")
    p.add_argument("--sdc-flip-rank", type=int, default=None, help=argparse.SUPPRESS)


def run_part(args: argparse.Namespace, device: torch.device, rank: int, *,
             emit: Callable[[JSONObject], None]) -> None:
    """Every rank: its digests; rank 0: every rank's, in one line."""
    import torch.distributed as dist

    from harness.probes.gpu_compute import device_uuid
    from harness.probes.sdc import run_sdc

    flip = args.sdc_flip_rank == rank or (get_str("PREFLIGHT_SELFTEST_FAULT") or "") == SDC_FAULT
    mine: JSONObject = {"rank": rank, "device": device.index if device.type == "cuda" else None,
                        "uuid": device_uuid(device) if device.type == "cuda" else None,
                        **run_sdc(device, args.sdc_level, flip=flip)}
    ranks: list[JSONValue] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine)
    if rank == 0:
        emit({"schema": SDC_SCHEMA, "level": args.sdc_level, "ranks": ranks})
