"""Compute sanity as a worker part: every rank multiplies on its own GPU at the same time
(GPUs in parallel), for a few seconds so that clocks dropping under load show, with the SM
clock, power and clock-event reasons read from NVML while it runs; then a device-to-device
copy; then its memory is released (the worker's CUDA context ends with the worker, not with
the pytest session). Rank 0 prints every rank's figures as one line.

The timing loop and the summary are plain functions over any torch device: tested on CPU
tensors; the NVML readings are optional (none on CPU, or without nvidia-ml-py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeAlias

from harness.base.jsontypes import JSONMapping, JSONObject, JSONValue
from harness.probes import gpu_compute as gc

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch

    from harness.probes.nvml import NvmlHandle
    from harness.worker.launch import PartOutcome

__all__ = ["COMPUTE_SCHEMA", "RankCompute", "Reading", "ReadingValues", "WorkerParts",
           "nvml_reader", "part_record", "run_part", "timed_matmuls"]

COMPUTE_SCHEMA = "gpu-preflight.compute/v1"

#: One NVML sample's values by Reading field (`sm_clock_mhz`, `power_w`, `event_reasons`;
#: None: not readable): what an `nvml_reader` function returns.
ReadingValues: TypeAlias = dict[str, int | float | None]


@dataclass(frozen=True, slots=True)
class Reading:
    """One NVML sample during the run (None: not readable)."""

    t_s: float
    sm_clock_mhz: int | None = None
    power_w: float | None = None
    event_reasons: int | None = None


@dataclass(frozen=True, slots=True)
class RankCompute:
    """One rank's (one GPU's) figures."""

    device: int
    tflops: float
    """Over the whole timed window (all chunks)."""
    tflops_by_chunk: list[float]
    digest: str
    copy_gb_s: float
    seconds: float
    uuid: str | None = None
    readings: list[Reading] = field(default_factory=list)
    released: bool = False
    """The tensors were freed and the allocator's cache emptied after the run."""
    n: int = 0
    """The matrices' side (n x n, bf16 on GPUs)."""
    copy_bytes: int = 0

    def to_dict(self) -> JSONObject:
        return asdict(self)


def timed_matmuls(
    device: torch.device, a: torch.Tensor, b: torch.Tensor, *, seconds: float, chunk_iters: int,
    read: Callable[[], ReadingValues] | None = None,
) -> tuple[float, list[float], str, list[Reading], float]:
    """Multiply `a @ b` in chunks of `chunk_iters` until `seconds` have passed (at least one
    chunk); after each chunk, sync and take a reading. The TFLOP/s are over the chunks' own time
    only: the NVML readings between chunks (tens of ms each on a busy driver) are outside it.
    (TFLOP/s overall, per chunk, digest of the first product, readings, seconds of matmul)."""
    import torch

    n = a.shape[0]
    readings: list[Reading] = []
    with torch.no_grad():
        c = a @ b
        first = gc.digest(c)
        for _ in range(gc.WARMUP_ITERS):
            torch.matmul(a, b, out=c)
        gc.sync_device(device)
        start = time.perf_counter()
        per_chunk: list[float] = []
        total_iters = 0
        busy = 0.0
        while True:
            t0 = time.perf_counter()
            for _ in range(chunk_iters):
                torch.matmul(a, b, out=c)
            gc.sync_device(device)
            now = time.perf_counter()
            busy += max(now - t0, 1e-9)
            per_chunk.append(gc.matmul_tflops(n, max(now - t0, 1e-9), chunk_iters))
            total_iters += chunk_iters
            readings.append(Reading(t_s=round(now - start, 3), **(read() if read else {})))
            if time.perf_counter() - start >= seconds:
                break
    return gc.matmul_tflops(n, busy, total_iters), per_chunk, first, readings, busy


