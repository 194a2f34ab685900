"""The gpu-preflight pytest plugin: options, tier markers, profile resolution, the check context
around each test, and the streaming results file the CLI turns into reports."""

from __future__ import annotations

import json
import os
import pkgutil
import time
from pathlib import Path
from typing import Any

import pytest

import harness.fixtures as _fixtures_pkg
from harness import __version__
from harness.checking import TIERS, CheckContext, CheckFailure, CheckSpec, ProbeError, _set_current
from harness.deadline import TimeoutHooks
from harness.interrupt import install_session_handlers

# Fact fixtures live in harness/fixtures/*.py (one module per area), loaded with this plugin so
# that a conftest.py can override any of them with canned facts.
pytest_plugins = [
    f"harness.fixtures.{m.name}" for m in pkgutil.iter_modules(_fixtures_pkg.__path__)
]

HELP_PROFILE = "Profile name (exact instance type, e.g. p5.48xlarge), or 'auto' to detect."
HELP_PROFILE_FILE = "TOML file with profile overrides or extra profiles."
HELP_TIER = "Check tier: preflight (fast, every job), certify (nightly), diagnose (one bad node)."
HELP_RESULTS = "Append one JSON line per check result to this file (the CLI reads it)."
HELP_SYSROOT = "Root directory probes read /sys, /proc and /dev under (tests point it at a fake)."

MARKERS = {
    "preflight_check(id)": "a gpu-preflight check with a stable ID (set by @harness.checking.check)",
    "preflight": "tier: runs in every job's preflight (fast) and in every later tier",
    "certify": "tier: nightly certification and diagnose only",
    "diagnose": "tier: single-node debugging only (slowest)",
    "exclusive": "owns the GPUs or the network (collectives, bandwidth): runs alone, after the rest",
    "gpu": "needs a real GPU; the harness's own tests skip it on machines without one",
}

_profile_key = pytest.StashKey[Any]()
_phases_key = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight", "gpu-preflight")
    group.addoption("--preflight-profile", default=None, help=HELP_PROFILE)
    group.addoption("--preflight-profile-file", default=None, help=HELP_PROFILE_FILE)
    group.addoption("--preflight-tier", default="preflight", choices=TIERS, help=HELP_TIER)
    group.addoption("--preflight-results", default=None, help=HELP_RESULTS)
    group.addoption("--preflight-sysroot", default="/", help=HELP_SYSROOT)


def pytest_configure(config: pytest.Config) -> None:
    for marker, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {doc}")
    if config.pluginmanager.hasplugin("timeout"):  # each check's deadline, for harness.proc
        config.pluginmanager.register(TimeoutHooks(), "preflight-deadlines")
    path = config.getoption("preflight_results")
    if path:
        worker = getattr(config, "workerinput", {}).get("workerid")
        config.pluginmanager.register(ResultsRecorder(Path(path), worker), "preflight-results")
        install_session_handlers()  # SIGTERM/SIGHUP end the session as Ctrl-C does


def resolve_profile(config: pytest.Config) -> Any:
    """The session's Profile (resolved once); raises pytest.UsageError naming what is wrong."""
    if _profile_key in config.stash:
        return config.stash[_profile_key]
    from harness.detect import detect_instance_type
    from harness.profiles import BUILTIN_PROFILES, ProfileError, get_profile, load_profile_file

    try:
        profiles = BUILTIN_PROFILES
        if config.getoption("preflight_profile_file"):
            profiles = load_profile_file(config.getoption("preflight_profile_file"))
        sysroot = Path(config.getoption("preflight_sysroot"))
        found = detect_instance_type(config.getoption("preflight_profile"), sysroot=sysroot)
        if found is None:
            raise ProfileError(
                "this machine has GPUs but no provider named its instance type; pass --profile "
                f"NAME (known: {', '.join(sorted(profiles))})"
            )
        profile = get_profile(found.name, profiles)
    except ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_profile_key] = (profile, found.source)
    return config.stash[_profile_key]


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not (config.getoption("preflight_results") or config.getoption("preflight_profile")):
        return None
    profile, source = resolve_profile(config)
    tier = config.getoption("preflight_tier")
    return [f"gpu-preflight {__version__}: profile {profile.name} (from {source}), tier {tier}"]


