"""The gpu-preflight pytest plugin: options, tier markers, profile resolution, check IDs as -k
keywords, the phase split, the check context around each test, and the results file the CLI
turns into reports.

Loaded by `preflight run` (`-p harness.plugin`), by `pytest -p harness.plugin`, and through the
`pytest11` entry point (named `harness.plugin`, so that `-p harness.plugin` and a conftest's
`pytest_plugins` find it already registered) in every pytest session of an environment where
gpu-preflight is installed. There it stays inert, options only, unless the session asks for it:
a --preflight-* option, `-p harness.plugin`, or a path into the built-in suite
(`pytest --pyargs checks`). Only then are markers, fact fixtures and hooks in force."""

from __future__ import annotations

import contextvars
import gc
import json
import os
import pkgutil
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.profiles.model import Profile

import pytest

import harness.fixtures as _fixtures_pkg
from harness import __version__
from harness.base.deadline import TimeoutHooks
from harness.base.jsontypes import JSONObject
from harness.base.redact import Redactor
from harness.base.tiers import TIERS
from harness.checking import CheckContext, CheckSpec, classify, combine, error_text, set_current
from harness.items import item_spec, reused_key, selection_key, suite_of, suites_key
from harness.results import CheckResult, Measurement, plain
from harness.run.interrupt import install_session_handlers
from harness.run.suites import BUILTIN_SUITE

#: Fact fixtures live in harness/fixtures/*.py (one module per area), registered when the plugin
#: is in force, so that a conftest.py can override any of them with canned facts.
FIXTURE_MODULES = [
    f"harness.fixtures.{m.name}" for m in pkgutil.iter_modules(_fixtures_pkg.__path__)
]
#: Phases of a run: `checks` (the whole selection in one session), or `node-local` checks (in
#: parallel under xdist) then `exclusive` ones alone.
PHASES = ("checks", "node-local", "exclusive", "confirm")

HELP_PROFILE = "Profile name (exact instance type, e.g. p5.48xlarge), or 'auto' to detect."
HELP_PROFILE_FILE = "TOML file with profile overrides or extra profiles."
HELP_PROFILE_JSON = ("the profile the run resolved (harness.run.runner writes it): used as it is, "
                     "never resolved again")
HELP_TIER = "Check tier: preflight (fast, every job), certify (nightly), diagnose (one bad node)."
HELP_RESULTS = "Append one JSON line per check result to this file (the CLI reads it)."
HELP_SYSROOT = "Root directory probes read /sys, /proc and /dev under (tests point it at a fake)."
HELP_PHASE = ("Run this phase's share of the selection: node-local (not exclusive), exclusive, "
              "checks (all of it, the default), or confirm (all of it: failed checks run again "
              "to confirm them, harness.run.confirm).")
HELP_REUSED = ("Check IDs (comma-separated) a node certificate stands for this run "
               "(harness.memory.certificate): deselected, never run, never reported as run.")
HELP_SUITE = ("NAME=PATH of a check suite (repeatable): plain tests under PATH get IDs relative "
              "to it, and results name the suite.")

MARKERS = {
    "preflight_check(id)": "a gpu-preflight check with a stable ID (set by @harness.checking.check)",
    "preflight": "tier: runs in every job's preflight (fast) and in every later tier",
    "certify": "tier: nightly certification and diagnose only",
    "diagnose": "tier: single-node debugging only (slowest)",
    "exclusive": "owns the GPUs or the network (collectives, bandwidth): runs alone, after the rest",
    "gpu": "needs a real GPU; the harness's own tests skip it on machines without one",
}

_active_key = pytest.StashKey[bool]()
_profile_key = pytest.StashKey["tuple[Profile, str]"]()
_phases_key = pytest.StashKey["_ItemState"]()
_redactor_key = pytest.StashKey[Redactor]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("preflight", "gpu-preflight")
    group.addoption("--preflight-profile", default=None, help=HELP_PROFILE)
    group.addoption("--preflight-profile-file", default=None, help=HELP_PROFILE_FILE)
    group.addoption("--preflight-profile-json", default=None, help=HELP_PROFILE_JSON)
    group.addoption("--preflight-tier", default="preflight", choices=TIERS, help=HELP_TIER)
    group.addoption("--preflight-results", default=None, help=HELP_RESULTS)
    group.addoption("--preflight-sysroot", default="/", help=HELP_SYSROOT)
    group.addoption("--preflight-phase", default=None, choices=PHASES, help=HELP_PHASE)
    group.addoption("--preflight-suite", action="append", default=[], metavar="NAME=PATH",
                    help=HELP_SUITE)
    group.addoption("--preflight-reused", default="", metavar="IDS", help=HELP_REUSED)


def _requested(config: pytest.Config) -> bool:
    """Does this session ask for gpu-preflight (see the module docstring)?"""
    opt = config.option
    if any(getattr(opt, name, None) for name in (
            "preflight_profile", "preflight_profile_file", "preflight_results",
            "preflight_phase", "preflight_suite", "preflight_reused")):
        return True
    if getattr(opt, "preflight_tier", "preflight") != "preflight" or \
            getattr(opt, "preflight_sysroot", "/") != "/":
        return True
    if "harness.plugin" in (getattr(opt, "plugins", None) or []):
        return True
    return any(_in_builtin_suite(arg.split("::", 1)[0], config) for arg in config.args)


