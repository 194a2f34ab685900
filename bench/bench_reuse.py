"""Job start with a recent certificate against a full preflight (issue 30, goal <= 0.5).

One certify run of the built-in suite issues the certificate; then pairs, interleaved (the
order alternates), of `preflight run` (tier preflight) and `preflight run --reuse-certified 6h`
on the same report folder: wall time of the whole console-script process, medians, the ratio
of the medians and the median of the paired ratios. Also the identity read alone (what a reuse
adds). A run that did not pass, or a reuse run that reused nothing, has no figure: the bench
says so and exits 1. Writes bench/out/reuse.json.

    .venv/bin/python bench/bench_reuse.py [--pairs 7] [--profile local-cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PREFLIGHT = str(Path(sys.executable).with_name("preflight"))


def timed_run(args: list[str], env: dict[str, str], report: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    res = subprocess.run([PREFLIGHT, "run", *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, check=False)
    took = time.perf_counter() - start
    if res.returncode != 0:
        sys.exit(f"no figure: `preflight run {' '.join(args)}` exited {res.returncode}:\n"
                 f"{res.stdout[-3000:]}")
    return took, json.loads(report.read_text())


def identity_s(profile: str, runs: int) -> float:
    code = ("import os, time; from harness.memory.identity import gather; "
            "from harness.profiles.table import BUILTIN_PROFILES as P; t = time.perf_counter(); "
            f"gather(P[{profile!r}], 'bench', os.environ); print(time.perf_counter() - t)")
    return statistics.median(float(subprocess.run([sys.executable, "-c", code], text=True,
                                                  capture_output=True, check=True).stdout)
                             for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--profile", default="local-cpu")
    opts = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-reuse-"))
    env = {**os.environ, "AWS_EC2_METADATA_DISABLED": "true", "PREFLIGHT_HOSTNAME": "bench"}
    base = ["--profile", opts.profile, "--report-dir", str(tmp / "r")]
    report = tmp / "r" / "bench" / "report.json"
    try:
        cert_s, _ = timed_run([*base, "--tier", "certify"], env, report)
        full, reuse, ratios, reused_ids = [], [], [], []
        for i in range(opts.pairs):
            order = ("full", "reuse") if i % 2 == 0 else ("reuse", "full")
            got = {}
            for kind in order:
                extra = ["--reuse-certified", "6h"] if kind == "reuse" else []
                got[kind], data = timed_run([*base, *extra], env, report)
                if kind == "reuse":
                    if not data.get("reused", {}).get("used"):
                        sys.exit(f"no figure: the reuse run reused nothing: {data.get('reused')}")
                    reused_ids = [c["id"] for c in data["reused"]["checks"]]
            full.append(got["full"])
            reuse.append(got["reuse"])
            ratios.append(got["reuse"] / got["full"])
            print(f"pair {i + 1}: full {got['full']:6.2f} s, reuse {got['reuse']:6.2f} s, "
                  f"ratio {ratios[-1]:.2f}", flush=True)
        ident = identity_s(opts.profile, 5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"profile": opts.profile, "pairs": opts.pairs, "certify_s": round(cert_s, 2),
           "full_median_s": round(statistics.median(full), 2),
           "reuse_median_s": round(statistics.median(reuse), 2),
           "ratio_of_medians": round(statistics.median(reuse) / statistics.median(full), 3),
           "median_paired_ratio": round(statistics.median(ratios), 3),
           "identity_median_s": round(ident, 3), "reused": reused_ids,
           "load_average": os.getloadavg(), "goal": "<= 0.5"}
    print(json.dumps(out, indent=2))
    (REPO / "bench/out").mkdir(exist_ok=True)
    (REPO / "bench/out/reuse.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
