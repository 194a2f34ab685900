"""`preflight` end to end through main(argv): verdicts, exit codes, hand-off, reports, failure
file, redaction. The checks really run (as a pytest subprocess) on this machine."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from harness import cli
from harness.base import handoff
from harness.commands import EXIT_FAILED, EXIT_HARNESS, EXIT_OK, EXIT_USAGE

HF_TOKEN = "hf_plantedSecretTokenValue0123456789abcd"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYPLANTEDKEY"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """A neutral environment: no NCCL/FI settings, no SageMaker, no IMDS."""
    for name in list(os.environ):
        if name.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_", "RDMAV_", "TORCH_NCCL")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PREFLIGHT_OPT_ML", str(tmp_path / "opt_ml"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "node-a")
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def execs(monkeypatch):
    """Record the hand-off instead of performing it."""
    calls: list[list[str]] = []
    monkeypatch.setattr(handoff, "_execvp", lambda file, argv: calls.append(list(argv)))
    return calls


def _report(directory: Path) -> dict:
    return json.loads((directory / "node-a" / "report.json").read_text())


def test_passing_run_execs_the_exact_command(tmp_path, execs, capsys):
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--",
                   "torchrun", "--nproc-per-node=8", "train.py", "--lr", "3e-4"])
    assert rc == EXIT_OK
    assert execs == [["torchrun", "--nproc-per-node=8", "train.py", "--lr", "3e-4"]]
    report = _report(tmp_path / "r")
    assert report["schema"] == "gpu-preflight.report/v1"
    assert (report["verdict"], report["profile"]["name"], report["host"]) == (
        "pass", "local-cpu", "node-a")
    assert report["profile"]["source"] == "inspection (no GPU found)"
    assert {c["id"] for c in report["checks"]} >= {"PF-ENV-001", "PF-ENV-004"}
    assert report["command"] == ["torchrun", "--nproc-per-node=8", "train.py", "--lr", "3e-4"]
    assert (tmp_path / "r" / "node-a" / "junit.xml").exists()
    out = capsys.readouterr().out
    assert "PASS" in out and "hard upper bound" in out


def test_no_command_only_checks(tmp_path, execs):
    assert cli.main(["run", "--report-dir", str(tmp_path / "r")]) == EXIT_OK
    assert execs == []


def test_failing_run_never_execs_and_explains(tmp_path, execs, monkeypatch, capsys):
    monkeypatch.setenv("NCCL_NET", "Socket")
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--report-dir", str(tmp_path / "r"),
                   "--failure-file", str(failure), "--", "echo", "ok"])
    assert rc == EXIT_FAILED
    assert execs == []
    report = _report(tmp_path / "r")
    assert report["verdict"] == "fail" and report["exit_code"] == 1
    failed = {c["id"]: c for c in report["checks"] if c["outcome"] == "fail"}
    assert "PF-ENV-001" in failed
    assert "NCCL_NET=Socket" in failed["PF-ENV-001"]["message"]
    text = failure.read_text()
    head = text[:1024]
    assert head.startswith("gpu-preflight FAILED on node-a (p5.48xlarge, tier preflight)")
    # The causes come first (issue 29): PF-ENV-001 is one of them, named before the failed
    # IDs (in full when the room allows; else in "+N more causes"), and in full below.
    causes_part = head.split(" | failed: ")[0]
    assert "CAUSE: " in causes_part and "PF-ENV-001" in causes_part, head
    assert "[PF-ENV-001] harmful environment variables" in text and "NCCL_NET=Socket" in text
    assert "FAIL" in capsys.readouterr().out


def test_warn_only_execs_despite_failures(tmp_path, execs, monkeypatch):
    monkeypatch.setenv("NCCL_NET", "Socket")
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--warn-only",
                   "--report-dir", str(tmp_path / "r"), "--", "echo", "ok"])
    assert execs == [["echo", "ok"]]
    assert rc == EXIT_OK  # the recorded exec returns; a real one never does
    assert _report(tmp_path / "r")["warn_only"] is True


def test_unknown_profile_is_usage_error_listing_known(tmp_path, execs, capsys):
    # g5.xlarge has a profile since issue 17; a name given with --profile that has none is a
    # usage error (a typo must not run a derived profile).
    rc = cli.main(["run", "--profile", "g5.xlarg", "--report-dir", str(tmp_path / "r"), "--",
                   "echo"])
    assert rc == EXIT_USAGE and execs == []
    err = capsys.readouterr().err
    assert "unknown profile 'g5.xlarg'; did you mean 'g5.xlarge'" in err
    assert "; known profiles: g5.12xlarge," in err
    assert _report(tmp_path / "r")["harness_errors"]


def _sagemaker(tmp_path: Path, instance_type: str) -> Path:
    config = tmp_path / "opt_ml" / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({
        # One host: a multi-host config makes `run` a multi-node job (tests/test_cluster_*).
        "current_host": "algo-2", "hosts": ["algo-2"],
        "current_instance_type": instance_type, "current_group_name": "homogeneousCluster",
        "network_interface_name": "eth0",
    }))
    return tmp_path / "opt_ml"


def test_sagemaker_profile_report_dir_and_failure_file(tmp_path, execs, monkeypatch):
    opt_ml = _sagemaker(tmp_path, "ml.p5.48xlarge")
    monkeypatch.delenv("PREFLIGHT_HOSTNAME")
    monkeypatch.setenv("FI_PROVIDER", "tcp")
    rc = cli.main(["run", "--", "python", "train.py"])
    assert rc == EXIT_FAILED and execs == []
    report = json.loads((opt_ml / "output/data/preflight/algo-2/report.json").read_text())
    resolved = report["profile"].pop("resolved")  # the whole profile (docs/profiles.md)
    assert report["profile"] == {"name": "p5.48xlarge", "source": "SageMaker resourceconfig.json"}
    assert (resolved["name"], resolved["nvlink_busbw_gb_s_min"]) == ("p5.48xlarge", 460.0)
    assert report["host"] == "algo-2"
    reason = (opt_ml / "output" / "failure").read_text()
    assert reason.startswith("gpu-preflight FAILED on algo-2 (p5.48xlarge, tier preflight)")
    assert "PF-ENV-001" in reason[:1024].split(" | failed: ")[0]  # a cause, before the IDs
    assert "FI_PROVIDER=tcp" in reason  # its words in full in the Causes section
    # No /dev/nvidia* and no NVML on this machine: no CUDA rank is launched, each says why.
    checks = {c["id"]: c for c in report["checks"]}
    for check_id, outcome in (("PF-TRAIN-001", "fail"), ("PF-NET-006", "error"),
                              ("PF-BW-001", "error")):
        assert checks[check_id]["outcome"] == outcome, checks[check_id]
        assert ("no NVIDIA GPU is visible in this container: no /dev/nvidia[0-9]* device node"
                in checks[check_id]["message"]), checks[check_id]["message"]


def test_sagemaker_unknown_instance_type_writes_failure(tmp_path, execs, monkeypatch):
    # A GPU family type with no profile and no GPU visible (with a GPU it would be derived).
    opt_ml = _sagemaker(tmp_path, "ml.p9.48xlarge")
    assert cli.main(["run", "--", "python", "train.py"]) == EXIT_USAGE
    reason = (opt_ml / "output" / "failure").read_text()
    assert "unknown profile 'p9.48xlarge'" in reason and "p5.48xlarge" in reason


def test_secrets_never_reach_any_output(tmp_path, execs, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("TORCH_DIST_PASSWORD", "hunter2-planted")  # kept section, secret name
    # A secret inside a value that a failing check prints:
    monkeypatch.setenv("FI_PROVIDER", HF_TOKEN)
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--report-dir", str(tmp_path / "r"),
                   "--failure-file", str(failure), "-v", "--",
                   "train.py", f"--hf-token={HF_TOKEN}"])
    assert rc == EXIT_FAILED
    captured = capsys.readouterr()
    outputs = {"stdout": captured.out, "stderr": captured.err, "failure": failure.read_text()}
    for path in (tmp_path / "r" / "node-a").iterdir():
        outputs[path.name] = path.read_text()
    assert {"report.json", "junit.xml", "pytest-output.txt", "results.jsonl"} <= set(outputs)
    for name, text in outputs.items():
        for secret in (HF_TOKEN, AWS_SECRET, "hunter2-planted"):
            assert secret not in text, f"{secret[:6]}... leaked into {name}"
    report = json.loads(outputs["report.json"])
    assert report["environment"]["TORCH_DIST_PASSWORD"] == "***REDACTED***"
    assert "FI_PROVIDER=***REDACTED***" in outputs["failure"]


SLOW_SUITE = '''
import time
from harness.checking import check

@check("PF-T-500", title="quick", why="w", remedy="r")
def test_quick():
    pass

@check("PF-T-501", title="hangs", why="w", remedy="r")
def test_hangs():
    time.sleep(600)
'''


def test_budget_bounds_the_run_and_report_is_written(tmp_path, execs, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_slow.py").write_text(SLOW_SUITE)
    profiles = tmp_path / "profiles.toml"
    # 40 s: the check session must start and report the quick check inside the budget (less the
    # report reserve) on a loaded machine; 9 s left 4 s, too few at load 10 ("no check ran").
    profiles.write_text('[profiles."local-cpu"]\nrun_budget_s = { preflight = 40.0 }\n'
                        'check_timeout_s = { preflight = 600.0 }\n')
    monkeypatch.setenv("PREFLIGHT_SUITE", str(suite))
    start = time.monotonic()
    rc = cli.main(["run", "--profile-file", str(profiles), "--report-dir", str(tmp_path / "r"),
                   "--", "echo", "ok"])
    elapsed = time.monotonic() - start
    assert rc == EXIT_FAILED and execs == []
    assert elapsed < 40.0 + 10  # budget, plus kill grace and slow-machine margin
    report = _report(tmp_path / "r")
    outcomes = {c["id"]: (c["outcome"], c["message"]) for c in report["checks"]}
    assert outcomes["PF-T-500"][0] == "pass"
    assert outcomes["PF-T-501"] == ("error",
                                    "[PF-T-501] did not finish within the run budget (40 s)")
    assert "did not finish within the 40 s budget" in report["harness_errors"][0]


def test_broken_check_file_is_a_harness_error(tmp_path, execs, monkeypatch):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_broken.py").write_text("import no_such_module_xyz\n")
    monkeypatch.setenv("PREFLIGHT_SUITE", str(suite))
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "echo", "ok"])
    assert rc == EXIT_HARNESS and execs == []
    report = _report(tmp_path / "r")
    assert report["verdict"] == "error"
    assert "no_such_module_xyz" in report["harness_errors"][0]


def test_exec_failure_is_127(tmp_path, capsys):
    failure = tmp_path / "failure"
    rc = cli.main(["run", "-k", "PF-ENV-001", "--report-dir", str(tmp_path / "r"),
                   "--failure-file", str(failure), "--", "no-such-trainer-xyz"])
    assert rc == handoff.EXIT_EXEC_FAILED
    assert "cannot run 'no-such-trainer-xyz'" in capsys.readouterr().err
    report = _report(tmp_path / "r")  # the checks passed; the report says what happened next
    assert (report["verdict"], report["exit_code"]) == ("pass", 127)
    assert report["handoff"] == {
        "command": ["no-such-trainer-xyz"], "executed": False, "exit_code": 127,
        "error": "cannot run 'no-such-trainer-xyz': No such file or directory"}
    assert failure.read_text().startswith(
        "gpu-preflight on node-a (local-cpu, tier preflight): the checks passed (1 of 1) but the "
        "training command could not be started: cannot run 'no-such-trainer-xyz': No such file "
        "or directory (exit 127)")


def test_a_crash_is_a_harness_error_that_still_leaves_its_files(tmp_path, execs, monkeypatch,
                                                                capsys):
    """A bug anywhere in the run (here: printing the summary) is exit 3, never 1 (a node
    verdict: the Slurm prolog drains on 1), with report.json, junit.xml and the failure file
    naming the exception."""
    from harness.commands import run

    def broken(*args, **kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(run, "print_run_summary", broken)
    failure = tmp_path / "failure"
    rc = cli.main(["run", "-k", "PF-ENV-001", "--report-dir", str(tmp_path / "r"),
                   "--failure-file", str(failure), "--", "echo", "ok"])
    assert rc == EXIT_HARNESS and execs == []
    report = _report(tmp_path / "r")
    assert (report["verdict"], report["exit_code"]) == ("error", 3)
    assert [c["id"] for c in report["checks"]] == ["PF-ENV-001"]  # what ran is kept
    assert report["harness_errors"][-1].startswith("internal error: RuntimeError: planted bug "
                                                   "(at test_cli.py:")
    assert failure.read_text().startswith("gpu-preflight ERROR on node-a (local-cpu, tier "
                                          "preflight): the harness could not complete its "
                                          "checks. harness: internal error: RuntimeError")
    assert (tmp_path / "r" / "node-a" / "junit.xml").exists()
    err = capsys.readouterr().err
    assert "preflight: harness error: internal error: RuntimeError: planted bug" in err


def test_an_unusable_report_folder_is_exit_3_naming_it(tmp_path, execs, capsys):
    """Its parent is a file: nothing runs, the failure file (writable elsewhere) says why."""
    (tmp_path / "r").write_text("not a folder")
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--failure-file", str(failure),
                   "--", "echo", "ok"])
    assert rc == EXIT_HARNESS and execs == []
    said = f"the report folder {tmp_path / 'r' / 'node-a'} cannot be written: Not a directory"
    assert f"preflight: harness error: {said}" in capsys.readouterr().err
    assert said in failure.read_text()


def test_xdist_workers_give_the_same_verdict(tmp_path, execs, monkeypatch):
    monkeypatch.setenv("NCCL_NET", "Socket")
    rc = cli.main(["run", "--profile", "p5.48xlarge", "--workers", "2",
                   "--report-dir", str(tmp_path / "r"), "-k", "env"])
    assert rc == EXIT_FAILED
    report = _report(tmp_path / "r")
    ids = [c["id"] for c in report["checks"]]
    assert len(ids) == len(set(ids)) and "PF-ENV-001" in ids
    assert [p["phase"] for p in report["phases"]] == ["node-local", "exclusive"]


def test_list_explain_profiles(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "PF-ENV-001" in out and "preflight" in out
    assert cli.main(["explain", "pf-env-001"]) == 0
    out = capsys.readouterr().out
    assert "why:" in out and "remedy:" in out
    assert cli.main(["explain", "PF-NOPE-999"]) == EXIT_USAGE
    assert "unknown check 'PF-NOPE-999'" in capsys.readouterr().err
    assert cli.main(["profiles", "--json"]) == 0
    profiles = json.loads(capsys.readouterr().out)
    assert profiles["p5en.48xlarge"]["num_efa_devices"] == 16
    assert cli.main(["profiles", "p5.48xlarge"]) == 0
    assert "net_busbw_gb_s_min" in capsys.readouterr().out


def test_bad_usage_exit_code(capsys):
    assert cli.main(["run", "--tier", "nightly"]) == EXIT_USAGE
    assert cli.main(["frobnicate"]) == EXIT_USAGE
    assert cli.main(["run", "--workers", "many"]) == EXIT_USAGE


def test_inspect_env(tmp_path, capsys):
    dump = tmp_path / "env.txt"
    dump.write_text(f"NCCL_NET=Socket\nHF_TOKEN={HF_TOKEN}\nNCCL_PROTO=simple\r\nPATH=/bin\n")
    assert cli.main(["inspect", "env", str(dump), "--json", "--profile", "p5.48xlarge"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out)
    assert [f["name"] for f in result["harmful"]] == ["NCCL_NET"]
    assert [f["name"] for f in result["outdated"]] == ["NCCL_PROTO"]
    assert HF_TOKEN not in out


def test_inspect_garbage_exits_2_with_json_error(tmp_path, capsys):
    garbage = tmp_path / "g.txt"
    garbage.write_bytes(b"\x00\x01 not an env dump \xff")
    assert cli.main(["inspect", "env", str(garbage), "--json"]) == EXIT_USAGE
    assert "error" in json.loads(capsys.readouterr().out)
    assert cli.main(["inspect", "nope", str(garbage)]) == EXIT_USAGE
    assert "unknown kind 'nope'" in capsys.readouterr().err


def test_closed_stdout_is_not_a_traceback(tmp_path):
    """`preflight list | head -1`: the reader is gone before preflight writes."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "harness", "list"], env=env,
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr


