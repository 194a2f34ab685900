"""`preflight`: run the checks then exec the training command, or explain why not.

Exit codes (stable; automation keys on them):
  0  every check passed (or warned); the training command was exec'd, if one was given
  1  one or more checks failed or errored (a probe could not produce its fact)
  2  bad usage: unknown option, unknown profile, unreadable profile file, unknown check ID,
     a -k that is malformed or selects no check, a missing --extra-checks folder
  3  harness error: the checks could not be run or judged (pytest crashed, internal bug)
127 the checks passed but the training command could not be exec'd
128+N  stopped by signal N (143 SIGTERM, 130 SIGINT, 129 SIGHUP): everything the run started
       was stopped, the report (verdict `interrupted`) and the failure file were written, the
       training command was not started
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.catalog import Catalog
    from harness.interrupt import RunGuard

__all__ = ["EXIT_FAILED", "EXIT_HARNESS", "EXIT_OK", "EXIT_USAGE", "entrypoint", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HARNESS = 3

TIERS = ("preflight", "certify", "diagnose")
EXTRA_HELP = ("site checks to run beside the built-in suite: a folder of test_*.py files (plain "
              "pytest tests or @check functions) or one such file; repeatable; also "
              "$PREFLIGHT_EXTRA_CHECKS (colon-separated)")


class UsageError(Exception):
    """Bad input from the user; str() is the message (exit 2)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Prove this GPU node (and cluster) is fit to train, then exec the "
        "training command: preflight run -- torchrun ... train.py",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from harness import __version__

    parser.add_argument("--version", action="version", version=f"gpu-preflight {__version__}")
    sub = parser.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    run = sub.add_parser("run", help="run the checks, then exec the command after `--`")
    run.add_argument("--profile", default=None,
                     help="instance type (p5.48xlarge) or 'auto' (default; see README)")
    run.add_argument("--profile-file", default=None, help="TOML file of profile overrides")
    run.add_argument("--tier", choices=TIERS, default=None,
                     help="preflight (default; fast), certify (nightly), diagnose (one node)")
    run.add_argument("--report-dir", default=None,
                     help="where reports go (default: $PREFLIGHT_REPORT_DIR, under SageMaker "
                     "/opt/ml/output/data/preflight, else ./preflight-report); a folder per host")
    run.add_argument("-k", dest="keyword", default=None,
                     help="only checks matching EXPR (pytest -k over check IDs, ID prefixes and "
                     "test names: -k PF-ENV-001, -k \"PF-GPU and not PF-GPU-012\")")
    run.add_argument("--extra-checks", action="append", default=[], metavar="DIR",
                     help=EXTRA_HELP)
    run.add_argument("--warn-only", action="store_true",
                     help="report failures but exec the command anyway (exit status of the "
                     "command)")
    run.add_argument("--failure-file", default=None,
                     help="write the failure reason here (default under SageMaker: "
                     "/opt/ml/output/failure)")
    run.add_argument("--workers", default="auto",
                     help="parallel pytest-xdist workers for node-local checks: N or auto")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="show pytest's output and every measured value")
    run.add_argument("--s3-uri", default=None,
                     help="also upload the report folder to S3 URI/<date>/<job>/<host>/ "
                     "(default: $PREFLIGHT_S3_URI); a failed upload is only a warning")
    run.add_argument("--cloudwatch-namespace", default=None,
                     help="also put key figures as CloudWatch metrics in this namespace "
                     "(default: $PREFLIGHT_CW_NAMESPACE); a failed put is only a warning")
    run.add_argument("--metrics-file", default=None, metavar="PATH",
                     help="also write the results as Prometheus text (node_exporter textfile "
                     "collector: PATH ends in .prom), atomically (default: "
                     "$PREFLIGHT_METRICS_FILE); a failed write is only a warning")
    run.add_argument("command", nargs=argparse.REMAINDER,
                     help="-- then the training command to exec after a passing preflight")

    lst = sub.add_parser("list", help="list the checks: ID, tier, suite, description")
    lst.add_argument("--tier", choices=TIERS, default=None, help="only checks run in this tier")
    lst.add_argument("-k", dest="keyword", default=None, help="only checks `run -k EXPR` selects")
    lst.add_argument("--extra-checks", action="append", default=[], metavar="DIR", help=EXTRA_HELP)
    lst.add_argument("--json", action="store_true")

    prof = sub.add_parser("profiles", help="list profiles and the thresholds they hold")
    prof.add_argument("name", nargs="?", help="show one profile in full")
    prof.add_argument("--profile-file", default=None)
    prof.add_argument("--derive", action="store_true",
                      help="show the profile derived from this machine (PREFLIGHT_SYSROOT honoured)")
    prof.add_argument("--json", action="store_true")

    exp = sub.add_parser("explain", help="what a check verifies, why, and the remedy")
    exp.add_argument("check_id")
    exp.add_argument("--extra-checks", action="append", default=[], metavar="DIR", help=EXTRA_HELP)

    st = sub.add_parser("selftest", help="run the multi-node path on this machine with "
                        "injected faults: selftest cluster --nodes 4 --inject hang=2")
    st.add_argument("what", choices=["cluster"], help="cluster: N local processes as nodes")
    st.add_argument("--nodes", type=int, default=4, help="simulated nodes (default 4)")
    st.add_argument("--inject", action="append", default=[], metavar="FAULT=K[,K]",
                    help="fault on node K: slow, hang, crash, fail-check, absent (repeatable)")
    st.add_argument("--tier", choices=TIERS, default="preflight",
                    help="certify always runs the pairwise isolation")
    st.add_argument("--work-dir", default=None, help="reports and outputs (default: a temp dir)")
    st.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every selftest timeout (slow or loaded machines)")

    ins = sub.add_parser("inspect", help="parse a saved log or tool output (see `inspect -h`)")
    ins.add_argument("kind", help="what the file holds: env, nccl-log, fi-info, nccl-tests, "
                     "nvidia-smi, dcgm, kernel-log, train-step, topology (an unknown kind lists "
                     "the known ones)")
    ins.add_argument("file", help="path, or - for standard input")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.add_argument("--profile", default="local-cpu",
                     help="profile to judge against, where the kind judges (env)")
    ins.add_argument("--fail-on", choices=("problem", "harmful"), default=None,
                     help="exit 1 when the output shows a problem (problem), or a harmful "
                     "setting (harmful, env): a CI gate over job logs and env files")
    rep = sub.add_parser("report", help="summarise many nodes' reports; --html writes one page")
    rep.add_argument("source", help="a report folder tree (report.json per host), one "
                     "report.json, or an s3://bucket/prefix/ holding them")
    rep.add_argument("--html", default=None, help="write a self-contained HTML page here")
    lau = sub.add_parser("launch", help="start a SageMaker training job that certifies every node")
    lau.add_argument("--instance-type", required=True, help="e.g. ml.p5.48xlarge")
    lau.add_argument("--instance-count", required=True, type=int)
    lau.add_argument("--image", required=True, help="the gpu-preflight image URI (container/)")
    lau.add_argument("--role", required=True, help="SageMaker execution role ARN")
    lau.add_argument("--output", required=True,
                     help="s3:// output; reports go to OUTPUT/reports/<date>/<job>/<host>/")
    lau.add_argument("--tier", choices=TIERS, default="certify")
    lau.add_argument("--training-plan", default=None, help="SageMaker training plan ARN")
    lau.add_argument("--spot", action="store_true", help="managed spot training (needs --max-wait)")
    lau.add_argument("--max-wait", type=int, default=None, help="spot: max wait incl. run, s")
    lau.add_argument("--checkpoint-s3-uri", default=None)
    lau.add_argument("--max-runtime", type=int, default=None,
                     help="s (default: the profile's budget for the tier + 15 min)")
    lau.add_argument("--volume-gb", type=int, default=100)
    lau.add_argument("--job-name", default=None, help="default gpu-preflight-TIER-<time>")
    lau.add_argument("--cluster", default=None, help="CloudWatch Cluster dimension")
    lau.add_argument("--cloudwatch-namespace", default=None, help="put metrics from every node")
    lau.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="extra environment for the job (repeatable)")
    lau.add_argument("--dry-run", action="store_true",
                     help="print the CreateTrainingJob request as JSON and exit (no SDK needed)")
    return parser


