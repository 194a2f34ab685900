"""The all_reduce bench's timing against a model of ProcessGroupNCCL (pytorch/pytorch
torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp): with blocking wait on, `WorkNCCL::wait`
polls `isCompleted()` with a 1 ms sleep (10 ms in older torch), so the CPU clock around the
waits reads the poll period; from torch 2.6 `WorkNCCL::synchronize()` only makes the current
stream wait on the work's end event, so CUDA events around the launch loop read the GPU's own
time. And the data check, which must not hold the message more than once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.worker.collective_timing import (
    CPU_CLOCK,
    CUDA_EVENTS,
    CpuTimer,
    CudaEventTimer,
    LoopTimes,
    make_timer,
    stream_only_synchronize,
    timed_reps,
)

POLL_S = 0.001  # kSynchronizeBusyWaitMillis
OP_S = 20e-6  # what one small all_reduce takes on the GPU in this model


class Gpu:
    """The device's clock: NCCL's stream runs ops back to back; the current stream is where
    events are recorded (it reaches an event once every work it waits on has ended)."""

    def __init__(self) -> None:
        self.nccl_end = 0.0
        self.current = 0.0


class NcclWork:
    """A WorkNCCL of torch >= 2.6 under blocking wait."""

    def __init__(self, gpu: Gpu, launched_at: float) -> None:
        self.gpu = gpu
        gpu.nccl_end = max(gpu.nccl_end, launched_at) + OP_S
        self.end = gpu.nccl_end

    def synchronize(self) -> None:  # synchronizeStream: the current stream waits, not the CPU
        self.gpu.current = max(self.gpu.current, self.end)

    def wait(self, timeout=None) -> bool:  # blocking wait: poll isCompleted, sleep 1 ms
        self.synchronize()
        import time

        time.sleep(POLL_S)
        return True


class Event:
    def __init__(self, gpu: Gpu, enable_timing: bool = False) -> None:
        self.gpu, self.t = gpu, None

    def record(self) -> None:
        self.t = self.gpu.current

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: Event) -> float:
        return (end.t - self.t) * 1e3  # ms, as torch.cuda.Event.elapsed_time


class Cuda:
    def __init__(self, gpu: Gpu) -> None:
        self.Event = lambda enable_timing=False: Event(gpu, enable_timing)


def _loop(timer, gpu: Gpu, iters: int = 50, reps: int = 5) -> LoopTimes:
    return timed_reps(lambda: NcclWork(gpu, gpu.current), iters=iters // reps, reps=reps,
                      timer=timer, guard=lambda w: w.wait(60))


def test_cuda_events_read_the_collective_not_the_poll():
    gpu = Gpu()
    times = _loop(CudaEventTimer(Cuda(gpu)), gpu)
    assert times.timer == CUDA_EVENTS
    assert times.median_s == pytest.approx(OP_S)  # 20 us per all_reduce, as the GPU ran it
    assert times.spread_s == pytest.approx(0.0, abs=1e-12)


def test_the_cpu_clock_around_the_waits_reads_the_poll_period():
    """What the bench did before: 50 x 8-byte all_reduces cannot read below the poll."""
    gpu = Gpu()
    times = _loop(CpuTimer(), gpu)
    assert times.timer == CPU_CLOCK
    assert times.median_s >= POLL_S > 10 * OP_S


def test_cuda_events_only_where_synchronize_leaves_the_cpu_alone():
    class Torch:
        def __init__(self, version: str) -> None:
            self.__version__, self.cuda = version, Cuda(Gpu())

    assert stream_only_synchronize("2.6.0+cu124") and stream_only_synchronize("2.13.0")
    assert not stream_only_synchronize("2.5.1+cu121") and not stream_only_synchronize("2.4.0")
    assert make_timer("cuda", Torch("2.7.1")).kind == CUDA_EVENTS
    # before 2.6 synchronize() polls the CPU under blocking wait: the event would carry it
    assert make_timer("cuda", Torch("2.5.1")).kind == CPU_CLOCK
    assert make_timer("cpu", Torch("2.7.1")).kind == CPU_CLOCK


def test_the_spread_is_beside_the_median():
    times = LoopTimes((3e-5, 2e-5, 9e-5, 2.5e-5, 2.2e-5), CUDA_EVENTS)
    assert times.median_s == 2.5e-5 and times.spread_s == pytest.approx(7e-5)


def test_the_guard_bounds_a_hung_collective():
    class Hung(NcclWork):
        def wait(self, timeout=None) -> bool:
            raise RuntimeError("Operation timed out!")

    gpu = Gpu()
    with pytest.raises(RuntimeError, match="timed out"):
        timed_reps(lambda: Hung(gpu, 0.0), iters=2, reps=1, timer=CudaEventTimer(Cuda(gpu)),
                   guard=lambda w: w.wait(1))


# --- the data check holds the message once ---------------------------------------------------

DATA_CHECK = """
import resource, sys, torch
from harness.worker import bandwidth as tb
n = 1 << 26  # 256 MiB of float32
data = tb.fill_pattern(torch.empty(n, dtype=torch.float32), rank=0)
data.mul_(3)  # as if 2 ranks (1 + 2) had reduced patterns 1 and 2: the exact sum
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
wrong = tb.count_wrong(data, nranks=2)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(wrong, grown * 1024 / (n * 4))
"""


def test_the_data_check_counts_right_across_pieces():
    torch = pytest.importorskip("torch")
    from harness.worker import bandwidth as tb

    data = tb.fill_pattern(torch.empty(1000, dtype=torch.float32), rank=0, chunk=7)
    assert data[:14].tolist() == [float(i % 13 + 1) for i in range(14)]
    data.mul_(3)  # nranks 2: 1 + 2 times the base pattern
    assert tb.count_wrong(data, 2, chunk=7) == 0
    data[500] += 1
    data[999] -= 2
    assert tb.count_wrong(data, 2, chunk=7) == 2


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int64"])
@pytest.mark.parametrize(("count", "chunk"), [(1000, 7), (1000, 13), (1000, 1000), (50, 4096),
                                              (4099, 1024)])
def test_the_pattern_is_its_definition_at_every_offset(dtype, count, chunk):
    """The periodic pattern made once and sliced per piece is (r + 1) * ((i % 13) + 1) cast to
    the dtype at every element, and the exact sum of n ranks' patterns reads as 0 wrong."""
    torch = pytest.importorskip("torch")
    from harness.worker import bandwidth as tb

    kind = getattr(torch, dtype)
    for rank in (0, 2, 7):
        data = tb.fill_pattern(torch.zeros(count, dtype=kind), rank=rank, chunk=chunk)
        want = torch.tensor([(rank + 1) * (i % 13 + 1) for i in range(count)]).to(kind)
        assert torch.equal(data, want)
    total = sum(r + 1 for r in range(8))  # 8 ranks' patterns, summed exactly, then cast
    summed = torch.tensor([total * (i % 13 + 1) for i in range(count)]).to(kind)
    assert tb.count_wrong(summed, 8, chunk=chunk) == 0


