"""A tool's timeout fits inside the running check's pytest-timeout and the run's budget, so the
tool's own named timeout fires first, never pytest-timeout's bare "Timeout (>8.0s)"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from harness.base import deadline, proc
from tests.conftest import REPO, run_checks

SUITE = '''
from harness.base import deadline, proc
from harness.checking import check


@check("PF-T-800", title="a tool hangs", why="w", remedy="r")
def test_tool_hangs():
    res = proc.run(["sleep", "300"], timeout_s=600)
    assert res.ok, res.describe()


@check("PF-T-801", title="the next check has its own deadline", why="w", remedy="r")
def test_next():
    assert deadline.current().what == "check PF-T-801's 8 s pytest-timeout", deadline.current()
'''


def test_the_tool_times_out_first_with_its_name_not_pytest_timeouts(suite):
    suite.makepyfile(test_deadline_suite=SUITE)
    start = time.monotonic()
    _, checks = run_checks(suite, "--preflight-profile", "local-cpu", "--timeout", "8")
    assert time.monotonic() - start < 60
    message = checks["PF-T-800"]["message"]
    assert "Timeout (>" not in message
    assert message.startswith("[PF-T-800] `sleep 300` did not finish within ")
    assert ("s and was killed (its 600 s timeout was shortened to end before check PF-T-800's "
            "8 s pytest-timeout); it printed nothing") in message
    assert checks["PF-T-801"]["outcome"] == "pass", checks["PF-T-801"]["message"]


@pytest.fixture
def no_deadline(monkeypatch):
    """None in force (this very test runs under the plugin: its own pytest-timeout is one)."""
    monkeypatch.setattr(deadline, "_check", None)
    monkeypatch.delenv(deadline.DEADLINE_VAR, raising=False)


def test_the_soonest_deadline_wins_and_scopes_nest(no_deadline, monkeypatch):
    assert deadline.current() is None and deadline.fit(60, 5) == (60, None)
    with deadline.scope(100, "outer"), deadline.scope(50, "inner") as inner:
        assert deadline.current() == inner
        timeout, by = deadline.fit(60, 5)
        assert by == inner and 44 < timeout <= 45
        assert deadline.fit(10, 5) == (10, None)  # room enough: not shortened
    assert deadline.current() is None
    monkeypatch.setenv(*deadline.run_deadline_env(time.monotonic() + 20, "the run's budget")
                       .popitem())
    assert deadline.current().what == "the run's budget"
    deadline.set_check_deadline(deadline.Deadline(time.monotonic() + 10, "check X"))
    assert deadline.current().what == "check X"


def test_the_one_deadline_bounds_a_fallback_chain_step(no_deadline):
    """The Deadline a scope (or the check, or the run) puts in force is the one a probe's chain
    steps through: with under a second of it left, the step's tool is not started."""
    from harness.probes import chain

    with deadline.scope(0.5, "the scope's 0.5 s"):
        res, note = chain.run(["sleep", "30"], deadline.current(), 30, tool="sleep-test")
    assert res.returncode is None and note == ""
    assert res.error == "not started: no time left of the scope's 0.5 s"
    assert deadline.hung("sleep-test") is None  # not started: not hung


@pytest.mark.parametrize("value", ["", "soon", "nan-ish later"])
def test_a_garbled_run_deadline_is_ignored(no_deadline, monkeypatch, value):
    monkeypatch.setenv(deadline.DEADLINE_VAR, value)
    assert deadline.current() is None
    assert proc.budget(30) == 30


RUN_SUITE = '''
import os
from harness.checking import check


@check("PF-T-810", title="sees the run's deadline", why="w", remedy="r")
def test_sees():
    at, _, what = os.environ["PREFLIGHT_DEADLINE"].partition(" ")
    assert what == "the run's 300 s budget (tier preflight)", what
'''


def test_the_runner_hands_its_budget_to_the_check_session(tmp_path):
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_run.py").write_text(RUN_SUITE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_")}
    env.update({"PREFLIGHT_SUITE": str(tmp_path / "suite"), "PYTHONPATH": str(REPO),
                "AWS_EC2_METADATA_DISABLED": "true", "PREFLIGHT_HOSTNAME": "node-a",
                # a stale deadline inherited from an outer run must not bound this one
                deadline.DEADLINE_VAR: "1.0 an outer run"})
    res = subprocess.run([sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                          "--report-dir", str(tmp_path / "r")], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=240)
    report = json.loads((tmp_path / "r" / "node-a" / "report.json").read_text())
    assert res.returncode == 0, report["checks"]
