"""`preflight report --html` at cluster scale: render time and page size for N nodes built from
the recorded 4-node reports (tests/data/reports), as medians, and the ratio to loading the JSON
(json.loads and Report.from_dict: the file edge).

A second table renders synthetic runs in the shape a real multi-node run leaves (the cluster
verdict and the pairwise isolation rounds in every report: tests/synthetic_run.py), one node
slow. No goal was set by the issue; the figures say whether a nightly 1000-node page stays
cheap.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from harness.report.html.render import ReportSet, render_html  # noqa: E402
from harness.report.model import Report  # noqa: E402

DATA = REPO / "tests" / "data" / "reports"


def cluster(n: int) -> list[dict]:
    base = [json.loads((DATA / h / "report.json").read_text())
            for h in ("algo-1", "algo-2", "algo-3", "algo-4")]
    reports = []
    for i in range(n):
        r = copy.deepcopy(base[i % 4])
        r["host"] = f"node-{i}"
        reports.append(r)
    return reports


def median_s(fn, runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "5"))
    print(f"{'nodes':>6} {'render ms':>10} {'load ms':>14} {'ratio':>6} {'page KiB':>9}")
    for n in (4, 64, 256, 1024):
        reports = cluster(n)
        text = [json.dumps(r) for r in reports]
        rs = ReportSet(source="bench", reports=[Report.from_dict(r) for r in reports])
        render = median_s(lambda rs=rs: render_html(rs), runs)
        load = median_s(lambda text=text: [Report.from_dict(json.loads(t)) for t in text], runs)
        size = len(render_html(rs).encode()) / 1024
        print(f"{n:>6} {render * 1000:>10.1f} {load * 1000:>14.1f} {render / load:>6.1f} "
              f"{size:>9.0f}")
    import synthetic_run

    print(f"\nsynthetic cluster runs (one slow node)\n{'nodes':>6} {'render ms':>10} "
          f"{'page KiB':>9}")
    for n in (4, 64, 256, 1024):
        rs = ReportSet(source="bench", reports=synthetic_run.run(n, slow={n // 2: 0.3}))
        render = median_s(lambda rs=rs: render_html(rs), runs)
        print(f"{n:>6} {render * 1000:>10.1f} {len(render_html(rs).encode()) / 1024:>9.0f}")


if __name__ == "__main__":
    main()
