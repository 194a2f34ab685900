"""Where the whole local preflight's CPU time goes (issue 28 item 6, second part): one
`preflight run` (default profile, built-in suite) with a `sitecustomize` on PYTHONPATH that has
every Python process it starts append, at exit, its own CPU time (RUSAGE_SELF) and that of the
children it waited for (RUSAGE_CHILDREN) with its argv. Each process is given a role (the CLI,
a check session, an xdist worker, torchrun, a torchrun rank) and the CPU seconds are summed per
role; the CPU of processes that wrote nothing (non-Python tools, a process ended by a signal)
is what their parent waited for beyond its recorded children ("unrecorded children of" the
parent's role). `os._exit`, the torchrun ranks' way out, is wrapped to record first (the hook
runs before any module binds it), so the ranks are a role of their own.
Hand-written (a stdlib atexit hook): no profiler here follows a process tree across exec and
torchrun. `--hand N`: N runs of bench_worker.py's hand-scripted side under the same hook.
`--base DIR`: a baseline worktree's run alternates with this tree's, `--runs` pairs: per role
the medians and the median paired change (bench/out/whole_split_paired.json).
Usage: python bench/bench_whole_split.py [--runs 2] [--hand 3] [--base DIR];
bench/out/whole_split.json."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HOOK = '''
import atexit, json, os, resource, sys
def _h28_split():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(os.environ["SPLIT_FILE"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:3],
                            "orig": list(getattr(sys, "orig_argv", []))[:4],
                            "self": s.ru_utime + s.ru_stime,
                            "children": c.ru_utime + c.ru_stime}) + "\\n")
atexit.register(_h28_split)
_h28_exit = os._exit
def _h28_exit_recorded(code):  # the worker's ranks (and the hand script) leave by os._exit
    _h28_split()
    _h28_exit(code)
os._exit = _h28_exit_recorded
'''


def role(rec: dict[str, object]) -> str:
    """What a recorded process was, from its argv."""
    text = " ".join(map(str, [*rec["orig"], *rec["argv"]]))  # type: ignore[misc]
    if "harness.worker" in text or "harness/worker" in text:
        return "torchrun ranks (worker)"
    if "torch.distributed.run" in text:
        return "torchrun (agent)"
    if rec["argv"][1:2] == ["run"] and "harness" in text:  # type: ignore[index]
        return "CLI (preflight run)"
    if "sys.stdin" in text or "execnet" in text:
        return "xdist workers (checks)"
    if "pytest" in text:
        return "check sessions (pytest main)"
    return "other python: " + text[:60]


def one_run(tmp: Path, root: Path | None = None) -> tuple[float, dict[str, float]]:
    """One `preflight run` under the hook; `root`: a baseline tree first on the path."""
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    split = tmp / "split.jsonl"
    split.unlink(missing_ok=True)
    from bench_worker import _env  # the environment bench_worker.py --whole runs both sides in

    base = _env()
    if root is not None:
        base["PYTHONPATH"] = os.pathsep.join([str(root), *base["PYTHONPATH"].split(os.pathsep)[1:]])
    env = {**base, "PYTHONPATH": f"{hook}:{base['PYTHONPATH']}", "SPLIT_FILE": str(split),
           "AWS_EC2_METADATA_DISABLED": "true"}
    env.pop("PREFLIGHT_SUITE", None)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--report-dir",
                             str(tmp / "r")], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    total = usage.ru_utime + usage.ru_stime
    recs = [json.loads(line) for line in split.read_text().splitlines()]
    by_pid = {r["pid"]: r for r in recs}
    out: dict[str, float] = defaultdict(float)
    for r in recs:
        out[role(r)] += r["self"]
        kids = sum(k["self"] + k["children"] for k in recs if k["ppid"] == r["pid"])
        out[f"unrecorded children of {role(r)}"] += max(0.0, r["children"] - kids)
    top = [r for r in recs if r["ppid"] not in by_pid]
    out["unrecorded top level"] += max(0.0, total - sum(r["self"] + r["children"]
                                                                for r in top))
    return total, dict(out)


def hand_run(tmp: Path) -> tuple[float, dict[str, float]]:
    """bench_worker.py's hand-scripted torch work (one torchrun of 2 ranks) under the same
    hook: its agent and its ranks (what the agent waited for)."""
    from bench_worker import HAND, _env  # bench/ is the script's directory: sys.path[0]

    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(HOOK)
    (tmp / "hand.py").write_text(HAND)
    split = tmp / "hand.jsonl"
    split.unlink(missing_ok=True)
    base = _env()
    env = {**base, "AWS_EC2_METADATA_DISABLED": "true", "HAND_ITERS": "4", "HAND_SDC": "1",
           "HAND_STEPS": "5", "SPLIT_FILE": str(split),
           "PYTHONPATH": f"{hook}:{base['PYTHONPATH']}"}
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node=2", str(tmp / "hand.py")], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    [agent] = [json.loads(line) for line in split.read_text().splitlines()
               if "torch.distributed.run" in line]
    return usage.ru_utime + usage.ru_stime, {"hand: torchrun (agent)": agent["self"],
                                             "hand: ranks": agent["children"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--hand", type=int, default=0, help="runs of the hand-scripted side too")
    ap.add_argument("--base", type=Path, default=None,
                    help="a baseline worktree (beside this one), run alternately with this tree")
    args = ap.parse_args()
    if args.base is not None:
        return paired(args.runs, args.base)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.hand):
            total, roles = hand_run(Path(tmp))
            runs.append({"hand_total_cpu_s": round(total, 3),
                         "roles": {k: round(v, 3) for k, v in roles.items()}})
            print(f"hand: {total:.2f} CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                                           roles.items()), flush=True)
        one_run(Path(tmp))  # warm-up (page cache), not counted
        for i in range(args.runs):
            total, roles = one_run(Path(tmp))
            runs.append({"total_cpu_s": round(total, 3),
                         "roles": {k: round(v, 3) for k, v in sorted(roles.items())}})
            print(f"run {i}: {total:.2f} CPU s: " + ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(roles.items(), key=lambda kv: -kv[1])),
                flush=True)
    names = sorted({k for r in runs for k in r["roles"]})
    med = {k: round(statistics.median(r["roles"][k] for r in runs if k in r["roles"]), 3)
           for k in names}
    summary = {"bench": "whole_split", "runs": runs, "median": med, "loadavg": os.getloadavg()}
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "whole_split.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary["median"], indent=1))
    return 0


def paired(runs_n: int, base: Path) -> int:
    """`runs_n` runs of each tree, alternating (each first in turn): per role, the medians and
    the median paired change (this tree - base); bench/out/whole_split_paired.json."""
    pairs: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        one_run(Path(tmp)), one_run(Path(tmp), base)  # warm-up (page cache, bytecode)
        for i in range(runs_n):
            order = [("this", None), ("base", base)]
            got = {name: one_run(Path(tmp), root) for name, root in
                   (order if i % 2 == 0 else order[::-1])}
            pairs.append({name: {"total": total, **roles} for name, (total, roles) in got.items()})
            print(f"pair {i}: this {got['this'][0]:.2f}, base {got['base'][0]:.2f} CPU s",
                  flush=True)
    names = sorted({k for p in pairs for side in p.values() for k in side})
    table = {}
    for k in names:
        this = [p["this"].get(k, 0.0) for p in pairs]
        before = [p["base"].get(k, 0.0) for p in pairs]
        table[k] = {"base": round(statistics.median(before), 3),
                    "this": round(statistics.median(this), 3),
                    "change": round(statistics.median(a - b for a, b in zip(this, before, strict=True)), 3)}
    summary = {"bench": "whole_split_paired", "base": str(base), "pairs": len(pairs),
               "roles": table, "loadavg": os.getloadavg()}
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "whole_split_paired.json").write_text(json.dumps(summary, indent=2) + "\n")
    for k, row in sorted(table.items(), key=lambda kv: -kv[1]["base"]):
        print(f"{row['base']:7.3f} {row['this']:7.3f} {row['change']:+7.3f}  {k}")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
