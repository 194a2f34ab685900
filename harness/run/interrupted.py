"""What a `preflight run` that did not end with its verdict leaves behind. Stopped by a signal:
report.json with verdict `interrupted` (the selection, the checks that finished with their
results and those that did not), the junit files no session wrote, the failure file, and, on a
multi-node job, its interrupted result for the peers; then, like a finished run, the metrics
file and the S3/CloudWatch uploads the run was asked for (`outputs`), within what is left of the
exit bound (harness.run.interrupt's timer ends the process at EXIT_WITHIN_S whatever they do; the
local files are written first, and report.json is uploaded last, so a cut upload leaves no
report.json in S3 rather than a stale one). Written by the signal cleanup once every process the
run started is stopped. Crashed (an uncaught exception, an unusable report folder): the same
files saying so, exit 3. Passed, but the command could not be exec'd: the report and the
failure file say so, exit 127."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.run.runner import RunConfig

from harness.base.settings import get_path
from harness.report.failure import FAILURE_REASON_CHARS, failure_reason
from harness.report.kube import write_termination_log
from harness.report.model import (
    Report,
    ReportDirError,
    command_for_report,
    describe_crash,
    now_iso,
    redact_outputs,
    report_environment,
    write_report,
)
from harness.results import results
from harness.run.interrupt import RunGuard, signal_name
from harness.run.junit import write_junit
from harness.run.selection import Events, account_interrupted, load_events

__all__ = ["ClusterAbort", "RunFinalizer", "failure_text", "interrupted_report"]

def _events(results_path: Path, since: float) -> Events:
    """The check sessions' events; none from a results file older than this run (`since`,
    wall clock: an earlier run's, the signal came before this run removed it)."""
    try:
        if results_path.stat().st_mtime < since:
            return Events()
    except OSError:
        return Events()
    return load_events(results_path)


def describe_selection(cfg: RunConfig | None, tier: str, keyword: str | None) -> str:
    """The selection as the user asked for it: `profile p5.48xlarge, tier preflight, -k 'X',
    suites built-in, site`."""
    parts = [f"profile {cfg.profile.name}"] if cfg is not None else []
    parts.append(f"tier {tier}")
    if keyword:
        parts.append(f"-k {keyword!r}")
    if cfg is not None:
        parts.append("suites " + ", ".join(s.name for s in cfg.resolved_suites()))
    return ", ".join(parts)


class ClusterAbort(Protocol):
    """What the finalizer needs of a multi-node run's control plane (harness.cluster.step's
    ClusterStep; run/ never imports cluster/)."""

    def abort(self, report: Report) -> None:
        """Publish this node's interrupted report to the master, best effort."""