def _default_report_dir(env: dict[str, str]) -> Path:
    from harness.detect import opt_ml_dir, sagemaker_resource_config

    if env.get("PREFLIGHT_REPORT_DIR"):
        return Path(env["PREFLIGHT_REPORT_DIR"])
    if sagemaker_resource_config(env) is not None:
        return opt_ml_dir(env) / "output" / "data" / "preflight"
    return Path("preflight-report")


def _failure_path(arg: str | None, env: dict[str, str]) -> Path | None:
    from harness.detect import opt_ml_dir, sagemaker_resource_config

    if arg:
        return Path(arg)
    if sagemaker_resource_config(env) is not None:
        return opt_ml_dir(env) / "output" / "failure"
    return None


def _workers(value: str, profile: object) -> int:
    if value == "auto":
        # Node-local GPU checks are subprocess-bound (nvidia-smi, dcgmi, fi_info): a few workers
        # overlap them. On CPU-only profiles the xdist start-up costs more than it saves.
        return min(4, os.cpu_count() or 1) if getattr(profile, "has_gpus", False) else 0
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--workers must be a number or 'auto', got {value!r}") from None
    if n < 0:
        raise UsageError(f"--workers must be >= 0, got {n}")
    return n


def _cmd_run(args: argparse.Namespace) -> int:
    """The run under a RunGuard: a signal stops everything it started and writes the
    interrupted report (harness.interrupt); nothing it started outlives it."""
    from harness.deadline import DEADLINE_VAR
    from harness.interrupt import RunGuard

    os.environ.pop(DEADLINE_VAR, None)  # a deadline inherited from an outer run is not ours
    guard = RunGuard().install()
    try:
        return _run(args, guard)
    finally:
        guard.close()


