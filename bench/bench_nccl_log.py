"""Benchmark: parse a ~200 MB synthetic NCCL log and compare with `grep -c NCCL` on the same file.

The log is the recorded lines of tests/data/nccl_log/ repeated under rotating rank prefixes
(Open MPI, srun, none). Reports medians of N runs (MB/s), the parser/grep throughput ratio by wall
time and by CPU time (the goal is >= 0.25), and the parser's peak RSS for two file sizes (it must
not grow with the file).

    /work/venv/bin/python bench/bench_nccl_log.py [--mb 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import proc  # noqa: E402

DATA = ROOT / "tests" / "data" / "nccl_log"
WRAPPERS = ("[1,{r}]<stdout>:", "{r}: ", "")


def write_log(path: Path, size_mb: float) -> int:
    """Write the synthetic log; returns its size in bytes."""
    lines = [
        line
        for f in sorted(DATA.glob("*.log"))
        if f.stat().st_size
        for line in f.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    target = int(size_mb * 1e6)
    written = 0
    rank = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < target:
            rank = (rank + 1) % 64
            block = "".join(
                WRAPPERS[(rank + i) % len(WRAPPERS)].format(r=rank) + line + "\n"
                for i, line in enumerate(lines)
            )
            fh.write(block)
            written += len(block.encode())
    return path.stat().st_size


_CHILD = """
import resource, sys, time, json
sys.path.insert(0, {root!r})
from harness.parsers.nccl_log import parse_nccl_log_stream
t, c = time.perf_counter(), time.process_time()
with open({path!r}, "rb") as fh:
    s = parse_nccl_log_stream(fh)
print(json.dumps({{"s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "net": s.num_net_channels, "network": s.network}}))
"""


def parse_once(path: Path) -> dict:
    """Parse in a fresh interpreter (so that peak RSS is this file's alone)."""
    code = _CHILD.format(root=str(ROOT), path=str(path))
    res = proc.run([sys.executable, "-c", code], timeout_s=600)
    if not res.ok:
        raise SystemExit(f"parser run failed: {res.describe()}\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def grep_once(path: Path) -> tuple[float, float]:
    """(wall s, CPU s) of `grep -c NCCL` on the file."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run(["grep", "-c", "NCCL", str(path)], capture_output=True, check=False,
                         timeout=600)
    elapsed = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode not in (0, 1):
        raise SystemExit(f"grep failed: {res.stderr!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="synthetic log size, MB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-nccl-log-") as tmp:
        big = Path(tmp) / "big.log"
        small = Path(tmp) / "small.log"
        size = write_log(big, args.mb)
        write_log(small, args.mb / 8)
        grep_s, grep_cpu, parse_s, parse_cpu, rss = [], [], [], [], []
        for _ in range(args.runs):  # interleaved, so both see the same machine load
            wall, cpu = grep_once(big)
            grep_s.append(wall)
            grep_cpu.append(cpu)
            result = parse_once(big)
            parse_s.append(result["s"])
            parse_cpu.append(result["cpu_s"])
            rss.append(result["rss_mb"])
        small_rss = parse_once(small)["rss_mb"]
    mb = size / 1e6
    grep_mb_s = mb / statistics.median(grep_s)
    parse_mb_s = mb / statistics.median(parse_s)
    report = {
        "file_mb": round(mb, 1),
        "grep_c_mb_s": round(grep_mb_s, 1),
        "parser_mb_s": round(parse_mb_s, 1),
        "ratio_parser_to_grep": round(parse_mb_s / grep_mb_s, 3),
        # CPU time is steadier than wall time on a shared machine.
        "ratio_by_cpu_time": round(statistics.median(grep_cpu) / statistics.median(parse_cpu), 3),
        "goal_ratio": 0.25,
        "peak_rss_mb": {f"{mb:.0f} MB file": round(statistics.median(rss), 1),
                        f"{mb / 8:.0f} MB file": round(small_rss, 1)},
        "runs": args.runs,
        "network_seen": result["network"],
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