def nvml_reader(device_index: int) -> Callable[[], ReadingValues] | None:
    """A function reading SM clock, power and clock-event reasons of a GPU, or None when NVML
    cannot be used. The index is CUDA's; NVML's handle is looked up by the device's UUID."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        uuid = gc.device_uuid(torch.device("cuda", device_index))
        handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid
                  else pynvml.nvmlDeviceGetHandleByIndex(device_index))
    except Exception:
        return None

    def read() -> ReadingValues:
        out: ReadingValues = {}
        for key, call in (
            ("sm_clock_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
            ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            ("event_reasons", lambda: _event_reasons(pynvml, handle)),
        ):
            try:
                out[key] = call()
            except Exception:
                out[key] = None
        return out

    return read


def _event_reasons(pynvml: ModuleType, handle: NvmlHandle) -> int:
    """The clock event reason mask: `nvmlDeviceGetCurrentClocksEventReasons` (the current
    name), else its older `...ClocksThrottleReasons` (as harness.probes.gpu reads it)."""
    call = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(call(handle))


def run_one(device: torch.device, *, seconds: float, n: int, chunk_iters: int, copy_bytes: int,
            copy_iters: int) -> RankCompute:
    """This rank's matmul window and copy on `device`, then its memory released."""
    import torch

    index = device.index if device.type == "cuda" else 0
    read = nvml_reader(index) if device.type == "cuda" else None
    a, b = (t.to(device) for t in gc.make_inputs(n, seed=0))
    tflops, chunks, first, readings, timed = timed_matmuls(
        device, a, b, seconds=seconds, chunk_iters=chunk_iters, read=read)
    del a, b
    copy = gc.run_copy(device, nbytes=copy_bytes, iters=copy_iters)
    released = True
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        released = torch.cuda.memory_allocated(device) == 0
    return RankCompute(device=index, tflops=tflops, tflops_by_chunk=chunks, digest=first,
                       copy_gb_s=copy, seconds=round(timed, 3), uuid=gc.device_uuid(device),
                       readings=readings, released=released, n=n, copy_bytes=copy_bytes)


def run_part(device: torch.device, *, seconds: float,
             emit: Callable[[JSONObject], None]) -> None:
    """Every rank at once; rank 0 emits `{"schema": COMPUTE_SCHEMA, "ranks": [...]}`."""
    import torch.distributed as dist

    if device.type == "cuda":
        mine = run_one(device, seconds=seconds, n=8192, chunk_iters=25, copy_bytes=1 << 30,
                       copy_iters=20)
    else:  # CPU: the same logic at a size a 2-core VM does in a blink
        mine = run_one(device, seconds=min(seconds, 0.2), n=64, chunk_iters=4,
                       copy_bytes=1 << 16, copy_iters=2)
    ranks: list[JSONValue] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, mine.to_dict())
    if dist.get_rank() == 0:
        emit({"schema": COMPUTE_SCHEMA, "ranks": ranks})


def compute_result(record: JSONMapping) -> gc.ComputeResult:
    """The ComputeResult the PF-GPU compute checks judge, keyed by CUDA device index."""
    ranks = record["ranks"]
    return gc.ComputeResult(
        tflops={r["device"]: r["tflops"] for r in ranks},
        digests={r["device"]: r["digest"] for r in ranks},
        copy_gb_s={r["device"]: r["copy_gb_s"] for r in ranks},
        uuids={r["device"]: r["uuid"] for r in ranks if r.get("uuid")},
    )


def find_record(text: str, schema: str) -> JSONObject | None:
    """The last `{"schema": <schema>, ...}` line of a worker's output, or None."""
    from harness.worker.launch import schema_records

    records = schema_records(text, schema)
    return records[-1] if records else None


class WorkerParts(Protocol):
    """What `from_worker` needs of the session's worker (harness.fixtures.worker.WorkerSession,
    named by this protocol: the fixtures layer imports this module)."""

    no_gpu: str | None
    """Why it is certain that no GPU is visible (then nothing is launched), else None."""

    def part(self, name: str) -> PartOutcome: ...


def part_record(session: WorkerParts, part: str, schema: str, *, cuda: bool = True
                ) -> JSONObject:
    """The result line of one part of the session's worker; RuntimeError naming why when the
    part gave none (or, with `cuda`, when torch sees no CUDA device, or no GPU is visible:
    then the worker is not launched at all)."""
    if session.no_gpu is not None:
        raise RuntimeError(session.no_gpu)
    if cuda:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device (CUDA build: "
                               f"{torch.version.cuda or 'none'})")
    outcome = session.part(part)
    record = find_record(outcome.output, schema)
    if outcome.status != "ok" or record is None:
        raise RuntimeError(f"part {outcome.status}: {outcome.message or 'no result line'}")
    return record


def from_worker(session: WorkerParts) -> gc.ComputeResult:
    """The compute part of the session's worker (harness.fixtures.worker.WorkerSession) as a
    ComputeResult; RuntimeError naming why when the part gave none (`part_record`)."""
    return compute_result(part_record(session, "compute", COMPUTE_SCHEMA))
