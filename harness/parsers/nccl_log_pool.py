"""A large NCCL log file scanned by worker processes: wall time, not CPU time (the same work,
spread over the cores; the scan is C code whose cost is one Python object per candidate line, so
one process cannot go faster: bench/README.md).

Each worker scans whole chunks, the very chunks the serial reader makes (a chunk ends at the last
line boundary before each multiple of the chunk size, as harness.parsers.nccl_log._feed_readinto
cuts them), and returns their ChunkScan; the parent interprets the scans in file order, so the
summary is the serial one. scan_file returns False (the caller reads serially) for: an input
under PARALLEL_MIN_BYTES, fewer than MIN_CPUS usable CPUs, a stream that is not a regular file,
no `fork` start method or no prctl (not Linux), other threads in this process (a fork copies
only the calling one: a lock another holds would stay held in the workers), or a chunk without
a line boundary (a line longer than a chunk: the serial reader's own handling). A pool that
cannot start or breaks leaves the rest to this process.

No worker outlives the parse: each asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG: a parent killed by SIGTERM or SIGKILL takes them along), ignores SIGINT (the
parent handles Ctrl-C), and the pool is shut down on the way out, whatever ends the parse.
"""

from __future__ import annotations

import itertools
import os
import signal
import stat
import threading
from collections import deque
from typing import IO, TYPE_CHECKING, Protocol

from harness.parsers.nccl_log_chunk import HEAD_BYTES, ChunkScan, scan_chunk
from harness.parsers.nccl_log_payloads import PayloadFacts

if TYPE_CHECKING:
    from concurrent.futures import Future
    from multiprocessing.context import BaseContext

__all__ = ["MAX_WORKERS", "MIN_CPUS", "PARALLEL_MIN_BYTES", "chunk_cuts", "scan_file"]

#: Below this the serial scan is as fast (a pool costs ~0.1 s to start and its imports).
PARALLEL_MIN_BYTES = 64 << 20
MAX_WORKERS = 8
#: Fewer usable CPUs: serial. On a 2-core VM (load ~6) two workers and the parent were slower
#: than one process, by wall and CPU time (bench/README.md).
MIN_CPUS = 4
#: How far back from a chunk's end a line boundary is looked for first.
_TAIL_BYTES = 64 << 10
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_fd = -1
_docker = False


class _Scanner(Protocol):
    """What is scanned into: harness.parsers.nccl_log._Scanner."""

    commands: list[str] | None
    docker: bool
    saw_nccl: bool
    facts: PayloadFacts

    def head(self, chunk: bytes, end: int) -> None: ...

    def apply(self, scan: ChunkScan) -> None: ...


def chunk_cuts(fd: int, start: int, stop: int, chunk_bytes: int) -> list[int] | None:
    """The offsets where the serial reader's chunks start, and `stop`; None when a chunk has no
    line boundary (then only the serial reader reproduces its handling)."""
    cuts = [start]
    read_end = start
    while read_end < stop:
        read_end = min(read_end + chunk_bytes, stop)
        low = cuts[-1]
        window = max(low, read_end - _TAIL_BYTES)
        newline = os.pread(fd, read_end - window, window).rfind(b"\n")
        if newline < 0 and window > low:
            window = low
            newline = os.pread(fd, read_end - low, low).rfind(b"\n")
        if newline >= 0:
            cuts.append(window + newline + 1)
        elif read_end < stop:
            return None
    if cuts[-1] < stop:
        cuts.append(stop)  # the last line, without its newline
    return cuts


def scan_file(scanner: _Scanner, fh: IO[bytes], chunk_bytes: int, *,
              min_bytes: int | None = None, workers: int | None = None) -> bool:
    """Scan the rest of `fh` into `scanner` with `workers` processes (default: the usable CPUs,
    up to MAX_WORKERS, where there are MIN_CPUS) when it holds `min_bytes` or more (default
    PARALLEL_MIN_BYTES); False when it is not done (see above) and `fh` is untouched."""
    min_bytes = PARALLEL_MIN_BYTES if min_bytes is None else min_bytes
    try:
        fd = fh.fileno()
        start, stop = fh.tell(), os.fstat(fd).st_size
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):
        return False
    cpus = len(os.sched_getaffinity(0))
    count = (min(MAX_WORKERS, cpus) if cpus >= MIN_CPUS else 1) if workers is None else workers
    if not regular or stop - start < min_bytes or count < 2 or _prctl() is None:
        return False
    if threading.active_count() > 1:  # fork copies one thread: another's locks stay held
        return False
    import multiprocessing

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:
        return False
    cuts = chunk_cuts(fd, start, stop, chunk_bytes)
    if cuts is None:
        return False
    if scanner.commands is None:
        head = os.pread(fd, min(cuts[1] - start, HEAD_BYTES), start)
        scanner.head(head, len(head))
    ranges = list(itertools.pairwise(cuts))
    done = _scan_in_pool(scanner, context, fd, ranges, count)
    for begin, end in ranges[done:]:  # no pool, or a broken one: the rest here
        scanner.apply(_scan_here(scanner, fd, begin, end))
    fh.seek(0, os.SEEK_END)
    return True


def _scan_in_pool(scanner: _Scanner, context: BaseContext, fd: int, ranges: list[tuple[int, int]],
                  count: int) -> int:
    """Scan `ranges` in `count` workers, at most 2 * count scans held at once (memory stays
    flat); returns how many were applied (all, unless the pool failed)."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    applied = 0
    try:
        pool = ProcessPoolExecutor(count, mp_context=context, initializer=_worker_init,
                                   initargs=(fd, scanner.docker, os.getpid()))
    except OSError:
        return 0
    try:
        pending: deque[Future[ChunkScan]] = deque()
        queued = iter(ranges)
        for r in queued:
            pending.append(pool.submit(_scan_range, r))
            if len(pending) >= 2 * count:
                break
        while pending:
            scan = pending.popleft().result()
            for r in queued:
                pending.append(pool.submit(_scan_range, r))
                break
            scanner.apply(scan)
            applied += 1
    except (BrokenProcessPool, OSError):
        pass
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return applied


def _scan_here(scanner: _Scanner, fd: int, begin: int, end: int) -> ChunkScan:
    data = os.pread(fd, end - begin, begin)
    return scan_chunk(data, len(data), scanner.docker,
                      not scanner.saw_nccl and not scanner.facts.recognised)


def _prctl() -> object | None:
    """libc's prctl, None where there is none (not Linux)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):
        return None


def _worker_init(fd: int, docker: bool, parent: int) -> None:
    global _fd, _docker
    prctl = _prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
        os._exit(1)  # no guarantee to die with the parent (or it is already gone): no scan
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _fd, _docker = fd, docker


def _scan_range(span: tuple[int, int]) -> ChunkScan:
    begin, end = span
    data = os.pread(_fd, end - begin, begin)
    return scan_chunk(data, len(data), _docker, None, keep_chunk=False)
