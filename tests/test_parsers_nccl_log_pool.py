"""A large NCCL log scanned by worker processes (harness.parsers.nccl_log_pool): the serial
reader's chunks, the serial summary, serial where it cannot be parallel, no worker left behind."""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.parsers import nccl_log, nccl_log_pool

DATA = Path(__file__).parent / "data" / "nccl_log"
CHUNK = 4096


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    """Every recorded sample line 6 times under rotating rank wrappers, some coloured, with
    many distinct `comm` lines (a large job's): ~100 chunks of CHUNK bytes."""
    lines = [line for f in sorted(DATA.glob("*.log")) if f.stat().st_size
             for line in f.read_bytes().splitlines() if line.strip() and len(line) < CHUNK // 2]
    out = []
    for rank in range(6):
        wrapper = (b"[1,%d]<stdout>:" % rank, b"%d: " % rank, b"")[rank % 3]
        out += [wrapper + line for line in lines]
        out += [b"h:1:2 [%d] NCCL INFO comm 0x%x rank %d nRanks 64 nNodes 8 localRanks 8"
                % (rank, i, rank) for i in range(200)]
        out += [b"\x1b[32mh:1:2 [0] NCCL INFO NET/OFI Selected provider is efa\x1b[0m"]
    path = tmp_path_factory.mktemp("pool") / "big.log"
    path.write_bytes(b"\n".join(out) + b"\nh:1:2 [0] NCCL INFO Using network Libfabric")
    return path


def _serial(path: Path) -> tuple[nccl_log._Scanner, list[int]]:
    scanner, starts = nccl_log._Scanner(), []
    feed, offset = scanner.feed, [0]

    def recording(chunk: bytes, end: int | None = None) -> None:
        starts.append(offset[0])
        offset[0] += len(chunk) if end is None else end
        feed(chunk, end)

    scanner.feed = recording  # type: ignore[method-assign]
    with path.open("rb") as fh:
        nccl_log._feed_readinto(scanner, fh, CHUNK)
    return scanner, [*starts, offset[0]]


def _parallel(path: Path, **kw) -> tuple[nccl_log._Scanner, bool]:
    scanner = nccl_log._Scanner()
    with path.open("rb") as fh:
        done = nccl_log_pool.scan_file(scanner, fh, CHUNK, min_bytes=0, workers=2, **kw)
        assert fh.tell() == (path.stat().st_size if done else 0)
    return scanner, done


def test_the_workers_chunks_are_the_serial_readers(big_log):
    _, starts = _serial(big_log)
    with big_log.open("rb") as fh:
        assert nccl_log_pool.chunk_cuts(fh.fileno(), 0, big_log.stat().st_size, CHUNK) == starts
    assert len(starts) > 50


@pytest.mark.parametrize("seen_cap", [nccl_log.SEEN_CAP, 50])  # 50: the memory is reset often
def test_the_parallel_summary_is_the_serial_one(big_log, monkeypatch, seen_cap):
    monkeypatch.setattr(nccl_log, "SEEN_CAP", seen_cap)
    scanner, done = _parallel(big_log)
    assert done and not multiprocessing.active_children()
    expected = _serial(big_log)[0].summary()
    assert scanner.summary() == expected
    assert expected.nranks == 64 and expected.network


def test_a_line_longer_than_a_chunk_is_left_to_the_serial_reader(tmp_path):
    log = tmp_path / "long.log"
    log.write_bytes(b"x NCCL INFO Using network IB\n" * 300 + b"y" * (3 * CHUNK) + b"\n" * 10)
    assert not _parallel(log)[1]
    scanner = nccl_log._Scanner()
    with log.open("rb") as fh:
        assert not nccl_log_pool.scan_file(scanner, fh, CHUNK, min_bytes=0, workers=2)
        assert not nccl_log_pool.scan_file(scanner, fh, CHUNK, min_bytes=1 << 40, workers=2)
    assert not nccl_log_pool.scan_file(scanner, io.BytesIO(log.read_bytes()), CHUNK,
                                       min_bytes=0, workers=2)  # not a file
    assert scanner.commands is None  # nothing was read


def test_a_broken_pool_leaves_the_rest_to_this_process(big_log, monkeypatch):
    monkeypatch.setattr(nccl_log_pool, "_worker_init", lambda *a: os._exit(1))
    scanner, done = _parallel(big_log)
    assert done and not multiprocessing.active_children()
    assert scanner.summary() == _serial(big_log)[0].summary()


def test_an_interrupted_scan_leaves_no_worker(big_log, monkeypatch):
    calls = []

    def interrupted(self, scan):
        calls.append(scan)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(nccl_log._Scanner, "apply", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _parallel(big_log)
    assert not multiprocessing.active_children()


def test_the_workers_die_with_a_killed_parent(big_log, tmp_path):
    """SIGTERM's default action ends the parent at once: the kernel kills its workers
    (PR_SET_PDEATHSIG), so that none keeps scanning."""
    pids = tmp_path / "pids"
    code = textwrap.dedent(f"""
        import multiprocessing, os, time
        from harness.parsers import nccl_log, nccl_log_pool
        def stuck(self, scan):
            open({str(pids)!r}, "w").write(" ".join(
                str(p.pid) for p in multiprocessing.active_children()))
            time.sleep(60)
        nccl_log._Scanner.apply = stuck
        with open({str(big_log)!r}, "rb") as fh:
            nccl_log_pool.scan_file(nccl_log._Scanner(), fh, {CHUNK}, min_bytes=0, workers=2)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parent.parent)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not (pids.exists() and pids.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        workers = [int(p) for p in pids.read_text().split()]
        assert workers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in workers)
    finally:
        proc.kill()
        proc.wait()
        for pid in workers:  # a failed run leaves nothing behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("cpus", "parallel"), [(2, False), (nccl_log_pool.MIN_CPUS, True)])
def test_the_pool_needs_min_cpus(big_log, monkeypatch, cpus, parallel):
    monkeypatch.setattr(nccl_log_pool.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    with big_log.open("rb") as fh:
        assert nccl_log_pool.scan_file(nccl_log._Scanner(), fh, CHUNK, min_bytes=0) is parallel


def test_another_thread_keeps_the_scan_serial(big_log):
    """A fork copies only the calling thread (a lock another holds would stay held)."""
    import threading

    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not _parallel(big_log)[1]
    finally:
        stop.set()
        other.join()
    assert _parallel(big_log)[1]
