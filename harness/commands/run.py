"""`preflight run [-- COMMAND]`: resolve the profile and the suites once, join the cluster,
run the checks, write the report, then exec the training command or stop with the reason.

The run lives under a RunGuard (harness.run.interrupt): a signal stops everything it started and
writes the interrupted report (harness.run.interrupted); nothing it started outlives it."""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from harness.base import handoff
from harness.base.deadline import DEADLINE_VAR
from harness.base.redact import Redactor
from harness.base.settings import HOST_NAME
from harness.base.settings import problems as setting_problems
from harness.base.settings import text as setting
from harness.cluster.job import job_topology
from harness.commands import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_USAGE, UsageError, say_crash
from harness.commands.memory import NodeMemory
from harness.commands.run_outputs import (
    preload_aws,
    print_run_summary,
    write_failure,
    write_junit_file,
    write_kubernetes,
    write_metrics,
)
from harness.detect.instance import hostname, opt_ml_dir, sagemaker_resource_config
from harness.detect.resolve import resolve
from harness.profiles.model import Profile, ProfileError
from harness.profiles.table import weakened_line
from harness.report.failure import failure_reason
from harness.report.model import (
    Report,
    check_report_dir,
    command_for_report,
    describe_crash,
    now_iso,
    redact_outputs,
    write_report,
)
from harness.run import confirm
from harness.run.interrupt import RunGuard
from harness.run.interrupted import RunFinalizer
from harness.run.report_lock import ReportLock, ReportLockBusy
from harness.run.runner import RunConfig, run_checks
from harness.run.selection import SelectionError, check_keyword
from harness.run.suites import SuiteError, describe, resolve_suites, source_overrides
from harness.topology.model import TopologyError

if TYPE_CHECKING:
    from harness.cluster.step import ClusterStep

__all__ = ["cmd_run"]

#: Seconds the report folder's lock outlasts the run's hard upper bound (the report, uploads).
LOCK_MARGIN_S = 120.0


def cmd_run(args: argparse.Namespace) -> int:
    """The run under a RunGuard; returns the exit code (harness.cli's docstring). The guard
    takes the signals the console script held (harness.base.sigmask) once its finalizer knows where
    the report goes; an uncaught exception is a harness error (exit 3) that still leaves the
    report and the failure file where they can be written."""
    json_out = None
    if getattr(args, "format", "text") == "json":  # stdout holds the summary object alone:
        json_out, sys.stdout = sys.stdout, sys.stderr  # every other line goes to stderr
    guard = RunGuard()
    held: list[ReportLock] = []
    try:
        finalizer, bad = _finalizer(args, guard)

        def finalize(signum: int) -> None:
            """The interrupted report, then the folder is free (harness.run.interrupt's cleaner)."""
            try:
                finalizer(signum)
            finally:
                for lock in held:
                    lock.release()

        guard.set_finalizer(finalize)
        guard.install()
        guard.checkpoint()  # a signal held during start-up: its cleanup writes the report
        try:
            return _run(args, guard, finalizer, json_out, held, bad)
        except UsageError:
            raise
        except Exception as exc:  # a bug or an unusable report folder: never a node verdict
            with guard.section():  # after a signal: parks; the interrupted report wins
                say_crash(exc)
                return finalizer.crashed(exc, EXIT_HARNESS)
    finally:
        for lock in held:
            lock.release()
        guard.close()
        if json_out is not None:
            sys.stdout = json_out


def _finalizer(args: argparse.Namespace, guard: RunGuard) -> tuple[RunFinalizer, dict[str, str]]:
    """Where this run's outputs go (host, report folder, failure file), known before anything
    that takes time: a signal or a crash from here on leaves its report there. Also every
    PREFLIGHT_* value its rule refuses (name -> why): the outputs' places are found without
    them, and the run refuses them once it holds its folder."""
    if getattr(args, "groups", None):  # the job's layout travels as PREFLIGHT_GROUPS
        os.environ["PREFLIGHT_GROUPS"] = args.groups
    bad = setting_problems(os.environ)  # every PREFLIGHT_* value, typed and in range, or exit 2
    os.environ.pop(DEADLINE_VAR, None)  # a deadline inherited from an outer run is not ours
    env = dict(os.environ)
    usable = {k: v for k, v in env.items() if k not in bad}  # where the early report goes
    host, report_dir, failure_file = _place(args, usable, env)
    finalizer = RunFinalizer(guard, host=host, tier=args.tier or setting(usable, "PREFLIGHT_TIER")
                             or "preflight", report_dir=report_dir, failure_file=failure_file,
                             env=env, command=_training_command(args),
                             write_failure=write_failure, keyword=args.keyword)
    return finalizer, bad


