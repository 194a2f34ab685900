"""Root cause first (harness.report.causes): failures that follow from one cause are one cause, the
check that states it its root, the rest folded under it by ID; a failure of its own stays as
its check said it. On a recorded no-GPU p5 run (tests/recorded/no_gpu_p5_checks.json)."""

from __future__ import annotations

import json
from pathlib import Path

from harness.report.causes import find_causes
from harness.results import CheckResult, results

DATA = Path(__file__).parent / "recorded" / "no_gpu_p5_checks.json"


def _c(cid: str, message: str, outcome: str = "error", remedy: str = "") -> CheckResult:
    return CheckResult(id=cid, outcome=outcome, message=f"[{cid}] {message}", remedy=remedy)


def test_a_recorded_no_gpu_run_has_seven_causes_the_missing_gpu_first():
    checks = results(json.loads(DATA.read_text())["checks"])
    causes = find_causes(checks)
    assert sum(len(c.ids) for c in causes) == 44  # every failed check, once
    first = causes[0]
    assert first.key == "no-gpu" and first.root == "PF-GPU-001" and len(first.blocked) == 35
    assert first.text.startswith("no NVIDIA GPU is visible in this container: no /dev/nvidia")
    assert first.fix.startswith("start the container with the NVIDIA runtime")
    assert causes[1].key == "no-efa" and causes[1].root == "PF-NET-001"
    assert causes[1].blocked == ("PF-NET-002", "PF-NET-012")
    assert [c.root for c in causes[2:]] == ["PF-HOST-004", "PF-NET-005", "PF-GPU-012",
                                           "PF-NET-003", "PF-NET-004"]
    assert causes[2].line() == ("PF-HOST-004: open-files hard limit (ulimit -Hn) 20000 < 65536 "
                                "required for p5.48xlarge")
    assert causes[2].fix.startswith("run the container with `--ulimit nofile=")


def test_a_missing_tool_blocks_each_check_that_runs_it():
    causes = find_causes([
        _c("PF-NET-003", "fi_info could not list providers: `fi_info -p efa` could not run: "
           "command not found"),
        _c("PF-NET-014", "`fi_info -v` could not run: command not found"),
        _c("PF-HOST-004", "open-files hard limit 1024 < 65536", "fail", "raise it"),
    ])
    assert [(c.key, c.root, c.blocked) for c in causes] == [
        ("tool:fi_info", "PF-NET-003", ("PF-NET-014",)),
        ("check:PF-HOST-004", "PF-HOST-004", ())]
    assert causes[0].line().startswith("`fi_info` is not installed in this image (command not "
                                       "found) (PF-NET-003); blocked by it: 1 checks: PF-NET-014")
    assert causes[1].fix == "raise it"


def test_the_same_message_on_many_checks_is_one_line_without_a_rule():
    causes = find_causes([_c(f"PF-GPU-00{i}", "nvidia-smi: not found on PATH")
                          for i in range(1, 6)])
    assert len(causes) == 1
    assert causes[0].line() == "PF-GPU-001..005: nvidia-smi: not found on PATH"


def test_passes_warnings_and_skips_are_no_cause():
    assert find_causes([_c("A-1", "x", "pass"), _c("A-2", "y", "warn"),
                        _c("A-3", "z", "skip")]) == []


def test_one_failure_on_several_gpus_is_one_line_naming_them():
    causes = find_causes([_c("PF-GPU-005", f"GPU {i} temperature 95 C > 85 C", "fail")
                          for i in (0, 3, 5)])
    assert [c.line() for c in causes] == [
        "PF-GPU-005: GPU N temperature 95 C > 85 C (GPU N: 0, 3, 5)"]