def test_the_data_check_catches_a_shift_a_nan_and_a_zeroed_piece():
    """Each fault the check exists for turns it non-zero: a result one element off its place,
    a NaN, a piece left unreduced (zeros), and one piece reduced with the wrong scale."""
    torch = pytest.importorskip("torch")
    from harness.worker import bandwidth as tb

    good = tb.fill_pattern(torch.empty(1000, dtype=torch.float32), rank=0, chunk=64).mul_(3)
    assert tb.count_wrong(good, 2, chunk=64) == 0
    shifted = torch.roll(good, 1)
    assert tb.count_wrong(shifted, 2, chunk=64) == 1000
    nan = good.clone()
    nan[130] = float("nan")
    assert tb.count_wrong(nan, 2, chunk=64) == 1
    zeroed = good.clone()
    zeroed[64:128] = 0
    assert tb.count_wrong(zeroed, 2, chunk=64) == 64
    half = good.clone()
    half[960:] /= 3  # one rank's share only
    assert tb.count_wrong(half, 2, chunk=64) == 40
    bf16 = tb.fill_pattern(torch.empty(1000, dtype=torch.bfloat16), rank=0, chunk=64).mul_(3)
    bf16[5] += 8
    assert tb.count_wrong(bf16, 2, chunk=64) == 1


def test_the_data_check_needs_a_fraction_of_the_message_beside_it():
    pytest.importorskip("torch")
    out = subprocess.run([sys.executable, "-c", DATA_CHECK], capture_output=True, text=True,
                         timeout=120, check=True)
    wrong, grown = out.stdout.split()
    assert int(wrong) == 0
    # The old check built an index tensor, its cast, the expected sum and a mask over the whole
    # message: measured 2.26x a 256 MiB float32 message beside it; in pieces of 4 Mi elements
    # 0.19x (the piece, not the message: at 16 GiB it is ~0.3% of it).
    assert float(grown) < 0.5, f"the check grew the process by {float(grown):.2f}x the message"
