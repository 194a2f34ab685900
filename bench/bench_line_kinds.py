"""Benchmark: every line-based `preflight inspect` kind against a plain Python loop over the same
lines (issue 32: each within 10x), whole process, paired runs.

For each kind the input of bench_inspect.py's generator (the recorded samples concatenated as a
long log holds them) is written at `--mb` MB; then, `--runs` times, interleaved, the CPU time
(user + sys, from wait4) of

- `preflight inspect KIND FILE --json` (the console script's entry point, as users run it,
  with this checkout's harness), and
- `python -c 'for line in open(FILE, errors="replace"): pass'` (the same interpreter), the
  floor: reading and decoding the lines and nothing else,

and prints the median of the per-pair ratios, both medians in CPU ms per MB, and the peak RSS.
`--rss 20,500` also runs one kind (default kernel-log) at two sizes and prints its peak RSS
growth (memory flat in the file size). `--base DIR` (a worktree of a baseline revision) also
runs that revision's `preflight inspect` in the same pairs (its harness imported from DIR ahead
of this checkout's editable install) and prints its ratio first: before and after in one run.

    .venv/bin/python bench/bench_line_kinds.py [--mb 20] [--runs 5] [--kinds env,fi-info]
        [--rss 20,500 --rss-kind kernel-log] [--base /tmp/base-worktree]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_inspect import MB, _cycle, _samples, generators

ROOT = Path(__file__).resolve().parent.parent

#: The line-based kinds (nccl-log has its own bench: bench_nccl_log.py; its figure is here too).
KINDS = ("env (env dumps)", "env (scripts)", "env (distinct scripts)", "fi-info", "nccl-tests",
         "nccl-tests (one table)", "kernel-log", "nvidia-smi", "dcgm", "dcgm (mndiag)",
         "train-step", "topology", "nccl-log")
#: The env scripts with a counter after each plain assignment value (`A=b` -> `A=b7` in the 7th
#: copy; `-x A=b` too), so that no copy repeats a command line: the memos of lines and segments
#: read before (harness/parsers/env_script_lines.py) gain nothing here (issue 32, item 3).
_PLAIN_VALUE = re.compile(r"(?<=[A-Za-z0-9_]=)([A-Za-z0-9_./:-]+)")
DISTINCT = {"env (distinct scripts)": ("env", _cycle(
    _samples("env", "*.sh"), lambda s, i: _PLAIN_VALUE.sub(lambda m: f"{m[1]}{i}", s)))}
LOOP = "import sys\nfor line in open(sys.argv[1], errors='replace'): pass\n"
#: `preflight` with the harness of the folder in argv[1] (the editable install's finder removed).
BASE = ("import sys\nsys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in repr(f)]"
        "\nsys.path.insert(0, sys.argv.pop(1))\nsys.argv[0] = 'preflight'\n"
        "from harness.cli import entrypoint\nsys.exit(entrypoint())\n")


def _run(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of one process, its output thrown away."""
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(cmd, stdout=null, stderr=null)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 2):
        raise SystemExit(f"{cmd}: exit {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _preflight() -> list[str]:
    """`preflight` with this checkout's harness. (The console script imports whatever tree the
    venv's editable install points at, which need not be this one: a clone sharing a venv.)"""
    return [sys.executable, "-c", BASE, str(Path(__file__).resolve().parents[1])]


def _input(folder: Path, name: str, mb: float) -> tuple[str, Path]:
    kind, write = {**generators(), **DISTINCT}[name]
    path = folder / f"{re.sub(r'[^a-z0-9]+', '-', name)}-{mb:g}MB.txt"
    if not path.exists():
        write(path, int(mb * MB))
    return kind, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kinds", default="", help="only these generator names / kinds")
    ap.add_argument("--rss", default="", help="two sizes in MB for the memory row, e.g. 20,500")
    ap.add_argument("--rss-kind", default="kernel-log")
    ap.add_argument("--keep", default="", help="folder to keep (and reuse) the inputs in")
    ap.add_argument("--base", default="", help="a baseline worktree, run in the same pairs")
    args = ap.parse_args()
    wanted = {k.strip() for k in args.kinds.split(",") if k.strip()}
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-lines-"))
    folder.mkdir(parents=True, exist_ok=True)
    pre = _preflight()
    print(f"{'input':18s} {'ratio':>6s} {'inspect ms/MB':>14s} {'loop ms/MB':>11s} "
          f"{'RSS MB':>7s}", flush=True)
    try:
        for name in KINDS:
            if wanted and name not in wanted and {**generators(), **DISTINCT}[name][0] not in wanted:
                continue
            kind, path = _input(folder, name, args.mb)
            mb = path.stat().st_size / MB
            ratios, ours, loops, rss, base = [], [], [], 0.0, []
            for _ in range(args.runs):
                if args.base:
                    base.append(_run([sys.executable, "-c", BASE, args.base, "inspect", kind,
                                      str(path), "--json"])[0])
                cpu, peak = _run([*pre, "inspect", kind, str(path), "--json"])
                floor, _ = _run([sys.executable, "-c", LOOP, str(path)])
                ratios.append(cpu / floor)
                ours.append(cpu)
                loops.append(floor)
                rss = max(rss, peak)
            if base:
                before = statistics.median(b / f for b, f in zip(base, loops, strict=True))
                print(f"{name + ' (base)':18s} {before:6.1f} "
                      f"{statistics.median(base) * 1000 / mb:14.1f}", flush=True)
            print(f"{name:18s} {statistics.median(ratios):6.1f} "
                  f"{statistics.median(ours) * 1000 / mb:14.1f} "
                  f"{statistics.median(loops) * 1000 / mb:11.1f} {rss:7.1f}", flush=True)
            if not args.keep:
                path.unlink()
        if args.rss:
            peaks = []
            for size in (float(s) for s in args.rss.split(",")):
                kind, path = _input(folder, args.rss_kind, size)
                peaks.append((size, _run([*pre, "inspect", kind, str(path), "--json"])[1]))
                if not args.keep:
                    path.unlink()
            (s0, r0), (s1, r1) = peaks[0], peaks[-1]
            print(f"\npeak RSS of {args.rss_kind}: {r0:.1f} MB at {s0:g} MB, {r1:.1f} MB at "
                  f"{s1:g} MB (+{(r1 / r0 - 1) * 100:.0f}%)")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
