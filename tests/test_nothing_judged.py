"""A run that judged nothing is not a pass (issue 25 item 7): when every selected check was
skipped (not applicable to the profile), `run` ends as an empty selection does: exit 2, the
selection and the profile named, `preflight list` pointed at, never PASS, never a hand-off
(--warn-only included). One judged check among the skips is a run like any other. The
multi-node side (every node the same verdict): tests/test_cluster_verdict.py and
tests/e2e/test_e2e_judged.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.commands import EXIT_OK, EXIT_USAGE


def _report(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())


@pytest.mark.parametrize("warn_only", [False, True])
def test_every_check_skipped_is_a_usage_error_never_a_hand_off(
        tmp_path: Path, run_handoffs: list[list[str]], capsys: pytest.CaptureFixture[str],
        warn_only: bool):
    """local-cpu has no GPU: PF-GPU-001 does not apply, so `-k PF-GPU-001` judges nothing."""
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-GPU-001",
                   "--failure-file", str(failure), *(["--warn-only"] if warn_only else []),
                   "--", "echo", "ok"])
    assert rc == EXIT_USAGE and run_handoffs == []
    out, err = capsys.readouterr()
    said = ("every selected check was skipped, nothing was judged (profile local-cpu; tier "
            "preflight; -k 'PF-GPU-001'; suites built-in (")
    assert f"preflight: error: {said}" in err
    assert ("1 skipped (PF-GPU-001: not applicable to local-cpu: the profile expects no GPUs). "
            "A run that judges nothing proves nothing. `preflight list --tier preflight -k "
            "PF-GPU-001` shows what this selection matches, `preflight list` every check") in err
    assert "PASS" not in out
    report = _report(tmp_path)
    assert (report["verdict"], report["exit_code"]) == ("error", EXIT_USAGE)
    assert report["usage_error"].startswith(said)
    assert report["selection"]["judged"] == 0 and report["selection"]["selected"] == 1
    assert [c["outcome"] for c in report["checks"]] == ["skip"]
    assert said in failure.read_text()


def test_the_issues_case_a_p5_file_without_gpus_and_one_gpu_check(
        tmp_path: Path, run_handoffs: list[list[str]]):
    """`num_gpus = 0` for p5.48xlarge (said why, so the file is accepted) and `-k PF-GPU-001`
    printed "PASS (1 skip)" and exec'd."""
    path = tmp_path / "site.toml"
    path.write_text('[profiles."p5.48xlarge"]\nnum_gpus = 0\nweakened_because = "a test"\n')
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--profile-file", str(path),
                   "--report-dir", str(tmp_path / "r"), "-k", "PF-GPU-001", "--", "echo", "ok"])
    assert rc == EXIT_USAGE and run_handoffs == []
    assert "(profile p5.48xlarge; tier preflight; -k 'PF-GPU-001'" in _report(tmp_path)[
        "usage_error"]


def test_one_judged_check_among_skips_is_a_run_like_any_other(
        tmp_path: Path, run_handoffs: list[list[str]]):
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-GPU-001 or PF-ENV-001",
                   "--", "echo", "ok"])
    assert rc == EXIT_OK and run_handoffs == [["echo", "ok"]]
    report = _report(tmp_path)
    assert report["verdict"] == "pass" and report["selection"]["judged"] == 1
    assert report["selection"]["nothing_judged"] is None
