"""CLI start-up and harness overhead, as medians and ratios against bare Python / bare pytest.

Goals (issue 2): `import harness.cli` <= 0.15 s and no torch import; the overhead of a
`preflight run` whose checks do nothing, against bare `pytest` on an empty test.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str], runs: int, cwd: str | None = None) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def write_suites(tmp: Path) -> tuple[Path, Path]:
    """(a suite of one do-nothing check, a directory of one empty plain test) under tmp."""
    suite = tmp / "suite"
    suite.mkdir()
    (suite / "test_noop.py").write_text(
        "from harness.checking import check\n"
        "@check('PF-B-001', title='noop', why='w', remedy='r')\n"
        "def test_noop():\n    pass\n")
    empty = tmp / "empty"
    empty.mkdir()
    (empty / "test_empty.py").write_text("def test_empty():\n    pass\n")
    return suite, empty


def main() -> None:
    runs = int(os.environ.get("BENCH_RUNS", "11"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_EC2_METADATA_DISABLED": "true"}
    py = sys.executable
    bare = timed([py, "-c", "pass"], env, runs)
    imp = timed([py, "-c", "import harness.cli"], env, runs)
    helps = timed([py, "-m", "harness", "--help"], env, runs)
    torch_loaded = subprocess.run(
        [py, "-c", "import sys, harness.cli, harness.parsers.env; print('torch' in sys.modules)"],
        env=env, capture_output=True, text=True, check=True).stdout.strip()
    print(f"python -c pass           median {bare * 1000:7.1f} ms")
    print(f"import harness.cli       median {imp * 1000:7.1f} ms  (+{(imp - bare) * 1000:.1f} ms, "
          f"ratio {imp / bare:.2f}x; goal <= 150 ms) torch imported: {torch_loaded}")
    print(f"preflight --help         median {helps * 1000:7.1f} ms  (ratio {helps / bare:.2f}x)")

    with tempfile.TemporaryDirectory() as tmp:
        suite, empty = write_suites(Path(tmp))
        runs_slow = max(3, runs // 2)
        pytest_bare = timed([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(empty)], env,
                            runs_slow, cwd=tmp)
        env_run = {**env, "PREFLIGHT_SUITE": str(suite)}
        run = timed([py, "-m", "harness", "run", "--profile", "local-cpu",
                     "--report-dir", str(Path(tmp) / "r")], env_run, runs_slow, cwd=tmp)
        print(f"bare pytest, empty test  median {pytest_bare * 1000:7.1f} ms")
        print(f"preflight run, noop check median {run * 1000:6.1f} ms  (overhead "
              f"+{(run - pytest_bare) * 1000:.0f} ms, ratio {run / pytest_bare:.2f}x)")


if __name__ == "__main__":
    main()
