"""Runs the check suite as pytest sessions in a supervised subprocess (so a check stuck in C++
cannot hang the harness), within the tier's hard time budget, and assembles the Report."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import proc
from harness.deadline import run_deadline_env
from harness.profiles import Profile
from harness.report import Report, load_results, now_iso, report_environment

__all__ = ["RunConfig", "checks_dir", "pytest_phases", "run_checks"]

#: Seconds kept back from the budget to write reports after the checks are stopped.
REPORT_RESERVE_S = 5.0
#: Seconds without a finished check after which a heartbeat line says the run is alive.
HEARTBEAT_S = 30.0
#: The ini the check sessions use, so a pytest.ini/pyproject in the user's cwd cannot interfere.
_INI = Path(__file__).with_name("checks.ini")


def checks_dir() -> Path:
    """The installed (or checked-out) check suite."""
    import checks

    return Path(checks.__file__).parent


@dataclass(kw_only=True, slots=True)
class RunConfig:
    """Everything one `preflight run` needs; built by the CLI."""

    profile: Profile
    profile_source: str
    tier: str = "preflight"
    report_dir: Path
    host: str
    keyword: str | None = None
    warn_only: bool = False
    command: Sequence[str] = ()
    workers: int = 0
    """xdist workers for node-local checks; 0 or 1: one serial session."""
    profile_file: str | None = None
    sysroot: Path = Path("/")
    suite: Path | None = None
    """Check files or folder to run (default: the installed suite)."""
    verbose: bool = False
    progress: bool = True
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    extra_pytest_args: Sequence[str] = ()

    @property
    def budget_s(self) -> float:
        return float(self.profile.run_budget_s.get(self.tier, 300.0))

    @property
    def check_timeout_s(self) -> float:
        return float(self.profile.check_timeout_s.get(self.tier, 120.0))


def pytest_phases(cfg: RunConfig, results: Path) -> list[tuple[str, list[str]]]:
    """(name, pytest argv) per phase: node-local checks (in parallel when workers > 1), then
    the exclusive ones (collectives, bandwidth) alone."""
    suite = str(cfg.suite or checks_dir())
    base = [
        sys.executable, "-m", "pytest", suite,
        "-c", str(_INI), "--rootdir", str(Path(suite).parent if Path(suite).is_dir() else "."),
        "-p", "harness.plugin", "-p", "no:cacheprovider",
        "--preflight-profile", cfg.profile.name, "--preflight-tier", cfg.tier,
        "--preflight-results", str(results), "--preflight-sysroot", str(cfg.sysroot),
        "--timeout", f"{cfg.check_timeout_s:g}",
        "-v" if cfg.verbose else "-q", "-rN",
    ]
    if cfg.profile_file:
        base += ["--preflight-profile-file", cfg.profile_file]
    if cfg.keyword:
        base += ["-k", cfg.keyword]
    base += list(cfg.extra_pytest_args)
    junit = cfg.report_dir / "junit.xml"
    if cfg.workers <= 1:
        return [("checks", [*base, "--junitxml", str(junit)])]
    return [
        ("node-local", [*base, "-m", "not exclusive", "-n", str(cfg.workers),
                        "--junitxml", str(junit)]),
        ("exclusive", [*base, "-m", "exclusive",
                       "--junitxml", str(cfg.report_dir / "junit-exclusive.xml")]),
    ]


def _child_env(cfg: RunConfig) -> dict[str, str]:
    """The checks see the environment the training command will get; the harness's own
    package is made importable without changing what the checks report."""
    env = dict(cfg.env)
    root = str(Path(__file__).resolve().parent.parent)
    env["PREFLIGHT_ORIG_PYTHONPATH"] = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PREFLIGHT_HOSTNAME"] = cfg.host
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class _Progress(threading.Thread):
    """Tails the results file and prints each check as it finishes, and a heartbeat line when
    a long check has kept the run quiet for HEARTBEAT_S."""

    def __init__(self, path: Path, budget_s: float = 0.0, verbose: bool = False) -> None:
        super().__init__(daemon=True)
        self.verbose = verbose
        self.path, self.stop, self.offset = path, threading.Event(), 0
        self.budget_s, self.total, self.done = budget_s, 0, 0
        self.began = self.last = time.monotonic()

    def poll(self) -> None:
        import json

        from harness.summary import print_progress

        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "collected":
                self.total += len(record.get("checks", []))
            elif record.get("event") == "result":
                self.done += 1
                self.last = time.monotonic()
                if record.get("outcome") != "skip" or self.verbose:
                    print_progress(record)

    def heartbeat(self) -> None:
        from harness.summary import print_heartbeat

        now = time.monotonic()
        if now - self.last >= HEARTBEAT_S:
            self.last = now
            print_heartbeat(self.done, self.total, now - self.began, self.budget_s)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.poll()
            self.heartbeat()
        self.poll()


def run_checks(cfg: RunConfig) -> Report:
    """Run every phase within the budget; always returns a Report (never raises for checks)."""
    start = time.monotonic()
    report = Report(host=cfg.host, profile=cfg.profile.name, profile_source=cfg.profile_source,
                    tier=cfg.tier, budget_s=cfg.budget_s, warn_only=cfg.warn_only,
                    environment=report_environment(cfg.env))
    cfg.report_dir.mkdir(parents=True, exist_ok=True)
    results = cfg.report_dir / "results.jsonl"
    log = cfg.report_dir / "pytest-output.txt"
    for stale in (results, log):
        stale.unlink(missing_ok=True)
    deadline = start + max(cfg.budget_s - REPORT_RESERVE_S, 1.0)
    progress = _Progress(results, cfg.budget_s, cfg.verbose) if cfg.progress else None
    if progress:
        progress.start()
    timed_out = False
    try:
        for name, argv in pytest_phases(cfg, results):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            env = {**_child_env(cfg), **run_deadline_env(
                deadline, f"the run's {cfg.budget_s:g} s budget (tier {cfg.tier})")}
            res = proc.run(argv, timeout_s=remaining, env=env, output_path=log)
            report.phases.append({
                "phase": name, "argv": list(argv), "exit_code": res.returncode,
                "timed_out": res.timed_out, "duration_s": round(res.duration_s, 3),
            })
            if res.error:
                report.harness_errors.append(f"could not start pytest: {res.describe()}")
                break
            if res.timed_out:
                timed_out = True
                break
            if res.returncode not in (0, 1, 5):
                report.harness_errors.append(_pytest_problem(name, res.returncode, res.stdout))
    finally:
        if progress:
            progress.stop.set()
            progress.join(timeout=2)
    collected, by_nodeid, _ = load_results(results)
    report.checks = _merge(collected, by_nodeid, timed_out, cfg.budget_s)
    if timed_out:
        report.harness_errors.append(
            f"the checks did not finish within the {cfg.budget_s:g} s budget of tier {cfg.tier}; "
            "unfinished checks are reported as errors (see pytest-output.txt)"
        )
    report.finished_at = now_iso()
    report.duration_s = time.monotonic() - start
    return report


def _pytest_problem(phase: str, code: int | None, output: str) -> str:
    meaning = {2: "interrupted (a check file failed to import?)", 3: "internal error",
               4: "usage error"}.get(code or 0, f"exit status {code}")
    lines = [ln for ln in output.strip().splitlines() if ln.strip()][-15:]
    return f"pytest phase {phase!r}: {meaning}:\n" + "\n".join(lines)


def _merge(
    collected: list[dict[str, Any]], results: dict[str, dict[str, Any]], timed_out: bool,
    budget_s: float,
) -> list[dict[str, Any]]:
    """Every collected check gets a result; one that never reported one is an error."""
    merged = []
    seen = set()
    for c in collected:
        if c["nodeid"] in seen:
            continue
        seen.add(c["nodeid"])
        if c["nodeid"] in results:
            merged.append(results[c["nodeid"]])
            continue
        why = (f"did not finish within the run budget ({budget_s:g} s)" if timed_out
               else "produced no result (its pytest session died)")
        merged.append({**c, "outcome": "error", "message": f"[{c['id']}] {why}",
                       "warnings": [], "measurements": [], "remedy": "", "duration_s": 0.0})
    merged.extend(r for nodeid, r in results.items() if nodeid not in seen)
    return merged