# --- the gate fails closed (issue 12) ---------------------------------------------------------


def test_k_matching_nothing_is_a_usage_error_and_never_execs(tmp_path, execs, capsys):
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-NOPE-999",
                   "--failure-file", str(failure), "--", "echo", "ok"])
    assert rc == EXIT_USAGE and execs == []
    out, err = capsys.readouterr()
    assert "ERROR (no check ran)" in out + err and "()" not in out + err
    assert "no check selected (profile local-cpu; tier preflight; -k 'PF-NOPE-999'; suites " \
           "built-in (" in err
    assert "`preflight list --tier preflight -k PF-NOPE-999` shows what this selection" in err
    report = _report(tmp_path / "r")
    assert report["verdict"] == "error" and report["exit_code"] == EXIT_USAGE
    assert report["usage_error"].startswith("no check selected")
    assert report["selection"]["selected"] == 0 and report["checks"] == []
    assert "no check selected" in failure.read_text()


def test_malformed_k_is_a_usage_error_before_any_check_runs(tmp_path, execs, capsys):
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-GPU and (",
                   "--", "echo", "ok"])
    assert rc == EXIT_USAGE and execs == []
    assert "-k 'PF-GPU and (' is not a valid expression: at column 13" in capsys.readouterr().err
    assert not (tmp_path / "r" / "node-a" / "results.jsonl").exists()  # no session started
    assert _report(tmp_path / "r")["exit_code"] == EXIT_USAGE


