"""all_reduce bandwidth over torch.distributed (NCCL on GPUs, gloo on CPU), measured the way
nccl-tests measures it, with a check of the reduced values. A library call inside an
initialised process group: the `bandwidth` part of the distributed worker (harness.worker),
and the cluster step's benches."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.worker.collective_timing import LoopTimes, make_timer, timed_reps

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch
    import torch.distributed as dist

    from harness.base.proc_result import ProcResult

__all__ = [
    "DEFAULT_SIZES",
    "BenchRow",
    "TorchBenchResult",
    "allreduce_bench",
    "bus_factor",
    "count_wrong",
    "fill_pattern",
    "parse_size",
    "result_from_output",
    "run_under_torchrun",
    "wait_bounded",
]

MIB = 1024**2
#: Default sweep: 1 MiB to 64 MiB by 4x (small enough for a CPU, large enough to leave latency).
DEFAULT_SIZES: tuple[int, ...] = (MIB, 4 * MIB, 16 * MIB, 64 * MIB)
#: Marker of the one result line the torchrun entry point prints on rank 0.
RESULT_KEY = "torch_bench"
#: Repetitions of each size's timed loop (the spread is reported beside the median).
REPS = 5


def bus_factor(nranks: int) -> float:
    """all_reduce busbw / algbw, as nccl-tests defines it: 2(n-1)/n (0 for one rank)."""
    return 2.0 * (nranks - 1) / nranks if nranks > 0 else 0.0


@dataclass(frozen=True)
class BenchRow:
    """One message size: mean time of one all_reduce across ranks, and its bandwidths (GB = 1e9)."""

    size_bytes: int
    count: int
    time_us: float
    algbw_gb_s: float
    busbw_gb_s: float
    wrong: int | None = None
    """Elements whose reduced value differed from the expected sum, summed over ranks; None when
    the data was not checked."""
    time_us_spread: float | None = None
    """max - min of the repetitions' per-iteration times (`time_us` is their median)."""
    reps: int = 1
    timer: str = ""
    """`cuda-events` or `cpu-clock` (harness.worker.collective_timing)."""


@dataclass(frozen=True)
class TorchBenchResult:
    """A size sweep of all_reduce over one process group."""

    backend: str
    nranks: int
    dtype: str
    rows: tuple[BenchRow, ...]
    data_ok: bool
    """Every checked reduction was exact on every rank (True when not checked and no error)."""
    errors: tuple[str, ...]
    """What went wrong (a timed-out or failed collective); the sweep stops at the first one."""
    checked: bool = True
    warmup: int = 0
    iters: int = 0
    duration_s: float = 0.0

    def at_size(self, size_bytes: int) -> BenchRow | None:
        """The row measured at exactly `size_bytes`, or None."""
        return next((r for r in self.rows if r.size_bytes == size_bytes), None)

    @property
    def largest(self) -> BenchRow | None:
        return max(self.rows, key=lambda r: r.size_bytes, default=None)

    @property
    def ok(self) -> bool:
        return self.data_ok and not self.errors and bool(self.rows)

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: JSONMapping) -> TorchBenchResult:
        fields = dict(data)
        fields["rows"] = tuple(BenchRow(**r) for r in fields.get("rows", ()))
        fields["errors"] = tuple(fields.get("errors", ()))
        return cls(**fields)


def _dtype(name: str) -> torch.dtype:
    import torch

    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"dtype {name!r} is not a torch dtype (float32, bfloat16, ...)")
    return value


#: Elements per piece of the data check: it fills the input and compares the result piece by
#: piece, so it holds the message once (plus a piece), not 4x (an index tensor, its cast, the
#: expected sum and the comparison's mask at 16 GiB came near 64 GiB per GPU).
CHECK_CHUNK = 1 << 22


def _pieces(count: int, chunk: int) -> list[tuple[int, int]]:
    return [(i, min(i + chunk, count)) for i in range(0, count, chunk)]


#: The pattern's period: (i % PERIOD) + 1 at element i.
PERIOD = 13