def interrupted_report(guard: RunGuard, *, host: str, tier: str, cfg: RunConfig | None = None,
                       env: Mapping[str, str], started_at: str, started_wall: float,
                       started_mono: float, keyword: str | None = None) -> Report:
    """The report of a run stopped by `guard.signum`; `cfg` (the RunConfig) is None when the
    signal came before the run was configured (during start-up)."""
    signum = guard.signum or 0
    name = signal_name(signum)
    why = f"the run was interrupted by {name}"
    report = Report(
        host=host, profile=cfg.profile.name if cfg else "?",
        profile_source=cfg.profile_source if cfg else "?", tier=tier,
        budget_s=cfg.budget_s if cfg else 0.0, warn_only=cfg.warn_only if cfg else False,
        environment=report_environment(env), started_at=started_at)
    events = _events(cfg.report_dir / "results.jsonl", started_wall) if cfg else Events()
    proof = account_interrupted(events, why)
    report.checks = results(proof.checks)
    finished = [c for c in report.checks if c.id not in proof.not_finished]
    selected = proof.selection["selected"]
    selection = describe_selection(cfg, tier, keyword)
    if (cfg is None or guard.during_startup) and not finished:
        # Held during start-up, the signal stopped the run before any check could start (the
        # main thread may have gone on resolving the profile meanwhile: `cfg` is no clock).
        stage = "start-up"
        said = (f"during start-up{' (while the modules loaded)' if guard.during_startup else ''}"
                f", before any check ran ({selection})")
    elif selected is None:
        stage = "before the checks"
        said = (f"before the checks were collected: the selection ({selection}) was not known "
                "yet; no check had finished")
    else:
        stage = "checks" if proof.not_finished else "after the checks"
        said = f"{len(finished)} of the {selected} selected checks had finished ({selection})"
        if proof.not_finished:
            said += (f"; {len(proof.not_finished)} had not: "
                     + ", ".join(proof.not_finished[:20])
                     + (f" (+{len(proof.not_finished) - 20} more)"
                        if len(proof.not_finished) > 20 else ""))
        else:
            said += "; the signal came after them, before the hand-off"
    report.selection = {"tier": tier, "keyword": keyword,
                        "suites": [s.name for s in cfg.resolved_suites()] if cfg else None,
                        "described": selection, **proof.selection}
    report.interrupted = {
        "signal": name, "signum": signum, "exit_code": 128 + signum, "stage": stage,
        "during_startup": guard.during_startup, "selected": selected,
        "finished": [{"id": c.id, "outcome": c.outcome} for c in finished],
        "not_finished": list(proof.not_finished),
        "processes_stopped": guard.stopped, "unkillable": sorted(guard.unkillable),
    }
    report.harness_errors.append(
        f"interrupted by {name} {said}" if stage in ("start-up", "before the checks")
        else f"interrupted by {name}: {said}")
    report.harness_errors[-1] += (
        f"; stopped the {guard.stopped} process(es) the run had started"
        + (f", {len(guard.unkillable)} of them unkillable (D state)" if guard.unkillable else "")
        + "; the training command was not started")
    report.exit_code = 128 + signum
    report.finished_at = now_iso()
    report.duration_s = time.monotonic() - started_mono
    return report


def failure_text(report: Report, env: Mapping[str, str] | None = None) -> str:
    """The failure file's text, from the redacted report: its first FAILURE_REASON_CHARS say,
    alone, who stopped the run, what had finished, what had failed before the signal."""
    report = report.redacted(env)
    info = report.interrupted or {}
    done = info.get("finished", [])
    failed = [c for c in report.failed if c.id not in info.get("not_finished", [])]
    selected = info.get("selected")
    if info.get("stage") == "start-up":
        counted = "during start-up, before any check ran"
    elif selected is None:
        counted = "before the checks were collected"
    else:
        counted = f"{len(done)} of the {selected} selected checks finished"
    head = (f"gpu-preflight INTERRUPTED on {report.host} ({report.profile}, tier {report.tier}) "
            f"by {info.get('signal', '?')}: {counted}; the training command was not started.")
    if failed:
        head += " Failed before the signal: " + " | ".join(
            " ".join((c.message or c.id).split())[:200] for c in failed)
    if info.get("not_finished"):
        head += " Not finished: " + ", ".join(info["not_finished"])
    if len(head) > FAILURE_REASON_CHARS:
        head = head[:FAILURE_REASON_CHARS - 3] + "..."
    return head + "\n\nDetails:\n" + "\n".join(report.harness_errors) + "\n"


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