def test_k_selects_by_check_id_and_prefix(tmp_path, execs):
    assert cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-ENV-001"]) == 0
    report = _report(tmp_path / "r")
    assert [c["id"] for c in report["checks"]] == ["PF-ENV-001"]
    assert report["selection"]["keyword"] == "PF-ENV-001"
    assert (report["selection"]["selected"], report["selection"]["reported"]) == (1, 1)
    assert cli.main(["run", "--report-dir", str(tmp_path / "r"),
                     "-k", "PF-ENV and not PF-ENV-001"]) == 0
    ids = {c["id"] for c in _report(tmp_path / "r")["checks"]}
    assert "PF-ENV-004" in ids and "PF-ENV-001" not in ids
    assert ids == {i for i in ids if i.startswith("PF-ENV-")}


SITE_CHECKS = '''
"""Site checks of one cluster."""
import os

def test_scratch_has_room():
    """Scratch space has room for checkpoints"""
    free_gb = 50
    assert free_gb > 100, f"only {free_gb} GB free on /scratch"

def test_site_env():
    assert "HOME" in os.environ
'''


def _site(tmp_path: Path, text: str = SITE_CHECKS, name: str = "site-checks") -> Path:
    site = tmp_path / name
    site.mkdir()
    (site / "test_site.py").write_text(text)
    return site