def _periodic(count: int, chunk: int, scale: int, dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """scale * ((i % 13) + 1) for i in [0, piece + 12), piece = min(count, chunk): the pattern of
    the piece at `start` is its slice from start % 13 (`_piece_of`). Small integers, so float
    sums are exact, and position-dependent, so a chunk reduced at the wrong offset shows up.
    Made once per fill or check from the 13 values (exact integers, then cast), repeated: an
    index tensor, its remainder and cast per piece cost ~20x more CPU (bench_worker.py)."""
    import torch

    tile = torch.arange(1, PERIOD + 1, device=device).mul_(scale).to(dtype)
    return tile.repeat(-(-(min(count, chunk) + PERIOD - 1) // PERIOD))


def _piece_of(pattern: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    offset = start % PERIOD
    return pattern[offset:offset + stop - start]


def fill_pattern(data: torch.Tensor, rank: int, chunk: int = CHECK_CHUNK) -> torch.Tensor:
    """Rank r's input, written into `data` piece by piece: (r + 1) * ((i % 13) + 1)."""
    pattern = _periodic(data.numel(), chunk, rank + 1, data.dtype, data.device)
    for start, stop in _pieces(data.numel(), chunk):
        data[start:stop] = _piece_of(pattern, start, stop)
    return data


def count_wrong(data: torch.Tensor, nranks: int, chunk: int = CHECK_CHUNK) -> int:
    """Elements of the reduced `data` that differ from the exact sum of every rank's pattern,
    n(n+1)/2 * ((i % 13) + 1), compared piece by piece (a piece that is exactly equal is not
    counted element by element). 16-bit floats round the larger sums: they are allowed their
    precision."""
    import torch

    exact = data.dtype in (torch.float32, torch.float64, torch.int32, torch.int64)
    pattern = _periodic(data.numel(), chunk, nranks * (nranks + 1) // 2, data.dtype,
                        data.device)
    bad = 0
    for start, stop in _pieces(data.numel(), chunk):
        expected = _piece_of(pattern, start, stop)
        got = data[start:stop]
        if exact and torch.equal(got, expected):
            continue
        mask = got != expected if exact else ~torch.isclose(got, expected, rtol=1e-2, atol=0.0)
        bad += int(mask.sum())
    return bad


@dataclass
class _Waiter:
    """Waits on async works against one deadline, so a hung peer becomes an error."""

    timeout_s: float
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.timeout_s

    def wait(self, work: dist.Work, what: str) -> None:
        from datetime import timedelta

        left = max(self.deadline - time.monotonic(), 0.001)
        try:
            ok = work.wait(timeout=timedelta(seconds=left))
        except Exception as exc:
            detail = f"{type(exc).__name__}: {str(exc).strip()[:400]}"
            raise _CollectiveError(f"{what}: {detail}") from exc
        if ok is False:
            raise _CollectiveError(f"{what}: did not complete within {self.timeout_s:g} s")

    def wait_for(self, what: str, work: dist.Work) -> None:
        """`wait` with the description first (a partial of it is the timing loop's guard)."""
        self.wait(work, what)


class _CollectiveError(RuntimeError):
    pass


def wait_bounded(work: dist.Work, timeout_s: float, what: str) -> None:
    """Wait for one collective at most `timeout_s`; RuntimeError naming `what` otherwise."""
    _Waiter(timeout_s).wait(work, what)


def allreduce_bench(
    *,
    group: dist.ProcessGroup | None = None,
    sizes_bytes: Sequence[int] = DEFAULT_SIZES,
    warmup: int = 2,
    iters: int = 5,
    check_data: bool = True,
    timeout_s: float = 60.0,
    device: torch.device | str | None = None,
    corrupt_rank: int | None = None,
    dtype: str = "float32",
) -> TorchBenchResult:
    """Sweep all_reduce (sum) over `group` (default: the world) at each size; every rank of the
    group must call it with the same arguments.

    Per size: warm-up, then `iters` timed all_reduces launched back to back in up to REPS
    repetitions (nccl-tests' loop), timed with CUDA events on GPUs and the CPU clock on gloo
    (harness.worker.collective_timing); time = the median repetition of the per-iteration time
    averaged over ranks (nccl-tests' default `-a 1`), the spread beside it; algbw = bytes /
    time; busbw = algbw * 2(n-1)/n. With `check_data`, one more
    all_reduce of a known pattern is compared with the exact sum on every rank; `corrupt_rank`
    (a test hook; a rank within `group`) adds 1 to one element of that rank's input so the
    check must catch it.
    Every wait is bounded by `timeout_s` per phase: a hung or dead peer becomes an error in the
    result, never a hang. Errors stop the sweep; the group should not be used afterwards.
    """
    import torch
    import torch.distributed as dist

    start = time.monotonic()
    backend = str(dist.get_backend(group))
    nranks = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("allreduce_bench: this process is not a member of `group`")
    torch_dtype = _dtype(dtype)
    if device is None:
        device = (torch.device("cuda", torch.cuda.current_device()) if backend == "nccl"
                  else torch.device("cpu"))
    device = torch.device(device)
    elem = torch.empty((), dtype=torch_dtype).element_size()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    rows: list[BenchRow] = []
    errors: list[str] = []
    data_ok = True
    for size in sizes_bytes:
        count = max(int(size) // elem, 1)
        try:
            tensor = torch.zeros(count, dtype=torch_dtype, device=device)
            waiter = _Waiter(timeout_s)
            for _ in range(warmup):
                waiter.wait(dist.all_reduce(tensor, group=group, async_op=True),
                            f"warm-up all_reduce of {count * elem} bytes")
            sync()
            waiter = _Waiter(timeout_s)
            what = f"timed all_reduce of {count * elem} bytes"
            reps = min(REPS, max(iters, 1))
            times = timed_reps(
                functools.partial(dist.all_reduce, tensor, group=group, async_op=True),
                iters=max(iters // reps, 1), reps=reps, timer=make_timer(device.type, torch),
                guard=functools.partial(_Waiter.wait_for, waiter, what))
            wrong = None
            if check_data:  # in the timed loop's tensor: no second message, no fresh pages
                wrong = _check_once(group, rank, nranks, tensor, corrupt=corrupt_rank == rank,
                                    waiter=_Waiter(timeout_s))
            del tensor
            # One collective for every repetition's time and the total of wrong elements.
            stats = torch.tensor([*times.per_iter_s, float(wrong or 0)], dtype=torch.float64,
                                 device=device)
            _Waiter(timeout_s).wait(dist.all_reduce(stats, group=group, async_op=True),
                                    "all_reduce of the timings")
            across = LoopTimes(tuple(float(t) / nranks for t in stats[:-1].tolist()),
                               times.timer)
            mean_s = across.median_s
            total_wrong = None if wrong is None else int(stats[-1])
        except _CollectiveError as exc:
            errors.append(f"rank {rank}: {exc}")
            data_ok = False
            break
        except torch.OutOfMemoryError as exc:
            errors.append(f"rank {rank}: out of memory at {size} bytes: {str(exc)[:200]}")
            data_ok = False
            break
        if total_wrong:
            data_ok = False
        algbw = count * elem / mean_s / 1e9 if mean_s > 0 else 0.0
        rows.append(BenchRow(
            size_bytes=count * elem, count=count, time_us=mean_s * 1e6, algbw_gb_s=algbw,
            busbw_gb_s=algbw * bus_factor(nranks), wrong=total_wrong,
            time_us_spread=across.spread_s * 1e6, reps=len(across.per_iter_s),
            timer=across.timer,
        ))
    return TorchBenchResult(
        backend=backend, nranks=nranks, dtype=dtype, rows=tuple(rows), data_ok=data_ok,
        errors=tuple(errors), checked=check_data, warmup=warmup, iters=iters,
        duration_s=time.monotonic() - start,
    )


def _check_once(
    group: dist.ProcessGroup | None, rank: int, nranks: int, data: torch.Tensor, *,
    corrupt: bool, waiter: _Waiter,
) -> int:
    """Write this rank's pattern into `data`, reduce it once and count the elements that differ
    from the exact sum."""
    import torch.distributed as dist

    fill_pattern(data, rank)
    if corrupt:
        data[data.numel() // 2] += 1
    waiter.wait(dist.all_reduce(data, group=group, async_op=True),
                f"data-check all_reduce of {data.numel() * data.element_size()} bytes")
    return count_wrong(data, nranks)


def parse_size(text: str) -> int:
    """`1G`, `256M`, `64K`, `8` -> bytes (binary multiples, as nccl-tests' -b/-e)."""
    text = text.strip().upper().removesuffix("B")
    units = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def result_from_output(text: str) -> TorchBenchResult | None:
    """The result line printed by the torchrun entry point (the last one), or None."""
    marker = '{"' + RESULT_KEY + '"'
    for line in reversed(text.splitlines()):
        at = line.find(marker)  # after a launcher prefix (`[rank0]: `), if any
        if at < 0:
            continue
        try:
            found, _ = json.JSONDecoder().raw_decode(line, at)
            return TorchBenchResult.from_dict(found[RESULT_KEY])
        except (ValueError, TypeError, KeyError):
            continue
    return None


def run_under_torchrun(
    nproc: int, sizes_bytes: Sequence[int], *, timeout_s: float, env: Mapping[str, str],
    warmup: int = 2, iters: int = 5, backend: str = "auto", corrupt_rank: int | None = None,
) -> tuple[ProcResult | None, TorchBenchResult | None]:
    """The sweep alone, as the `bandwidth` part of one worker launch (harness.worker) of
    `nproc` local ranks; (the part's ProcResult, None when it has none; the result or None).
    The part gets `timeout_s`, each collective a third of it."""
    from harness.worker.launch import PartSpec, run_worker

    device = {"nccl": "cuda", "gloo": "cpu"}.get(backend, "auto")
    extra = [f"--device={device}", f"--pg-timeout-s={max(timeout_s / 3, 1.0):g}",
             "--bw-sizes=" + ",".join(str(s) for s in sizes_bytes), f"--bw-warmup={warmup}",
             f"--bw-iters={iters}"]
    if corrupt_rank is not None:
        extra.append(f"--bw-corrupt-rank={corrupt_rank}")
    part = run_worker(nproc, [PartSpec("bandwidth", timeout_s)], env=env,
                      extra=extra).parts["bandwidth"]
    return part.proc, result_from_output(part.output)
