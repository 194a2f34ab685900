"""Prometheus text-format results for node_exporter's textfile collector (`--metrics-file`).

The file is written with prometheus_client's `write_to_textfile`, which writes a temporary file
beside the target and renames it over the target: the collector never reads half a file
(prometheus_client/exposition.py). Labels follow DCGM-exporter's where they mean the same thing
(`Hostname`, `gpu`, `UUID`: https://github.com/NVIDIA/dcgm-exporter README), so the preflight
series join the GPU dashboards operators already have.

Results are read from the typed report (harness.report.model.Report) and its check records.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from harness.report.model import Report
from harness.results import measurement_name

if TYPE_CHECKING:  # prometheus_client is imported where a metrics file is written
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

__all__ = ["METRICS_FILE_ENV", "render", "write_metrics_file"]

METRICS_FILE_ENV = "PREFLIGHT_METRICS_FILE"
OUTCOMES = ("pass", "warn", "skip", "fail", "error")
VERDICTS = ("pass", "fail", "error", "interrupted")
#: `GPU 3 temperature`, `cuda:3 busbw`: the GPU a measurement is about (its `gpu` label).
_GPU_IN_WHAT = re.compile(r"\b(?:GPU|cuda:)\s*(\d+)\b")
_UUID_IN_WHAT = re.compile(r"\b(GPU-[0-9a-fA-F-]{8,})\b")


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    return None


def _base_labels(report: Report) -> dict[str, str]:
    return {"Hostname": report.host or "?", "profile": report.profile or "?",
            "tier": report.tier or "?"}


def _gpu_labels(what: str, uuids: Mapping[str, str], gpu_index: object = None) -> dict[str, str]:
    """`gpu` and `UUID` as DCGM-exporter spells them; empty strings when not per GPU. The
    measurement's `gpu_index` where it has one, else the GPU its text names (older reports)."""
    gpu = _GPU_IN_WHAT.search(what)
    uuid = _UUID_IN_WHAT.search(what)
    index = (str(gpu_index) if isinstance(gpu_index, int) and not isinstance(gpu_index, bool)
             else gpu.group(1) if gpu else "")
    return {"gpu": index, "UUID": uuid.group(1) if uuid else uuids.get(index, "")}


def _uuids(report: Report) -> dict[str, str]:
    """GPU index -> UUID from the report's `gpus.inventory` section, where a stage wrote one."""
    section = report.extra.get("gpus")
    inventory = section.get("inventory") if isinstance(section, Mapping) else None
    found = {}
    for g in inventory or []:
        if isinstance(g, Mapping) and g.get("index") is not None and g.get("uuid"):
            found[str(g["index"])] = str(g["uuid"])
    return found


class _ReportCollector:
    """A prometheus_client collector over one report (registered on a private registry)."""

    def __init__(self, report: Report, now: float) -> None:
        self.report = report
        self.now = now

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        report = self.report
        base = _base_labels(report)
        keys = list(base)
        verdict = report.verdict
        fam = GaugeMetricFamily("preflight_verdict", "1 for the run's verdict (pass, fail, error, "
                                "interrupted), 0 for the others", labels=[*keys, "verdict"])
        for v in sorted({*VERDICTS, verdict}):
            fam.add_metric([*base.values(), v], 1.0 if v == verdict else 0.0)
        yield fam
        yield _single("preflight_passed", "1 when the verdict is pass, else 0 (unknown is not "
                      "a pass)", base, 1.0 if verdict == "pass" else 0.0)
        yield _single("preflight_exit_code", "the exit status of preflight run", base,
                      float(report.exit_code))
        yield _single("preflight_duration_seconds", "wall time of the run", base,
                      float(round(report.duration_s, 3)))
        yield _single("preflight_last_run_timestamp_seconds", "when this file was written "
                      "(alert when it gets old)", base, self.now)
        confirmation = report.extra.get("confirmation")
        flaky = _number(confirmation.get("flaky_total")) if isinstance(confirmation, Mapping) \
            else None
        if flaky is not None:  # absent: no confirmation ran (an older report, a crash)
            yield _single("preflight_flaky_total", "checks of this run that failed, then passed "
                          "when run again (harness.run.confirm): warnings, never a drain", base,
                          flaky)

        outcome = GaugeMetricFamily("preflight_check_outcome", "1 for the check's outcome, 0 for "
                                    "the others", labels=[*keys, "check", "outcome"])
        duration = GaugeMetricFamily("preflight_check_duration_seconds", "time the check took",
                                     labels=[*keys, "check"])
        # Keyed by the measurement's stable name (docs/reports.md), never by its text: a
        # reworded `what` leaves every series and dashboard as it was.
        labels = [*keys, "check", "measurement", "unit", "gpu", "UUID"]
        value = GaugeMetricFamily("preflight_measurement", "a value a check measured, by its "
                                  "stable `measurement` name; its unit in `unit`", labels=labels)
        threshold = GaugeMetricFamily("preflight_measurement_threshold", "the threshold the "
                                      "value was judged against; `op` says how",
                                      labels=[*labels[:-2], "op", *labels[-2:]])
        judged = GaugeMetricFamily("preflight_measurement_ok", "1 when the value met its "
                                   "threshold, 0 when not", labels=labels)
        uuids = _uuids(report)
        seen: set[tuple[str, ...]] = set()
        for row in report.checks:
            lbl = [*base.values(), row.id]
            for o in OUTCOMES:
                outcome.add_metric([*lbl, o], 1.0 if o == row.outcome else 0.0)
            if row.duration_s is not None:  # not measured: no sample, never a 0
                duration.add_metric(lbl, round(float(row.duration_s), 3))
            for m in row.measurements:
                number = _number(m.value)
                if number is None:  # a text fact (a driver version, a path) has no sample
                    continue
                what, unit = m.what, m.unit
                name = m.name or measurement_name(what)  # an older report: derived
                gpu = _gpu_labels(what, uuids, m.gpu_index)
                key = (row.id, name, unit, *gpu.values())
                if key in seen:  # one sample per series: the first measurement wins
                    continue
                seen.add(key)
                value.add_metric([*lbl, name, unit, *gpu.values()], number)
                limit = _number(m.threshold)
                if limit is not None and m.op:
                    threshold.add_metric([*lbl, name, unit, m.op, *gpu.values()], limit)
                if m.ok is not None:
                    judged.add_metric([*lbl, name, unit, *gpu.values()], 1.0 if m.ok else 0.0)
        yield from (outcome, duration, value, threshold, judged)


def _single(name: str, doc: str, labels: Mapping[str, str], value: float) -> GaugeMetricFamily:
    from prometheus_client.core import GaugeMetricFamily

    fam = GaugeMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), value)
    return fam


def _registry(report: Report, now: float | None) -> CollectorRegistry:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(report, time.time() if now is None else now))
    return registry


def render(report: Report, now: float | None = None) -> str:
    """The report as Prometheus text exposition format."""
    from prometheus_client import generate_latest

    return generate_latest(_registry(report, now)).decode("utf-8")


def write_metrics_file(report: Report, path: Path, now: float | None = None) -> Path:
    """Write the metrics atomically (temp file in the same folder, then rename)."""
    from prometheus_client import write_to_textfile

    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), _registry(report, now))
    return path


def metric_names(text: str) -> Iterable[str]:
    """The metric family names in a text exposition (for tests and docs)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [f.name for f in text_string_to_metric_families(text)]
