"""Reports kept: S3 upload and CloudWatch metrics against a real moto server on loopback, the
warnings when it is down (local report intact, verdict unchanged), and `preflight run` wiring."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from aws_server import aws_test_env, free_port

from harness import cli
from harness.commands import EXIT_OK, EXIT_USAGE
from harness.report.model import Report, write_report
from harness.report.publish import (
    S3Location,
    cluster_name,
    download_reports,
    job_id,
    metric_data,
    parse_s3_uri,
    publish,
)

DATA = Path(__file__).parent / "data" / "reports"


def recorded(host: str) -> dict[str, Any]:
    return json.loads((DATA / host / "report.json").read_text())


def as_report(data: dict[str, Any]) -> Report:
    """A Report object holding a recorded report's content (what the CLI has after a run)."""
    return Report.from_dict(data)


def report_folder(tmp_path: Path, host: str) -> tuple[Report, Path]:
    report = as_report(recorded(host))
    folder = tmp_path / "reports" / host
    write_report(report, folder, {})
    (folder / "junit.xml").write_text("<testsuites/>\n")
    (folder / "results.jsonl").write_text('{"event": "finished", "exitstatus": 1}\n')
    return report, folder


def s3():
    import boto3

    return boto3.client("s3")


def cloudwatch():
    import boto3

    return boto3.client("cloudwatch")


def metric_value(namespace: str, name: str, dims: dict[str, str]) -> float | None:
    now = datetime.now(timezone.utc)
    stats = cloudwatch().get_metric_statistics(
        Namespace=namespace, MetricName=name,
        Dimensions=[{"Name": k, "Value": v} for k, v in dims.items()],
        StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1),
        Period=60, Statistics=["Maximum"])
    points = stats["Datapoints"]
    return max(p["Maximum"] for p in points) if points else None


@pytest.mark.parametrize(("uri", "expected"), [
    ("s3://bucket", S3Location("bucket", "")),
    ("s3://bucket/", S3Location("bucket", "")),
    ("s3://bucket/certify", S3Location("bucket", "certify/")),
    ("s3://bucket/a/b/", S3Location("bucket", "a/b/")),
])
def test_parse_s3_uri(uri: str, expected: S3Location) -> None:
    assert parse_s3_uri(uri) == expected


@pytest.mark.parametrize("uri", ["bucket/prefix", "s3://", "s3:///prefix", "https://b/p",
                                 "s3://b c/p"])
def test_parse_s3_uri_rejects(uri: str) -> None:
    with pytest.raises(ValueError, match="not an S3 URI"):
        parse_s3_uri(uri)


@pytest.mark.parametrize(("env", "expected"), [
    ({"PREFLIGHT_JOB_ID": "n1", "TRAINING_JOB_NAME": "sm", "SLURM_JOB_ID": "7"}, "n1"),
    ({"TRAINING_JOB_NAME": "certify-2026", "SLURM_JOB_ID": "7"}, "certify-2026"),
    ({"SLURM_JOB_ID": "7"}, "7"),
    ({}, "adhoc"),
])
def test_job_id_precedence(env: dict[str, str], expected: str) -> None:
    assert job_id(env) == expected


def test_cluster_name() -> None:
    assert cluster_name({"PREFLIGHT_CLUSTER": "c1", "SLURM_CLUSTER_NAME": "s"}) == "c1"
    assert cluster_name({"SLURM_CLUSTER_NAME": "s"}) == "s"
    assert cluster_name({}) == "default"


