"""Report JSON, failure reason and the results file."""

from __future__ import annotations

import json

from harness.report import Report, failure_reason, load_results, write_report
from harness.results import CheckResult


def _check(i: int, outcome: str, message: str = "") -> CheckResult:
    return CheckResult(id=f"PF-GPU-{i:03d}", nodeid=f"t::c{i}", title=f"check {i}",
                       outcome=outcome, message=message)


def test_failure_reason_first_1024_chars_stand_alone():
    long_tail = " because " + "x" * 900
    checks = [_check(i, "fail", f"[PF-GPU-{i:03d}] GPU {i} value {i}.5 < 10.0 required for "
                     f"p5.48xlarge{long_tail}") for i in range(1, 6)]
    checks += [_check(9, "pass")]
    report = Report(host="algo-3", profile="p5.48xlarge", profile_source="x", tier="preflight",
                    checks=checks)
    text = failure_reason(report)
    head = text[: text.index("\n\nDetails:")]
    assert len(head) <= 1024
    assert head.startswith("gpu-preflight FAILED on algo-3 (p5.48xlarge, tier preflight): "
                           "5 of 6 checks failed.")
    for i in (1, 2, 3):  # the first ones in full enough to carry value and threshold
        assert f"[PF-GPU-{i:03d}] GPU {i} value {i}.5 < 10.0 required for p5.48xlarge" in head
    assert head.endswith("| +2 more: PF-GPU-004, PF-GPU-005")
    assert "Details:" in text and long_tail.strip() in text


def test_failure_reason_many_failures_measured_first_all_named():
    checks = [_check(i, "error", f"[PF-GPU-{i:03d}] NVML Shared Library Not Found; fallback "
                     "`nvidia-smi -q` could not run: command not found") for i in range(1, 31)]
    checks += [_check(99, "fail", "[PF-GPU-099] all_reduce busbw at 1 GiB 112.4 GB/s < 370.0 "
                      "GB/s required for p5.48xlarge; the NCCL log says NET/Socket")]
    report = Report(host="algo-1", profile="p5.48xlarge", profile_source="x", tier="preflight",
                    checks=checks)
    text = failure_reason(report)
    head = text[: text.index("\n\nDetails:")]
    assert len(head) <= 1024
    first = head.split(" | ")[0]
    assert "[PF-GPU-099] all_reduce busbw at 1 GiB 112.4 GB/s < 370.0 GB/s" in first
    for i in range(1, 31):
        assert f"PF-GPU-{i:03d}" in head


def test_harness_error_only_is_verdict_error():
    report = Report(host="h", profile="p", profile_source="s", tier="preflight",
                    harness_errors=["pytest crashed"])
    assert report.verdict == "error"
    assert "the harness could not complete its checks" in failure_reason(report)


def test_verdicts():
    base = dict(host="h", profile="p", profile_source="s", tier="preflight")
    assert Report(**base, checks=[_check(1, "pass"), _check(2, "warn"), _check(3, "skip")]).verdict == "pass"
    assert Report(**base, checks=[_check(1, "error")]).verdict == "fail"


def test_report_json_is_versioned_and_redacted(tmp_path):
    report = Report(host="h", profile="p", profile_source="s", tier="preflight",
                    checks=[_check(1, "fail", "saw secret-value-xyz in log")])
    path = write_report(report, tmp_path, env={"API_TOKEN": "secret-value-xyz"})
    data = json.loads(path.read_text())
    assert data["schema"] == "gpu-preflight.report/v1"
    assert data["counts"]["fail"] == 1 and data["verdict"] == "fail"
    assert "secret-value-xyz" not in path.read_text()


def test_load_results_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        json.dumps({"event": "collected", "checks": [{"id": "A", "nodeid": "n1"}]}) + "\n"
        + json.dumps({"event": "result", "id": "A", "nodeid": "n1", "outcome": "pass"}) + "\n"
        + '{"event": "result", "id": "B", "nod'
    )
    collected, results, statuses = load_results(path)
    assert [c["id"] for c in collected] == ["A"] and list(results) == ["n1"] and statuses == []


def test_a_report_without_results_is_never_a_pass():
    base = dict(host="h", profile="p", profile_source="s", tier="preflight")
    assert Report(**base).verdict == "error"  # zero checks: `PASS ()` proved nothing
    assert Report(**base, checks=[_check(1, "pass")], usage_error="no check selected").verdict \
        == "error"


def test_report_json_names_suites_overrides_and_the_selection(tmp_path):
    report = Report(host="h", profile="p", profile_source="s", tier="preflight",
                    checks=[_check(1, "pass")],
                    suites=[{"name": "built-in", "path": "/x/checks", "kind": "built-in",
                             "source": "installed package"}],
                    overrides=[{"name": "PREFLIGHT_KERNEL_LOG", "value": "/k", "effect": "e"}],
                    selection={"selected": 1, "reported": 1, "missing": [], "duplicates": []})
    data = json.loads(write_report(report, tmp_path).read_text())
    assert data["suites"][0]["name"] == "built-in"
    assert data["overrides"][0]["name"] == "PREFLIGHT_KERNEL_LOG"
    assert data["selection"]["reported"] == 1 and data["usage_error"] is None
    assert data["verdict"] == "pass"