def _in_builtin_suite(target: str, config: pytest.Config) -> bool:
    """Does a command-line argument name the built-in suite (a path, or `--pyargs checks...`
    that resolves to it: another project's own `checks` package does not count)?"""
    if getattr(config.option, "pyargs", False) and target.split(".")[0] == "checks":
        import importlib.util

        try:  # finds the package without importing it
            spec = importlib.util.find_spec("checks")
        except (ImportError, ValueError):
            return False
        places = getattr(spec, "submodule_search_locations", None) or []
        return any(Path(p).resolve() == BUILTIN_SUITE for p in places)
    try:
        path = (config.invocation_params.dir / target).resolve()
    except (OSError, ValueError):
        return False
    return path == BUILTIN_SUITE or BUILTIN_SUITE in path.parents


def active(config: pytest.Config) -> bool:
    """True when the plugin is in force in this session."""
    return config.stash.get(_active_key, False)


def pytest_configure(config: pytest.Config) -> None:
    if not _requested(config):
        return
    config.stash[_active_key] = True
    # One Redactor for the session (the run's environment is this process's): the results
    # are redacted as they are made; in a run's session also pytest's reports and results.jsonl.
    redactor = config.stash[_redactor_key] = Redactor.of()
    for marker, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{marker}: {doc}")
    for module in FIXTURE_MODULES:
        config.pluginmanager.import_plugin(module)
    suites = []
    for raw in config.getoption("preflight_suite"):
        name, sep, path = raw.partition("=")
        if not sep:
            raise pytest.UsageError(f"--preflight-suite wants NAME=PATH, got {raw!r}")
        suites.append((name, Path(path).resolve()))
    config.stash[suites_key] = suites
    # pytest-timeout: "timeout" when autoloaded, its module's name when loaded with -p (the
    # runner's sessions); each check's deadline, for harness.base.proc.
    if any(config.pluginmanager.hasplugin(n) for n in ("timeout", "pytest_timeout")):
        config.pluginmanager.register(TimeoutHooks(), "preflight-deadlines")
    path = config.getoption("preflight_results")
    if path:
        from harness.run.recorder import ResultsRecorder
        from harness.run.session_redaction import SessionRedaction

        config.pluginmanager.register(SessionRedaction(redactor), "preflight-redaction")
        worker = getattr(config, "workerinput", {}).get("workerid")
        recorder = ResultsRecorder(Path(path), worker, config.getoption("preflight_phase") or "checks",
                                   redact=redactor.obj)
        config.pluginmanager.register(recorder, "preflight-results")
        install_session_handlers()  # SIGTERM/SIGHUP end the session as Ctrl-C does


def resolve_profile(config: pytest.Config) -> tuple[Profile, str]:
    """The session's Profile (resolved once); raises pytest.UsageError naming what is wrong."""
    if _profile_key in config.stash:
        return config.stash[_profile_key]
    if config.getoption("preflight_profile_json"):
        config.stash[_profile_key] = _handed_profile(config.getoption("preflight_profile_json"))
        return config.stash[_profile_key]
    from harness.detect.resolve import resolve
    from harness.profiles.model import ProfileError

    try:
        profile, source = resolve(config.getoption("preflight_profile"),
                                  config.getoption("preflight_profile_file") or None,
                                  sysroot=Path(config.getoption("preflight_sysroot")))
    except ProfileError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[_profile_key] = (profile, source)
    return config.stash[_profile_key]