def test_metric_data_of_a_bad_node() -> None:
    data = metric_data(as_report(recorded("algo-3")), {"PREFLIGHT_CLUSTER": "prod"})
    by_name: dict[str, list[dict[str, Any]]] = {}
    for item in data:
        by_name.setdefault(item["MetricName"], []).append(item)
    assert by_name["Passed"][0]["Value"] == 0.0
    assert by_name["FailedChecks"][0]["Value"] == 3.0
    assert by_name["GPUsHealthy"][0]["Value"] == 7.0  # GPU 5 fell off the bus
    assert by_name["Passed"][0]["Dimensions"] == [
        {"Name": "Cluster", "Value": "prod"}, {"Name": "InstanceType", "Value": "p5.48xlarge"},
        {"Name": "Host", "Value": "algo-3"}]
    busbw = {d["Dimensions"][-1]["Value"]: d["Value"] for d in by_name["BusBandwidth"]}
    assert busbw == {"PF-BW-001 all_reduce": 489.0, "PF-BW-002 all_reduce": 123.5}
    assert {d["Unit"] for d in by_name["BusBandwidth"]} == {"Gigabytes/Second"}


def test_metric_data_of_a_healthy_node() -> None:
    by_name = {d["MetricName"]: d for d in metric_data(as_report(recorded("algo-1")), {})}
    assert by_name["Passed"]["Value"] == 1.0
    assert by_name["FailedChecks"]["Value"] == 0.0
    assert by_name["GPUsHealthy"]["Value"] == 8.0


