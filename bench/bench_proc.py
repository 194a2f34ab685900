"""harness.base.proc against subprocess.run, the cost of reading the process tree, and the time from
a signal to `preflight run`'s exit.

1. `proc.run(["true"])` vs `subprocess.run(["true"])`, paired, 50 rounds: medians and ratio
   (the loop, the tag, the /proc scan when the tool exits).
2. `proctree.snapshot()` with the processes there are now, then with 1000 extra sleepers.
3. SIGTERM to `preflight run` while a check's tool hangs (ignoring SIGTERM, with a detached
   child holding its stdout): seconds from the signal to the exit, 5 runs: median and max; then
   the same with a check session that ignores SIGTERM too (the cleanup's SIGTERM grace, then
   SIGKILL: the worst case).
Run: `nice -n 10 .venv/bin/python bench/bench_proc.py` from the repository root.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.base import proc, proctree


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_run(rounds: int = 50) -> None:
    ours, plain = [], []
    for _ in range(rounds):
        ours.append(_timed(lambda: proc.run(["true"], timeout_s=30)))
        plain.append(_timed(lambda: subprocess.run(["true"], capture_output=True, timeout=30)))
    m_ours, m_plain = statistics.median(ours), statistics.median(plain)
    print(f"proc.run(true): median {m_ours * 1e3:.2f} ms; subprocess.run: {m_plain * 1e3:.2f} ms; "
          f"ratio {m_ours / m_plain:.2f}")


def bench_snapshot(extra: int = 1000) -> None:
    def median_scan() -> tuple[float, int]:
        times = [_timed(proctree.snapshot) for _ in range(20)]
        return statistics.median(times), len(proctree.snapshot())

    t, n = median_scan()
    print(f"snapshot of {n} processes: median {t * 1e3:.1f} ms")
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(extra)]
    try:
        t, n = median_scan()
        print(f"snapshot of {n} processes: median {t * 1e3:.1f} ms")
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()


SUITE = '''
import os, signal
from harness.base import proc
from harness.checking import check

@check("PF-B-001", title="a tool hangs", why="w", remedy="r")
def test_hangs():
    if os.environ.get("IGNORE_TERM"):  # the worst case: the check session ignores SIGTERM
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    proc.run(["hangtool"], timeout_s=600)
'''
TOOL = """#!/bin/bash
trap '' TERM
setsid bash -c 'trap "" TERM; sleep 300; :' &
echo ready > "$READY"
sleep 300 & wait; wait
"""


def bench_signal(runs: int = 5, ignore_term: bool = False) -> None:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "suite").mkdir()
        (d / "suite" / "test_b.py").write_text(SUITE)
        (d / "bin").mkdir()
        (d / "bin" / "hangtool").write_text(TOOL)
        (d / "bin" / "hangtool").chmod(0o755)
        env = {**os.environ, "PATH": f"{d / 'bin'}:{os.environ['PATH']}", "READY": str(d / "ready"),
               "PREFLIGHT_SUITE": str(d / "suite"), "AWS_EC2_METADATA_DISABLED": "true",
               "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
               **({"IGNORE_TERM": "1"} if ignore_term else {})}
        for _ in range(runs):
            (d / "ready").unlink(missing_ok=True)
            p = subprocess.Popen([sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                                  "--report-dir", str(d / "r")], env=env, cwd=d,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 start_new_session=True)
            while not (d / "ready").exists():
                time.sleep(0.05)
            start = time.monotonic()
            p.send_signal(signal.SIGTERM)
            rc = p.wait(60)
            times.append(time.monotonic() - start)
            assert rc == 143, rc
    what = "a check session ignoring SIGTERM" if ignore_term else "the check session handling it"
    print(f"SIGTERM -> exit 143 of `preflight run`, {what} ({runs} runs): median "
          f"{statistics.median(times):.2f} s, max {max(times):.2f} s")


if __name__ == "__main__":
    bench_run()
    bench_snapshot()
    bench_signal()
    bench_signal(ignore_term=True)
