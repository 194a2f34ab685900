"""`preflight`: run the checks then exec the training command, or explain why not.

Exit codes (stable; automation keys on them):
  0  every check passed (or warned); the training command was exec'd, if one was given
  1  one or more checks failed or errored (a probe could not produce its fact)
  2  bad usage: unknown option, unknown profile, a profile file that does not validate
     (unreadable, not UTF-8, invalid TOML, a bad value, a weakening without weakened_because),
     unknown check ID, a -k that is malformed or selects no check, a run whose selected
     checks were all skipped (nothing judged), a missing --extra-checks folder, a
     PREFLIGHT_* value its rule refuses, a report folder another run is using
  3  harness error: the checks could not be run or judged (pytest crashed, an unusable
     report folder, any uncaught exception: a bug); never a node verdict
127 the checks passed but the training command could not be exec'd (the report says so)
128+N  stopped by signal N (143 SIGTERM, 130 SIGINT, 129 SIGHUP), at any moment from start-up
       to the hand-off: everything the run started was stopped, the report (verdict
       `interrupted`), junit.xml and the failure file were written, the training command was
       not started
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # argparse is imported once the signals are held (entrypoint, _parser)
    import argparse

from harness import __version__
from harness.base import sigmask
from harness.base.settings import SettingError
from harness.base.tiers import TIERS
from harness.commands import EXIT_HARNESS, EXIT_USAGE, UsageError, say_crash

__all__ = ["entrypoint", "main"]

EXTRA_HELP = ("site checks to run beside the built-in suite: a folder of test_*.py files (plain "
              "pytest tests or @check functions) or one such file; repeatable; also "
              "$PREFLIGHT_EXTRA_CHECKS (colon-separated)")


def _parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(
        prog="preflight",
        description="Prove this GPU node (and cluster) is fit to train, then exec the "
        "training command: preflight run -- torchrun ... train.py",
        epilog=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    run.add_argument("--groups", default=None, metavar="SPEC",
                     help="the job's parallel layout (tp=8,pp=4,ep=2, or a JSON/TOML file): on "
                     "a multi-node job the bandwidth gate and isolation also run inside each "
                     "tensor/expert-parallel group that spans nodes (PREFLIGHT_GROUPS; "
                     "docs/bandwidth.md)")
    run.add_argument("--warn-only", action="store_true",
                     help="report failures but exec the command anyway (exit status of the "
                     "command); without a command, the exit status is the checks' (1 on a "
                     "failure)")
    run.add_argument("--failure-file", default=None,
                     help="write the failure reason here (default under SageMaker: "
                     "/opt/ml/output/failure)")
    run.add_argument("--workers", default="auto",
                     help="parallel pytest-xdist workers for node-local checks: N or auto")
    run.add_argument("--format", choices=("text", "json"), default="text",
                     help="json: the run's outcome as one JSON object on stdout (verdict, exit "
                     "code, counts, what needs attention, the report's path); the progress "
                     "lines go to stderr")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="as each check finishes, print every value it measured with its "
                     "threshold, and why it did not pass or does not apply; the summary lists "
                     "the checks that do not apply; pytest's own output (run with -v) is in "
                     "REPORT_DIR/pytest-output.txt")
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
    run.add_argument("--reuse-certified", default=None, metavar="MAX_AGE",
                     help="at job start, reuse a certify pass of this node younger than MAX_AGE "
                          "(90m, 6h, 2d) whose identity matches: only the checks whose facts "
                          "can change run (docs/certification.md; PREFLIGHT_REUSE_CERTIFIED)")
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
    exp.add_argument("--json", action="store_true", help="the same facts as one JSON object")
    exp.add_argument("--extra-checks", action="append", default=[], metavar="DIR", help=EXTRA_HELP)

    st = sub.add_parser("selftest", help="run the multi-node path on this machine with "
                        "injected faults: selftest cluster --nodes 4 --inject hang=2")
    st.add_argument("what", choices=["cluster"], help="cluster: N local processes as nodes")
    st.add_argument("--nodes", type=int, default=4, help="simulated nodes (default 4)")
    st.add_argument("--inject", action="append", default=[], metavar="FAULT=K[,K]",
                    help="fault on node K: slow, hang, crash, fail-check, absent, sdc (one bit of its "
                    "SDC result flipped), slowlink (the link between the slowlink nodes) "
                    "(repeatable)")
    st.add_argument("--groups", default=None, metavar="SPEC",
                    help="the job layout every node is given (tp=2 with one rank per node: "
                    "groups of two nodes; see `run --groups`)")
    st.add_argument("--tier", choices=TIERS, default="preflight",
                    help="certify always runs the pairwise isolation")
    st.add_argument("--work-dir", default=None, help="reports and outputs (default: a temp dir)")
    st.add_argument("--json", action="store_true",
                    help="print the outcome as one JSON object (nodes, verdict, bad nodes)")
    st.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every selftest timeout (slow or loaded machines)")

    ins = sub.add_parser("inspect", help="parse a saved log or tool output (see `inspect -h`)")
    ins.add_argument("kind", help="what the file holds: env, nccl-log, fi-info, nccl-tests, "
                     "nvidia-smi, dcgm, kernel-log, train-step, topology (an unknown kind lists "
                     "the known ones)")
    ins.add_argument("file", help="path, or - for standard input")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.add_argument("--profile", default=None,
                     help="profile to judge against, where the kind judges (env, nccl-tests, "
                     "...); default local-cpu, whose GPU verdicts are n/a (a hint says so)")
    ins.add_argument("--fail-on", choices=("problem", "harmful"), default=None,
                     help="exit 1 when the output shows a problem (problem), or a harmful "
                     "setting (harmful, env): a CI gate over job logs and env files")
    rep = sub.add_parser("report", help="summarise many nodes' reports; --html writes one page")
    rep.add_argument("source", help="a report folder tree (report.json per host), one "
                     "report.json, or an s3://bucket/prefix/ holding them")
    rep.add_argument("--html", default=None, help="write a self-contained HTML page here")
    rep.add_argument("--json", action="store_true", help="print the same facts as JSON on "
                     "stdout: the verdict, and every node's host, verdict, bad and why")
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
    led = sub.add_parser("ledger", help="the bad-hardware ledger: list it, clear a part's entries")
    led_sub = led.add_subparsers(dest="ledger_cmd", required=True)
    led_list = led_sub.add_parser("list", help="every entry, and what is open (not cleared)")
    led_list.add_argument("--json", action="store_true", help="the entries as JSON")
    led_list.add_argument("--all", action="store_true", help="cleared entries too")
    led_clear = led_sub.add_parser("clear", help="clear a part's failures so far (recorded)")
    led_clear.add_argument("key", metavar="SERIAL", help="a GPU serial (or UUID) or a NIC GUID")
    led_clear.add_argument("--why", required=True, help="why (repaired, replaced, false alarm)")
    for p in (led_list, led_clear):
        p.add_argument("--ledger", default=None, metavar="WHERE",
                       help="a folder or s3:// prefix (default: PREFLIGHT_LEDGER)")
    return parser


#: Each command's module and function (harness.commands). Imported when its command runs,
#: so that `preflight list` does not load pytest's runner, rich or the cluster step.
COMMANDS = {
    "run": ("harness.commands.run", "cmd_run"),
    "selftest": ("harness.commands.selftest", "cmd_selftest"),
    "list": ("harness.commands.checks", "cmd_list"),
    "profiles": ("harness.commands.profiles", "cmd_profiles"),
    "explain": ("harness.commands.checks", "cmd_explain"),
    "inspect": ("harness.commands.inspect", "cmd_inspect"),
    "report": ("harness.commands.report", "cmd_report"),
    "launch": ("harness.commands.launch", "cmd_launch"),
    "ledger": ("harness.commands.ledger", "cmd_ledger"),
}


#: Commands that take the held signals themselves (their RunGuard releases them once its
#: handlers are in place); every other command releases them before it runs.
GUARDED = ("run", "selftest")


def _command(name: str) -> Callable[[argparse.Namespace], int]:
    module, function = COMMANDS[name]
    command: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module),
                                                           function)
    return command


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    if args.cmd == "run":  # on a terminal: a line at once; the live line starts with the checks
        info = sys.stderr if args.format == "json" else sys.stdout
        if info.isatty():
            print("gpu-preflight: starting", file=info, flush=True)
    try:
        command = _command(args.cmd)
        if args.cmd not in GUARDED:
            sigmask.release()  # a held SIGINT raises KeyboardInterrupt here: 130
        return command(args)
    except (UsageError, SettingError) as exc:  # it may quote a value the user gave: redacted
        from harness.base.redact import redact_text

        print(f"preflight: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # entrypoint: the reader went away
    except Exception as exc:  # a bug (`run` writes its report first): a harness error, never 1
        say_crash(exc)
        return EXIT_HARNESS


def entrypoint() -> None:
    """Console-script entry point (and `python -m harness`). Its first instruction holds the
    signals (harness.base.sigmask) until the command is ready for them."""
    sigmask.hold()
    code = EXIT_HARNESS
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`preflight list | head`): say nothing more, as the Python docs
        # recommend (stdout pointed at devnull so the exit-time flush does not raise again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except OSError:  # stdout on a full disk: the exit code still says what happened
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)
