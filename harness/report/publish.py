"""Results kept: the report folder uploaded to S3 (`s3://bucket/prefix/<date>/<job>/<host>/...`)
and key figures put as CloudWatch metrics. An upload problem is a warning, printed and recorded in
the report (`uploads`): it never loses the local report and never changes the verdict."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject, JSONValue
from harness.base.redact import Redactor
from harness.base.settings import get_str
from harness.report.figures import bandwidth_curves, gpus_healthy
from harness.report.model import Report, write_report

if TYPE_CHECKING:  # boto3 is optional and imported where a client is made
    from botocore.client import BaseClient

__all__ = [
    "CW_NAMESPACE_ENV",
    "S3_URI_ENV",
    "S3Location",
    "aws_client",
    "cluster_name",
    "download_reports",
    "job_id",
    "metric_data",
    "parse_s3_uri",
    "publish",
]

S3_URI_ENV = "PREFLIGHT_S3_URI"
CW_NAMESPACE_ENV = "PREFLIGHT_CW_NAMESPACE"
#: `emf` (default: Embedded Metric Format log events, harness.report.emf) or `metrics` (PutMetricData).
CW_FORMAT_ENV = "PREFLIGHT_CW_FORMAT"
CLUSTER_ENV = "PREFLIGHT_CLUSTER"
JOB_ENV = "PREFLIGHT_JOB_ID"
#: Bounded waits: an unreachable endpoint costs seconds, never a hung job start.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 30
MAX_ATTEMPTS = 2
_CONTENT_TYPES = {".json": "application/json", ".xml": "application/xml",
                  ".jsonl": "application/x-ndjson", ".txt": "text/plain; charset=utf-8",
                  ".html": "text/html; charset=utf-8"}


@dataclass(frozen=True, slots=True)
class S3Location:
    """A bucket and a key prefix (no leading slash; empty or ending in `/`)."""

    bucket: str
    prefix: str = ""

    def child(self, *parts: str) -> S3Location:
        tail = "/".join(p.strip("/") for p in parts if p.strip("/"))
        return S3Location(self.bucket, f"{self.prefix}{tail}/" if tail else self.prefix)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_s3_uri(uri: str) -> S3Location:
    """`s3://bucket/some/prefix` -> S3Location; ValueError saying what is wrong otherwise."""
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an S3 URI (wanted s3://BUCKET/PREFIX)")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not bucket or "/" in bucket or " " in uri:
        raise ValueError(f"{uri!r} is not an S3 URI (wanted s3://BUCKET/PREFIX)")
    prefix = prefix.strip("/")
    return S3Location(bucket, f"{prefix}/" if prefix else "")


def job_id(env: Mapping[str, str]) -> str:
    """The folder that groups one job's nodes: PREFLIGHT_JOB_ID, SageMaker's TRAINING_JOB_NAME,
    SLURM_JOB_ID, else `adhoc`."""
    found = get_str(JOB_ENV, env) or env.get("TRAINING_JOB_NAME") or env.get("SLURM_JOB_ID")
    return found.replace("/", "-") if found else "adhoc"


def cluster_name(env: Mapping[str, str]) -> str:
    """The CloudWatch `Cluster` dimension: PREFLIGHT_CLUSTER, SLURM_CLUSTER_NAME, else `default`."""
    return get_str(CLUSTER_ENV, env) or env.get("SLURM_CLUSTER_NAME") or "default"


def aws_client(service: str) -> BaseClient:
    """A boto3 client with bounded timeouts and retries (endpoint, region and credentials come
    from the usual AWS variables and files, AWS_ENDPOINT_URL included)."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                    retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"})
    return boto3.client(service, config=config)


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return "boto3 is not installed (pip install 'gpu-preflight[aws]')"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:500]


def metric_data(report: Report, env: Mapping[str, str]) -> list[JSONObject]:
    """CloudWatch MetricData for one node: verdict, failed/warned checks, GPUs healthy, duration,
    and busbw at the largest measured size per bandwidth check (extra dimension `Check`)."""
    profile_name = report.profile or "?"
    dims = [{"Name": "Cluster", "Value": cluster_name(env)},
            {"Name": "InstanceType", "Value": profile_name},
            {"Name": "Host", "Value": report.host or "?"}]
    counts = report.counts()
    data = [
        ("Passed", 1.0 if report.verdict == "pass" else 0.0, "Count", []),
        ("FailedChecks", float(counts.get("fail", 0) + counts.get("error", 0)), "Count", []),
        ("WarnedChecks", float(counts.get("warn", 0)), "Count", []),
        ("DurationSeconds", float(round(report.duration_s, 3)), "Seconds", []),
    ]
    healthy = gpus_healthy(report, _expected_gpus(profile_name))
    if healthy is not None:
        data.append(("GPUsHealthy", float(healthy), "Count", []))
    for curve in bandwidth_curves(report):
        peak = curve.peak
        if peak is not None:
            data.append(("BusBandwidth", peak[1], "Gigabytes/Second",
                         [{"Name": "Check", "Value": curve.label}]))
    return [{"MetricName": name, "Dimensions": dims + extra, "Value": value, "Unit": unit}
            for name, value, unit, extra in data]


