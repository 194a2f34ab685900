"""CloudWatch Embedded Metric Format (harness.report.emf): Host a property, never a dimension; the
events reach CloudWatch Logs on the moto server."""

from __future__ import annotations

import json
from pathlib import Path

from test_publish import recorded, report_folder

from harness.report.emf import emf_events
from harness.report.model import Report
from harness.report.publish import metric_data, publish


def _check_emf(event: dict) -> None:
    """The EMF specification's rules: every dimension and metric a top-level member."""
    directive = event["_aws"]["CloudWatchMetrics"][0]
    assert isinstance(event["_aws"]["Timestamp"], int)
    for dims in directive["Dimensions"]:
        assert len(dims) <= 30 and all(isinstance(event[d], str) for d in dims)
    for metric in directive["Metrics"]:
        assert isinstance(event[metric["Name"]], float | int)


def test_one_node_event_without_a_host_dimension():
    report = Report.from_dict(recorded("algo-3"))
    events = emf_events(report, metric_data(report, {"PREFLIGHT_CLUSTER": "prod"}), "GPUPreflight",
                        now_ms=1764547200000)
    head, *bandwidth = events
    for event in events:
        _check_emf(event)
        assert event["Host"] == "algo-3" and event["Verdict"] == "fail"
        assert all("Host" not in dims for dims in event["_aws"]["CloudWatchMetrics"][0]["Dimensions"])
    assert head["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Cluster", "InstanceType"]]
    assert (head["Cluster"], head["InstanceType"]) == ("prod", "p5.48xlarge")
    assert head["Passed"] == 0.0 and head["FailedChecks"] == 3.0 and head["GPUsHealthy"] == 7.0
    assert len(head["FailedCheckIds"]) == 3
    assert {e["Check"]: e["BusBandwidth"] for e in bandwidth} == {
        "PF-BW-001 all_reduce": 489.0, "PF-BW-002 all_reduce": 123.5}
    assert all(e["_aws"]["CloudWatchMetrics"][0]["Dimensions"] ==
               [["Cluster", "InstanceType", "Check"]] for e in bandwidth)


def test_publish_sends_emf_events_by_default(aws_env, tmp_path: Path, monkeypatch):
    import boto3

    monkeypatch.delenv("PREFLIGHT_CW_FORMAT")
    env = {k: v for k, v in aws_env.items() if k != "PREFLIGHT_CW_FORMAT"}
    report, folder = report_folder(tmp_path, "algo-3")
    warnings: list[str] = []
    uploads = publish(report, folder, {**env, "PREFLIGHT_CW_LOG_GROUP": "/pf/test"},
                      namespace="PreflightTest/emf", warn=warnings.append)
    assert warnings == []
    cw = uploads["cloudwatch"]
    assert (cw["ok"], cw["format"], cw["log_group"], cw["log_stream"]) == (
        True, "emf", "/pf/test", "algo-3")
    assert "Host" not in cw["dimensions"]
    logs = boto3.client("logs")
    got = logs.get_log_events(logGroupName="/pf/test", logStreamName="algo-3")["events"]
    messages = [json.loads(e["message"]) for e in got]
    assert messages[0]["Host"] == "algo-3" and messages[0]["FailedChecks"] == 3.0
    assert len(messages) == 3
    # A second node's run reuses the group (already there) without a warning.
    publish(report, folder, env, namespace="PreflightTest/emf", warn=warnings.append)
    assert warnings == []


def test_emf_server_down_is_a_warning(tmp_path: Path, monkeypatch):
    from aws_server import aws_test_env, free_port

    env = aws_test_env(f"http://127.0.0.1:{free_port()}", tmp_path)
    env.pop("PREFLIGHT_CW_FORMAT")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    report, folder = report_folder(tmp_path, "algo-3")
    warnings: list[str] = []
    uploads = publish(report, folder, env, namespace="PreflightTest/gone", warn=warnings.append)
    assert uploads["cloudwatch"] == {"namespace": "PreflightTest/gone", "ok": False, "format": "emf"}
    assert "EMF events" in warnings[0] and "verdict (fail) is unchanged" in warnings[0]
