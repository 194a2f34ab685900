"""CloudWatch Embedded Metric Format: the node's figures as one structured log event per node
(plus one per bandwidth check), so that `Host` is a searchable property of the event and not a
metric dimension. With `Host` as a dimension, 1000 nodes x 6 metrics are 6000 custom metrics;
here the metrics are per `Cluster` x `InstanceType` (and `Check` for bandwidth), and the
per-host values stay in the log events (CloudWatch Logs Insights: `filter Host = "algo-3"`).

Format: https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html
(the `_aws` metadata object; `CloudWatchMetrics` directives each with `Namespace`,
`Dimensions` as a list of dimension sets, and `Metrics` by `Name` and `Unit`; every dimension
and metric a top-level member of the event). CloudWatch extracts the metrics when the event is
sent with PutLogEvents to any log group.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Protocol

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.base.settings import get_str
from harness.report.model import Report

__all__ = ["LOG_GROUP_ENV", "emf_events", "put_emf"]

LOG_GROUP_ENV = "PREFLIGHT_CW_LOG_GROUP"
DEFAULT_LOG_GROUP = "/gpu-preflight/metrics"
NODE_DIMENSIONS = ("Cluster", "InstanceType")


def emf_events(report: Report, data: list[JSONObject], namespace: str,
               now_ms: int | None = None) -> list[JSONObject]:
    """EMF events for one node from its PutMetricData rows (harness.report.publish.metric_data, whose
    Host dimension becomes a property): the node's figures, then one event per bandwidth check."""
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    base = {d["Name"]: d["Value"] for d in data[0]["Dimensions"]} if data else {}
    properties = {"Host": base.get("Host", report.host or "?"),
                  "Verdict": report.verdict, "Tier": report.tier or "?",
                  "FailedCheckIds": [c.id for c in report.checks if c.failed]}
    node: JSONObject = {k: base.get(k, "?") for k in NODE_DIMENSIONS}
    node_metrics: list[dict[str, str]] = []
    events = []
    for item in data:
        extra = [d for d in item["Dimensions"] if d["Name"] not in (*NODE_DIMENSIONS, "Host")]
        if not extra:
            node[item["MetricName"]] = item["Value"]
            node_metrics.append({"Name": item["MetricName"], "Unit": item["Unit"]})
            continue
        dims = {**{k: node[k] for k in NODE_DIMENSIONS}, **{d["Name"]: d["Value"] for d in extra}}
        events.append(_event(stamp, namespace, dims, {item["MetricName"]: item["Value"]},
                             [{"Name": item["MetricName"], "Unit": item["Unit"]}], properties))
    head = _event(stamp, namespace, {k: node[k] for k in NODE_DIMENSIONS},
                  {m["Name"]: node[m["Name"]] for m in node_metrics}, node_metrics, properties)
    return [head, *events]


def _event(stamp: int, namespace: str, dims: Mapping[str, str], values: Mapping[str, float],
           metrics: list[dict[str, str]], properties: JSONMapping) -> JSONObject:
    return {"_aws": {"Timestamp": stamp, "CloudWatchMetrics": [
        {"Namespace": namespace, "Dimensions": [list(dims)], "Metrics": metrics}]},
        **properties, **dims, **values}


class LogsClient(Protocol):
    """What put_emf uses of a boto3 CloudWatch Logs client (`boto3.client("logs")`)."""

    exceptions: ModuleType

    def create_log_group(self, **kwargs: str) -> object: ...

    def create_log_stream(self, **kwargs: str) -> object: ...

    def put_log_events(self, **kwargs: object) -> object: ...


def put_emf(report: Report, data: list[JSONObject], env: Mapping[str, str],
            namespace: str, client: LogsClient) -> JSONObject:
    """Send the events to the log group (created if missing) with `client` (boto3 `logs`),
    stream = host; returns what the report's `uploads.cloudwatch` records. Raises on an AWS
    problem (publish makes it a warning)."""
    events = emf_events(report, data, namespace)
    group = get_str(LOG_GROUP_ENV, env) or DEFAULT_LOG_GROUP
    stream = str(events[0]["Host"]).replace(":", "-").replace("*", "-") or "unknown"
    for create, kwargs in ((client.create_log_group, {"logGroupName": group}),
                           (client.create_log_stream, {"logGroupName": group,
                                                       "logStreamName": stream})):
        with contextlib.suppress(client.exceptions.ResourceAlreadyExistsException):
            create(**kwargs)
    client.put_log_events(logGroupName=group, logStreamName=stream, logEvents=[
        {"timestamp": e["_aws"]["Timestamp"], "message": json.dumps(e, default=str)}
        for e in events])
    return {"namespace": namespace, "ok": True, "format": "emf", "log_group": group,
            "log_stream": stream,
            "dimensions": {k: events[0][k] for k in NODE_DIMENSIONS},
            "metrics": sorted({m["Name"] for e in events
                               for m in e["_aws"]["CloudWatchMetrics"][0]["Metrics"]})}
