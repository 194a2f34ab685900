"""One report type from check to file: a report.json read back with `Report.from_dict` and
written again is the same bytes (every recorded report of this version under tests/), and a
recorded v1 report reads through harness.report.v1 into the typed report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.model import RESULTS_SCHEMA, Report, write_json_atomic
from harness.report.v1 import NAMED_GPU, is_v1

TESTS = Path(__file__).parent
RECORDED = sorted(p for p in TESTS.rglob("report.json") if ".venv" not in p.parts)
CURRENT = [p for p in RECORDED if not is_v1(json.loads(p.read_text()))]
V1 = [p for p in RECORDED if p not in CURRENT]


def _written(report: Report, tmp_path: Path) -> bytes:
    """The bytes `write_report` writes (the same writer, without the redaction)."""
    write_json_atomic(tmp_path / "again.json", report.to_dict())
    return (tmp_path / "again.json").read_bytes()


def test_there_are_recorded_reports_of_both_versions():
    assert len(CURRENT) >= 2 and len(V1) >= 4


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: str(p.relative_to(TESTS)))
def test_a_recorded_report_round_trips_to_the_same_bytes(path: Path, tmp_path: Path):
    report = Report.from_dict(json.loads(path.read_bytes()))
    assert _written(report, tmp_path) == path.read_bytes()


@pytest.mark.parametrize("path", CURRENT, ids=lambda p: str(p.relative_to(TESTS)))
def test_the_round_trip_judges_the_verdict_again(path: Path, tmp_path: Path):
    """The verdict and counts are not copied from the file: drop a failed check and they
    change (a round trip that copied them could not fail)."""
    data = json.loads(path.read_bytes())
    report = Report.from_dict(data)
    assert report.to_dict()["verdict"] == data["verdict"]
    report.checks = [c for c in report.checks if not c.failed]
    again = report.to_dict()
    assert again["counts"]["fail"] == again["counts"]["error"] == 0
    if data["verdict"] == "fail":
        assert again["verdict"] == "pass" and again != data


def test_keys_this_version_does_not_know_are_kept_in_order():
    data = json.loads(CURRENT[0].read_bytes())
    data["later_section"] = {"a": [1, 2]}
    report = Report.from_dict(data)
    assert report.extra["later_section"] == {"a": [1, 2]}
    assert list(report.to_dict())[-1] == "later_section"
    assert report.to_dict() == data


@pytest.mark.parametrize("path", V1, ids=lambda p: str(p.relative_to(TESTS)))
def test_a_v1_report_reads_as_the_typed_report(path: Path):
    data = json.loads(path.read_bytes())
    report = Report.from_dict(data)
    assert report.host == data["host"] and report.profile == data["profile"]["name"]
    assert [c.id for c in report.checks] == [c["id"] for c in data["checks"]]
    assert report.verdict == data["verdict"] and report.counts() == data["counts"]
    out = report.to_dict()
    assert out["results_schema"] == RESULTS_SCHEMA  # written again, it is today's report
    assert out["cluster"] == data["cluster"]


def test_a_v1_report_has_its_sizes_and_gpus_as_fields():
    data = json.loads((TESTS / "data" / "reports" / "algo-3" / "report.json").read_bytes())
    report = Report.from_dict(data)
    sized = [m.size_bytes for c in report.checks for m in c.measurements if "busbw" in m.what]
    assert 16 * 2**30 in sized
    named = [m for c in report.checks for m in c.measurements if m.what == NAMED_GPU]
    assert {m.gpu_index for m in named} == {5}
    data["results_schema"] = RESULTS_SCHEMA  # the same text in a new report: never read
    again = Report.from_dict(data)
    assert not [m for c in again.checks for m in c.measurements
                if m.what == NAMED_GPU or (m.size_bytes and "busbw" in m.what)]
