"""What `preflight run` (the shipped wheel, from a folder outside the checkout) refuses before it
checks anything, and what it never pretends: a PREFLIGHT_* value its rule refuses is exit 2
naming it (every registered variable at once, and the issue's cases one by one); a node name
cannot take the report folder out of --report-dir; a report folder another run is using is
exit 2 naming that run while the first run's verdict stays its own; a dead run's lock is taken
over; --warn-only hands off despite a failure only when there is a command to hand off to."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.base.settings import SETTINGS
from tests.e2e import procs
from tests.e2e.shipped import Shipped

#: A site check that holds its run until the test says go (the second run starts meanwhile).
HOLDING_CHECK = '''
import os
import time
from pathlib import Path


def test_holds_until_go():
    """Holds the run until the test's go file appears"""
    Path(os.environ["E2E_STARTED"]).write_text(str(os.getpid()))
    go, end = Path(os.environ["E2E_GO"]), time.monotonic() + 120
    while not go.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert go.exists(), "no go file within 120 s"
'''


class Runner:
    """`preflight run --profile local-cpu --report-dir REPORTS ARGS -- <marker>` of the shipped
    wheel from a folder outside the checkout, one token per test (leftovers are killed)."""

    def __init__(self, shipped: Shipped, tmp: Path) -> None:
        self.shipped, self.tmp = shipped, tmp
        self.reports, self.token = tmp / "reports", procs.run_token("guards")
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        (tmp / "site").mkdir()
        (tmp / "site" / "test_hold.py").write_text(HOLDING_CHECK)

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items()
                if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "PREFLIGHT_"))}
        return {**base, "E2E_RUN_TOKEN": self.token, "AWS_EC2_METADATA_DISABLED": "true",
                "PREFLIGHT_HOSTNAME": "e2e-node", "E2E_STARTED": str(self.tmp / "started"),
                "E2E_GO": str(self.tmp / "go"), **extra}

    def argv(self, *args: str, marker: str | None = "handed-off", profile: str = "local-cpu"
             ) -> list[str]:
        tail = ["--", "/bin/sh", "-c", f': > "{self.tmp / marker}"'] if marker else []
        return [str(self.shipped.preflight), "run", "--profile", profile, "--report-dir",
                str(self.reports), *args, *tail]

    def run(self, *args: str, env: dict[str, str] | None = None, **kw: str) -> procs.Run:
        return procs.run(self.argv(*args, **kw), env=env or self.env(), cwd=self.cwd,
                         bound_s=180, token=self.token, report_dir=self.reports / "e2e-node")

    def start_holding(self) -> subprocess.Popen[str]:
        """A run whose only check holds it until `go`; returns once that check is running."""
        proc = procs.start(self.argv("--extra-checks", str(self.tmp / "site"), "-k",
                                     "test_holds_until_go", marker="first-handed-off"),
                           env=self.env(), cwd=self.cwd)
        _wait("the first run's holding check", lambda: (self.tmp / "started").exists(), proc)
        return proc


def _wait(what: str, ready: Callable[[], bool], proc: subprocess.Popen[str],
          timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"the run ended before {what}: exit {proc.returncode}"
        assert time.monotonic() < end, f"no {what} within {timeout_s:g} s"
        time.sleep(0.05)


@pytest.fixture
def runner(shipped: Shipped, tmp_path: Path):
    r = Runner(shipped, tmp_path)
    yield r
    procs.kill_leftovers(r.token)


def test_a_bad_value_of_every_setting_is_named_and_nothing_runs(runner: Runner) -> None:
    """Every registered variable set to the value its rule refuses, at once: exit 2 naming
    each, no hand-off, and the report folder inside --report-dir."""
    bad = {s.name: s.rule.bad for s in SETTINGS}
    run = runner.run(env={**runner.env(), **bad})
    assert run.returncode == 2, run.describe()
    missing = [name for name in bad if f"{name}=" not in run.output]
    assert missing == [], f"not named: {missing}{run.describe()}"
    assert not (runner.tmp / "handed-off").exists()
    assert [p.parent.parent for p in runner.tmp.rglob("report.json")] == [runner.reports]
    assert run.left_running == []


@pytest.mark.parametrize(("name", "value", "said"), [
    ("PREFLIGHT_NUM_NODES", "-1", "PREFLIGHT_NUM_NODES='-1' is not between 1 and 65536"),
    ("PREFLIGHT_PORT", "99999", "PREFLIGHT_PORT='99999' is not between 1 and 65535"),
    ("PREFLIGHT_K8S_MARK", "bogus", "PREFLIGHT_K8S_MARK='bogus' is not one of label, condition, "
     "taint, hyperpod"),
    ("PREFLIGHT_HOSTNAME", "../../etc", "PREFLIGHT_HOSTNAME='../../etc' is not a host name"),
])
def test_the_campaigns_silently_accepted_values_are_refused(runner: Runner, name: str, value: str,
                                                             said: str) -> None:
    run = runner.run(env={**runner.env(), name: value})
    assert run.returncode == 2 and f"preflight: error: {said}" in run.output, run.describe()
    assert not (runner.tmp / "handed-off").exists()
    assert not (runner.tmp / "etc").exists() and not (runner.reports.parent / "etc").exists()
    # the early report, where there is one, is inside --report-dir, under the real host name
    assert all(runner.reports in p.parents for p in runner.tmp.rglob("report.json"))


def test_a_second_run_on_one_report_folder_is_refused_naming_the_first(runner: Runner) -> None:
    """Before: the healthy first run failed with "reported 2 results", the second's real result
    was hidden, and nothing named the other run."""
    first = runner.start_holding()
    try:
        second = runner.run("-k", "PF-ENV-001", "--failure-file", str(runner.tmp / "failure2"),
                            marker="second-handed-off")
    finally:
        (runner.tmp / "go").touch()
    done = procs.finish(first, [], time.monotonic(), 180, token=runner.token,
                        report_dir=runner.reports / "e2e-node")
    assert second.returncode == 2, second.describe()
    said = f"is in use by another preflight run (pid {first.pid} on {socket.gethostname()}, started "
    assert said in second.output, second.describe()
    assert said in (runner.tmp / "failure2").read_text()
    assert not (runner.tmp / "second-handed-off").exists()
    assert done.returncode == 0, done.describe()
    assert (runner.tmp / "first-handed-off").exists()
    report = done.report or {}
    assert report.get("verdict") == "pass", done.describe()
    assert [c["id"] for c in report["checks"]] == ["site/test_hold.py::test_holds_until_go"]
    third = runner.run("-k", "PF-ENV-001")  # the folder is free again once the first ended
    assert third.returncode == 0 and (runner.tmp / "handed-off").exists(), third.describe()


def test_the_lock_of_a_killed_run_is_stale_and_taken_over(runner: Runner) -> None:
    """SIGKILL (no cleanup ran): its identity stays in the lock file, its flock died with it."""
    first = runner.start_holding()
    os.killpg(first.pid, signal.SIGKILL)
    first.communicate(timeout=30)  # reaps it and closes its output pipe
    lock = json.loads((runner.reports / "e2e-node" / ".preflight.lock").read_text())
    assert lock["pid"] == first.pid
    run = runner.run("-k", "PF-ENV-001")
    assert run.returncode == 0, run.describe()
    assert f"the report folder's lock of pid {first.pid} on " in run.output
    assert "was stale: that run is gone; taken over" in run.output
    assert (runner.reports / "e2e-node" / ".preflight.lock").read_text() == ""  # released


@pytest.mark.parametrize("command", [True, False], ids=["with-command", "without-command"])
def test_warn_only_hands_off_despite_a_failure_only_to_a_command(runner: Runner,
                                                                 command: bool) -> None:
    """A failing check (NCCL_NET=Socket on p5.48xlarge) under --warn-only: with a command, it is
    handed off (exit: the command's); without one, nothing is handed off, nothing says so, and
    the exit status is the failure's (1), with the report and the failure file written."""
    failure = runner.tmp / "failure"
    run = runner.run("-k", "PF-ENV-001", "--warn-only", "--failure-file", str(failure),
                     profile="p5.48xlarge", marker="handed-off" if command else None,
                     env={**runner.env(), "NCCL_NET": "Socket"})
    report = run.report or {}
    assert report.get("verdict") == "fail" and report.get("warn_only") is True, run.describe()
    assert "[PF-ENV-001]" in failure.read_text()
    if command:
        assert run.returncode == 0, run.describe()
        assert (runner.tmp / "handed-off").exists()
        assert "--warn-only: handing off despite the failures above" in run.output
    else:
        assert run.returncode == 1, run.describe()
        assert "handing off" not in run.output, run.describe()
        assert "Traceback" not in run.output
    assert run.left_running == []