def test_publish_uploads_and_puts_metrics(aws_env: dict[str, str], tmp_path: Path) -> None:
    s3().create_bucket(Bucket="pf-upload")
    report, folder = report_folder(tmp_path, "algo-3")
    warnings: list[str] = []
    uploads = publish(report, folder, {**aws_env, "PREFLIGHT_JOB_ID": "nightly-1",
                                       "PREFLIGHT_CLUSTER": "c-up"},
                      s3_uri="s3://pf-upload/certify", namespace="PreflightTest/up",
                      warn=warnings.append)
    assert warnings == []
    prefix = "certify/2026-11-28/nightly-1/algo-3/"
    listed = s3().list_objects_v2(Bucket="pf-upload", Prefix="certify/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        prefix + "junit.xml", prefix + "report.json", prefix + "results.jsonl"]
    assert uploads["s3"] == {"uri": f"s3://pf-upload/{prefix}", "ok": True,
                             "files": [prefix + "junit.xml", prefix + "results.jsonl",
                                       prefix + "report.json"]}
    uploaded = json.loads(s3().get_object(Bucket="pf-upload", Key=prefix + "report.json")
                          ["Body"].read())
    assert uploaded["uploads"]["s3"]["ok"] is True
    assert uploaded["uploads"]["cloudwatch"]["ok"] is True
    assert uploaded["verdict"] == "fail"
    local = json.loads((folder / "report.json").read_text())
    assert local["uploads"] == uploaded["uploads"]
    dims = {"Cluster": "c-up", "InstanceType": "p5.48xlarge", "Host": "algo-3"}
    assert metric_value("PreflightTest/up", "FailedChecks", dims) == 3.0
    assert metric_value("PreflightTest/up", "Passed", dims) == 0.0
    assert metric_value("PreflightTest/up", "GPUsHealthy", dims) == 7.0
    assert metric_value("PreflightTest/up", "BusBandwidth",
                        {**dims, "Check": "PF-BW-002 all_reduce"}) == 123.5


def test_publish_to_missing_bucket_warns(aws_env: dict[str, str], tmp_path: Path) -> None:
    report, folder = report_folder(tmp_path, "algo-1")
    warnings: list[str] = []
    uploads = publish(report, folder, aws_env, s3_uri="s3://pf-no-such-bucket/x",
                      warn=warnings.append)
    assert uploads["s3"]["ok"] is False
    assert len(warnings) == 1
    assert "NoSuchBucket" in warnings[0]
    assert "verdict (pass) is unchanged" in warnings[0]


def test_server_down_keeps_local_report_and_verdict(
    aws_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    report, folder = report_folder(tmp_path, "algo-3")
    before = json.loads((folder / "report.json").read_text())
    warnings: list[str] = []
    uploads = publish(report, folder, {"PREFLIGHT_CW_FORMAT": "metrics"}, s3_uri="s3://pf-down/certify",
                      namespace="PreflightTest/down", warn=warnings.append)
    assert len(warnings) == 2
    assert "putting CloudWatch metrics in namespace PreflightTest/down failed" in warnings[0]
    assert "uploading the report to s3://pf-down/certify/2026-11-28/adhoc/algo-3/" in warnings[1]
    for text in warnings:
        assert "Could not connect to the endpoint URL" in text
        assert f"the local report {folder / 'report.json'} is intact" in text
        assert "the verdict (fail) is unchanged" in text
    after = json.loads((folder / "report.json").read_text())
    assert after["uploads"] == uploads
    assert after["uploads"]["s3"]["ok"] is False and after["uploads"]["cloudwatch"]["ok"] is False
    assert {k: v for k, v in after.items() if k != "uploads"} == before
    assert report.verdict == "fail"


def test_download_reports_lists_only_report_json(aws_env: dict[str, str]) -> None:
    s3().create_bucket(Bucket="pf-down-list")
    for host in ("algo-1", "algo-2"):
        s3().put_object(Bucket="pf-down-list", Key=f"c/2026-11-28/j/{host}/report.json",
                        Body=(DATA / host / "report.json").read_bytes())
        s3().put_object(Bucket="pf-down-list", Key=f"c/2026-11-28/j/{host}/junit.xml", Body=b"x")
    s3().put_object(Bucket="pf-down-list", Key="other/report.json", Body=b"{}")
    found = download_reports("s3://pf-down-list/c/")
    assert [uri for uri, _ in found] == [
        "s3://pf-down-list/c/2026-11-28/j/algo-1/report.json",
        "s3://pf-down-list/c/2026-11-28/j/algo-2/report.json"]
    assert json.loads(found[0][1])["host"] == "algo-1"


def _run(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
         **env: str) -> int:
    monkeypatch.delenv("PREFLIGHT_S3_URI", raising=False)
    monkeypatch.delenv("PREFLIGHT_CW_NAMESPACE", raising=False)
    for name, value in {"PREFLIGHT_PROFILE": "local-cpu", "PREFLIGHT_HOSTNAME": "node-a",
                        "PREFLIGHT_JOB_ID": "cli-job", **env}.items():
        monkeypatch.setenv(name, value)
    return cli.main(["run", "--report-dir", str(tmp_path / "r"), *args])


def test_cli_run_uploads(aws_env: dict[str, str], tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    s3().create_bucket(Bucket="pf-cli")
    code = _run(["--s3-uri", "s3://pf-cli/runs"], tmp_path, monkeypatch,
                PREFLIGHT_CW_NAMESPACE="PreflightTest/cli")
    assert code == EXIT_OK
    local = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert local["verdict"] == "pass"
    assert local["uploads"]["s3"]["ok"] is True
    keys = [o["Key"] for o in s3().list_objects_v2(Bucket="pf-cli")["Contents"]]
    day = local["started_at"][:10]
    assert f"runs/{day}/cli-job/node-a/report.json" in keys
    assert f"runs/{day}/cli-job/node-a/junit.xml" in keys
    dims = {"Cluster": "default", "InstanceType": "local-cpu", "Host": "node-a"}
    assert metric_value("PreflightTest/cli", "Passed", dims) == 1.0


def test_cli_run_server_down_still_passes(
    aws_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    code = _run(["--cloudwatch-namespace", "PreflightTest/gone"], tmp_path, monkeypatch,
                PREFLIGHT_S3_URI="s3://pf-gone/runs")
    assert code == EXIT_OK
    err = capsys.readouterr().err
    assert "preflight: warning: uploading the report to s3://pf-gone/runs/" in err
    assert "the verdict (pass) is unchanged" in err
    local = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert local["verdict"] == "pass"
    assert len(local["uploads"]["warnings"]) == 2


def test_cli_run_rejects_bad_s3_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["--s3-uri", "bucket/prefix"], tmp_path, monkeypatch) == EXIT_USAGE
    assert "--s3-uri / PREFLIGHT_S3_URI: 'bucket/prefix' is not an S3 URI" in (
        capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


def test_env_helper_points_at_loopback(tmp_path: Path) -> None:
    env = aws_test_env("http://127.0.0.1:1", tmp_path)
    assert env["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