def _run(args: argparse.Namespace, guard: RunGuard) -> int:
    from harness import handoff
    from harness.detect import detect_instance_type, hostname
    from harness.interrupted import RunFinalizer
    from harness.profiles import BUILTIN_PROFILES, ProfileError, load_profile_file
    from harness.profiles_derive import resolve_detected
    from harness.report import command_for_report, failure_reason, redact_file, write_report
    from harness.runner import RunConfig, run_checks
    from harness.selection import SelectionError, check_keyword
    from harness.suites import SuiteError, describe, resolve_suites, source_overrides
    from harness.summary import print_summary

    env = dict(os.environ)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    host = hostname(env)
    report_dir = Path(args.report_dir) if args.report_dir else _default_report_dir(env)
    report_dir = report_dir / host
    failure_file = _failure_path(args.failure_file, env)
    tier = args.tier or env.get("PREFLIGHT_TIER") or "preflight"
    finalizer = RunFinalizer(guard, host=host, tier=tier, report_dir=report_dir,
                             failure_file=failure_file, env=env, command=command,
                             write_failure=_write_failure)
    guard.set_finalizer(finalizer)
    if tier not in TIERS:
        raise UsageError(f"PREFLIGHT_TIER={tier!r} is not one of {', '.join(TIERS)}")
    s3_uri = args.s3_uri or env.get("PREFLIGHT_S3_URI") or None
    namespace = args.cloudwatch_namespace or env.get("PREFLIGHT_CW_NAMESPACE") or None
    if s3_uri:
        from harness.publish import parse_s3_uri

        try:
            parse_s3_uri(s3_uri)
        except ValueError as exc:
            raise UsageError(f"--s3-uri / PREFLIGHT_S3_URI: {exc}") from None

    try:
        profiles = load_profile_file(args.profile_file) if args.profile_file else BUILTIN_PROFILES
        sysroot = Path(env.get("PREFLIGHT_SYSROOT", "/"))
        found = detect_instance_type(args.profile, env, sysroot=sysroot, known=profiles)
        profile, profile_source = resolve_detected(found, profiles, sysroot=sysroot)
    except ProfileError as exc:
        _write_early_failure(str(exc), host, tier, report_dir, failure_file, env)
        raise UsageError(str(exc)) from None
    try:  # what is judged: decided, and refused when it cannot run, before any check runs
        suites = resolve_suites(args.extra_checks, env)
        if args.keyword is not None:
            check_keyword(args.keyword)
    except (SuiteError, SelectionError) as exc:
        _write_early_failure(str(exc), host, tier, report_dir, failure_file, env)
        raise UsageError(str(exc)) from None

    cfg = RunConfig(
        profile=profile, profile_source=profile_source, tier=tier, report_dir=report_dir,
        host=host, keyword=args.keyword, warn_only=args.warn_only, command=command,
        workers=_workers(args.workers, profile), profile_file=args.profile_file,
        verbose=args.verbose, env=env,
        sysroot=Path(env.get("PREFLIGHT_SYSROOT", "/")), suites=suites,
    )
    print(f"gpu-preflight: host {host}, profile {profile.name} (from {profile_source}), tier "
          f"{tier}; hard upper bound {cfg.budget_s:g} s", flush=True)
    if profile.origin == "derived":
        print(f"gpu-preflight: {profile.description}", flush=True)
    for line in describe(suites, source_overrides(env, args.profile_file)):
        print(f"gpu-preflight: {line}", flush=True)
    finalizer.cfg = cfg
    cluster = _cluster_start(cfg, failure_file)  # None on a single-node job
    finalizer.cluster = cluster
    try:
        report = run_checks(cfg)
    except Exception as exc:  # the harness itself broke: still leave a report behind
        from harness.report import Report

        report = Report(host=host, profile=profile.name, profile_source=profile_source, tier=tier,
                        profile_detail=profile.to_dict())
        report.harness_errors.append(f"internal error: {type(exc).__name__}: {exc}")
    report.command = command_for_report(command, env)
    report.exit_code = (EXIT_OK if report.verdict == "pass" else EXIT_USAGE if report.usage_error
                        else EXIT_HARNESS if report.verdict == "error" else EXIT_FAILED)
    failure_text = None
    guard.checkpoint()  # after a signal: parks here; the peers get the interrupted result
    if cluster is not None:  # multi-node: every node takes the same verdict, or none hands off
        failure_text = _cluster_finish(cluster, report)
    with guard.section():  # after a signal: parks; the signal's cleanup writes the outputs
        write_report(report, report_dir, env)
        for name in ("junit.xml", "junit-exclusive.xml", "pytest-output.txt", "results.jsonl"):
            redact_file(report_dir / name, env)
        if s3_uri or namespace:
            from harness.publish import publish

            publish(report, report_dir, env, s3_uri=s3_uri, namespace=namespace)
        _write_metrics(args.metrics_file or env.get("PREFLIGHT_METRICS_FILE"), report, env)
        if sys.stdout.isatty():
            print_summary(report, verbose=args.verbose)
        else:  # a log (CloudWatch, Slurm output, a pipe): plain lines, never wrapped
            from harness.plain_output import print_plain_summary

            print_plain_summary(report)
        print(f"report: {report_dir / 'report.json'}", flush=True)
        if report.usage_error:
            print(f"preflight: error: {report.usage_error}", file=sys.stderr, flush=True)
        if report.verdict != "pass" and failure_file is not None:
            _write_failure(failure_file, failure_text or failure_reason(report), env)
        _kubernetes(report, failure_text, env)
    if cluster is not None:
        cluster.close()
    if report.verdict == "pass" or args.warn_only:
        if report.verdict != "pass":
            print("preflight: --warn-only: handing off despite the failures above", flush=True)
        if command:
            return guard.exec_gate(lambda: handoff.exec_command(command))
        return EXIT_OK if report.verdict == "pass" else report.exit_code
    return report.exit_code


