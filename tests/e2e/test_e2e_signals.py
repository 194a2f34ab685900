"""Signals to the installed `preflight run` (Slurm's prolog timeout, `docker stop`, a deleted pod,
StopTrainingJob): sent to the preflight process alone, as a scheduler signals PID 1, at every
moment of a run: during start-up (while the modules load: 0.05, 0.3, 0.8 s after the start),
while it waits on a tool that only SIGKILL stops, or on torchrun and its workers (issue 12,
item 4), and between the PASS report and the hand-off (issue 26, item 3).

Each cell asserts: exit 128 + the signal within 10 s (+ slack), report.json saying the run was
interrupted, junit.xml and the failure file written, no traceback, nothing the run started
left running, no hand-off. The start-up cells synchronise on what the kernel shows of the
process (/proc/PID/status: the signals held, then handled), never on a sleep alone, so they
land in the same phase on a loaded machine.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e import procs
from tests.e2e.node import FakeNode
from tests.fake_kube_api import FakeApi

#: How long a signalled run may take to stop everything, write its reports and exit, s.
SIGNAL_BOUND_S = 10.0
SLACK_S = 10.0
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _wait_until(what: str, ready, timeout_s: float = 90.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if ready():
            return
        time.sleep(0.1)
    pytest.fail(f"{what} did not happen within {timeout_s:g} s")


def _torchrun_started(node: FakeNode) -> bool:
    """A process of the run is torchrun's elastic agent (or one of its workers)."""
    return any(b"torch.distributed.run" in Path(f"/proc/{pid}/cmdline").read_bytes()
               for pid in procs.token_processes(node.token)
               if Path(f"/proc/{pid}/cmdline").exists())


def _problems(sig: signal.Signals, node: FakeNode, run: procs.Run, took_s: float) -> list[str]:
    problems = []
    if "Traceback" in run.output:
        problems.append("a traceback in the output")
    if not run.junit_written:
        problems.append("no junit.xml")
    if run.returncode != 128 + sig:
        problems.append(f"exit {run.returncode}, not {128 + sig} (128 + {sig.name})")
    if took_s > SIGNAL_BOUND_S + SLACK_S:
        problems.append(f"ended {took_s:.1f} s after {sig.name}")
    report = run.report
    if report is None:
        problems.append("no report.json")
    elif "interrupted" not in (report.get("verdict"), report.get("outcome")):
        problems.append(f"report.json verdict {report.get('verdict')!r}, not 'interrupted'")
    failure = node.cwd / "failure"
    if not failure.is_file():
        problems.append("no failure file")
    if run.left_running:
        problems.append(f"left running: {run.left_running}")
    if node.marker.exists():
        problems.append("handed off after the signal")
    return problems


def _signal_when(ready_what: str, ready, sig: signal.Signals, sent: list[float]):
    def during(proc: subprocess.Popen[str], node: FakeNode) -> None:
        _wait_until(ready_what, lambda: ready(node))
        time.sleep(0.5)
        proc.send_signal(sig)
        sent.append(time.monotonic())
    return during


@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_signal_while_a_tool_ignores_sigterm(run_node, sig: signal.Signals) -> None:
    """dcgmi hangs and ignores SIGTERM (so do its children): the run must still stop it."""
    sent: list[float] = []
    during = _signal_when("dcgmi starting", lambda n: any(c[0] == "dcgmi" for c in n.calls()),
                          sig, sent)
    node, run = run_node(["-k", "test_dcgm_diag_passes or test_gpu_count_matches_profile",
                          "--failure-file", "failure"], faults={"dcgmi": "hang-ignore-term"},
                         during=during)
    problems = _problems(sig, node, run, run.ended_at - sent[0])
    assert problems == [], "\n".join(problems) + run.describe()


@pytest.mark.smoke
def test_sigterm_during_the_training_step(run_node) -> None:
    """local-cpu, the FSDP step running under torchrun: the agent and its workers stop too."""
    sent: list[float] = []
    during = _signal_when("torchrun starting", _torchrun_started, signal.SIGTERM, sent)
    node, run = run_node(["-k", "test_train_step_completes", "--failure-file", "failure"],
                         profile="local-cpu", during=during, run_budget_s=300.0)
    problems = _problems(signal.SIGTERM, node, run, run.ended_at - sent[0])
    assert problems == [], "\n".join(problems) + run.describe()


# --- start-up: the first instruction on (harness.base.sigmask) ---------------------------------------

def _started(pid: int) -> bool:
    """preflight's own code runs: SIGTERM is held (its first instruction) or handled (the
    run's guard), not the interpreter's start-up (where the default action would kill it)."""
    return procs.holds(pid, signal.SIGTERM) or procs.handles(pid, signal.SIGTERM)


def _during_startup(sig: signal.Signals, at_s: float, sent: list[float]):
    """Send `sig` once preflight's code runs and `at_s` has passed since the start; at 0.05 s
    while the signals are still held (the modules loading: the report's `during_startup`
    proves it landed there). Polled without sleeping: the held window is ~0.2 s idle."""
    def during(proc: subprocess.Popen[str], node: FakeNode) -> None:
        began, end = time.monotonic(), time.monotonic() + 90.0
        held = (lambda: procs.holds(proc.pid, signal.SIGTERM)) if at_s < 0.1 else (
            lambda: _started(proc.pid))
        while not held() or time.monotonic() - began < at_s:
            assert proc.poll() is None, f"exited {proc.returncode} before the signal"
            assert not (at_s < 0.1 and procs.handles(proc.pid, signal.SIGTERM)), (
                "the start-up window was missed: the run's handlers are in place already")
            assert time.monotonic() < end, "preflight's code never started"
        proc.send_signal(sig)
        sent.append(time.monotonic())
    return during


