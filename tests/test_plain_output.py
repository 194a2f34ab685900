"""The summary for logs: one line per cause, no wrapping, identical failures grouped."""

from __future__ import annotations

import io

from harness.report.model import Report
from harness.report.plain_output import group_failures, print_plain_summary
from harness.results import results

LONG = "x" * 300


def _check(cid: str, outcome: str, message: str) -> dict:
    return {"id": cid, "outcome": outcome, "message": message}


def test_identical_failures_on_many_gpus_are_one_line():
    checks = [_check("PF-GPU-005", "fail", f"[PF-GPU-005] GPU {i} temperature 95 C > 85 C")
              for i in range(16)]
    checks.append(_check("PF-GPU-007", "fail", "[PF-GPU-007] GPU 2 has 3 retired pages"))
    groups = group_failures(results(checks))
    assert groups[0] == ("fail", ["PF-GPU-005"], [str(i) for i in range(16)],
                         "GPU N temperature 95 C > 85 C")
    assert groups[1] == ("fail", ["PF-GPU-007"], [], "GPU 2 has 3 retired pages")


def test_the_same_error_on_many_checks_is_one_line():
    checks = [_check(f"PF-GPU-00{i}", "error", f"[PF-GPU-00{i}] nvidia-smi: not found on PATH")
              for i in range(1, 6)]
    out = io.StringIO()
    print_plain_summary(Report.from_dict({
        "checks": checks, "verdict": "fail", "counts": {"error": 5}, "duration_s": 2,
        "host": "n1", "profile": {"name": "p5"}, "tier": "preflight"}), out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "ERROR PF-GPU-001..005: nvidia-smi: not found on PATH"
    assert lines[1] == "FAIL (5 error) in 2.0 s: n1 p5 tier preflight"


def test_pass_is_one_line_and_long_messages_never_wrap():
    out = io.StringIO()
    checks = [_check("PF-ENV-001", "pass", ""), _check("PF-ENV-003", "warn", f"long\n{LONG}")]
    print_plain_summary(Report.from_dict({
        "checks": checks, "verdict": "pass", "counts": {"pass": 1, "warn": 1}, "duration_s": 1,
        "host": "n1", "profile": {"name": "p5"}, "tier": "x"}), out)
    lines = out.getvalue().splitlines()
    assert lines == [f"WARN PF-ENV-003: long {LONG}", "PASS (1 pass, 1 warn) in 1.0 s: n1 p5 tier x"]
    assert "PF-ENV-001" not in out.getvalue()  # the progress lines already named it


def test_progress_lines_are_not_wrapped_when_piped():
    from harness.report.summary import print_progress

    out = io.StringIO()
    print_progress({"outcome": "pass", "id": "PF-TRAIN-001", "title": "t" * 200,
                    "duration_s": 1.0}, out)
    assert len(out.getvalue().splitlines()) == 1
    assert "t" * 200 in out.getvalue()


def test_summary_data_groups_what_needs_attention():
    from harness.report.plain_output import summary_data

    checks = [_check("PF-GPU-005", "fail", f"GPU {i} temperature 95 C > 85 C") for i in (0, 3)]
    checks += [_check("PF-ENV-001", "pass", ""), _check("PF-NET-001", "error", "fi_info: hung")]
    data = summary_data(Report.from_dict({
        "checks": checks, "verdict": "fail", "exit_code": 1, "host": "n1",
        "profile": {"name": "p5.48xlarge"}, "tier": "preflight",
        "counts": {"pass": 1, "fail": 2, "error": 1}, "duration_s": 3.5,
        "harness_errors": ["one\ntwo"]}), "/r/n1/report.json")
    assert data["attention"] == [
        {"outcome": "fail", "checks": ["PF-GPU-005"], "gpus": ["0", "3"],
         "message": "GPU N temperature 95 C > 85 C"},
        {"outcome": "error", "checks": ["PF-NET-001"], "gpus": [], "message": "fi_info: hung"}]
    assert data["verdict"] == "fail" and data["profile"] == "p5.48xlarge"
    assert data["harness_errors"] == ["one two"] and data["cluster"] is None
    assert [(c["root"], c["blocked_by_it"]) for c in data["causes"]] == [
        ("PF-GPU-005", []), ("PF-NET-001", [])]  # by cause, as the terminal says them
    assert data["report"] == "/r/n1/report.json"
