"""The only module that creates a torch.distributed process group, and how its waits are
bounded. torch is imported inside the functions: the launcher side imports this without it.

NCCL waits (pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): before torch
2.6, `work.wait(timeout)` blocks the CPU and honours the timeout only when blocking wait is on
(`TORCH_NCCL_BLOCKING_WAIT=1`, read when the process group is constructed; `NCCL_BLOCKING_WAIT`
before torch 2.2, PR #114077); otherwise it only orders the streams and returns True at once,
and a hung peer then hangs the next `torch.cuda.synchronize` until the watchdog kills the
process. From 2.6 (PR #137295) an explicit timeout blocks either way. So the worker turns
blocking wait on before `init_process_group`: a timed-out NCCL wait raises in the waiting
thread on every supported torch, and the result line can still be printed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from datetime import timedelta
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy

__all__ = ["BLOCKING_WAIT_VARS", "blocking_wait_on", "fsdp_api", "init_group",
           "set_blocking_wait"]

#: The variables that turn NCCL blocking wait on (new name, and the name torch < 2.2 reads).
BLOCKING_WAIT_VARS = ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT")


def set_blocking_wait(environ: MutableMapping[str, str]) -> None:
    """Turn NCCL blocking wait on in `environ` (both names), so `wait(timeout)` is bounded."""
    for name in BLOCKING_WAIT_VARS:
        environ[name] = "1"


def blocking_wait_on(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether a ProcessGroupNCCL constructed now would use blocking wait."""
    env = os.environ if environ is None else environ
    return any(env.get(name) == "1" for name in BLOCKING_WAIT_VARS)


def init_group(
    backend: str,
    *,
    timeout_s: float,
    device: torch.device | None = None,
    store: dist.Store | None = None,
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> None:
    """`init_process_group` with a timeout (the default is 10 or 30 minutes: never use it).

    NCCL: blocking wait on (module docstring) and `device_id` given, which forms the
    communicator at once (a missing peer shows at init, bounded by the timeout) and binds this
    rank to its GPU. `store`/`init_method`/`rank`/`world_size` are passed through (the cluster
    plane's TCPStore, a test's file store); by default torchrun's environment is used.
    """
    import torch.distributed as dist

    kwargs: dict[str, object] = {"timeout": timedelta(seconds=timeout_s)}
    if store is not None:
        kwargs["store"] = store
    if init_method is not None:
        kwargs["init_method"] = init_method
    if rank is not None:
        kwargs["rank"] = rank
    if world_size is not None:
        kwargs["world_size"] = world_size
    if "nccl" in backend:  # "nccl", or "cpu:gloo,cuda:nccl"
        set_blocking_wait(os.environ)
        if device is not None:
            kwargs["device_id"] = device
    dist.init_process_group(backend, **kwargs)


def fsdp_api(
    import_module: Callable[[str], ModuleType] | None = None,
) -> tuple[Callable[..., torch.nn.Module], type[MixedPrecisionPolicy]]:
    """(fully_shard, MixedPrecisionPolicy): public in `torch.distributed.fsdp` from torch 2.6,
    under `torch.distributed._composable.fsdp` from 2.4 (the path TE's own FSDP2 tests use).
    `import_module`: importlib.import_module (a test's stand-in)."""
    if import_module is None:
        import importlib

        import_module = importlib.import_module
    errors = []
    for path in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            module = import_module(path)
            return module.fully_shard, module.MixedPrecisionPolicy
        except (ImportError, AttributeError) as exc:
            errors.append(f"{path}: {type(exc).__name__}: {exc}")
    raise ImportError("FSDP2 (fully_shard) not found; needs torch >= 2.4: " + "; ".join(errors))
