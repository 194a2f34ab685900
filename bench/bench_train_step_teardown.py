"""Clean start and teardown of the tiny FSDP2 training step, over many consecutive launches.

Runs `torchrun --standalone --nproc-per-node=N -m harness.worker --parts train --device cpu` RUNS
times (gloo) and counts: non-zero exits, ranks killed by SIGABRT or printing `terminate called
without an active exception`, runs without a result line, and processes left behind after
torchrun returned; prints the median, p90 and max run time. `--teardown normal` measures the
abort rate of a normal interpreter exit after barrier + destroy_process_group (the default,
`hard`, is what the check uses).

    python bench/bench_train_step_teardown.py [--runs 50] [--nproc 2] [--teardown hard|normal]
        [--cpu-dtype fp32|bf16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.parsers import ParseError  # noqa: E402
from harness.parsers.train_step import parse_train_step  # noqa: E402
from harness.worker.launch import PartSpec, torchrun_argv  # noqa: E402

TAG_ENV = "PREFLIGHT_BENCH_TAG"
TIMEOUT_S = 120.0


def tagged_pids(tag: str) -> list[int]:
    """Processes (of any parent) whose environment carries this run's tag."""
    found = []
    needle = f"{TAG_ENV}={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def one_run(index: int, nproc: int, teardown: str, dtype: str) -> dict:
    """One launch. Not through harness.base.proc.run on purpose: its process-group kill after the
    leader exits would hide exactly the leftover ranks this bench counts."""
    tag = f"{os.getpid()}-{index}"
    env = {**os.environ, TAG_ENV: tag, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    argv = torchrun_argv(nproc, [PartSpec("train", TIMEOUT_S)],
                         extra=("--device=cpu", f"--cpu-dtype={dtype}", "--pg-timeout-s=30",
                                f"--teardown={teardown}"))
    start = time.monotonic()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
    try:
        out, _ = child.communicate(timeout=TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        timed_out = True
    duration = time.monotonic() - start
    time.sleep(0.2)
    leftover = tagged_pids(tag)
    for pid in leftover:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    text = out.decode(errors="replace")
    try:
        parsed = parse_train_step(text)
        has_result, aborted = parsed.result is not None, parsed.aborted_at_exit
    except ParseError:
        has_result, aborted = False, False
    return {
        "run": index, "returncode": child.returncode, "timed_out": timed_out,
        "duration_s": round(duration, 3), "result": has_result,
        "terminate_called": "terminate called without an active exception" in text,
        "sigabrt": aborted, "leftover_pids": leftover,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--teardown", choices=("hard", "normal"), default="hard")
    parser.add_argument("--cpu-dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args(argv)
    runs = []
    for i in range(args.runs):
        run = one_run(i, args.nproc, args.teardown, args.cpu_dtype)
        runs.append(run)
        bad = run["returncode"] != 0 or run["leftover_pids"] or not run["result"]
        print(f"run {i + 1:3d}/{args.runs}: rc={run['returncode']} {run['duration_s']:.2f} s"
              + ("  <-- " + json.dumps(run) if bad else ""), flush=True)
    durations = sorted(r["duration_s"] for r in runs)
    summary = {
        "bench": "train_step_teardown", "runs": len(runs), "nproc": args.nproc,
        "teardown": args.teardown, "cpu_dtype": args.cpu_dtype,
        "nonzero_exit": sum(r["returncode"] != 0 for r in runs),
        "sigabrt": sum(r["sigabrt"] for r in runs),
        "terminate_called": sum(r["terminate_called"] for r in runs),
        "no_result": sum(not r["result"] for r in runs),
        "timed_out": sum(r["timed_out"] for r in runs),
        "leftover_processes": sum(len(r["leftover_pids"]) for r in runs),
        "median_s": round(statistics.median(durations), 2),
        "p90_s": round(durations[int(0.9 * (len(durations) - 1))], 2),
        "max_s": round(durations[-1], 2),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"train_step_teardown_{args.teardown}_{args.cpu_dtype}.json").write_text(
        json.dumps({"summary": summary, "runs": runs}, indent=1))
    print(json.dumps(summary))
    clean = not (summary["nonzero_exit"] or summary["leftover_processes"] or summary["no_result"])
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