def test_a_failing_plain_site_check_fails_the_run(tmp_path, execs, capsys):
    site = _site(tmp_path)
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--extra-checks", str(site),
                   "-k", "PF-ENV-001 or site", "--", "echo", "ok"])
    assert rc == EXIT_FAILED and execs == []
    out = capsys.readouterr().out
    assert "gpu-preflight: suites: built-in (" in out
    assert f"site-checks ({site}, added by --extra-checks)" in out
    report = _report(tmp_path / "r")
    by_id = {c["id"]: c for c in report["checks"]}
    assert set(by_id) == {"PF-ENV-001", "site-checks/test_site.py::test_scratch_has_room",
                          "site-checks/test_site.py::test_site_env"}
    failed = by_id["site-checks/test_site.py::test_scratch_has_room"]
    assert (failed["outcome"], failed["suite"], failed["kind"]) == ("fail", "site-checks", "test")
    assert failed["message"] == ("[site-checks/test_site.py::test_scratch_has_room] only 50 GB "
                                 "free on /scratch (test_site.py:8)")
    assert [s["name"] for s in report["suites"]] == ["built-in", "site-checks"]
    assert report["suites"][1] == {"name": "site-checks", "path": str(site), "kind": "extra",
                                   "source": "--extra-checks"}


def test_extra_checks_env_var_list_and_explain(tmp_path, monkeypatch, capsys):
    site = _site(tmp_path)
    monkeypatch.setenv("PREFLIGHT_EXTRA_CHECKS", f"{site}:")
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == [lines[0].split()[0], lines[0].split()[1], "built-in"]
    site_lines = [ln for ln in lines if "site-checks/" in ln]
    assert [ln.split()[:3] for ln in site_lines] == [
        ["site-checks/test_site.py::test_scratch_has_room", "preflight", "site-checks"],
        ["site-checks/test_site.py::test_site_env", "preflight", "site-checks"]]
    assert site_lines[0].endswith("Scratch space has room for checkpoints")
    assert cli.main(["list", "--json", "-k", "site"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {c["suite"] for c in listed} == {"site-checks"} and len(listed) == 2
    assert cli.main(["explain", "site-checks/test_site.py::test_scratch_has_room"]) == 0
    out = capsys.readouterr().out
    assert f"suite:    site-checks ({site}) (a plain pytest test)" in out
    assert "why:      Scratch space has room for checkpoints" in out


def test_missing_extra_checks_folder_is_a_usage_error(tmp_path, execs, capsys):
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--extra-checks",
                   str(tmp_path / "nope"), "--", "echo", "ok"])
    assert rc == EXIT_USAGE and execs == []
    assert f"--extra-checks: {tmp_path / 'nope'} does not exist" in capsys.readouterr().err