def _cluster_start(cfg: object, failure_file: Path | None) -> object:
    """Multi-node jobs: join the control plane before the local checks (harness.cluster)."""
    from harness.cluster import ClusterStep, TopologyError

    try:
        return ClusterStep.start(profile=cfg.profile, tier=cfg.tier,
                                 local_budget_s=cfg.budget_s, env=cfg.env,
                                 failure_file=failure_file)
    except TopologyError as exc:  # a malformed launcher variable: say which, leave a report
        _write_early_failure(str(exc), cfg.host, cfg.tier, cfg.report_dir,  # type: ignore[attr-defined]
                             failure_file, cfg.env)  # type: ignore[attr-defined]
        raise UsageError(str(exc)) from None


def _cluster_finish(cluster: object, report: object) -> str | None:
    """Gather, judge and record the cluster verdict; the failure text every node writes."""
    try:
        verdict = cluster.finish(report)
    except Exception as exc:  # a bug in the cluster step: fail this node, never hang
        report.harness_errors.append(
            f"cluster step: internal error: {type(exc).__name__}: {exc}")
        report.exit_code = EXIT_HARNESS
        return None
    return verdict.text or None


def _write_metrics(path: str | None, report: object, env: dict[str, str]) -> None:
    """--metrics-file (harness.metrics): a problem is a warning, never a changed verdict."""
    if not path:
        return
    from harness.metrics import write_metrics_file
    from harness.redact import Redactor

    try:
        write_metrics_file(Redactor(env).obj(report.to_dict()), Path(path))  # type: ignore[attr-defined]
    except ImportError:
        print("preflight: warning: --metrics-file needs prometheus_client "
              "(pip install 'gpu-preflight[metrics]')", file=sys.stderr, flush=True)
    except OSError as exc:
        print(f"preflight: warning: cannot write metrics file {path}: {exc.strerror or exc}",
              file=sys.stderr, flush=True)