def _expected_gpus(profile_name: str) -> int | None:
    from harness.profiles.model import ProfileError
    from harness.profiles.table import get_profile

    try:
        return get_profile(profile_name).num_gpus or None
    except ProfileError:
        return None


def _put_metrics(namespace: str, data: list[JSONObject]) -> None:
    client = aws_client("cloudwatch")
    for start in range(0, len(data), 500):  # PutMetricData takes at most 1000 items per call
        client.put_metric_data(Namespace=namespace, MetricData=data[start:start + 500])


def _upload(client: BaseClient, path: Path, location: S3Location) -> str:
    key = f"{location.prefix}{path.name}"
    extra = {"ContentType": _CONTENT_TYPES.get(path.suffix, "application/octet-stream")}
    client.upload_file(str(path), location.bucket, key, ExtraArgs=extra)
    return key


def publish(
    report: Report,
    report_dir: Path,
    env: Mapping[str, str],
    *,
    s3_uri: str | None = None,
    namespace: str | None = None,
    warn: Callable[[str], None] | None = None,
) -> JSONObject:
    """Put the metrics, upload the folder (report.json last, so that the uploaded copy records
    the uploads), record the outcome in `report.extra["uploads"]` and rewrite report.json.
    Never raises for an AWS problem; each one is a warning."""
    warn = warn or (lambda text: print(text, file=sys.stderr, flush=True))
    local = report_dir / "report.json"
    warnings: list[JSONValue] = []
    uploads: JSONObject = {"s3": None, "cloudwatch": None, "warnings": warnings}

    def problem(what: str, exc: BaseException) -> None:
        text = Redactor.of(env).text(
            f"preflight: warning: {what} failed: {describe_error(exc)}; the local report "
            f"{local} is intact and the verdict ({report.verdict}) is unchanged")
        warnings.append(text.removeprefix("preflight: warning: "))
        warn(text)

    if namespace and get_str(CW_FORMAT_ENV, env) == "emf":  # harness.report.emf: no Host dimension
        try:
            from harness.report.emf import put_emf

            shown = report.redacted(env)
            uploads["cloudwatch"] = put_emf(shown, metric_data(shown, env), env, namespace,
                                            aws_client("logs"))
        except Exception as exc:  # any AWS/network/import problem is a warning, never a crash
            uploads["cloudwatch"] = {"namespace": namespace, "ok": False, "format": "emf"}
            problem(f"putting CloudWatch EMF events for namespace {namespace}", exc)
    elif namespace:  # PREFLIGHT_CW_FORMAT=metrics: PutMetricData, Host as a dimension
        try:
            data = metric_data(report.redacted(env), env)
            _put_metrics(namespace, data)
            uploads["cloudwatch"] = {
                "namespace": namespace, "ok": True,
                "dimensions": {d["Name"]: d["Value"] for d in data[0]["Dimensions"]},
                "metrics": sorted({d["MetricName"] for d in data}),
            }
        except Exception as exc:  # any AWS/network/import problem is a warning, never a crash
            uploads["cloudwatch"] = {"namespace": namespace, "ok": False}
            problem(f"putting CloudWatch metrics in namespace {namespace}", exc)

    s3_client, target = None, None
    s3: JSONObject = {}
    s3_files: list[JSONValue] = []
    if s3_uri:
        target = parse_s3_uri(s3_uri).child(
            (report.started_at or "unknown")[:10], job_id(env), report.host)
        files = sorted(p for p in report_dir.rglob("*")
                       if p.is_file() and not p.name.startswith(".") and p != local)
        uploads["s3"] = s3 = {"uri": str(target), "ok": False, "files": s3_files}
        try:
            s3_client = aws_client("s3")
            for path in files:
                s3_files.append(_upload(s3_client, path, target.child(
                    *path.parent.relative_to(report_dir).parts)))
            s3["ok"] = True
            s3_files.append(f"{target.prefix}report.json")
        except Exception as exc:
            s3_client = None
            problem(f"uploading the report to {target}", exc)

    report.extra["uploads"] = uploads
    write_report(report, report_dir, env)
    if s3_client is not None and target is not None:
        try:
            _upload(s3_client, local, target)
        except Exception as exc:
            s3["ok"] = False
            s3_files.remove(f"{target.prefix}report.json")
            problem(f"uploading report.json to {target}", exc)
            write_report(report, report_dir, env)
    return uploads


def download_reports(uri: str) -> list[tuple[str, bytes]]:
    """(s3 URI, content) of every `report.json` under an S3 prefix (for `preflight report`)."""
    location = parse_s3_uri(uri)
    client = aws_client("s3")
    found = []
    for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=location.bucket, Prefix=location.prefix):
        for obj in page.get("Contents", []):
            key = obj["Key"]
            if key == "report.json" or key.endswith("/report.json"):
                body = client.get_object(Bucket=location.bucket, Key=key)["Body"].read()
                found.append((f"s3://{location.bucket}/{key}", body))
    return found