class RunFinalizer:
    """Where `preflight run` leaves its outputs when it does not reach its verdict's usual end:
    the finalizer it gives its RunGuard (a signal), and its crash and exec-failure paths. The
    CLI fills in `cfg`, `cluster`, `outputs` and `report` as the run gets them."""

    def __init__(self, guard: RunGuard, *, host: str, tier: str, report_dir: Path,
                 failure_file: Path | None, env: Mapping[str, str], command: Sequence[str],
                 write_failure: Callable[[Path, str, dict[str, str]], None],
                 keyword: str | None = None) -> None:
        self.guard, self.host, self.tier, self.env = guard, host, tier, dict(env)
        self.report_dir, self.failure_file, self.write_failure = report_dir, failure_file, write_failure
        self.keyword = keyword
        self.command = command_for_report(command, env)
        self.cfg: RunConfig | None = None
        self.cluster: ClusterAbort | None = None
        #: The run's metrics file and uploads (harness.commands.run sets it once it knows them).
        self.outputs: Callable[[Report], None] | None = None
        #: The run's own report once the checks have given it (a crash after them keeps them).
        self.report: Report | None = None
        self.started_at, self.started_wall, self.started_mono = now_iso(), time.time(), time.monotonic()

    def __call__(self, signum: int) -> None:
        report = interrupted_report(
            self.guard, host=self.host, tier=self.tier, cfg=self.cfg, env=self.env,
            started_at=self.started_at, started_wall=self.started_wall,
            started_mono=self.started_mono, keyword=self.keyword)
        report.command = self.command
        report = report.redacted(self.env)  # every output below renders the redacted record
        self.report = report
        self.leave(report, failure_text(report, self.env))
        print(f"{self.guard.what}: INTERRUPTED by {signal_name(signum)}; report: "
              f"{self.report_dir / 'report.json'}", flush=True)
        if self.cluster is not None:  # the peers name this node now, not at their deadline
            self.cluster.abort(report)
        if self.outputs is not None:  # last: they talk to the network (bounded by the exit timer)
            self.outputs(report)

    def leave(self, report: Report, failure: str) -> None:
        """report.json, junit.xml (from the report), the failure file and the
        Kubernetes termination message: each attempted on its own (a report folder that takes
        nothing must not cost the failure file), each problem said on stderr; then the files
        the sessions wrote, redacted."""
        try:
            write_report(report, self.report_dir, self.env)
        except ReportDirError as exc:
            _say(f"preflight: cannot write report.json: {exc}")
        try:
            write_junit(report, self.report_dir, env=self.env)
        except OSError as exc:
            _say(f"preflight: cannot write junit.xml in {self.report_dir}: {exc.strerror or exc}")
        if self.failure_file is not None:
            self.write_failure(self.failure_file, failure, self.env)
        with contextlib.suppress(OSError, ValueError):
            write_termination_log(failure, get_path("PREFLIGHT_TERMINATION_LOG", self.env))
        redact_outputs(self.report_dir, self.env)

    def crashed(self, exc: BaseException, exit_code: int) -> int:
        """An uncaught exception (a bug, an unusable report folder): the report so far, or a
        blank one, with the error named; the files written where they can be; `exit_code`."""
        report = self.report or self._blank()
        report.harness_errors.append(describe_crash(exc))
        report.exit_code = exit_code
        report.command = self.command
        report.finished_at = now_iso()
        report.duration_s = time.monotonic() - self.started_mono
        self.report = report
        self.leave(report, failure_reason(report, env=self.env))
        return exit_code

    def exec_failed(self, report: Report, reason: str, exit_code: int) -> int:
        """The checks passed but the command could not be exec'd: the report says so (its
        `handoff` section and exit code), and the failure file."""
        report.exit_code = exit_code
        report.extra["handoff"] = {"command": report.command, "executed": False,
                                   "error": reason, "exit_code": exit_code}
        text = (f"gpu-preflight on {report.host} ({report.profile}, tier {report.tier}): the "
                f"checks passed ({len(report.checks) - len(report.failed)} of "
                f"{len(report.checks)}) but the training command could not be started: {reason} "
                f"(exit {exit_code})\n")
        self.leave(report, text)
        return exit_code

    def _blank(self) -> Report:
        cfg = self.cfg
        report = Report(host=self.host, profile=cfg.profile.name if cfg else "?",
                        profile_source=cfg.profile_source if cfg else "?", tier=self.tier,
                        budget_s=cfg.budget_s if cfg else 0.0,
                        warn_only=cfg.warn_only if cfg else False,
                        environment=report_environment(self.env), started_at=self.started_at)
        if cfg is not None:
            report.profile_detail = cfg.profile.to_dict()
        return report