def _kubernetes(report: object, failure_text: str | None, env: dict[str, str]) -> None:
    """Kubernetes outputs (harness.kube): /dev/termination-log, PREFLIGHT_K8S_MARK."""
    from harness.kube import apply
    from harness.redact import Redactor
    from harness.report import failure_reason

    if report.verdict != "pass":  # type: ignore[attr-defined]
        failure_text = Redactor(env).text(failure_text or failure_reason(report))  # type: ignore[arg-type]
    apply(Redactor(env).obj(report.to_dict()), env, failure_text,  # type: ignore[attr-defined]
          say=lambda text: print(text, file=sys.stderr, flush=True))


def _write_failure(path: Path, text: str, env: dict[str, str]) -> None:
    from harness.redact import Redactor

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Redactor(env).text(text), encoding="utf-8")
    except OSError as exc:
        print(f"preflight: cannot write failure file {path}: {exc.strerror}", file=sys.stderr)


def _write_early_failure(
    message: str, host: str, tier: str, report_dir: Path, failure_file: Path | None,
    env: dict[str, str],
) -> None:
    """A run that could not start still leaves a report (and the SageMaker failure reason)."""
    from harness.report import Report, now_iso, write_report

    report = Report(host=host, profile="?", profile_source="?", tier=tier)
    report.harness_errors.append(message)
    report.exit_code = EXIT_USAGE
    report.finished_at = now_iso()
    with contextlib.suppress(OSError):
        write_report(report, report_dir, env)
    if failure_file is not None:
        _write_failure(failure_file, f"gpu-preflight could not start on {host}: {message}", env)


def _catalog(args: argparse.Namespace, tier: str, keyword: str | None) -> Catalog:
    """The checks `run` would select (harness.catalog); its problems said on stderr."""
    from harness.catalog import CatalogError, catalog

    try:
        found = catalog(args.extra_checks, tier=tier, keyword=keyword)
    except CatalogError as exc:
        raise UsageError(str(exc)) from None
    for problem in found.problems:
        print(f"preflight: harness error: {problem}", file=sys.stderr)
    return found


