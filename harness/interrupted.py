"""What an interrupted `preflight run` leaves behind: report.json with verdict `interrupted` (the
checks that finished, with their results, and those that did not), the failure file, and, on a
multi-node job, its interrupted result for the peers; then, like a finished run, the metrics
file and the S3/CloudWatch uploads the run was asked for (`outputs`), within what is left of the
exit bound (harness.interrupt's timer ends the process at EXIT_WITHIN_S whatever they do; the
local files are written first, and report.json is uploaded last, so a cut upload leaves no
report.json in S3 rather than a stale one). Written by the signal cleanup once every process the
run started is stopped."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.runner import RunConfig

from harness.interrupt import RunGuard, signal_name
from harness.report import Report, load_results, now_iso, report_environment
from harness.results import CheckResult, results

__all__ = ["RunFinalizer", "failure_text", "interrupted_report"]

#: SageMaker shows the first 1024 characters of the failure file (harness.report).
HEAD_CHARS = 1024


def _checks(results_path: Path, since: float, why: str) -> list[dict[str, Any]]:
    """Every collected check: its result, or an error saying it did not finish. A results file
    older than this run (`since`, wall clock) is a previous run's and is ignored."""
    try:
        if results_path.stat().st_mtime < since:
            return []
    except OSError:
        return []
    collected, results, _ = load_results(results_path)
    checks, seen = [], set()
    for c in collected:
        if c["nodeid"] in seen:
            continue
        seen.add(c["nodeid"])
        checks.append(results.get(c["nodeid"]) or CheckResult.no_result(
            c, f"not finished: {why}", remedy="", finished=False).to_dict())
    checks += [r for nodeid, r in results.items() if nodeid not in seen]
    return checks


def interrupted_report(guard: RunGuard, *, host: str, tier: str, cfg: RunConfig | None = None,
                       env: Mapping[str, str], started_at: str, started_wall: float,
                       started_mono: float) -> Report:
    """The report of a run stopped by `guard.signum`; `cfg` (the RunConfig) is None when the
    signal came before the run was configured."""
    signum = guard.signum or 0
    name = signal_name(signum)
    why = f"the run was interrupted by {name}"
    report = Report(
        host=host, profile=cfg.profile.name if cfg else "?",
        profile_source=cfg.profile_source if cfg else "?", tier=tier,
        budget_s=cfg.budget_s if cfg else 0.0, warn_only=cfg.warn_only if cfg else False,
        environment=report_environment(env), started_at=started_at)
    records = _checks(cfg.report_dir / "results.jsonl", started_wall, why) if cfg else []
    ended = [r.pop("finished", True) for r in records]
    report.checks = results(records)
    finished = [c for c, done in zip(report.checks, ended, strict=True) if done]
    unfinished = [c.id for c, done in zip(report.checks, ended, strict=True) if not done]
    report.interrupted = {
        "signal": name, "signum": signum, "exit_code": 128 + signum,
        "finished": [{"id": c.id, "outcome": c.outcome} for c in finished],
        "not_finished": unfinished,
        "processes_stopped": guard.stopped, "unkillable": sorted(guard.unkillable),
    }
    report.harness_errors.append(
        f"interrupted by {name}: {len(finished)} of {len(report.checks)} checks had finished"
        + (f" ({len(unfinished)} did not: {', '.join(unfinished[:20])})" if unfinished else "")
        + f"; stopped the {guard.stopped} process(es) the run had started"
        + (f", {len(guard.unkillable)} of them unkillable (D state)" if guard.unkillable else "")
        + "; the training command was not started")
    report.exit_code = 128 + signum
    report.finished_at = now_iso()
    report.duration_s = time.monotonic() - started_mono
    return report


def failure_text(report: Report, env: Mapping[str, str] | None = None) -> str:
    """The failure file's text, from the redacted report: its first HEAD_CHARS say, alone, who
    stopped the run, what had finished, what had failed before the signal."""
    report = report.redacted(env)
    info = report.interrupted or {}
    done = info.get("finished", [])
    failed = [c for c in report.failed if c.id not in info.get("not_finished", [])]
    head = (f"gpu-preflight INTERRUPTED on {report.host} ({report.profile}, tier {report.tier}) "
            f"by {info.get('signal', '?')}: {len(done)} of {len(report.checks)} checks finished; "
            "the training command was not started.")
    if failed:
        head += " Failed before the signal: " + " | ".join(
            " ".join((c.message or c.id).split())[:200] for c in failed)
    if info.get("not_finished"):
        head += " Not finished: " + ", ".join(info["not_finished"])
    if len(head) > HEAD_CHARS:
        head = head[:HEAD_CHARS - 3] + "..."
    return head + "\n\nDetails:\n" + "\n".join(report.harness_errors) + "\n"


class RunFinalizer:
    """The finalizer `preflight run` gives its RunGuard. The CLI fills in `cfg` and `cluster` as
    the run gets them."""

    def __init__(self, guard: RunGuard, *, host: str, tier: str, report_dir: Path,
                 failure_file: Path | None, env: Mapping[str, str], command: Sequence[str],
                 write_failure: Callable[[Path, str, dict[str, str]], None]) -> None:
        from harness.report import command_for_report

        self.guard, self.host, self.tier, self.env = guard, host, tier, dict(env)
        self.report_dir, self.failure_file, self.write_failure = report_dir, failure_file, write_failure
        self.command = command_for_report(command, env)
        self.cfg: Any = None
        self.cluster: Any = None
        #: The run's metrics file and uploads (harness.commands.run sets it once it knows them).
        self.outputs: Callable[[Report], None] | None = None
        self.started_at, self.started_wall, self.started_mono = now_iso(), time.time(), time.monotonic()
        self.report: Report | None = None

    def __call__(self, signum: int) -> None:
        from harness.junit import write_junit_if_missing
        from harness.report import redact_outputs, write_report

        report = interrupted_report(
            self.guard, host=self.host, tier=self.tier, cfg=self.cfg, env=self.env,
            started_at=self.started_at, started_wall=self.started_wall,
            started_mono=self.started_mono)
        report.command = self.command
        report = report.redacted(self.env)  # every output below renders the redacted record
        self.report = report
        write_report(report, self.report_dir, self.env)
        # The check session may not have written its junit.xml (stopped before or during it).
        write_junit_if_missing(report, self.report_dir / "junit.xml", self.env)
        if self.failure_file is not None:
            self.write_failure(self.failure_file, failure_text(report, self.env), self.env)
        redact_outputs(self.report_dir, self.env)  # before anything that may block
        print(f"{self.guard.what}: INTERRUPTED by {signal_name(signum)}; report: "
              f"{self.report_dir / 'report.json'}", flush=True)
        if self.cluster is not None:  # the peers name this node now, not at their deadline
            self.cluster.abort(report)
        if self.outputs is not None:  # last: they talk to the network (bounded by the exit timer)
            self.outputs(report)
