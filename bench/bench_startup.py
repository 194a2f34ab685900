"""Start-up cost of the harness (issue 28, item 6): whole-process CPU time (user + sys of the
child, from os.wait4), paired and interleaved, medians.

(a) The harness alone over a bare pytest session: an empty test directory run the way the
runner starts check sessions (harness/run/runner.py: -c checks.ini, autoload off, -p
xdist.plugin -p pytest_timeout -p no:cacheprovider) without and with `-p harness.plugin`
(in force: --preflight-results and the profile handed as a file, as in a run); also against a
plain `python -m pytest` with nothing loaded; and the whole `preflight run` of one do-nothing
check (CLI, profile, check sessions, reports; children's CPU included) against bare pytest.
Goal: harness overhead <= 0.4 CPU s.
(b) `import harness.plugin` and `import harness.cli` against `python -c pass`, and which heavy
third-party modules each import leaves in sys.modules.

With --base DIR (a worktree of the baseline revision: `git worktree add /tmp/base main`) the
harness variants also run from DIR, interleaved in the same rounds, and each after/before pair
gives a ratio (same machine, same load).

Usage: .venv/bin/python bench/bench_startup.py [--pairs N] [--base DIR]  (default 9 pairs)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_cli import write_suites  # bench/ is the script's directory: sys.path[0]

REPO = Path(__file__).resolve().parent.parent
INI = REPO / "harness" / "run" / "checks.ini"
HEAVY = ("torch", "sympy", "boto3", "botocore", "rich", "packaging", "numpy", "jinja2",
         "prometheus_client", "pynvml", "yaml", "tomllib", "tomli")


def cpu_s(argv: list[str], env: dict[str, str], cwd: str) -> float:
    """User + sys CPU seconds of one whole child process (and what it waited for)."""
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 5):  # 5: pytest found no tests
        raise SystemExit(f"{argv} exited {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def loaded(code: str, env: dict[str, str]) -> list[str]:
    probe = f"import sys; {code}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=9)
    ap.add_argument("--base", default=None, help="a worktree of the baseline revision")
    args = ap.parse_args()
    py = sys.executable
    env = {**os.environ, "PYTHONPATH": str(REPO), "AWS_EC2_METADATA_DISABLED": "true",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        suite, empty = write_suites(Path(tmp))
        profile = Path(tmp) / "profile.json"
        profile.write_text(json.dumps({"profile": {"name": "local-cpu"}, "source": "bench"}))
        session = [py, "-m", "pytest", "-q", str(empty), "-c", str(INI), "--rootdir", tmp,
                   "-p", "xdist.plugin", "-p", "pytest_timeout", "-p", "no:cacheprovider"]
        variants = {
            "python -c pass": [py, "-c", "pass"],
            "import harness.plugin": [py, "-c", "import harness.plugin"],
            "import harness.cli": [py, "-c", "import harness.cli"],
            "bare pytest": [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(empty)],
            "runner session": session,
            "runner session + harness": [
                *session, "-p", "harness.plugin",
                "--preflight-results", str(Path(tmp) / "results.jsonl"),
                "--preflight-profile-json", str(profile)],
            # the whole local preflight of one do-nothing check: CLI, profile, sessions, report
            "preflight run (noop check)": [py, "-m", "harness", "run", "--profile", "local-cpu",
                                           "--report-dir", str(Path(tmp) / "r")],
        }
        env["PREFLIGHT_SUITE"] = str(suite)
        envs = {k: env for k in variants}
        if args.base:
            base_env = {**env, "PYTHONPATH": str(Path(args.base).resolve())}
            for name in ("import harness.plugin", "import harness.cli", "runner session + harness",
                         "preflight run (noop check)"):
                argv = [a.replace(str(INI), str(Path(args.base).resolve() / INI.relative_to(REPO)))
                        for a in variants[name]]
                variants[f"{name} [base]"], envs[f"{name} [base]"] = argv, base_env
        samples: dict[str, list[float]] = {k: [] for k in variants}
        for name, argv in variants.items():  # warm-up (page cache, bytecode), not counted
            cpu_s(argv, envs[name], tmp)
        for i in range(args.pairs):  # interleaved: each round runs every variant once
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for name in order:
                samples[name].append(cpu_s(variants[name], envs[name], tmp))

    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"CPU s (user+sys, whole process), median of {args.pairs} interleaved rounds; "
          f"load {os.getloadavg()[0]:.1f}")
    for name, value in med.items():
        print(f"  {name:28s} {value:6.3f}")

    def paired(a: str, b: str) -> tuple[float, float]:
        diffs = [y - x for x, y in zip(samples[a], samples[b], strict=True)]
        ratios = [y / x for x, y in zip(samples[a], samples[b], strict=True)]
        return statistics.median(diffs), statistics.median(ratios)

    for a, b, goal in (("runner session", "runner session + harness", " (goal <= 0.4 s)"),
                       ("bare pytest", "runner session + harness", ""),
                       ("bare pytest", "preflight run (noop check)", ""),
                       ("python -c pass", "import harness.plugin", ""),
                       ("python -c pass", "import harness.cli", "")):
        d, r = paired(a, b)
        print(f"  {b} - {a}: median paired +{d:.3f} CPU s, ratio {r:.2f}x{goal}")
    for name in [k for k in samples if k.endswith(" [base]")]:
        after = name.removesuffix(" [base]")
        d, r = paired(name, after)
        print(f"  {after}: this tree - base: median paired {d:+.3f} CPU s, ratio {r:.2f}x")
    if args.base:
        for before, after in (("runner session + harness [base]", "runner session + harness"),
                              ("preflight run (noop check) [base]", "preflight run (noop check)")):
            over_b, _ = paired("runner session" if "session" in after else "bare pytest", before)
            print(f"  overhead of `{after}` before: +{over_b:.3f} CPU s")
    for code in ("import harness.plugin", "import harness.cli"):
        print(f"  heavy modules after `{code}`: {', '.join(loaded(code, env)) or 'none'}")


if __name__ == "__main__":
    main()