def _cmd_list(args: argparse.Namespace) -> int:
    import json

    from harness.catalog import list_lines, list_records

    found = _catalog(args, args.tier or TIERS[-1], args.keyword)
    lines = ([json.dumps(list_records(found.checks), indent=2)] if args.json
             else list_lines(found.checks))
    if lines:
        print("\n".join(lines))
    return EXIT_HARNESS if found.problems else EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from harness.catalog import explain_lines, find

    found = _catalog(args, TIERS[-1], None)
    spec = find(found.checks, args.check_id)
    if spec is None:
        known = ", ".join(c["id"] for c in found.checks)
        raise UsageError(f"unknown check {args.check_id!r}; known checks: {known}")
    print("\n".join(explain_lines(spec, found.suites)))
    return EXIT_OK


def _cmd_profiles(args: argparse.Namespace) -> int:
    import json

    from harness.profiles import (
        BUILTIN_PROFILES,
        ProfileError,
        get_profile,
        load_profile_file,
        threshold_rows,
    )

    try:
        profiles = load_profile_file(args.profile_file) if args.profile_file else BUILTIN_PROFILES
        if args.derive:
            from harness.profiles_derive import resolve_profile

            sysroot = Path(os.environ.get("PREFLIGHT_SYSROOT", "/"))
            chosen = [resolve_profile("derived", "--derive", profiles, sysroot=sysroot)[0]]
            args.name = chosen[0].name
        else:
            chosen = [get_profile(args.name, profiles)] if args.name else list(profiles.values())
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({p.name: p.to_dict() for p in chosen}, indent=2))
        return EXIT_OK
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not args.name:
        table = Table(title="gpu-preflight profiles")
        for col in ("profile", "GPUs", "model", "fabric", "EFA", "GDR", "NVLink busbw GB/s",
                    "net busbw GB/s", "description"):
            table.add_column(col)
        for p in chosen:
            table.add_row(p.name, str(p.num_gpus), p.gpu_model or "-", p.fabric or "-",
                          str(p.num_efa_devices), "yes" if p.gdr_required else "no",
                          _num(p.nvlink_busbw_gb_s_min), _num(p.net_busbw_gb_s_min), p.description)
        console.print(table)
        console.print("`preflight profiles NAME` shows every threshold with its source.")
        return EXIT_OK
    p = chosen[0]
    table = Table(title=f"{p.name}: {p.description}")
    for col in ("field (unit in the name)", "value", "source"):
        table.add_column(col)
    for row in threshold_rows(p):
        table.add_row(*row)
    console.print(table)
    return EXIT_OK


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _cmd_inspect(args: argparse.Namespace) -> int:
    import json

    from harness.parsers import ParseError, inspect_kinds
    from harness.profiles import ProfileError, get_profile

    kinds = inspect_kinds()
    if args.kind not in kinds:
        raise UsageError(f"unknown kind {args.kind!r}; known kinds: {', '.join(sorted(kinds))}")
    try:
        profile = get_profile(args.profile)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    try:
        stream = sys.stdin if args.file == "-" else open(  # noqa: SIM115
            args.file, encoding="utf-8", errors="replace", newline=""
        )
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        with stream:
            result = kinds[args.kind](stream, profile=profile)
    except ParseError as exc:
        error = {"error": str(exc), "kind": args.kind, "file": args.file}
        print(json.dumps(error, indent=2) if args.json else f"preflight inspect: {exc}",
              file=sys.stdout if args.json else sys.stderr)
        return EXIT_USAGE
    from harness.redact import Redactor

    result = Redactor().obj(result)
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        _print_plain(result)
    if args.fail_on:
        from harness.inspect_gate import problems

        found = problems(args.kind, result, args.fail_on)
        for line in found[:20]:
            print(f"preflight inspect: {args.fail_on}: {line}", file=sys.stderr)
        return EXIT_FAILED if found else EXIT_OK
    return EXIT_OK


