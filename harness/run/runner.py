"""Runs the check suite as pytest sessions in a supervised subprocess (so a check stuck in C++
cannot hang the harness), within the tier's hard time budget, and assembles the Report: a pass
is proven from what every phase selected and what reported (harness.run.selection)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import proc, settings
from harness.base.deadline import run_deadline_env
from harness.base.proc_result import ProcResult
from harness.profiles.model import Profile
from harness.report.model import Report, now_iso, report_environment
from harness.results import results as typed_results
from harness.run import confirm
from harness.run.progress import Progress
from harness.run.selection import (
    ItemRecord,
    PhaseRun,
    account,
    collection_problems,
    error_lines,
    load_events,
)
from harness.run.selection_messages import empty_selection, nothing_judged
from harness.run.suites import BUILTIN_SUITE, Suite, resolve_suites, source_overrides

__all__ = ["PROFILE_FILE", "Collection", "RunConfig", "checks_dir", "collect_checks",
           "missing_pieces", "pytest_phases", "run_checks", "write_profile"]

#: Seconds kept back from the budget to write reports after the checks are stopped.
REPORT_RESERVE_S = 5.0
#: The ini the check sessions use, so a pytest.ini/pyproject in the user's cwd cannot interfere.
#: Package data: pyproject.toml ships it in the wheel; `missing_pieces` checks it is there.
_INI = Path(__file__).with_name("checks.ini")
#: Seconds `preflight list` / `explain` give the collection of the suites.
COLLECT_TIMEOUT_S = 120.0


def checks_dir() -> Path:
    """The installed (or checked-out) check suite."""
    return BUILTIN_SUITE


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
    suites: Sequence[Suite] = ()
    """What to collect (default: the built-in suite, or PREFLIGHT_SUITE's replacement, plus
    PREFLIGHT_EXTRA_CHECKS; see harness.run.suites.resolve_suites)."""
    verbose: bool = False
    progress: bool = True
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    extra_pytest_args: Sequence[str] = ()
    reused: Sequence[str] = ()
    """Check IDs a node certificate stands for (harness.memory.certificate): deselected, never run."""

    @property
    def budget_s(self) -> float:
        return float(self.profile.run_budget_s.get(self.tier, 300.0))

    @property
    def check_timeout_s(self) -> float:
        return float(self.profile.check_timeout_s.get(self.tier, 120.0))

    def resolved_suites(self) -> list[Suite]:
        """`suites`, else what the environment names (harness.run.suites.resolve_suites)."""
        return list(self.suites) or resolve_suites(env=self.env)


#: The pytest plugins every check session loads, by module: xdist (node-local checks in
#: parallel) and pytest-timeout (--timeout), both required by the package.
PLUGINS = ("xdist.plugin", "pytest_timeout")


def _plugin_args(env: Mapping[str, str]) -> list[str]:
    """`-p MODULE` for PLUGINS and the site's PREFLIGHT_PYTEST_PLUGINS (autoload is off)."""
    names = [*PLUGINS, *(settings.get_list("PREFLIGHT_PYTEST_PLUGINS", env) or [])]
    return [arg for name in dict.fromkeys(names) for arg in ("-p", name)]


def _session_argv(suites: Sequence[Suite], *, tier: str, keyword: str | None,
                  results: Path, env: Mapping[str, str]) -> list[str]:
    """The pytest argv every check session shares (suites, config, plugin, selection)."""
    argv = [sys.executable, "-m", "pytest", *(str(s.path) for s in suites),
            "-c", str(_INI), "--rootdir", str(suites[0].path.parent),
            # Only the plugins the gate needs: an image's other pytest plugins (hypothesis,
            # pytest-cov, a broken one) neither slow every session nor change what it does
            # (PYTEST_DISABLE_PLUGIN_AUTOLOAD in _child_env; a site suite names its own in
            # PREFLIGHT_PYTEST_PLUGINS).
            *_plugin_args(env),
            "-p", "harness.plugin", "-p", "no:cacheprovider",
            # A site check file that does not import is a harness error naming it; the other
            # checks still run, so the report says everything it can.
            "--continue-on-collection-errors",
            "--preflight-tier", tier, "--preflight-results", str(results)]
    for s in suites:
        argv += ["--preflight-suite", f"{s.name}={s.path}"]
    if keyword:
        argv += ["-k", keyword]
    return argv


#: The profile the run resolved, as the check sessions receive it (they never resolve it again).
PROFILE_FILE = "profile.json"


def write_profile(cfg: RunConfig) -> Path:
    """`report_dir/profile.json`: the resolved profile and where it came from, for the
    sessions' --preflight-profile-json."""
    path = cfg.report_dir / PROFILE_FILE
    path.write_text(json.dumps({"profile": cfg.profile.to_dict(), "source": cfg.profile_source},
                               indent=2), encoding="utf-8")
    return path