def test_a_site_check_file_that_does_not_import_is_a_harness_error(tmp_path, execs, capsys):
    site = _site(tmp_path, "import no_such_site_module\n")
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--extra-checks", str(site),
                   "--", "echo", "ok"])
    assert rc == EXIT_HARNESS and execs == []
    errors = _report(tmp_path / "r")["harness_errors"]
    assert errors == [f"check file {site / 'test_site.py'} could not be collected: "
                      "ModuleNotFoundError: No module named 'no_such_site_module'"]
    report = _report(tmp_path / "r")
    assert report["verdict"] == "error"
    assert {c["outcome"] for c in report["checks"]} <= {"pass", "warn", "skip"}  # the rest still ran
    assert cli.main(["list", "--extra-checks", str(site)]) == EXIT_HARNESS
    captured = capsys.readouterr()
    assert "No module named 'no_such_site_module'" in captured.err
    assert "PF-ENV-001" in captured.out  # the rest is listed


def test_suite_replacement_and_overrides_are_announced(tmp_path, execs, monkeypatch, capsys):
    suite = _site(tmp_path, "def test_only():\n    pass\n", name="my-suite")
    log = tmp_path / "kern.log"
    log.write_text("")
    monkeypatch.setenv("PREFLIGHT_SUITE", str(suite))
    monkeypatch.setenv("PREFLIGHT_KERNEL_LOG", str(log))
    assert cli.main(["run", "--report-dir", str(tmp_path / "r")]) == EXIT_OK
    out = capsys.readouterr().out
    assert (f"gpu-preflight: suites: my-suite ({suite}, from PREFLIGHT_SUITE: REPLACES the "
            "built-in suite)") in out
    assert (f"gpu-preflight: override: PREFLIGHT_KERNEL_LOG={log} (XID/SXid evidence read from "
            "this file instead of journalctl/dmesg)") in out
    report = _report(tmp_path / "r")
    assert report["suites"] == [{"name": "my-suite", "path": str(suite), "kind": "replacement",
                                 "source": "PREFLIGHT_SUITE"}]
    assert {"name": "PREFLIGHT_KERNEL_LOG", "value": str(log),
            "effect": "XID/SXid evidence read from this file instead of journalctl/dmesg"} in \
        report["overrides"]
    assert [c["id"] for c in report["checks"]] == ["my-suite/test_site.py::test_only"]


