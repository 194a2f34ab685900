"""Benchmark: parse a ~200 MB synthetic NCCL log and compare with `grep -c NCCL` on the same file.

The issue's log is the recorded lines of tests/data/nccl_log/ repeated under rotating rank
prefixes (Open MPI, srun, none); a second log is what a 256-rank job prints (mostly distinct
lines, mostly intra-node channel lines), so that a change that only suits the first shows.
Reports medians of N runs (MB/s), the parser/grep throughput ratio by wall time and by CPU time
(the goal is >= 0.25), the CPU ratio without the C scan (harness/parsers/_nccl_scan.c), and the
parser's peak RSS for two file sizes (it must not grow with the file). Also, per log: the whole
`preflight inspect nccl-log FILE --json` process against grep (interpreter start and imports
included, through the `preflight` console script), and where the parser's CPU time goes
(`stages`, ms of CPU per MB: reading the chunks alone, the `MAIN` regex's scan alone (the path
without the C scan), a chunk's whole scan (the C scan where built: `scanner`), the whole parse;
grep's own figure beside them).

    .venv/bin/python bench/bench_nccl_log.py [--mb 200] [--runs 3]
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

from harness.base import proc  # noqa: E402

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


def write_many_ranks_log(path: Path, size_mb: float, ranks: int = 256, comms: int = 20) -> int:
    """Write what a job of `ranks` ranks (8 per node, aws-ofi-nccl 1.14, NCCL 2.21) prints at
    INFO with INIT,NET while creating `comms` communicators, repeated to the size: unlike the
    fixture log, most lines are distinct (each rank's prefix, comm address and channel peers),
    and most channel lines are intra-node P2P. Returns the size in bytes."""
    import random

    rng = random.Random(1)
    target = int(size_mb * 1e6)
    written = 0
    nodes = max(ranks // 8, 2)
    with path.open("w", encoding="utf-8") as fh:
        while written < target:
            for comm in range(comms):
                commid = rng.getrandbits(48)
                for r in range(ranks):
                    node, lr = divmod(r, 8)
                    nxt, peer = node * 8 + (lr + 1) % 8, ((node + 1) % nodes) * 8 + lr
                    lines = [
                        "Bootstrap : Using ens32:10.1.0.1<0>",
                        "NET/Plugin: Loaded net plugin Libfabric (v9)",
                        "NET/OFI Initializing aws-ofi-nccl 1.14.0",
                        "NET/OFI Using Libfabric version 1.22",
                        "NET/OFI Setting FI_EFA_FORK_SAFE environment variable to 1",
                        "NET/OFI Running on p5.48xlarge platform, topology file "
                        "/opt/amazon/ofi-nccl/share/aws-ofi-nccl/xml/p5.48xl-topo.xml",
                        "NET/OFI Using transport protocol RDMA (platform set)",
                        "NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
                        "Using network Libfabric",
                        f"DMA-BUF is available on GPU device {lr}",
                        f"comm 0x{commid:x} rank {r} nRanks {ranks} nNodes {nodes} localRanks 8 "
                        f"localRank {lr} MNNVL 0",
                        f"Setting affinity for GPU {lr} to ffffff,ffffffff",
                    ]
                    lines += [f"Channel {ch:02d}/0 : {r}[{lr}] -> {nxt}[{nxt % 8}] via P2P/CUMEM/read"
                              for ch in range(32)]
                    if lr in (0, 7):  # the ranks that talk to the next node
                        for ch in range(16):
                            lines += [
                                f"Channel {ch:02d}/0 : {r}[{lr}] -> {peer}[{lr}] [send] via "
                                f"NET/Libfabric/{ch % 4}/GDRDMA",
                                f"Channel {ch:02d}/0 : {peer}[{lr}] -> {r}[{lr}] [receive] via "
                                f"NET/Libfabric/{ch % 4}/GDRDMA"]
                    lines += ["Connected all rings", "Connected all trees",
                              f"ncclCommInitRank comm 0x{commid:x} rank {r} nranks {ranks} cudaDev "
                              f"{lr} nvmlDev {lr} busId 53000 commId 0x{commid:x} - Init COMPLETE"]
                    host = f"ip-10-1-{node // 250}-{node % 250}"
                    prefix = f"{host}:{1000 + lr}:{2000 + lr + comm} [{lr}] NCCL INFO "
                    block = "".join(prefix + line + "\n" for line in lines)
                    fh.write(block)
                    written += len(block)
                    if written >= target:
                        return path.stat().st_size
    return path.stat().st_size


_CHILD = """
import resource, sys, time, json
sys.path.insert(0, {root!r})
from harness.parsers import nccl_log_chunk
from harness.parsers.nccl_log import parse_nccl_log_stream
if {regex!r}:
    nccl_log_chunk._nccl_scan = None  # the path of a wheel built without a C compiler
t, c = time.perf_counter(), time.process_time()
with open({path!r}, "rb") as fh:
    s = parse_nccl_log_stream(fh)
print(json.dumps({{"s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
                   "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   "net": s.num_net_channels, "network": s.network}}))
"""


_STAGES = """
import json, sys, time
sys.path.insert(0, {root!r})
from harness.parsers import nccl_log as n, nccl_log_chunk as c
from harness.parsers.nccl_log_lines import MAIN
path, mb = {path!r}, {mb!r}

def timed(feed):
    scanner = n._Scanner()
    scanner.feed = feed.__get__(scanner) if feed else scanner.feed
    t = time.process_time()
    with open(path, "rb") as fh:
        n._feed_readinto(scanner, fh, n._CHUNK_BYTES)
    return round((time.process_time() - t) * 1e3 / mb, 2)

def read_only(self, chunk, end=None):
    pass

def regex_scan(self, chunk, end=None):
    MAIN.findall(chunk, 0, len(chunk) if end is None else end)

def chunk_scan(self, chunk, end=None):
    scan = c.scan_chunk(chunk, len(chunk) if end is None else end, False, False, self.seen)
    self.seen.update(dict.fromkeys(scan.found))

print(json.dumps({{"scanner": "C" if c._nccl_scan else "regex",
                   "read_ms_per_mb": timed(read_only), "regex_main_scan_ms_per_mb": timed(regex_scan),
                   "chunk_scan_ms_per_mb": timed(chunk_scan), "whole_parse_ms_per_mb": timed(None)}}))
"""


def stages(path: Path) -> dict:
    """CPU ms per MB of each stage of the parse, and of `grep -c NCCL` (see the docstring)."""
    mb = path.stat().st_size / 1e6
    res = proc.run([sys.executable, "-c", _STAGES.format(root=str(ROOT), path=str(path), mb=mb)],
                   timeout_s=900)
    if not res.ok:
        raise SystemExit(f"stages run failed: {res.describe()}\n{res.stderr[-2000:]}")
    out = json.loads(res.stdout.strip().splitlines()[-1])
    out["grep_ms_per_mb"] = round(statistics.median(grep_once(path)[1] for _ in range(3)) * 1e3 / mb, 2)
    return out


def inspect_process(path: Path, runs: int) -> dict:
    """`preflight inspect nccl-log FILE --json` as a whole process against `grep -c NCCL`:
    interleaved runs, medians of wall and CPU time. The modules run byte-compiled, as pip installs
    them: this environment sets PYTHONDONTWRITEBYTECODE (every process would compile the sources
    again, ~0.1 s; /work/shared/engineering-notes.md), so the cache goes to a temporary folder,
    filled by one untimed run."""
    import os
    import resource

    script = Path(sys.executable).with_name("preflight")  # as users run it (no runpy)
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "harness"]
    cmd += ["inspect", "nccl-log", str(path), "--json"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(path.parent / "pycache")
    subprocess.run(cmd, capture_output=True, check=False, timeout=900, cwd=ROOT, env=env)
    walls, cpus, grep_walls, grep_cpus = [], [], [], []
    for _ in range(runs):
        wall, cpu = grep_once(path)
        grep_walls.append(wall)
        grep_cpus.append(cpu)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, check=False, timeout=900, cwd=ROOT, env=env)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if res.returncode != 0:
            raise SystemExit(f"inspect failed: {res.stderr[-2000:]!r}")
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return {"inspect_s": round(statistics.median(walls), 2),
            "ratio_to_grep": round(statistics.median(grep_walls) / statistics.median(walls), 3),
            "ratio_by_cpu_time": round(statistics.median(grep_cpus) / statistics.median(cpus), 3)}


def parse_once(path: Path, regex: bool = False) -> dict:
    """Parse in a fresh interpreter (so that peak RSS is this file's alone); `regex`: without
    the C scan."""
    code = _CHILD.format(root=str(ROOT), path=str(path), regex=regex)
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


def compare(path: Path, runs: int) -> dict:
    """Parser vs `grep -c NCCL` on one file, interleaved runs, medians."""
    grep_s, grep_cpu, parse_s, parse_cpu, rss, regex_cpu = [], [], [], [], [], []
    for _ in range(runs):  # interleaved, so both see the same machine load
        wall, cpu = grep_once(path)
        grep_s.append(wall)
        grep_cpu.append(cpu)
        result = parse_once(path)
        parse_s.append(result["s"])
        parse_cpu.append(result["cpu_s"])
        rss.append(result["rss_mb"])
        regex_cpu.append(parse_once(path, regex=True)["cpu_s"])
    mb = path.stat().st_size / 1e6
    grep_mb_s = mb / statistics.median(grep_s)
    parse_mb_s = mb / statistics.median(parse_s)
    return {
        "file_mb": round(mb, 1),
        "grep_c_mb_s": round(grep_mb_s, 1),
        "parser_mb_s": round(parse_mb_s, 1),
        "ratio_parser_to_grep": round(parse_mb_s / grep_mb_s, 3),
        # CPU time is steadier than wall time on a shared machine.
        "ratio_by_cpu_time": round(statistics.median(grep_cpu) / statistics.median(parse_cpu), 3),
        "peak_rss_mb": round(statistics.median(rss), 1),
        # Without the C scan (a wheel built without a compiler), same runs.
        "regex_ratio_by_cpu_time": round(statistics.median(grep_cpu) / statistics.median(regex_cpu),
                                         3),
        "network_seen": result["network"],
        "net_channels": result["net"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=200.0, help="synthetic log size, MB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-nccl-log-") as tmp:
        big, small, many = (Path(tmp) / name for name in ("big.log", "small.log", "many.log"))
        write_log(big, args.mb)
        write_log(small, args.mb / 8)
        write_many_ranks_log(many, args.mb)
        fixture_lines = compare(big, args.runs)
        small_rss = parse_once(small)["rss_mb"]
        many_ranks = compare(many, args.runs)
        for log, into in ((big, fixture_lines), (many, many_ranks)):
            into["whole_process"] = inspect_process(log, args.runs)
            into["stages"] = stages(log)
    report = {
        "goal_ratio": 0.25,
        "runs": args.runs,
        # The benchmark: the fixture lines repeated under rank wrappers.
        "fixture_lines": fixture_lines | {
            "peak_rss_mb": {f"{fixture_lines['file_mb']:.0f} MB file": fixture_lines["peak_rss_mb"],
                            f"{args.mb / 8:.0f} MB file": round(small_rss, 1)}},
        # Mostly distinct lines, as a real 256-rank job prints them.
        "many_ranks": many_ranks,
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