def pytest_phases(cfg: RunConfig, results: Path) -> list[tuple[str, list[str]]]:
    """(name, pytest argv) per phase: node-local checks (in parallel when workers > 1), then
    the exclusive ones (collectives, bandwidth) alone. Each session selects the same checks
    and the plugin keeps its phase's share (--preflight-phase)."""
    base = [
        *_session_argv(cfg.resolved_suites(), tier=cfg.tier, keyword=cfg.keyword, results=results,
                       env=cfg.env),
        "--preflight-profile", cfg.profile.name,
        "--preflight-profile-json", str(cfg.report_dir / PROFILE_FILE),
        "--preflight-sysroot", str(cfg.sysroot),
        "--timeout", f"{cfg.check_timeout_s:g}",
        "-v" if cfg.verbose else "-q", "-rN",
    ]
    if cfg.profile_file:
        base += ["--preflight-profile-file", cfg.profile_file]
    if cfg.reused:
        base += ["--preflight-reused", ",".join(cfg.reused)]
    base += list(cfg.extra_pytest_args)
    def phase(name: str, *args: str) -> tuple[str, list[str]]:
        # No --junitxml: junit.xml is written from the report (harness.run.junit), one file
        # with every selected check by its ID, whatever the phases.
        return name, [*base, "--preflight-phase", name, *args]

    if cfg.workers <= 1:
        return [phase("checks")]
    return [phase("node-local", "-n", str(cfg.workers)), phase("exclusive")]


def missing_pieces(suites: Sequence[Suite]) -> list[str]:
    """What the runner needs that is not there (an incomplete install); [] when complete."""
    needed = [(_INI, "the check sessions' pytest configuration")]
    needed += [(s.path, f"check suite {s.name}") for s in suites]
    return [f"gpu-preflight is incomplete: {what} {path} is missing (reinstall the package)"
            for path, what in needed if not path.exists()]


