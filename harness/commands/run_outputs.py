"""What `preflight run` writes besides report.json once its checks end, each rendered from the
one report and redacted: junit.xml, the summary (terminal, plain lines or JSON), the metrics
file, the Kubernetes outputs and the failure reason (SageMaker's failure file). A channel that
cannot be written is said on stderr, never a changed verdict (harness.commands.run calls them)."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from harness.base.redact import Redactor
from harness.report.failure import failure_reason
from harness.report.kube import apply as apply_kube
from harness.report.model import Report
from harness.report.plain_output import print_plain_summary, summary_data
from harness.report.summary import print_summary
from harness.run.junit import write_junit

__all__ = ["preload_aws", "print_run_summary", "write_failure", "write_junit_file", "write_kubernetes",
           "write_metrics"]


def write_junit_file(report: Report, report_dir: Path, env: Mapping[str, str]) -> None:
    """junit.xml from `report` (redacted there); a folder that cannot take it is said, not
    raised (report.json decides the run's exit)."""
    try:
        write_junit(report, report_dir, env=env)
    except OSError as exc:
        print(f"preflight: cannot write junit.xml in {report_dir}: {exc.strerror or exc}",
              file=sys.stderr, flush=True)


def print_run_summary(report: Report, report_dir: Path, env: dict[str, str],
                   json_out: TextIO | None, verbose: bool) -> None:
    """The table on a terminal, plain lines in a log, or (`--format json`) one JSON object on
    the real stdout, `json_out`."""
    if json_out is not None:
        data = summary_data(report.redacted(env), str(report_dir / "report.json"))
        print(json.dumps(data), file=json_out, flush=True)
        return
    if sys.stdout.isatty():
        print_summary(report, verbose=verbose, env=env)
    else:  # a log (CloudWatch, Slurm output, a pipe): plain lines, never wrapped
        print_plain_summary(report, env=env)
    print(f"report: {report_dir / 'report.json'}", flush=True)
    if verbose:
        print(f"pytest output: {report_dir / 'pytest-output.txt'}", flush=True)


def preload_aws() -> None:
    """Import boto3 ahead (a thread, while the checks run) for the S3 upload."""
    with contextlib.suppress(Exception):  # a missing boto3 is said by publish() itself
        import boto3  # noqa: F401
        import botocore.config  # noqa: F401


def write_metrics(path: str | None, report: Report, env: dict[str, str]) -> None:
    """--metrics-file (harness.report.metrics): a problem is a warning, never a changed verdict."""
    if not path:
        return
    try:
        from harness.report.metrics import write_metrics_file  # prometheus_client: an optional extra

        write_metrics_file(report.redacted(env), Path(path))
    except ImportError:
        print("preflight: warning: --metrics-file needs prometheus_client "
              "(pip install 'gpu-preflight[metrics]')", file=sys.stderr, flush=True)
    except OSError as exc:
        print(f"preflight: warning: cannot write metrics file {path}: {exc.strerror or exc}",
              file=sys.stderr, flush=True)


def write_kubernetes(report: Report, failure_text: str | None, env: dict[str, str]) -> None:
    """Kubernetes outputs (harness.report.kube): /dev/termination-log, PREFLIGHT_K8S_MARK."""
    redactor = Redactor.of(env)
    if report.verdict != "pass":
        failure_text = redactor.text(failure_text or failure_reason(report, env=env))
    apply_kube(report.redacted(env), env, failure_text,
               say=lambda text: print(redactor.text(text), file=sys.stderr, flush=True))


def write_failure(path: Path, text: str, env: dict[str, str]) -> None:
    """The failure reason (SageMaker's /opt/ml/output/failure), redacted; a write error is
    said on stderr, never raised."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Redactor.of(env).text(text), encoding="utf-8")
    except OSError as exc:
        print(f"preflight: cannot write failure file {path}: {exc.strerror}", file=sys.stderr)