STARTUP = [pytest.param(at_s, sig, id=f"{at_s:g}s-{sig.name}")
           for at_s in (0.05, 0.3, 0.8) for sig in SIGNALS]


@pytest.mark.parametrize(("at_s", "sig"), STARTUP)
def test_signal_during_start_up(run_node, at_s: float, sig: signal.Signals) -> None:
    """Before the fix: exit -15 with no report, junit or failure file (SIGTERM's default
    action), or a KeyboardInterrupt traceback and exit 1 (SIGINT). dcgmi hangs, so the run is
    never over before the signal."""
    sent: list[float] = []
    node, run = run_node(["-k", "test_dcgm_diag_passes", "--failure-file", "failure"],
                         faults={"dcgmi": "hang"}, during=_during_startup(sig, at_s, sent))
    problems = _problems(sig, node, run, run.ended_at - sent[0])
    info = (run.report or {}).get("interrupted") or {}
    if at_s < 0.1 and info.get("during_startup") is not True:
        problems.append(f"the signal did not land while the modules loaded: {info}")
    assert problems == [], "\n".join(problems) + run.describe()


# --- between the PASS report and the hand-off ----------------------------------------------

@pytest.mark.parametrize("sig", (signal.SIGTERM, signal.SIGINT), ids=lambda s: s.name)
def test_signal_between_the_pass_report_and_the_hand_off(run_node, sig: signal.Signals) -> None:
    """The node mark (PREFLIGHT_K8S_MARK=label on a pass: a PATCH of the node) is the run's last
    step before the exec: the fake API holds it, so the signal lands there every time."""
    api = FakeApi(hold=True).start()
    sent: list[float] = []
    passed: list[object] = []

    def during(proc: subprocess.Popen[str], node: FakeNode) -> None:
        _wait_until("the node mark after the PASS report", api.arrived.is_set)
        report = node.reports / "e2e-node" / "report.json"
        passed.append(json.loads(report.read_text()).get("verdict"))
        proc.send_signal(sig)
        sent.append(time.monotonic())
        api.release.set()

    try:
        node, run = run_node(["-k", "test_gpu_count_matches_profile", "--failure-file",
                              "failure"], during=during,
                             extra_env={"PREFLIGHT_K8S_MARK": "label", "PREFLIGHT_K8S_API": api.url,
                                        "PREFLIGHT_NODE_NAME": "e2e-node"})
    finally:
        api.stop()
    assert passed == ["pass"], f"report.json said {passed} when the node mark was sent"
    problems = _problems(sig, node, run, run.ended_at - sent[0])
    info = (run.report or {}).get("interrupted") or {}
    if info.get("stage") != "after the checks":
        problems.append(f"the interrupted report does not say it came after the checks: {info}")
    assert problems == [], "\n".join(problems) + run.describe()


# --- the interrupted report counts the selection (issue 26, item 5) --------------------------

def test_the_interrupted_report_names_and_counts_the_selection(run_node, shipped) -> None:
    """Two phases (xdist node-local, then exclusive), stopped while fi_info hangs in the first:
    the exclusive phase has not collected yet, but the selection is what `preflight list` says
    for the same -k and tier, counted once (before the fix: "4 of 6 checks had finished", the
    node-local share alone, for a selection of 19; the exclusive checks missing)."""
    select = "PF-NET or PF-BW"
    sent: list[float] = []
    during = _signal_when("fi_info starting", lambda n: any(c[0] == "fi_info" for c in n.calls()),
                          signal.SIGTERM, sent)
    node, run = run_node(["--workers", "2", "-k", select, "--failure-file", "failure"],
                         faults={"fi_info": "hang"}, during=during)
    problems = _problems(signal.SIGTERM, node, run, run.ended_at - sent[0])
    listed = subprocess.run([str(shipped.preflight), "list", "--tier", "preflight", "-k", select,
                             "--json"], env=node.env(shipped.bin), cwd=node.cwd,
                            capture_output=True, text=True, timeout=120, check=True)
    expected = {c["id"] for c in json.loads(listed.stdout)}
    report = run.report or {}
    info = report.get("interrupted") or {}
    ids = [c["id"] for c in report.get("checks", [])]
    finished = [c["id"] for c in info.get("finished", [])]
    if info.get("selected") != len(expected) or len(ids) != len(set(ids)) or set(ids) != expected:
        problems.append(f"selected {info.get('selected')}, checks {sorted(ids)}; `preflight "
                        f"list` selects {len(expected)}: {sorted(expected)}")
    if sorted(finished + info.get("not_finished", [])) != sorted(expected):
        problems.append(f"finished {finished} + not finished {info.get('not_finished')} is not "
                        "the selection")
    said = (report.get("harness_errors") or [""])[0]
    counted = f"{len(finished)} of the {len(expected)} selected checks had finished (profile "
    if counted not in said or f"-k '{select}'" not in said:
        problems.append(f"the report does not name and count the selection: {said}")
    if not {"PF-NET-003", "PF-BW-001"} <= set(info.get("not_finished", [])):
        problems.append(f"PF-NET-003 (fi_info, hung) and PF-BW-001 (exclusive, not started) "
                        f"are not among the unfinished: {info}")
    assert problems == [], "\n".join(problems) + run.describe()
