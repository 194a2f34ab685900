"""What one node brings to the cluster step: the facts that must match across nodes, the
cluster gate's message size and floor, and the selftest's injected faults."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from harness.base.jsontypes import JSONObject
from harness.base.settings import get_float, get_str

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["FAULTS", "PASSING_FAULTS", "flaky_round", "gate_floor", "gate_size", "inject_fault",
           "node_facts"]

#: Faults `preflight selftest cluster` injects through PREFLIGHT_SELFTEST_FAULT.
FAULTS = ("slow", "hang", "crash", "fail-check", "absent", "sdc", "slowlink", "flaky")
#: Faults a healthy node survives: `flaky` fails one isolation pair, then passes (a pass).
PASSING_FAULTS = ("flaky",)


def node_facts(env: Mapping[str, str]) -> JSONObject:
    """Versions and GPU inventory that must match across nodes (None where absent)."""
    from harness.probes import network

    facts: JSONObject = dict.fromkeys(("driver", "cuda", "nccl", "gpu_count", "gpu_model"))
    try:
        import torch

        facts["torch"] = torch.__version__
        if torch.cuda.is_available():
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # a broken torch is a fact too
        facts["torch"] = f"unusable: {type(exc).__name__}"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            facts["driver"] = _s(pynvml.nvmlSystemGetDriverVersion())
            v = pynvml.nvmlSystemGetCudaDriverVersion()
            facts["cuda"] = f"{v // 1000}.{v % 1000 // 10}"
            count = pynvml.nvmlDeviceGetCount()
            facts["gpu_count"] = count
            names = sorted({_s(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                            for i in range(count)})
            facts["gpu_model"] = ", ".join(names) or None
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver (NVMLError_LibraryNotFound) or no pynvml: no GPU facts
        pass
    lib = network.find_ofi_nccl(env)
    facts["ofi_nccl"] = lib.version if lib else None
    facts["libfabric"] = network.libfabric_version()
    return facts


def _s(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gate_size(profile: Profile, env: Mapping[str, str]) -> int:
    """Message size of the cluster gate: PREFLIGHT_CLUSTER_BW_BYTES, else the profile's gate
    size on GPU profiles and 4 MiB on CPU ones (gloo over TCP: a sanity check)."""
    if size := get_str("PREFLIGHT_CLUSTER_BW_BYTES", env):
        from harness.worker.bandwidth import parse_size

        return parse_size(size)
    return int(profile.bw_gate_size_bytes) if profile.has_gpus else 4 * 1024**2


def gate_floor(profile: Profile) -> float | None:
    """The cluster gate's floor. GPU profiles: none here — one GPU per node over NCCL cannot
    be held to the 8-GPU multi-node floor (net_busbw_gb_s_min, nccl-tests on every GPU); the
    check then catches errors, hangs and wrong data, and isolation judges pairs relatively."""
    return None if profile.has_gpus else profile.cpu_busbw_gb_s_min


def inject_fault(fault: str, rank: int | None = None) -> None:
    """The selftest's faults that act inside the collectives (`fail-check` and `absent` act
    before: a harmful variable, a node never started; `sdc` in the node's worker launch, which
    flips one bit of every rank's SDC result: harness.worker.sdc)."""
    if fault == "crash":
        print("preflight selftest: fault 'crash': exiting in the middle of the cluster step",
              file=sys.stderr, flush=True)
        os._exit(17)
    if fault == "hang":
        print("preflight selftest: fault 'hang': no longer answering collectives",
              file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)
    if fault == "slow":
        _slow_all_reduce()
    if fault == "slowlink":
        _slow_link(rank)


@contextlib.contextmanager
def flaky_round(fault: str, round_no: int) -> Iterator[None]:
    """The selftest's `flaky` fault: this node's all_reduce is slow (PREFLIGHT_SELFTEST_SLOW_S
    before each) in the first isolation round only, then healthy: a failure that does not come
    back (issue 30, confirm before condemn)."""
    if fault != "flaky" or round_no != 1:
        yield
        return
    undo = _slow_all_reduce()
    try:
        yield
    finally:
        undo()


def _slow_all_reduce() -> Callable[[], None]:
    """torch.distributed.all_reduce made to sleep PREFLIGHT_SELFTEST_SLOW_S before each call
    (the selftest's slow node); returns what puts the original back."""
    import torch.distributed as dist

    delay = get_float("PREFLIGHT_SELFTEST_SLOW_S") or 0.0
    original = dist.all_reduce

    def slow_all_reduce(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay)
        return original(*args, **kwargs)

    dist.all_reduce = slow_all_reduce
    return lambda: setattr(dist, "all_reduce", original)


def _slow_link(rank: int | None) -> None:
    """`slowlink` on nodes A and B (PREFLIGHT_SELFTEST_SLOW_LINK="A,B"): an all_reduce on a
    subgroup (a pair, a job-shaped group) that holds this node and another slow-link node
    sleeps first; the cluster-wide one does not (a link the cluster's ring does not cross)."""
    import torch.distributed as dist

    delay = get_float("PREFLIGHT_SELFTEST_SLOW_S") or 0.0
    peers = {int(x) for x in (get_str("PREFLIGHT_SELFTEST_SLOW_LINK") or "").split(",") if x}
    others = peers - {rank}
    original = dist.all_reduce

    def slow_all_reduce(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group")
        if group is not None and group is not dist.group.WORLD and \
                others & set(dist.get_process_group_ranks(group)):
            time.sleep(delay)
        return original(*args, **kwargs)

    dist.all_reduce = slow_all_reduce
