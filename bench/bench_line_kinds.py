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
`--rss 20,500` also runs one kind (default kernel-log; `--rss-kind all`: every kind chosen) at
two sizes and prints its peak RSS growth (memory flat in the file size). `--base DIR` (a
worktree of a baseline revision) also runs that revision's `preflight inspect` in the same pairs
(its harness imported from DIR ahead of this checkout's editable install) and prints its ratio
first: before and after in one run.

`--vary` reads, for every kind but env, varied_inputs.py's inputs instead: the same samples with
each repetition's numbers changed as a real loop or log changes them (lines that do not repeat);
`--vary --check` first reads 1 MB of each kind repeated and varied and prints where the two
results differ in shape (keys, list lengths, flags, problems), then stops.

    .venv/bin/python bench/bench_line_kinds.py [--mb 20] [--runs 5] [--kinds env,fi-info]
        [--rss 20,500 --rss-kind kernel-log] [--base /tmp/base-worktree] [--vary [--check]]
"""

from __future__ import annotations

import argparse
import json
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
from varied_inputs import varied_generators

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


def _input(folder: Path, name: str, mb: float, vary: bool = False) -> tuple[str, Path]:
    kind, write = (varied_generators() if vary else {**generators(), **DISTINCT})[name]
    tag = "-varied" if vary else ""
    path = folder / f"{re.sub(r'[^a-z0-9]+', '-', name)}{tag}-{mb:g}MB.txt"
    if not path.exists():
        write(path, int(mb * MB))
    return kind, path


def _shape(obj: object, path: str = "") -> dict[str, object]:
    """What must not change between a repeated and a varied input: every key, list length,
    flag and null, and the text of problems/unread/warnings with its digits masked."""
    out: dict[str, object] = {}
    if isinstance(obj, dict):
        out[path] = sorted(obj)
        for k, v in obj.items():
            out.update(_shape(v, f"{path}.{k}"))
    elif isinstance(obj, list):
        out[path] = len(obj)
        for n, v in enumerate(obj):
            out.update(_shape(v, f"{path}[{n}]"))
    elif isinstance(obj, bool) or obj is None:
        out[path] = obj
    elif isinstance(obj, str) and re.search(r"problem|unread|warning|error|cut|failed", path):
        out[path] = re.sub(r"[0-9a-f]*\d[0-9a-f]*", "#", obj)
    return out


def check(folder: Path, names: list[str]) -> None:
    """Reads 1 MB of each kind repeated and varied; prints where the results differ in shape."""
    for name in names:
        shapes = []
        for vary in ((False, True) if name in generators() else (True, True)):  # (no twin)
            kind, path = _input(folder, name, 1.0, vary)
            proc = subprocess.run([*_preflight(), "inspect", kind, str(path), "--json"],
                                  capture_output=True, text=True)
            shapes.append(_shape(json.loads(proc.stdout)) if proc.stdout.strip() else
                          {"": f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"})
        diff = [(k, shapes[0].get(k, "-"), shapes[1].get(k, "-"))
                for k in sorted(set(shapes[0]) | set(shapes[1])) if shapes[0].get(k) != shapes[1].get(k)]
        print(f"{name}: {'same shape' if not diff else f'{len(diff)} differences'}")
        for k, a, b in diff[:8]:
            print(f"    {k or '(root)'}: {str(a)[:90]} -> {str(b)[:90]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kinds", default="", help="only these generator names / kinds")
    ap.add_argument("--rss", default="", help="two sizes in MB for the memory row, e.g. 20,500")
    ap.add_argument("--rss-kind", default="kernel-log", help="names, comma-separated, or all")
    ap.add_argument("--keep", default="", help="folder to keep (and reuse) the inputs in")
    ap.add_argument("--base", default="", help="a baseline worktree, run in the same pairs")
    ap.add_argument("--vary", action="store_true", help="inputs whose lines do not repeat")
    ap.add_argument("--check", action="store_true", help="with --vary: compare result shapes")
    args = ap.parse_args()
    wanted = {k.strip() for k in args.kinds.split(",") if k.strip()}
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-lines-"))
    folder.mkdir(parents=True, exist_ok=True)
    pre = _preflight()
    made = varied_generators() if args.vary else {**generators(), **DISTINCT}
    names = [n for n in (made if args.vary else KINDS)
             if not wanted or n in wanted or made[n][0] in wanted]
    if args.check:
        check(folder, names)
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        return
    print(f"{'input':18s} {'ratio':>6s} {'inspect ms/MB':>14s} {'loop ms/MB':>11s} "
          f"{'RSS MB':>7s}", flush=True)
    try:
        for name in names:
            kind, path = _input(folder, name, args.mb, args.vary)
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
            every = list(varied_generators() if args.vary else KINDS)
            rss_names = every if args.rss_kind == "all" else args.rss_kind.split(",")
            print()
            for name in rss_names:
                peaks = []
                for size in (float(s) for s in args.rss.split(",")):
                    kind, path = _input(folder, name, size, args.vary)
                    peaks.append((size, _run([*pre, "inspect", kind, str(path), "--json"])[1]))
                    path.unlink()  # (the large input is not kept: 500 MB a kind)
                (s0, r0), (s1, r1) = peaks[0], peaks[-1]
                print(f"peak RSS of {name}: {r0:.1f} MB at {s0:g} MB, {r1:.1f} MB at "
                      f"{s1:g} MB (+{(r1 / r0 - 1) * 100:.0f}%)", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
