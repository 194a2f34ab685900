"""Signals to the installed `preflight run` (Slurm's prolog timeout, `docker stop`, a deleted pod,
StopTrainingJob): sent to the preflight process alone, as a scheduler signals PID 1, while it
waits on a tool that only SIGKILL stops, or on torchrun and its workers (issue 12, item 4).

Each cell asserts: exit 128 + the signal within 10 s (+ slack), report.json saying the run was
interrupted, the failure file written, nothing the run started left running, no hand-off.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e import procs
from tests.e2e.node import FakeNode

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
