"""Report JSON, failure reason and the results file."""

from __future__ import annotations

import json

from harness.report.failure import failure_reason
from harness.report.model import Report, load_results, write_report
from harness.results import CheckResult


def _check(i: int, outcome: str, message: str = "") -> CheckResult:
    return CheckResult(id=f"PF-GPU-{i:03d}", nodeid=f"t::c{i}", title=f"check {i}",
                       outcome=outcome, message=message)


def _head(text: str) -> str:
    """The failure file's first line: what SageMaker's FailureReason shows on its own."""
    return text.split("\n", 1)[0]


def test_failure_reason_first_1024_chars_stand_alone():
    long_tail = " because " + "x" * 900
    checks = [_check(i, "fail", f"[PF-GPU-{i:03d}] GPU {i} value {i}.5 < 10.0 required for "
                     f"p5.48xlarge{long_tail}") for i in range(1, 6)]
    checks += [_check(9, "pass")]
    report = Report(host="algo-3", profile="p5.48xlarge", profile_source="x", tier="preflight",
                    checks=checks)
    text = failure_reason(report)
    head = _head(text)
    assert len(head) <= 1024
    assert head.startswith("gpu-preflight FAILED on algo-3 (p5.48xlarge, tier preflight): "
                           "5 of 6 checks failed, from 5 causes. CAUSE: ")
    for i in range(1, 6):  # each in full enough to carry value and threshold
        assert f"CAUSE: [PF-GPU-{i:03d}] GPU {i} value {i}.5 < 10.0 required for p5.48xlarge" \
            in head
    assert head.endswith("| failed: PF-GPU-001..005")
    assert "Details:" in text and long_tail.strip() in text


def test_failure_reason_root_cause_first_then_every_failed_id():
    checks = [_check(i, "error", f"[PF-GPU-{i:03d}] NVML Shared Library Not Found; fallback "
                     "`nvidia-smi -q` could not run: command not found") for i in range(1, 31)]
    checks += [_check(99, "fail", "[PF-GPU-099] all_reduce busbw at 1 GiB 112.4 GB/s < 370.0 "
                      "GB/s required for p5.48xlarge; the NCCL log says NET/Socket")]
    report = Report(host="algo-1", profile="p5.48xlarge", profile_source="x", tier="preflight",
                    checks=checks)
    head = _head(failure_reason(report))
    assert len(head) <= 1024
    causes = head.split(" | ")
    assert causes[0].endswith("CAUSE: [PF-GPU-001 and 29 checks blocked by it] no NVIDIA GPU is "
                              "visible (NVML could not start); fix: start the "
                              "container with the NVIDIA runtime (`docker run --gpus all`, or "
                              "`--runtime=nvidia` with NVIDIA_VISIBLE_DEVICES=all; on Kubernetes "
                              "a `nvidia.com/gpu` resource limit) and check that the host's "
                              "`nvidia-smi` lists the GPUs")
    assert causes[1].startswith("CAUSE: [PF-GPU-099] all_reduce busbw at 1 GiB 112.4 GB/s < 370.0")
    assert causes[-1] == "failed: PF-GPU-001..030, PF-GPU-099"


def test_failure_reason_of_a_no_gpu_p5_run_names_the_cause_first():
    """A recorded no-GPU p5 run (tests/recorded/no_gpu_p5_checks.json): its 44 failures were said
    one by one, the ulimit and EFA ones first, the missing GPU never in the first 1024 chars."""
    from pathlib import Path

    from harness.results import results

    data = json.loads((Path(__file__).parent / "recorded" / "no_gpu_p5_checks.json").read_text())
    report = Report(host="vm", profile="p5.48xlarge", profile_source="x", tier="preflight",
                    checks=results(data["checks"]))
    text = failure_reason(report)
    first = _head(text)
    assert len(first) <= 1024
    assert first.startswith("gpu-preflight FAILED on vm (p5.48xlarge, tier preflight): 44 of 75 "
                            "checks failed, from 7 causes. CAUSE: [PF-GPU-001 and 35 checks "
                            "blocked by it] no NVIDIA GPU is visible in this container: ")
    assert "; fix: start the container with the NVIDIA runtime" in first
    assert first.index("no EFA device") < first.index("PF-HOST-004")
    assert first.count("no NVIDIA GPU is visible") == 1
    assert "CAUSE: [PF-NET-001 and 2 checks blocked by it] no EFA device" in first
    ids = first.split(" | failed: ")[1].split("\n")[0]
    assert ids == ("PF-BW-001, PF-BW-003..005, PF-CLOCK-001, PF-GPU-001..005, PF-GPU-007..017, "
                   "PF-HOST-004, PF-LINK-002..003, PF-NET-001..012, PF-TRAIN-001..008")


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