def _place(args: argparse.Namespace, usable: dict[str, str], env: dict[str, str]
           ) -> tuple[str, Path, Path | None]:
    """This node's name, its report folder (REPORT_DIR/NAME) and the failure file. A name that
    cannot name a folder inside REPORT_DIR (SageMaker's current_host, the kernel's hostname:
    PREFLIGHT_HOSTNAME's rule already refused its own) is a usage error."""
    host = hostname(usable)
    failure_file = _failure_path(args.failure_file, usable)
    if not re.fullmatch(HOST_NAME, host):
        message = (f"this node's name {host!r} cannot name its report folder (not a host name); "
                   "set PREFLIGHT_HOSTNAME")
        if failure_file is not None:
            write_failure(failure_file, f"gpu-preflight could not start: {message}", env)
        raise UsageError(message)
    report_dir = Path(args.report_dir) if args.report_dir else _default_report_dir(usable)
    return host, report_dir / host, failure_file


def _training_command(args: argparse.Namespace) -> list[str]:
    """What follows `--`."""
    command = list(args.command)
    return command[1:] if command[:1] == ["--"] else command


def _default_report_dir(env: dict[str, str]) -> Path:
    if report_dir := setting(env, "PREFLIGHT_REPORT_DIR"):
        return Path(report_dir)
    if sagemaker_resource_config(env) is not None:
        return opt_ml_dir(env) / "output" / "data" / "preflight"
    return Path("preflight-report")


def _failure_path(arg: str | None, env: dict[str, str]) -> Path | None:
    if arg:
        return Path(arg)
    if sagemaker_resource_config(env) is not None:
        return opt_ml_dir(env) / "output" / "failure"
    return None


def _workers(value: str, profile: Profile) -> int:
    if value == "auto":
        # Node-local GPU checks are subprocess-bound (nvidia-smi, dcgmi, fi_info): a few workers
        # overlap them. On CPU-only profiles the xdist start-up costs more than it saves.
        return min(4, os.cpu_count() or 1) if profile.has_gpus else 0
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--workers must be a number or 'auto', got {value!r}") from None
    if n < 0:
        raise UsageError(f"--workers must be >= 0, got {n}")
    return n


