"""Host readiness (issue 16): the parsers on crafted and broken outputs (what each recorded real
output under tests/data/host gives is in its X.expect.json), the probes on fake sysroots
and on a statvfs child that hangs or prints garbage, and checks/test_host.py end to end."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from harness.parsers.host import (
    limits_row,
    mount_kind,
    parse_chronyc_tracking,
    parse_mounts,
    parse_stat,
    parse_timedatectl,
)
from harness.probes import host
from tests.conftest import facts_conftest, run_check_file

ROOT = Path(__file__).resolve().parent.parent
def test_mounts_octal_escapes_and_lustre():
    rows = parse_mounts("fs-1.fsx.us-east-1.amazonaws.com@tcp:/abc /fsx\\040data lustre "
                        "rw,noatime,flock 0 0\nshort line\n")
    assert [(m.point, mount_kind(m)) for m in rows] == [("/fsx data", "FSx for Lustre")]


def test_chronyc_tracking_unsynchronised_and_errors():
    unsynced = parse_chronyc_tracking("Reference ID    : 00000000 ()\nStratum : 0\n"
                                      "Leap status     : Not synchronised\n")
    assert (unsynced.synchronized, unsynced.offset_s) == (False, None)
    with pytest.raises(ValueError):
        parse_chronyc_tracking("506 Cannot talk to daemon\n")


def test_timedatectl_without_dbus_is_unknown():
    with pytest.raises(ValueError):
        parse_timedatectl("System has not been booted with systemd as init system (PID 1). "
                          "Can't operate.\nFailed to connect to bus: Host is down\n")


def test_limits_row_and_stat():
    text = ("Limit                     Soft Limit           Hard Limit           Units     \n"
            "Max open files            1024                 524288               files     \n")
    assert limits_row(text, "Max open files") == (1024, 524288)
    assert limits_row("Max open files  unlimited unlimited files\n", "Max open files") == (None, None)
    with pytest.raises(ValueError):
        limits_row("Max open files  N/A 5 files\n", "Max open files")
    line = "42 (my (odd) cmd) D " + " ".join(["0"] * 18) + " 12345 0 0\n"
    assert parse_stat(line) == ("my (odd) cmd", "D", 12345)
    assert parse_stat("garbage") is None


def _fake_proc(root: Path, procs: dict[int, tuple[str, str, int]], uptime: float) -> None:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "uptime").write_text(f"{uptime} 0.0\n")
    for pid, (cmd, state, start) in procs.items():
        (root / "proc" / str(pid)).mkdir()
        fields = " ".join(["0"] * 18)
        (root / "proc" / str(pid) / "stat").write_text(f"{pid} ({cmd}) {state} {fields} {start} 0\n")


def test_stuck_processes_by_age(tmp_path: Path):
    ticks = os.sysconf("SC_CLK_TCK")
    _fake_proc(tmp_path, {1: ("init", "S", 0), 7: ("cp", "D", 100 * ticks),
                          8: ("ls", "D", 900 * ticks)}, uptime=1000.0)
    stuck, seen = host.stuck_processes(300.0, tmp_path)
    assert seen == 3
    assert [(s.pid, s.command, s.age_s) for s in stuck] == [(7, "cp", 900.0)]


def test_path_space_real_dir(tmp_path: Path):
    space = host.path_space(str(tmp_path), write=True)
    assert space.problem is None and space.writable is True and space.free_bytes > 0
    assert list(tmp_path.iterdir()) == []  # the write test cleaned up


def test_path_space_missing_dir_and_sysroot(tmp_path: Path):
    (tmp_path / "fsx").mkdir()
    assert host.path_space("/fsx", sysroot=tmp_path).problem is None
    missing = host.path_space("/nope", sysroot=tmp_path)
    assert missing.problem == "statvfs failed: No such file or directory"


def _fake_python(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return [str(script)]


def test_path_space_hung_child_is_bounded_and_named(tmp_path: Path):
    fake = _fake_python(tmp_path, "exec sleep 600")
    space = host.path_space(str(tmp_path), timeout_s=1.0, python=fake)
    assert space.problem == "statvfs gave no answer within 1 s (hung mount?)"


def test_path_space_write_hangs_after_statvfs(tmp_path: Path):
    fake = _fake_python(tmp_path, 'echo \'{"frsize": 4096, "blocks": 10, "bavail": 5, '
                        '"readonly": false}\'; exec sleep 600')
    space = host.path_space(str(tmp_path), timeout_s=1.0, write=True, python=fake)
    assert (space.problem, space.free_bytes, space.writable) == (None, 20480, None)
    assert space.write_error == "statvfs answered but the write test gave no answer within 1 s"


def test_path_space_garbage_is_a_problem(tmp_path: Path):
    fake = _fake_python(tmp_path, "echo 'Segmentation fault'; echo '[1,2]'")
    space = host.path_space(str(tmp_path), python=fake)
    assert space.problem == "the statvfs probe printed no result: 'Segmentation fault'"


def test_kernel_clock_flags():
    assert host.kernel_clock(lambda: (0, 0x2001, 5000, 100)).synchronized is True
    assert host.kernel_clock(lambda: (0, host.STA_UNSYNC, 16_000_000, 0)).synchronized is False
    assert host.kernel_clock(lambda: (host.TIME_ERROR, 0, 0, 0)).synchronized is False


def test_kernel_clock_real_call_answers():
    clock = host.kernel_clock()  # unprivileged adjtimex (modes=0) works on any Linux
    assert clock.maxerror_us >= 0


# --- the checks, end to end under the plugin on a fake sysroot --------------------------------

def _sysroot(tmp_path: Path, mounts: str = "", limits: str = "1048576 1048576") -> Path:
    root = tmp_path / "root"
    for d in ("dev/shm", "tmp", "proc/self", "fsx"):
        (root / d).mkdir(parents=True, exist_ok=True)
    _fake_proc(root, {1: ("init", "S", 0)}, uptime=100.0)
    (root / "proc/self/mounts").write_text(mounts)
    soft, hard = limits.split()
    (root / "proc/self/limits").write_text(f"Max open files            {soft}   {hard}   files\n")
    return root


@pytest.fixture
def host_checks(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeconftest(facts_conftest("tests.host_facts", "synced", ["host_clock"]))

    def run(root: Path, profile: str = "local-cpu", **env: str) -> dict[str, dict]:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return run_check_file(pytester, "test_host.py", profile, f"--preflight-sysroot={root}")

    return run


def test_checks_healthy_local_cpu(host_checks, tmp_path: Path):
    results = host_checks(_sysroot(tmp_path))
    outcomes = {cid: r["outcome"] for cid, r in results.items()}
    # /dev/shm here is the test machine's tmp dir: pass or warn by its free space, never fail.
    # The fake tree lives on this machine's disk: its usage (> 80%: a warning) is not ours.
    assert outcomes.pop("PF-HOST-001") in ("pass", "warn")
    assert outcomes.pop("PF-HOST-002") in ("pass", "warn")
    assert outcomes == {"PF-HOST-003": "skip", "PF-HOST-004": "pass",
                        "PF-HOST-005": "pass", "PF-HOST-006": "pass"}


def test_checks_missing_required_mount_low_nofile_missing_output(host_checks, tmp_path: Path):
    root = _sysroot(tmp_path, mounts="/dev/root / ext4 rw 0 0\n", limits="1024 4096")
    results = host_checks(root, "p5.48xlarge", PREFLIGHT_REQUIRED_MOUNTS="/fsx",
                          PREFLIGHT_OUTPUT_PATHS="/opt/ml/checkpoints")
    assert results["PF-HOST-003"]["outcome"] == "fail"
    assert "/fsx (required mount): not mounted" in results["PF-HOST-003"]["message"]
    assert results["PF-HOST-004"]["outcome"] == "fail"
    assert "open-files hard limit (ulimit -Hn) 4096 < 65536 required for p5.48xlarge" in \
        results["PF-HOST-004"]["message"]
    assert results["PF-HOST-002"]["outcome"] == "fail"
    assert "/opt/ml/checkpoints (PREFLIGHT_OUTPUT_PATHS): does not exist" in \
        results["PF-HOST-002"]["message"]


def test_checks_present_required_mount_answers(host_checks, tmp_path: Path):
    root = _sysroot(tmp_path, mounts="fs-1.fsx.us-east-1.amazonaws.com@tcp:/x /fsx lustre rw 0 0\n")
    results = host_checks(root, PREFLIGHT_REQUIRED_MOUNTS="/fsx")
    assert results["PF-HOST-003"]["outcome"] == "pass"