def _handed_profile(path: str) -> tuple[Profile, str]:
    """(Profile, source) from the file the runner wrote: the run resolved the profile once."""
    from harness.profiles.model import Profile

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return Profile(**data["profile"]), str(data["source"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise pytest.UsageError(f"--preflight-profile-json {path}: not a resolved profile "
                                f"({type(exc).__name__}: {exc})") from None

def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not active(config) or config.option.collectonly or not (
            config.getoption("preflight_results") or config.getoption("preflight_profile")):
        return None
    profile, source = resolve_profile(config)
    tier = config.getoption("preflight_tier")
    lines = [f"gpu-preflight {__version__}: profile {profile.name} (from {source}), tier {tier}"]
    lines += [f"gpu-preflight suite {name}: {path}" for name, path in config.stash[suites_key]]
    return lines


def pytest_collection_finish(session: pytest.Session) -> None:
    """A run's check session (a results file): what collection built (modules, items, fixture
    definitions) lives to the session's end, so the cyclic GC is told to stop walking it
    (gc.freeze): the collections during the checks and pytest's full ones at its end
    (unraisableexception) then walk only what the checks make (~40-100 ms of the session's
    CPU on the built-in suite, bench/bench_whole_split.py)."""
    if active(session.config) and session.config.getoption("preflight_results"):
        gc.freeze()


def pytest_itemcollected(item: pytest.Item) -> None:
    """`-k PF-GPU-003`, `-k "PF-GPU and not PF-GPU-012"`: the check ID is a keyword of its item
    (pytest -k matches substrings of names and keywords, case-insensitively)."""
    if active(item.config):
        item.extra_keyword_matches.add(item_spec(item).id)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """After -k/-m: deselect checks of a later tier than the one asked for, keep the selection
    (what this run must prove), then keep this phase's share of it."""
    if not active(config):
        return
    tier_index = TIERS.index(config.getoption("preflight_tier"))
    reused = {i for i in (config.getoption("preflight_reused") or "").split(",") if i}
    keep, drop, stood_for = [], [], set()
    for item in items:
        spec = item_spec(item)
        if TIERS.index(spec.tier) <= tier_index and spec.id in reused:
            stood_for.add(spec.id)  # a certificate stands for it: not run, not selected
        (drop if TIERS.index(spec.tier) > tier_index or spec.id in reused else keep).append(item)
    config.stash[reused_key] = sorted(stood_for)
    config.stash[selection_key] = list(keep)
    phase = config.getoption("preflight_phase") or "checks"
    if phase not in ("checks", "confirm"):
        exclusive = phase == "exclusive"
        drop += [i for i in keep if item_spec(i).exclusive != exclusive]
        keep = [i for i in keep if item_spec(i).exclusive == exclusive]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _time_for_the_worker(config, items)


def _time_for_the_worker(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The worker launch's own deadline scope (fixtures/worker.py give_launch_its_time), printed
    at start."""
    timeout = getattr(config.option, "timeout", None)
    if not timeout or config.option.collectonly:
        return
    from harness.fixtures.worker import give_launch_its_time

    line = give_launch_its_time(items, resolve_profile(config)[0],
                                config.getoption("preflight_tier"), os.environ, float(timeout))
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(f"gpu-preflight {line}")


@dataclass(slots=True)
class _ItemState:
    """A running check item's context and the (outcome, message, seconds) of each of its
    phases (setup, call, teardown) as pytest reports them."""

    ctx: CheckContext
    token: contextvars.Token[CheckContext | None]
    phases: dict[str, tuple[str, str, float]] = field(default_factory=dict)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if not active(item.config):
        return
    spec = item_spec(item)
    try:
        profile_name = resolve_profile(item.config)[0].name
    except pytest.UsageError:
        profile_name = "?"
    ctx = CheckContext(check_id=spec.id, profile=profile_name, remedy=spec.remedy)
    item.stash[_phases_key] = _ItemState(ctx, set_current(ctx))


def _where(rep: pytest.TestReport) -> str:
    crash = getattr(rep.longrepr, "reprcrash", None)
    return f" ({Path(crash.path).name}:{crash.lineno})" if crash is not None else ""


def _classify(spec: CheckSpec, call: pytest.CallInfo[None], rep: pytest.TestReport) -> tuple[str, str]:
    """(outcome, message) of one phase."""
    if rep.passed:
        return "pass", ""
    if rep.skipped:
        if hasattr(rep, "wasxfail"):
            return "skip", f"[{spec.id}] expected to fail (xfail): {rep.wasxfail}".rstrip(": ")
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return "skip", reason.removeprefix("Skipped: ")
    exc = call.excinfo.value if call.excinfo is not None else None
    where = _where(rep) if spec.kind == "test" else ""
    if exc is None:  # a failed report without an exception: what pytest wrote is the message
        return "error", error_text(spec, "error", str(rep.longrepr), rep.when, where)
    return classify(spec, exc, when=rep.when, where=where)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep: pytest.TestReport = yield
    state = item.stash.get(_phases_key, None)
    if not active(item.config) or state is None:
        return rep
    spec = item_spec(item)
    state.phases[rep.when] = (*_classify(spec, call, rep), rep.duration)
    # A test's own record_property values cross xdist's channel too: plain data only.
    rep.user_properties = [(str(k), plain(v)) for k, v in rep.user_properties]
    if rep.when == "teardown":
        set_current(None)
        # JSON text: junit.xml shows it as is (a dict would be its Python repr there).
        record = item.config.stash[_redactor_key].obj(_final(spec, item, state))  # as it is made
        rep.user_properties.append(("preflight_result", json.dumps(record, default=str)))
    return rep


def _final(spec: CheckSpec, item: pytest.Item, state: _ItemState) -> JSONObject:
    ctx = state.ctx
    phases = state.phases
    outcome, message = combine((phases[w][:2] for w in ("setup", "call", "teardown") if w in phases),
                                ctx.warnings)
    suite = suite_of(item)
    # Built as the typed record, sent as plain data: it crosses xdist's channel, ends in JSON.
    return CheckResult(
        id=spec.id, nodeid=item.nodeid, title=spec.title, tier=spec.tier, kind=spec.kind,
        suite=suite[0] if suite else "", outcome=outcome, message=message,
        warnings=tuple(ctx.warnings),
        measurements=tuple(Measurement.from_dict(m) for m in ctx.measurements),
        remedy=spec.remedy, duration_s=sum(p[2] for p in phases.values()),
        worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
    ).to_dict()