def test_an_incomplete_install_is_a_harness_error_naming_the_file(tmp_path, execs, monkeypatch):
    from harness.run import runner

    monkeypatch.setattr(runner, "_INI", tmp_path / "gone" / "checks.ini")
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "echo", "ok"])
    assert rc == EXIT_HARNESS and execs == []
    assert _report(tmp_path / "r")["harness_errors"] == [
        f"gpu-preflight is incomplete: the check sessions' pytest configuration "
        f"{tmp_path / 'gone' / 'checks.ini'} is missing (reinstall the package)"]


def test_the_images_pytest_plugins_are_not_loaded_unless_named(tmp_path, execs, monkeypatch):
    """An installed pytest plugin that breaks on import (or only slows every session) does not
    reach the check sessions; one named in PREFLIGHT_PYTEST_PLUGINS is loaded."""
    site = tmp_path / "site"
    dist = site / "broken_plugin-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nbroken = broken_plugin_xyz\n")
    (site / "broken_plugin_xyz.py").write_text("raise RuntimeError('broken plugin imported')\n")
    (site / "named_plugin_xyz.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['NAMED_PLUGIN_MARK']).write_text(str(os.getpid()))\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p))
    monkeypatch.setenv("PREFLIGHT_PYTEST_PLUGINS", "named_plugin_xyz")
    monkeypatch.setenv("NAMED_PLUGIN_MARK", str(tmp_path / "named-loaded"))
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "-k", "PF-ENV-001", "--",
                   "echo", "ok"])
    report = _report(tmp_path / "r")
    assert (rc, report["verdict"], report["harness_errors"]) == (EXIT_OK, "pass", [])
    assert [c["id"] for c in report["checks"]] == ["PF-ENV-001"]
    assert (tmp_path / "named-loaded").is_file()


def test_a_named_pytest_plugin_that_is_not_installed_stops_the_run(tmp_path, execs, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv("PREFLIGHT_PYTEST_PLUGINS", "no_such_plugin_xyz")
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--", "echo", "ok"])
    assert rc != EXIT_OK and execs == []
    assert "no_such_plugin_xyz" in capsys.readouterr().err