def _importable(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the harness's own package importable first (installed or checked out)."""
    env = dict(env)
    root = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the plugins come by name (_plugin_args)
    return env


def _child_env(cfg: RunConfig) -> dict[str, str]:
    """The checks see the environment the training command will get; the harness's own
    package is made importable without changing what the checks report."""
    env = _importable(cfg.env)
    env["PREFLIGHT_ORIG_PYTHONPATH"] = cfg.env.get("PYTHONPATH", "")
    env["PREFLIGHT_HOSTNAME"] = cfg.host
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def run_checks(cfg: RunConfig) -> Report:
    """Run every phase within the budget; always returns a Report (never raises for checks)."""
    start = time.monotonic()
    suites = cfg.resolved_suites()
    report = Report(host=cfg.host, profile=cfg.profile.name, profile_source=cfg.profile_source,
                    profile_detail=cfg.profile.to_dict(), tier=cfg.tier, budget_s=cfg.budget_s,
                    warn_only=cfg.warn_only,
                    environment=report_environment(cfg.env),
                    suites=[s.to_dict() for s in suites],
                    overrides=[o.to_dict() for o in source_overrides(cfg.env, cfg.profile_file)])
    cfg.report_dir.mkdir(parents=True, exist_ok=True)
    results = cfg.report_dir / "results.jsonl"
    log = cfg.report_dir / "pytest-output.txt"
    write_profile(cfg)
    for stale in (results, log):  # an earlier run's junit.xml: harness.run.junit replaces it
        stale.unlink(missing_ok=True)
    problems = missing_pieces(suites)
    if problems:
        report.harness_errors.extend(problems)
        report.finished_at = now_iso()
        report.duration_s = time.monotonic() - start
        return report
    deadline = start + max(cfg.budget_s - REPORT_RESERVE_S, 1.0)
    progress = Progress(results, cfg.budget_s, cfg.verbose) if cfg.progress else None
    if progress:
        progress.start()
    timed_out = False
    runs: list[PhaseRun] = []
    try:
        for name, argv in pytest_phases(cfg, results):
            if runs and not load_events(results).has_phase(name):
                report.phases.append({"phase": name, "argv": list(argv), "exit_code": None,
                                      "timed_out": False, "duration_s": 0.0,
                                      "skipped": "no selected check belongs to this phase"})
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            offset = log.stat().st_size if log.exists() else 0
            res = proc.run(argv, timeout_s=remaining, env=_session_env(cfg, deadline),
                           output_path=log)
            report.phases.append({
                "phase": name, "argv": list(argv), "exit_code": res.returncode,
                "timed_out": res.timed_out, "duration_s": round(res.duration_s, 3),
            })
            if res.error:
                report.harness_errors.append(f"could not start pytest: {res.describe()}")
                break
            runs.append(PhaseRun(name, res.returncode, res.timed_out, _output_since(log, offset)))
            if res.timed_out:
                timed_out = True
                break
    finally:
        if progress:
            progress.stop.set()
            progress.join(timeout=2)
    unfinished = f"did not finish within the run budget ({cfg.budget_s:g} s)" if timed_out else None
    proof = account(load_events(results), runs, empty_message=empty_selection(cfg, suites),
                    unfinished=unfinished)
    report.checks = typed_results(proof.checks)
    if not timed_out and not proof.harness_errors:
        confirm.run_again(report, load_events(results), cfg.profile.confirm_families,
                          deadline=deadline, budget_s=cfg.budget_s,
                          results=cfg.report_dir / confirm.RESULTS_FILE,
                          session=_confirm_session(cfg, deadline, log), announce=cfg.progress)
    report.harness_errors.extend(proof.harness_errors)
    report.usage_error = proof.usage_error
    report.selection = {"tier": cfg.tier, "keyword": cfg.keyword,
                        "suites": [s.name for s in suites],
                        "pytest_args": list(cfg.extra_pytest_args), **proof.selection}
    if timed_out:
        report.harness_errors.append(
            f"the checks did not finish within the {cfg.budget_s:g} s budget of tier {cfg.tier}; "
            "unfinished checks are reported as errors (see pytest-output.txt)"
        )
    report.selection["nothing_judged"] = nothing_judged(cfg, suites, report)
    if cfg.reused:  # what the sessions left to the certificate (harness.plugin)
        report.selection["reused"] = sorted({i for record in load_events(results).collected
                                             for i in record.get("reused", [])})
    report.finished_at = now_iso()
    report.duration_s = time.monotonic() - start
    return report


def _session_env(cfg: RunConfig, deadline: float) -> dict[str, str]:
    """A check session's environment: the child's, and the run's deadline."""
    return {**_child_env(cfg), **run_deadline_env(
        deadline, f"the run's {cfg.budget_s:g} s budget (tier {cfg.tier})")}


def _confirm_session(cfg: RunConfig, deadline: float, log: Path) -> confirm.Session:
    """The confirming check session (harness.run.confirm): the first phase's, serial, selecting
    only the checks asked, writing to the same output file."""
    def run(ids: Sequence[str], results: Path, timeout_s: float) -> tuple[list[str], ProcResult]:
        again = dataclasses.replace(cfg, workers=0, keyword=confirm.keyword(ids, cfg.keyword))
        argv = pytest_phases(again, results)[0][1]
        argv[argv.index("--preflight-phase") + 1] = confirm.CONFIRM_PHASE
        return argv, proc.run(argv, timeout_s=timeout_s, env=_session_env(cfg, deadline),
                              output_path=log)
    return run


#: How much of a phase's output is kept to find pytest's own error lines in.
_PHASE_OUTPUT_BYTES = 256 * 1024


def _output_since(log: Path, offset: int) -> str:
    """The end of what one phase wrote to the shared output file."""
    try:
        with log.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(offset, fh.tell() - _PHASE_OUTPUT_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(slots=True)
class Collection:
    """What `preflight list` / `explain` collected: the selected checks and what went wrong."""

    checks: list[ItemRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Harness errors: files that could not be collected, a session that crashed."""
    usage_error: str = ""


def collect_checks(
    suites: Sequence[Suite], *, tier: str = "diagnose", keyword: str | None = None,
    env: Mapping[str, str] | None = None, timeout_s: float = COLLECT_TIMEOUT_S,
) -> Collection:
    """Collect (never run) the suites as `run` does: the checks `run` would select."""
    found = Collection(problems=missing_pieces(suites))
    if found.problems:
        return found
    env = os.environ if env is None else env
    with tempfile.TemporaryDirectory(prefix="preflight-list-") as tmp:
        results = Path(tmp) / "results.jsonl"
        argv = [*_session_argv(suites, tier=tier, keyword=keyword, results=results, env=env),
                "--collect-only", "-q", "--preflight-phase", "checks"]
        res = proc.run(argv, timeout_s=timeout_s, env=_importable(env), cwd=tmp)
        events = load_events(results)
    said = error_lines(res.output[-_PHASE_OUTPUT_BYTES:])
    if res.error or res.timed_out:
        found.problems.append(f"could not collect the checks: {res.describe()}")
    elif res.returncode == 4:
        found.usage_error = f"the check session refused its arguments (pytest usage error): {said}"
    elif not events.collected:
        found.problems.append(f"collecting the checks left no record (pytest exit status "
                              f"{res.returncode}): {said}")
    else:
        record = events.collected[0]
        found.checks = list(record.get("selected", []))
        found.problems = collection_problems(record.get("errors", []))
        if res.returncode not in (0, 5) and not found.problems:
            found.problems.append(f"collecting the checks ended with pytest exit status "
                                  f"{res.returncode}: {said}")
    return found
