"""How the all_reduce bench times its launch loop: on CUDA with events around the loop, on the
device's own clock; on gloo with the CPU clock. `wait(timeout)` after the end event is the hang
guard only, never the timer.

Why not the CPU clock around `wait` on NCCL (pytorch/pytorch
torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): with blocking wait on (the worker turns it
on, harness.worker.group) or a timeout given, `WorkNCCL::wait` polls `isCompleted()` with a
sleep of `kSynchronizeBusyWaitMillis` (1 ms; 10 ms in older releases), so a loop of 8-byte
all_reduces timed on the CPU reads the poll period, not the collective. From torch 2.6
`WorkNCCL::synchronize()` only makes the current stream wait on the work's end event
(`synchronizeStream`: no CPU wait), so an event recorded on the current stream after it is
stamped when the last collective ends on the GPU. Before 2.6 `synchronize()` is
`synchronizeInternal(kNoTimeout)`, which also polls the CPU under blocking wait: there the
event would carry the poll too, and the CPU clock is used with its resolution said.

Each size is timed in `reps` repetitions of the loop: the figure is the median repetition's
per-iteration time, the spread (max - min) is reported beside it."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import ModuleType
from typing import Any, Protocol

__all__ = [
    "CPU_CLOCK",
    "CUDA_EVENTS",
    "CpuTimer",
    "CudaEventTimer",
    "LoopTimer",
    "LoopTimes",
    "make_timer",
    "stream_only_synchronize",
    "timed_reps",
]

CUDA_EVENTS, CPU_CLOCK = "cuda-events", "cpu-clock"


class Work(Protocol):
    """What the loop needs of a `dist.Work`."""

    def wait(self, timeout: timedelta = ...) -> bool: ...
    def synchronize(self) -> None: ...


class LoopTimer(Protocol):
    """Times one repetition of the launch loop."""

    kind: str

    def start(self) -> None: ...
    def stop(self, works: Sequence[Work]) -> None:
        """After the launches, before the hang guard's wait."""
    def elapsed_s(self) -> float:
        """After the hang guard's wait: the repetition's seconds."""


class CpuTimer:
    """The CPU clock around the launches and their waits (gloo: its wait blocks on a condition
    variable, not a poll)."""

    kind = CPU_CLOCK

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self._clock()

    def stop(self, works: Sequence[Work]) -> None:
        """Nothing to do: the loop ends when the guard has waited for every work."""

    def elapsed_s(self) -> float:
        return self._clock() - self._t0


class CudaEventTimer:
    """A CUDA event pair on the current stream: start before the first launch, end after the
    stream was made to wait on the last work (`synchronize`: no CPU wait from torch 2.6)."""

    kind = CUDA_EVENTS

    def __init__(self, cuda: Any) -> None:
        self._cuda = cuda  # torch.cuda (a stand-in in tests)
        self._start = self._end = None

    def start(self) -> None:
        self._start = self._cuda.Event(enable_timing=True)
        self._end = self._cuda.Event(enable_timing=True)
        self._start.record()

    def stop(self, works: Sequence[Work]) -> None:
        for work in works:  # NCCL runs them in order on its stream: the last ends last
            work.synchronize()
        self._end.record()

    def elapsed_s(self) -> float:
        self._end.synchronize()  # done already: the guard waited for the last work
        return float(self._start.elapsed_time(self._end)) / 1e3


def stream_only_synchronize(torch_version: str) -> bool:
    """Whether `WorkNCCL::synchronize()` leaves the CPU alone (torch >= 2.6; module doc)."""
    parts = []
    for piece in torch_version.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts) >= (2, 6)


def make_timer(device_type: str, torch: ModuleType) -> LoopTimer:
    """CUDA events where they time the collective itself, else the CPU clock."""
    if device_type == "cuda" and stream_only_synchronize(str(torch.__version__)):
        return CudaEventTimer(torch.cuda)
    return CpuTimer()


@dataclass(frozen=True, slots=True)
class LoopTimes:
    """One size's repetitions: seconds per iteration in each, and how they were timed."""

    per_iter_s: tuple[float, ...]
    timer: str

    @property
    def median_s(self) -> float:
        return statistics.median(self.per_iter_s)

    @property
    def spread_s(self) -> float:
        return max(self.per_iter_s) - min(self.per_iter_s)


def timed_reps(launch: Callable[[], Work], *, iters: int, reps: int, timer: LoopTimer,
               guard: Callable[[Work], None]) -> LoopTimes:
    """`reps` repetitions of `iters` back-to-back launches: the timer starts, every launch is
    issued, the timer stops (CUDA: the end event), then `guard` waits for every work within its
    timeout (the hang guard; a hung peer raises there) and the repetition is read."""
    out = []
    for _ in range(max(reps, 1)):
        timer.start()
        works = [launch() for _ in range(max(iters, 1))]
        timer.stop(works)
        for work in works:
            guard(work)
        out.append(timer.elapsed_s() / max(iters, 1))
    return LoopTimes(tuple(out), timer.kind)
