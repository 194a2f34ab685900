"""The typed check records (harness.results): built once, plain on the wire, read by field;
a recorded v1 report (written before size_bytes/gpu_index) still reads."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest

from harness.checking import CheckContext, expect, expect_none, measure, set_current
from harness.report.figures import bandwidth_curves, gpus_healthy
from harness.report.model import RESULTS_SCHEMA, Report
from harness.results import CheckResult, Measurement, plain

DATA = Path(__file__).parent / "data" / "reports"


def recorded(host: str) -> dict:
    return json.loads((DATA / host / "report.json").read_text())


def _result(**changes) -> CheckResult:
    base = CheckResult(
        id="PF-BW-001", outcome="fail", nodeid="checks/test_bandwidth.py::t", title="busbw",
        message="[PF-BW-001] busbw low", warnings=("w",), remedy="r", duration_s=1.23456,
        measurements=(Measurement("all_reduce busbw at 1 GiB", 12.5, "GB/s", op=">=",
                                  threshold=370.0, ok=False, size_bytes=2**30),
                      Measurement("GPU 3 temperature", 91, "C", gpu_index=3)),
        extra={"exclusive": True})
    return CheckResult(**{**{f: getattr(base, f) for f in CheckResult.__slots__}, **changes})


def test_a_result_round_trips_through_plain_json_and_pickle():
    result = _result()
    wire = result.to_dict()
    assert plain(wire) == wire  # what crosses xdist's channel is already plain
    again = CheckResult.from_dict(json.loads(json.dumps(wire)))
    assert again == CheckResult.from_dict(wire)
    assert again.measurements == result.measurements
    assert again.extra == {"exclusive": True} and again.duration_s == 1.235
    assert pickle.loads(pickle.dumps(again)) == again


def test_the_wire_keeps_the_v1_keys_and_adds_fields_only_when_known():
    wire = _result().to_dict()
    assert list(wire)[:13] == ["id", "nodeid", "title", "tier", "kind", "suite", "outcome",
                               "message", "warnings", "measurements", "remedy", "duration_s",
                               "worker"]
    sized, hot = wire["measurements"]
    assert sized == {"what": "all_reduce busbw at 1 GiB", "value": 12.5, "unit": "GB/s",
                     "op": ">=", "threshold": 370.0, "ok": False, "size_bytes": 2**30}
    assert hot["gpu_index"] == 3 and "size_bytes" not in hot and "node" not in hot


def test_records_are_frozen():
    with pytest.raises(AttributeError):
        _result().outcome = "pass"  # type: ignore[misc]


def test_measure_and_expect_record_size_and_gpu_explicitly():
    ctx = CheckContext(check_id="PF-X-001", profile="p")
    token = set_current(ctx)
    try:
        measure("busbw", 1.5, "GB/s", size_bytes=4096)
        expect("GPU 9 temperature", 50, "<=", 80, "C", gpu_index=9)
        with pytest.raises(AssertionError):
            expect_none("GPUs lost", ["a: lost", "b: lost"], gpus=[2, 5, None])
    finally:
        set_current(token.old_value if token.old_value is not token.MISSING else None)
    got = [Measurement.from_dict(m) for m in ctx.measurements]
    assert got[0].size_bytes == 4096 and got[1].gpu_index == 9
    assert [(m.gpu_index, m.ok) for m in got[2:]] == [(None, False), (2, False), (5, False)]


def test_new_reports_say_the_results_schema():
    report = Report(host="h", profile="p", profile_source="s", tier="preflight")
    assert report.to_dict()["results_schema"] == RESULTS_SCHEMA


def test_a_v1_report_recovers_sizes_from_its_text():
    v1 = recorded("algo-3")
    assert "results_schema" not in v1
    net = {c.label: c for c in bandwidth_curves(Report.from_dict(v1))}["PF-BW-002 all_reduce"]
    assert len(net.points) == 12 and net.points[-1] == (16 * 2**30, 123.5)


def test_a_new_report_reads_sizes_from_fields_never_from_the_text():
    report = copy.deepcopy(recorded("algo-3"))
    report["results_schema"] = RESULTS_SCHEMA
    # no collective or size recorded: not a busbw figure (not recorded), the prose is not read
    assert bandwidth_curves(Report.from_dict(report)) == []
    for check in report["checks"]:
        for m in check["measurements"]:
            if "busbw" in m["what"]:
                m["what"] = "busbw"
                m["size_bytes"] = 1 << 20
                m["collective"] = "all_reduce"
    net = {c.label: c for c in bandwidth_curves(Report.from_dict(report))}["PF-BW-002 all_reduce"]
    assert [size for size, _ in net.points] == [1 << 20]


def test_gpus_healthy_counts_the_gpu_indices_of_failed_measurements():
    failed = {"id": "PF-GPU-007", "outcome": "fail", "message": "[PF-GPU-007] GPU 3 hot",
              "measurements": [{"what": "GPUs too hot", "value": 1, "op": "==", "threshold": 0,
                                "ok": False, "gpu_index": 5},
                               {"what": "GPUs too hot", "value": 1, "op": "==", "threshold": 0,
                                "ok": False, "gpu_index": 6}]}
    new = {"results_schema": RESULTS_SCHEMA, "checks": [failed]}
    assert gpus_healthy(Report.from_dict(new), 8) == 6  # GPUs 5 and 6 (fields), not GPU 3
    old = Report.from_dict({"checks": [failed]})  # v1: the message is all there was
    assert gpus_healthy(old, 8) == 5
    assert Report.from_dict(new).checks[0].failed_gpus() == {5, 6}


def test_a_duration_not_measured_stays_unknown_never_0():
    """A record read without a duration (an older or hand-made report) says it was not
    measured: None, written back as null, and no metric or JUnit time is made of it."""
    record = _result().to_dict()
    del record["duration_s"]
    unknown = CheckResult.from_dict(record)
    assert unknown.duration_s is None and unknown.to_dict()["duration_s"] is None
    assert CheckResult.from_dict({**record, "duration_s": None}).duration_s is None
    assert CheckResult.from_dict({**record, "duration_s": 0}).duration_s == 0.0  # measured