def _print_plain(value: object, indent: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list) and v:
                print(f"{indent}{k}:")
                _print_plain(v, indent + "  ")
            else:
                print(f"{indent}{k}: {v}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                print(f"{indent}-")
                _print_plain(v, indent + "  ")
            else:
                print(f"{indent}- {v}")
    else:
        print(f"{indent}{value}")


def _cmd_selftest(args: argparse.Namespace) -> int:
    from harness.cluster.selftest import (
        SelftestConfig,
        SelftestError,
        default_work_dir,
        parse_injections,
        run_selftest,
        selftest_timeouts,
    )

    try:
        cfg = SelftestConfig(
            nodes=args.nodes, faults=parse_injections(args.inject, args.nodes), tier=args.tier,
            work_dir=Path(args.work_dir) if args.work_dir else default_work_dir(),
            timeouts=selftest_timeouts(args.timeout_scale),
        )
    except SelftestError as exc:
        raise UsageError(str(exc)) from None
    from harness.cluster.selftest import SELFTEST_TERM_GRACE_S, print_interrupted
    from harness.interrupt import RunGuard

    guard = RunGuard("preflight selftest", term_grace_s=SELFTEST_TERM_GRACE_S).install()
    guard.set_finalizer(lambda signum: print_interrupted(cfg, signum))
    try:
        code = run_selftest(cfg).exit_code
        with guard.section():  # after a signal: parks; the cleanup prints and exits 128+N
            return code
    finally:
        guard.close()


def _cmd_report(args: argparse.Namespace) -> int:
    from harness.figures import bad_nodes
    from harness.html_report import ReportSourceError, load_reports, write_html

    try:
        reports = load_reports(args.source)
    except ReportSourceError as exc:
        raise UsageError(str(exc)) from None
    for problem in reports.problems:
        print(f"preflight report: skipped {problem}", file=sys.stderr)
    failed = [r for r in reports.reports if r.get("verdict") != "pass"]
    print(f"{len(reports.reports)} nodes, {len(failed)} failed")
    for bad in bad_nodes(reports.reports):
        print(f"  bad node {bad.host}: {'; '.join(bad.reasons)}")
    if args.html:
        print(f"html: {write_html(reports, Path(args.html))}")
    return EXIT_FAILED if failed else EXIT_OK


def _cmd_launch(args: argparse.Namespace) -> int:
    import json

    from harness.launch import LaunchError, LaunchSpec, build_request, submit

    env: dict[str, str] = {}
    for item in args.env:
        name, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env wants NAME=VALUE, got {item!r}")
        env[name] = value
    try:
        spec = LaunchSpec(
            instance_type=args.instance_type, instance_count=args.instance_count,
            image=args.image, role=args.role, output=args.output, tier=args.tier,
            training_plan=args.training_plan, spot=args.spot, max_wait_s=args.max_wait,
            checkpoint_s3_uri=args.checkpoint_s3_uri, max_runtime_s=args.max_runtime,
            volume_gb=args.volume_gb, job_name=args.job_name, cluster=args.cluster,
            cloudwatch_namespace=args.cloudwatch_namespace, environment=env,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.dry_run:
        print(json.dumps(build_request(spec), indent=2))
        return EXIT_OK
    try:
        name = submit(spec)
    except LaunchError as exc:
        print(f"preflight launch: {exc}", file=sys.stderr)
        return EXIT_HARNESS
    print(f"started training job {name}: {spec.instance_count} x {spec.instance_type}, "
          f"tier {spec.tier}")
    print(f"reports: {spec.reports_uri}<date>/{name}/<host>/report.json; when it ends: "
          f"preflight report {spec.reports_uri}<date>/{name}/ --html report.html")
    return EXIT_OK


COMMANDS = {
    "run": _cmd_run,
    "selftest": _cmd_selftest,
    "list": _cmd_list,
    "profiles": _cmd_profiles,
    "explain": _cmd_explain,
    "inspect": _cmd_inspect,
    "report": _cmd_report,
    "launch": _cmd_launch,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return COMMANDS[args.cmd](args)
    except UsageError as exc:
        print(f"preflight: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def entrypoint() -> None:
    """Console-script entry point."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`preflight list | head`): say nothing more, as the Python docs
        # recommend (stdout pointed at devnull so the exit-time flush does not raise again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
