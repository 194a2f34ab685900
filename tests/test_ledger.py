"""The bad-hardware ledger (harness.memory.ledger, `preflight ledger`, PF-LEDGER-001): which failures
name hardware, what a clear clears, the CLI on a folder and on S3 (moto), and real runs: a
failure naming a GPU is appended, the next run names the part in its header and report,
certify fails on it until `preflight ledger clear` is recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from harness.memory.ledger import Ledger, hardware_failures, keys_of
from harness.memory.store import Store
from harness.results import CheckResult, Measurement
from tests.fake_tools import make_tool

ROOT = Path(__file__).resolve().parent.parent
H100_XML = ROOT / "tests/data/nvidia_smi/real_xml-580-h100x8-k8s-test-infra.xml"
GPUS = [{"index": 0, "uuid": "GPU-0", "serial": "1650000000001"},
        {"index": 1, "uuid": "GPU-1", "serial": "1650000000002"},
        {"index": 2, "uuid": "GPU-2", "serial": None}]
NICS = [{"name": "rdmap16s27", "guid": "0e5e:f5ff:fe11:2233"},
        {"name": "rdmap32s27", "guid": "0e5e:f5ff:fe44:5566"}]


def _result(check_id: str, message: str, outcome: str = "fail",
            measurements: tuple[Measurement, ...] = ()) -> CheckResult:
    return CheckResult(id=check_id, nodeid=check_id, title="t", tier="preflight",
                       outcome=outcome, message=message, measurements=list(measurements))


def _keys(entries: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(e["part"], e["hardware"]["type"], e["check"]) for e in entries]  # type: ignore[index]


def test_failures_name_gpus_nics_and_nvlinks() -> None:
    checks = [
        _result("PF-GPU-013", "[PF-GPU-013] GPU 1 (bus 00000000:1B:00.0, serial 1650000000002) "
                "matmul 310 TFLOP/s < 600 TFLOP/s required for p5.48xlarge"),
        _result("PF-GPU-010", "[PF-GPU-010] GPU 0 (bus 0:0, serial 1650000000001): NVLink 3 "
                "error counters rising (replay +9 in 5 s); GPU 1 (bus 0:1, serial 1650000000002):"
                " 17 of 18 NVLinks up (down: 7)"),
        _result("PF-GPU-015", "[PF-GPU-015] HBM copy below the floor", measurements=(
                Measurement("GPU 2 HBM copy", 100.0, "GB/s", ">=", 2000.0, False, gpu_index=2),
                Measurement("GPU 0 HBM copy", 2900.0, "GB/s", ">=", 2000.0, True, gpu_index=0))),
        _result("PF-NET-012", "[PF-NET-012] rdmap32s27 port 1 is DOWN"),
        _result("PF-GPU-003", "[PF-GPU-003] GPU 0 (serial 1650000000001): unread", "error"),
        _result("PF-ENV-001", "[PF-ENV-001] NCCL_PROTO=Simple is harmful"),
    ]
    entries = hardware_failures(checks, gpus=GPUS, nics=NICS, host="n1", instance_id="i-1")
    assert _keys(entries) == [
        ("1650000000002", "gpu", "PF-GPU-013"),
        ("1650000000001", "nvlink", "PF-GPU-010"),
        ("1650000000002", "gpu", "PF-GPU-010"),  # no link named in its part of the message
        ("GPU-2", "gpu", "PF-GPU-015"),  # no serial reported: its UUID is the key
        ("0e5e:f5ff:fe44:5566", "nic", "PF-NET-012"),
    ]
    assert entries[1]["hardware"]["links"] == [3]  # type: ignore[index]
    assert entries[0]["host"] == "n1" and entries[0]["instance_id"] == "i-1"


def test_clear_closes_only_earlier_failures_of_its_key(tmp_path: Path) -> None:
    ledger = Ledger(Store.of(str(tmp_path)))
    fail = {"kind": "failure", "check": "PF-GPU-013", "host": "n1", "at": "t"}
    ledger.append({**fail, "part": "A"}, writer="n1")
    ledger.append({**fail, "part": "B"}, writer="n1")
    ledger.clear("A", why="replaced", by="ops", host="admin")
    ledger.append({**fail, "part": "A", "host": "n7"}, writer="n7")  # came back, failed again
    with (tmp_path / "ledger.jsonl").open("a") as fh:
        fh.write("not json\n")
    entries, bad = ledger.entries()
    assert len(entries) == 4 and bad == 1
    assert [(e["part"], e["host"]) for e in ledger.open_failures()] == [("B", "n1"), ("A", "n7")]
    seen = ledger.seen(keys_of([{"index": 5, "uuid": "GPU-x", "serial": "A"}], []))
    assert [(e["host"], e["here"]) for e in seen] == [("n7", "GPU 5 (uuid GPU-x, serial A)")]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", "ledger", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("on_s3", [False, True])
def test_ledger_cli_list_and_clear(tmp_path: Path, on_s3: bool,
                                   request: pytest.FixtureRequest) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "USER": "ops-kim"}
    where = str(tmp_path / "ledger")
    if on_s3:
        env.update(request.getfixturevalue("aws_env"))
        boto3.client("s3").create_bucket(Bucket="pf-ledger-cli")
        where = "s3://pf-ledger-cli/fleet"
    Ledger(Store.of(where)).append({"kind": "failure", "part": "1650000000002", "host": "n1",
                                    "check": "PF-GPU-013", "at": "2026-12-01T00:00:00+00:00",
                                    "hardware": {"type": "gpu"}, "message": "slow"},
                                   writer="n1")
    res = _cli("list", "--ledger", where, env=env)
    assert res.returncode == 0, res.stderr
    assert "1 entries, 1 open" in res.stdout and "OPEN  1650000000002  gpu  PF-GPU-013 on n1" \
        in res.stdout
    res = _cli("clear", "1650000000002", "--why", "reseated, dcgmi diag -r 3 passes",
               env={**env, "PREFLIGHT_LEDGER": where})
    assert res.returncode == 0, res.stderr
    assert "cleared 1650000000002" in res.stdout and "reseated" in res.stdout
    listed = json.loads(_cli("list", "--json", "--ledger", where, env=env).stdout)
    assert listed["open"] == []
    clear = listed["entries"][-1]
    assert (clear["kind"], clear["part"], clear["why"]) == (
        "clear", "1650000000002", "reseated, dcgmi diag -r 3 passes")
    assert clear["by"]


def test_ledger_cli_usage_errors(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFLIGHT_LEDGER"}
    env["PYTHONPATH"] = str(ROOT)
    res = _cli("list", env=env)
    assert res.returncode == 2 and "no ledger: give --ledger WHERE" in res.stderr
    res = _cli("clear", "X", "--ledger", str(tmp_path), env=env)  # --why is required
    assert res.returncode == 2
    res = _cli("list", "--ledger", "s3://", env=env)
    assert res.returncode == 2 and "not an S3 URI" in res.stderr


SUITE = '''
import os
from checks.test_ledger import test_no_ledgered_hardware  # noqa: F401  (PF-LEDGER-001)
from harness.checking import check, fail

@check("PF-GPU-013", title="stand-in for the matmul check", why="w", remedy="r")
def test_matmul():
    if os.environ.get("SLOW_GPU"):
        fail("GPU 1 (bus 00000000:1B:00.0, serial 1650000000002) matmul 310 TFLOP/s < 600")
'''


def _run(tmp_path: Path, env: dict[str, str], tier: str = "preflight"
         ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                          "--tier", tier, "--report-dir", str(tmp_path / "r")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    return res, json.loads((tmp_path / "r/n1/report.json").read_text())


def _outcome(report: dict[str, object], check_id: str) -> tuple[str, str]:
    found = [c for c in report["checks"] if c["id"] == check_id]  # type: ignore[attr-defined]
    return found[0]["outcome"], found[0]["message"]


def test_ledger_on_real_runs(tmp_path: Path, aws_env: dict[str, str]) -> None:
    boto3.client("s3").create_bucket(Bucket="pf-ledger-run")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_site.py").write_text(SUITE)
    bin_dir = tmp_path / "bin"
    make_tool(bin_dir, "nvidia-smi", f'case "$*" in *-x*) cat "{H100_XML}";; *) exit 9;; esac')
    env = {**aws_env, "PYTHONPATH": str(ROOT), "PREFLIGHT_SUITE": str(suite),
           "PREFLIGHT_HOSTNAME": "n1", "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PREFLIGHT_LEDGER": "s3://pf-ledger-run/fleet",
           "PREFLIGHT_KERNEL_LOG": str(ROOT / "tests/data/kernel_log/"
                                       "real_dev-kmsg-clean-nvswitch.txt")}
    res, report = _run(tmp_path, {**env, "SLOW_GPU": "1"})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "ledger: recorded 1650000000002 (gpu) failing PF-GPU-013" in res.stdout
    appended = report["ledger"]["appended"]  # type: ignore[index]
    assert [(e["part"], e["check"], e["host"]) for e in appended] == [
        ("1650000000002", "PF-GPU-013", "n1")]

    # The part is fixed by nothing: the next job start names it (warn), certify fails on it.
    res, report = _run(tmp_path, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "gpu-preflight: ledgered hardware: GPU 1 (uuid GPU-00000001-0000-0000-0000-" \
           "000000000001, serial 1650000000002) failed PF-GPU-013 on n1" in res.stdout
    assert [e["part"] for e in report["ledger"]["seen"]] == ["1650000000002"]  # type: ignore[index]
    outcome, message = _outcome(report, "PF-LEDGER-001")
    assert outcome == "warn"
    res, report = _run(tmp_path, env, tier="certify")
    assert res.returncode == 1
    outcome, message = _outcome(report, "PF-LEDGER-001")
    assert outcome == "fail" and "serial 1650000000002" in message
    assert "certificate" not in report  # a failed certify certifies nothing

    res = _cli("clear", "1650000000002", "--why", "GPU replaced by the provider", env=env)
    assert res.returncode == 0, res.stderr
    res, report = _run(tmp_path, env, tier="certify")
    assert res.returncode == 0, res.stdout + res.stderr
    assert _outcome(report, "PF-LEDGER-001")[0] == "pass"
    assert report["certificate"]["written"]  # type: ignore[index]


def _judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tier: str,
           env: dict[str, str]) -> CheckResult:
    """PF-LEDGER-001 on facts handed to it (no GPU tool on PATH; two NICs in the sysroot)."""
    from checks.test_ledger import test_no_ledgered_hardware
    from harness.checking import run_check
    from harness.profiles.table import BUILTIN_PROFILES

    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    root = tmp_path / "root"
    for nic in NICS:
        (root / "sys/class/infiniband" / str(nic["name"])).mkdir(parents=True, exist_ok=True)
        (root / "sys/class/infiniband" / str(nic["name"]) / "node_guid").write_text(
            f"{nic['guid']}\n")
    return run_check(test_no_ledgered_hardware, BUILTIN_PROFILES["local-cpu"], tier, env, root,
                     profile="local-cpu")


def test_ledger_check_outcomes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               aws_env: dict[str, str]) -> None:
    folder = str(tmp_path / "ledger")
    assert _judge(tmp_path, monkeypatch, "certify", {}).outcome == "skip"  # no ledger set
    env = {"PREFLIGHT_LEDGER": folder}
    assert _judge(tmp_path, monkeypatch, "certify", env).outcome == "pass"  # looked up, none
    Ledger(Store.of(folder)).append({"kind": "failure", "part": "0e5e:f5ff:fe44:5566",
                                     "check": "PF-NET-012", "host": "n3", "at": "t",
                                     "message": "port DOWN"}, writer="n3")
    warned = _judge(tmp_path, monkeypatch, "preflight", env)
    assert warned.outcome == "warn"
    failed = _judge(tmp_path, monkeypatch, "certify", env)
    assert failed.outcome == "fail"
    assert "NIC rdmap32s27 (guid 0e5e:f5ff:fe44:5566) failed PF-NET-012 on n3" in failed.message
    unreadable = _judge(tmp_path, monkeypatch, "certify",
                        {"PREFLIGHT_LEDGER": "s3://pf-no-such-ledger/x"})
    assert unreadable.outcome == "error" and "cannot read the bad-hardware ledger" in \
        unreadable.message
