"""Compute sanity: a bf16 matmul on every GPU (achieved TFLOP/s, and a digest of its result so
that GPUs given the same inputs can be compared bit for bit: silent data corruption) and a
device-to-device copy (HBM bandwidth). torch is imported inside the functions; the arithmetic
and the comparisons are pure functions, tested on CPU tensors."""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch

__all__ = [
    "ComputeResult",
    "below_floor",
    "copy_gb_s",
    "device_uuid",
    "digest",
    "make_inputs",
    "matmul_tflops",
    "run_compute_sanity",
    "run_copy",
    "run_matmul",
    "sdc_suspects",
    "sync_device",
]


#: Untimed matmuls before the timed ones: an idle GPU takes a few ms to raise its clocks.
WARMUP_ITERS = 5


def matmul_tflops(n: int, seconds: float, iters: int) -> float:
    """Achieved TFLOP/s of `iters` n x n x n matmuls in `seconds` (2 n^3 flops each)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return 2.0 * n**3 * iters / seconds / 1e12


def copy_gb_s(nbytes: int, seconds: float, iters: int) -> float:
    """Device-to-device copy bandwidth, GB/s, counting the read and the write of every byte
    (as nvbandwidth and STREAM copy do, so it compares with the datasheet HBM figure)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    return 2.0 * nbytes * iters / seconds / 1e9


def below_floor(values: Mapping[int, float], floor: float) -> dict[int, float]:
    """The GPUs whose value is under `floor`."""
    return {gpu: v for gpu, v in sorted(values.items()) if v < floor}


def sdc_suspects(digests: Mapping[int, str]) -> dict[int, str]:
    """GPUs whose result differs from the majority's (same inputs, same kernel: any difference is
    silent data corruption). Without a strict majority every GPU is a suspect, since the good
    result cannot be told apart; one GPU alone cannot be judged."""
    if len(digests) < 2:
        return {}
    counts = Counter(digests.values())
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return dict(sorted(digests.items()))
    return {gpu: d for gpu, d in sorted(digests.items()) if d != top}


def digest(tensor: torch.Tensor) -> str:
    """sha256 of a tensor's bytes (its exact bits, whatever the dtype)."""
    data = tensor.detach().contiguous().cpu()
    import torch

    return hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def sync_device(device: torch.device) -> None:
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        torch.cuda.synchronize(device)


def make_inputs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((n, n), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, n), generator=gen, dtype=torch.float32).to(torch.bfloat16)
    return a, b


def run_matmul(device: torch.device, *, n: int = 8192, iters: int = 50, seed: int = 0,
               inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[float, str]:
    """(achieved TFLOP/s, digest of A @ B) for bf16 n x n inputs made on the CPU from `seed`, so
    every device multiplies the same bits."""
    import torch

    a, b = inputs if inputs is not None else make_inputs(n, seed)
    a, b = a.to(device), b.to(device)
    with torch.no_grad():
        c = a @ b  # the result every GPU is compared on
        result = digest(c)
        for _ in range(WARMUP_ITERS):  # let clocks ramp up from idle before timing
            torch.matmul(a, b, out=c)
        sync_device(device)
        start = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        sync_device(device)
        seconds = time.perf_counter() - start
    return matmul_tflops(a.shape[0], seconds, iters), result


def run_copy(device: torch.device, *, nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth of one device, GB/s."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    sync_device(device)
    start = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    sync_device(device)
    return copy_gb_s(nbytes, time.perf_counter() - start, iters)


@dataclass(frozen=True, slots=True)
class ComputeResult:
    """Per CUDA device index: matmul TFLOP/s, result digest, copy GB/s, and the device's UUID
    (`GPU-...`, as NVML spells it) so that results name the same GPU NVML does: CUDA numbers
    devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and CUDA_VISIBLE_DEVICES
    renumbers them."""

    tflops: dict[int, float]
    digests: dict[int, str]
    copy_gb_s: dict[int, float]
    uuids: dict[int, str] = field(default_factory=dict)


def device_uuid(device: torch.device) -> str | None:
    """`GPU-5b3e...` of a CUDA device, or None (CPU, or a torch without `.uuid`)."""
    import torch

    if getattr(device, "type", "") != "cuda":
        return None
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def run_compute_sanity(devices: list[torch.device] | None = None, *, n: int = 8192, iters: int = 50,
                       copy_bytes: int = 1 << 30, copy_iters: int = 20) -> ComputeResult:
    """Matmul and copy on every device (default: every CUDA device torch sees)."""
    import torch

    if devices is None:
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device (CUDA build: "
                               f"{torch.version.cuda or 'none'})")
        devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    inputs = make_inputs(n, seed=0)
    tflops, digests, copies, uuids = {}, {}, {}, {}
    for i, device in enumerate(devices):
        tflops[i], digests[i] = run_matmul(device, n=n, iters=iters, inputs=inputs)
        copies[i] = run_copy(device, nbytes=copy_bytes, iters=copy_iters)
        if (uuid := device_uuid(device)) is not None:
            uuids[i] = uuid
    return ComputeResult(tflops, digests, copies, uuids)