def _spec(item: pytest.Item) -> CheckSpec | None:
    fn = getattr(item, "function", None)
    return getattr(fn, "__preflight_check__", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect checks of a later tier than the one asked for."""
    tier_index = TIERS.index(config.getoption("preflight_tier"))
    keep, drop = [], []
    for item in items:
        spec = _spec(item)
        (drop if spec is not None and TIERS.index(spec.tier) > tier_index else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    spec = _spec(item)
    if spec is None:
        return
    try:
        profile_name = resolve_profile(item.config)[0].name
    except pytest.UsageError:
        profile_name = "?"
    ctx = CheckContext(check_id=spec.id, profile=profile_name, remedy=spec.remedy)
    item.stash[_phases_key] = {"ctx": ctx, "token": _set_current(ctx), "phases": {}}


def _classify(spec: CheckSpec, call: pytest.CallInfo[None], rep: pytest.TestReport) -> tuple[str, str]:
    """(outcome, message) of one phase."""
    if rep.passed:
        return "pass", ""
    if rep.skipped:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return "skip", reason.removeprefix("Skipped: ")
    exc = call.excinfo.value if call.excinfo is not None else None
    text = str(exc) if exc is not None else str(rep.longrepr)
    if isinstance(exc, CheckFailure):
        return "fail", text
    if isinstance(exc, AssertionError) and rep.when == "call":
        first = text.strip().splitlines()[0] if text.strip() else "assertion failed"
        return "fail", first if first.startswith(f"[{spec.id}]") else f"[{spec.id}] {first}"
    if exc is not None and type(exc).__name__ == "Failed" and "Timeout" in text:
        return "error", f"[{spec.id}] check did not finish: {text.strip()}"
    if isinstance(exc, ProbeError):
        return "error", f"[{spec.id}] {text}"
    name = type(exc).__name__ if exc is not None else "error"
    where = f" in {rep.when}" if rep.when != "call" else ""
    return "error", f"[{spec.id}] harness error{where}: {name}: {text.strip()[:2000]}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Any:
    rep: pytest.TestReport = yield
    spec = _spec(item)
    state = item.stash.get(_phases_key, None)
    if spec is None or state is None:
        return rep
    state["phases"][rep.when] = (*_classify(spec, call, rep), rep.duration)
    if rep.when == "teardown":
        _set_current(None)
        rep.user_properties.append(("preflight_result", _final(spec, item, state)))
    return rep


def _final(spec: CheckSpec, item: pytest.Item, state: dict[str, Any]) -> dict[str, Any]:
    ctx: CheckContext = state["ctx"]
    phases = state["phases"]
    order = {"error": 4, "fail": 3, "skip": 2, "pass": 0}
    outcome, message = "pass", ""
    for when in ("setup", "call", "teardown"):
        if when in phases:
            o, m, _ = phases[when]
            if order[o] > order[outcome] or (o == "skip" and outcome == "pass"):
                outcome, message = o, m
    if outcome == "pass" and ctx.warnings:
        outcome, message = "warn", "\n".join(ctx.warnings)
    return {
        "id": spec.id,
        "nodeid": item.nodeid,
        "title": spec.title,
        "tier": spec.tier,
        "outcome": outcome,
        "message": message,
        "warnings": ctx.warnings,
        "measurements": ctx.measurements,
        "remedy": spec.remedy,
        "duration_s": round(sum(p[2] for p in phases.values()), 3),
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }


class ResultsRecorder:
    """Registered only with --preflight-results: appends one JSON line per event and flushes it,
    so a killed session leaves every finished result behind.

    Under xdist the workers write (each line is one O_APPEND write, so lines never interleave):
    gw0 writes the collected checks, every worker its results; the controller writes only the
    final event. A worker that dies mid-check leaves that check without a result, which the
    runner reports as an error.
    """

    def __init__(self, path: Path, worker_id: str | None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.worker_id = worker_id
        self.distributing = False

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.distributing = session.config.pluginmanager.has_plugin("dsession")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.worker_id not in (None, "gw0"):
            return
        checks = []
        for item in session.items:
            spec = _spec(item)
            if spec is not None:
                checks.append({"id": spec.id, "nodeid": item.nodeid, "title": spec.title,
                               "tier": spec.tier, "exclusive": spec.exclusive})
        self.write({"event": "collected", "checks": checks, "time": time.time()})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown" or self.distributing:
            return
        for key, value in report.user_properties:
            if key == "preflight_result":
                self.write({"event": "result", **value})

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker_id is None:
            self.write({"event": "finished", "exitstatus": int(exitstatus), "time": time.time()})