def _run(args: argparse.Namespace, guard: RunGuard, finalizer: RunFinalizer,
         json_out: TextIO | None, held: list[ReportLock], bad: dict[str, str]) -> int:
    env, command = finalizer.env, _training_command(args)
    host, report_dir, failure_file = finalizer.host, finalizer.report_dir, finalizer.failure_file
    tier = finalizer.tier
    usable = {k: v for k, v in env.items() if k not in bad}
    s3_uri = args.s3_uri or setting(usable, "PREFLIGHT_S3_URI")
    if s3_uri:  # a mistyped option: said before anything is written
        from harness.report.publish import parse_s3_uri  # uploads only: imported where asked

        try:
            parse_s3_uri(s3_uri)
        except ValueError as exc:
            raise UsageError(f"--s3-uri / PREFLIGHT_S3_URI: {exc}") from None
    check_report_dir(report_dir)  # ReportDirError: exit 3 naming it, before any check runs
    held += _lock(report_dir, host, failure_file, env)
    if bad:
        message = "; ".join(bad.values())
        _write_early_failure(message, finalizer)
        raise UsageError(message)
    namespace = args.cloudwatch_namespace or setting(env, "PREFLIGHT_CW_NAMESPACE")

    try:
        sysroot = Path(setting(env, "PREFLIGHT_SYSROOT") or "/")
        profile, profile_source = resolve(args.profile, args.profile_file, env=env, sysroot=sysroot)
    except ProfileError as exc:
        _write_early_failure(str(exc), finalizer)
        raise UsageError(str(exc)) from None
    try:  # what is judged: decided, and refused when it cannot run, before any check runs
        suites = resolve_suites(args.extra_checks, env)
        if args.keyword is not None:
            check_keyword(args.keyword)
    except (SuiteError, SelectionError) as exc:
        _write_early_failure(str(exc), finalizer)
        raise UsageError(str(exc)) from None
    sysroot = Path(setting(env, "PREFLIGHT_SYSROOT") or "/")
    try:  # certificates and the ledger (docs/certification.md): options refused before the checks
        memory = NodeMemory.start(reuse_certified=getattr(args, "reuse_certified", None),
                                  profile=profile, host=host, tier=tier, report_dir=report_dir,
                                  env=env, sysroot=sysroot, keyword=args.keyword)
    except UsageError as exc:
        _write_early_failure(str(exc), finalizer)
        raise

    cfg = RunConfig(
        profile=profile, profile_source=profile_source, tier=tier, report_dir=report_dir,
        host=host, keyword=args.keyword, warn_only=args.warn_only, command=command,
        workers=_workers(args.workers, profile), profile_file=args.profile_file,
        verbose=args.verbose, env=env,
        sysroot=Path(setting(env, "PREFLIGHT_SYSROOT") or "/"), suites=suites,
    )
    header = [f"host {host}, profile {profile.name} (from {profile_source}), tier {tier}; "
              f"hard upper bound {cfg.budget_s:g} s, which "
              f"{confirm.budget_line(profile.confirm_families)}"]
    header += [profile.description] if profile.origin == "derived" else []
    header += [line] if (line := weakened_line(profile)) else []
    header += describe(suites, source_overrides(env, args.profile_file))
    for line in header:  # names, paths and overrides the user gave: redacted like the rest
        print(f"gpu-preflight: {Redactor.of(env).text(line)}", flush=True)
    finalizer.cfg = cfg
    metrics_file = args.metrics_file or setting(env, "PREFLIGHT_METRICS_FILE")

    def outputs(report: Report) -> None:
        """The metrics file and the uploads, after a finished or an interrupted run."""
        write_metrics(metrics_file, report, env)
        if s3_uri or namespace:
            from harness.report.publish import publish

            publish(report, report_dir, env, s3_uri=s3_uri, namespace=namespace)

    finalizer.outputs = outputs
    if s3_uri or namespace:  # a signal's uploads must not spend the exit bound importing boto3
        threading.Thread(target=preload_aws, daemon=True, name="preflight-preload").start()
    cluster = _cluster_start(cfg, finalizer)  # None on a single-node job
    finalizer.cluster = cluster
    if not _remember(lambda: memory.before(multi_node=cluster is not None), env):
        memory.reuse = None  # a lookup that broke reuses nothing: a full run
    cfg.reused = memory.reused_ids
    for lock in held:
        lock.extend((cluster.t.hard_bound_s if cluster is not None else cfg.budget_s)
                    + LOCK_MARGIN_S)
    try:
        report = run_checks(cfg)
    except Exception as exc:  # the harness itself broke: still leave a report behind
        report = Report(host=host, profile=profile.name, profile_source=profile_source, tier=tier,
                        profile_detail=profile.to_dict())
        report.harness_errors.append(describe_crash(exc))
    finalizer.report = report
    report.command = command_for_report(command, env)
    if cluster is None:  # multi-node: the cluster verdict decides (another node may judge)
        report.refuse_if_nothing_judged()
    report.exit_code = (EXIT_OK if report.verdict == "pass" else EXIT_USAGE if report.usage_error
                        else EXIT_HARNESS if report.verdict == "error" else EXIT_FAILED)
    failure_text = None
    guard.checkpoint()  # after a signal: parks here; the peers get the interrupted result
    if cluster is not None:  # multi-node: every node takes the same verdict, or none hands off
        # The node-local results' junit.xml first: a node that dies in the cluster step (a
        # crash, kill -9) still leaves it, as its check sessions did; replaced below.
        write_junit_file(report, report_dir, env)
        failure_text = _cluster_finish(cluster, report)
    _remember(lambda: memory.after(report), env)  # the reuse, the ledger, a certificate
    # The record is complete: from here on only its redacted form exists, and every output
    # below (files, stdout, stderr, uploads, Kubernetes) renders it.
    report = report.redacted(env)
    finalizer.report = report
    with guard.section():  # after a signal: parks; the signal's cleanup writes the outputs
        write_report(report, report_dir, env)  # ReportDirError: the crash path, exit 3
        redact_outputs(report_dir, env)  # what pytest itself wrote beside the results
        # One junit.xml, every selected check by its ID: rendered from the redacted record
        # like report.json, so written after the sweep (which would read it all again).
        write_junit_file(report, report_dir, env)
        outputs(report)
        print_run_summary(report, report_dir, env, json_out, verbose=args.verbose)
        if report.usage_error:
            print(f"preflight: error: {report.usage_error}", file=sys.stderr, flush=True)
        if report.verdict != "pass" and failure_file is not None:
            write_failure(failure_file, failure_text or failure_reason(report, env=env), env)
        write_kubernetes(report, failure_text, env)
    if cluster is not None:
        cluster.close()
    if report.verdict == "pass" or (args.warn_only and not report.usage_error):
        if report.verdict != "pass" and command:  # without one, nothing is handed off
            print("preflight: --warn-only: handing off despite the failures above", flush=True)
        if command:
            for lock in held:
                lock.release()  # the trainer does not hold the report folder
            return guard.exec_gate(lambda: _hand_off(command, report, finalizer))
        return EXIT_OK if report.verdict == "pass" else report.exit_code
    return report.exit_code


