"""harness.run.report_lock: one run per report folder. A second run is refused naming the first
(pid, machine, start time); a lock whose writer is gone (a dead pid on this machine, a run on
another machine past its hard bound) is taken over, saying so. tests/e2e/test_e2e_run_guards.py
runs two real `preflight run`s of the shipped wheel on one folder."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import test_cli

from harness import cli
from harness.commands import EXIT_OK, EXIT_USAGE
from harness.run import report_lock
from harness.run.report_lock import LOCK_NAME, ReportLock, ReportLockBusy

clean_env = test_cli.clean_env
execs = test_cli.execs


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write(folder, **identity) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK_NAME).write_text(json.dumps(identity) + "\n")


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    first = ReportLock.acquire(tmp_path / "r", host="node-a")
    with pytest.raises(ReportLockBusy) as caught:
        ReportLock.acquire(tmp_path / "r", host="node-a")
    said = str(caught.value)
    assert f"pid {os.getpid()} on {socket.gethostname()}, started " in said
    assert re.search(r"started \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00, \d+ s ago", said)
    assert str(tmp_path / "r" / LOCK_NAME) in said
    first.release()
    assert (tmp_path / "r" / LOCK_NAME).read_text() == ""  # nothing left to honour
    ReportLock.acquire(tmp_path / "r", host="node-a").release()
    first.release()  # idempotent


def test_a_dead_holder_on_this_machine_is_stale_and_taken_over(tmp_path):
    pid = _dead_pid()
    _write(tmp_path, pid=pid, machine="m", boot_id=report_lock._boot_id(), started=time.time(),
           started_at="then", until=time.time() + 3600)
    lock = ReportLock.acquire(tmp_path, host="node-a")
    assert lock.took_over is not None and lock.took_over["pid"] == pid
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    lock.release()


def test_a_holder_that_died_without_a_word_leaves_only_its_flock_which_the_kernel_drops(tmp_path):
    """SIGKILL: no release ran, the identity is still in the file; the next run takes over."""
    code = ("import sys, os; from pathlib import Path; from harness.run.report_lock import ReportLock;"
            "ReportLock.acquire(Path(sys.argv[1]), host='node-a'); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=False)
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] > 0
    lock = ReportLock.acquire(tmp_path, host="node-a")
    assert lock.took_over is not None
    lock.release()


def test_a_run_on_another_machine_holds_until_its_bound_then_is_stale(tmp_path):
    """A file system without shared flocks: the identity decides across machines."""
    other = {"pid": 1, "machine": "ip-10-0-0-9", "boot_id": "another-boot",
             "started": time.time() - 10, "started_at": "2026-01-01T00:00:00+00:00"}
    _write(tmp_path, **other, until=time.time() + 600)
    with pytest.raises(ReportLockBusy, match=r"pid 1 on ip-10-0-0-9, started 2026-01-01T00:00:00"):
        ReportLock.acquire(tmp_path, host="node-a")
    _write(tmp_path, **other, until=time.time() - 1)
    lock = ReportLock.acquire(tmp_path, host="node-a")
    assert lock.took_over is not None and lock.took_over["machine"] == "ip-10-0-0-9"
    lock.release()


def test_without_flocks_a_live_pid_on_this_machine_holds(tmp_path, monkeypatch):
    def no_flock(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_flock)
    _write(tmp_path, pid=os.getppid(), machine="m", boot_id=report_lock._boot_id(),
           started=time.time(), started_at="now", until=time.time() + 600)
    with pytest.raises(ReportLockBusy, match=f"pid {os.getppid()} on m"):
        ReportLock.acquire(tmp_path, host="node-a")
    _write(tmp_path, pid=_dead_pid(), machine="m", boot_id=report_lock._boot_id(),
           started=time.time(), started_at="now", until=time.time() + 600)
    ReportLock.acquire(tmp_path, host="node-a").release()


def test_extend_sets_the_runs_bound(tmp_path):
    lock = ReportLock.acquire(tmp_path, host="node-a")
    lock.extend(42.0)
    until = json.loads((tmp_path / LOCK_NAME).read_text())["until"]
    assert time.time() + 30 < until < time.time() + 50
    lock.release()


def test_run_refuses_a_folder_another_run_holds(tmp_path, execs, capsys):
    """Exit 2 naming the holder, the reason in the failure file, nothing written into the
    other run's folder (its results stay its own)."""
    holder = ReportLock.acquire(tmp_path / "r" / "node-a", host="node-a")
    failure = tmp_path / "failure"
    rc = cli.main(["run", "--report-dir", str(tmp_path / "r"), "--failure-file", str(failure),
                   "--", "train"])
    assert rc == EXIT_USAGE and execs == []
    err = capsys.readouterr().err
    assert f"is in use by another preflight run (pid {os.getpid()} on " in err
    assert "in use by another preflight run" in failure.read_text()
    assert sorted(p.name for p in (tmp_path / "r" / "node-a").iterdir()) == [LOCK_NAME]
    holder.release()


def test_run_releases_its_folder_when_it_ends_and_before_it_hands_off(tmp_path, execs,
                                                                     monkeypatch):
    seen = []
    monkeypatch.setattr("harness.base.handoff._execvp", lambda file, argv: seen.append(
        (tmp_path / "r" / "node-a" / LOCK_NAME).read_text()))
    assert cli.main(["run", "-k", "PF-ENV-001", "--report-dir", str(tmp_path / "r"),
                     "--", "train"]) == EXIT_OK
    assert seen == [""]  # at the exec, the trainer does not hold it
    ReportLock.acquire(tmp_path / "r" / "node-a", host="node-a").release()