def _remember(step: Callable[[], list[str]], env: dict[str, str]) -> bool:
    """Run a NodeMemory step and print its lines; a defect in it is a warning, never a crash
    or a changed verdict. False when it broke."""
    ok = True
    try:
        lines = step()
    except Exception as exc:
        ok, lines = False, [f"warning: certificates and ledger skipped: "
                            f"{type(exc).__name__}: {exc}"]
    for line in lines:
        print(f"gpu-preflight: {Redactor.of(env).text(line)}", flush=True)
    return ok


def _hand_off(command: list[str], report: Report, finalizer: RunFinalizer) -> int:
    """Exec the training command; when it cannot be, exit 127 with the report and the failure
    file saying so."""
    try:
        handoff.exec_command(command)
    except OSError as exc:
        reason = handoff.cannot_exec(command, exc)
        print(f"preflight: {reason}", file=sys.stderr, flush=True)
        return finalizer.exec_failed(report, reason, handoff.EXIT_EXEC_FAILED)
    return EXIT_OK  # only reached when the exec is replaced (tests)


def _lock(report_dir: Path, host: str, failure_file: Path | None,
          env: dict[str, str]) -> list[ReportLock]:
    """This run's hold on its report folder (harness.run.report_lock): another run's folder is a
    usage error naming that run (exit 2), written to the failure file, not to its report. A
    folder that cannot be written is not locked: the report's own write says so."""
    try:
        lock = ReportLock.acquire(report_dir, host=host)
    except ReportLockBusy as exc:
        if failure_file is not None:
            write_failure(failure_file, f"gpu-preflight could not start on {host}: {exc}", env)
        raise UsageError(str(exc)) from None
    except OSError as exc:
        print(f"preflight: warning: cannot lock the report folder {report_dir}: "
              f"{exc.strerror or exc}", file=sys.stderr, flush=True)
        return []
    if stale := lock.took_over:
        print(f"gpu-preflight: the report folder's lock of pid {stale.get('pid', '?')} on "
              f"{stale.get('machine', '?')} (started {stale.get('started_at', '?')}) was stale: "
              "that run is gone; taken over", flush=True)
    return [lock]


def _cluster_start(cfg: RunConfig, finalizer: RunFinalizer) -> ClusterStep | None:
    """Multi-node jobs: join the control plane before the local checks (harness.cluster)."""
    try:
        if job_topology(cfg.env) is None:
            return None  # single-node: the cluster step's imports (the verdict, pytest) not made
        from harness.cluster.step import ClusterStep

        return ClusterStep.start(profile=cfg.profile, tier=cfg.tier,
                                 local_budget_s=cfg.budget_s, env=cfg.env,
                                 failure_file=finalizer.failure_file)
    except TopologyError as exc:  # a malformed launcher variable: say which, leave a report
        _write_early_failure(str(exc), finalizer)
        raise UsageError(str(exc)) from None


def _cluster_finish(cluster: ClusterStep, report: Report) -> str | None:
    """Gather, judge and record the cluster verdict; the failure text every node writes."""
    try:
        verdict = cluster.finish(report)
    except Exception as exc:  # a bug in the cluster step: fail this node, never hang
        report.harness_errors.append(
            f"cluster step: internal error: {type(exc).__name__}: {exc}")
        report.exit_code = EXIT_HARNESS
        return None
    return verdict.text or None


def _write_early_failure(message: str, finalizer: RunFinalizer) -> None:
    """A run that could not start still leaves a report, junit.xml and the failure reason."""
    report = Report(host=finalizer.host, profile="?", profile_source="?", tier=finalizer.tier,
                    started_at=finalizer.started_at)
    report.harness_errors.append(message)
    report.exit_code = EXIT_USAGE
    report.finished_at = now_iso()
    with finalizer.guard.section():  # after a signal: parks; the interrupted report wins
        finalizer.leave(report, f"gpu-preflight could not start on {finalizer.host}: {message}")
