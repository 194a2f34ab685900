"""The node fault matrix: the installed `preflight selftest cluster` (N local processes as nodes,
each a real `preflight run`, gloo on loopback) with one bad node: the faults the selftest
injects (slow, hang, crash, absent) and what happens to nodes from outside (kill -9 of a node
mid-run, SIGTERM to a node, SIGTERM to the whole run: sent while that node runs its node-local
checks, a window that lasts as long as its check session, so the cell is the same every time).

Each cell asserts: the fault-free nodes name the bad node and what went wrong in their failure
file, the run ends within its printed hard bound + 10 s (or 10 s after a signal), every node
that started wrote report.json and junit.xml, nothing any node started is left running, and no
node handed off. A new fault is one row in NODE_FAULTS.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import procs
from tests.e2e.shipped import Shipped

NODES = 3
BAD = 1
SLACK_S = 10.0
#: How long a signalled run may take to stop, write its reports and exit (issue 12, item 4).
SIGNAL_BOUND_S = 10.0
#: The selftest's hard upper bound at --timeout-scale 1 (it prints it; harness/cluster/selftest
#: selftest_timeouts): past it + KILL_AFTER_S the test stops the run itself.
HARD_BOUND_S = 228.0


@dataclass(frozen=True)
class NodeFault:
    name: str
    words: str
    """What the healthy nodes' failure reason says about the bad node."""
    inject: str | None = None
    """`--inject FAULT=1` of the selftest, or None for a fault this test makes happen."""
    signal_node: signal.Signals | None = None
    """Sent to the bad node's `preflight run` while it runs its node-local checks."""
    signal_run: signal.Signals | None = None
    """Sent to the selftest itself while the bad node runs its node-local checks."""
    writes_report: bool = True
    """The bad node can still write report.json (False: it dies on the spot, os._exit or
    SIGKILL; a hung node is stopped by the selftest with SIGTERM and must report)."""
    writes_junit: bool = True
    """The bad node can still write junit.xml. It is written from the report (issue 29: one
    file, every check by its ID), after the node-local checks and again at the end: a node that
    dies in the cluster step keeps it; one SIGKILLed during its node-local checks has nothing
    to write it from (the per-session file of before came from the orphaned check session)."""


NODE_FAULTS = (
    NodeFault("slow", r"GB/s|bandwidth|slow", inject="slow"),
    NodeFault("hang", r"did not|timed? ?out|stopped answering|no answer|hung", inject="hang"),
    NodeFault("crash", r"exit|crash|closed|lost|died|stopped|missing|did not", inject="crash",
              writes_report=False),
    NodeFault("absent", r"never joined|did not join|absent|missing", inject="absent"),
    NodeFault("kill-9", r"exit|killed|closed|lost|died|stopped|missing|did not",
              signal_node=signal.SIGKILL, writes_report=False, writes_junit=False),
    NodeFault("sigterm-node", r"SIGTERM|interrupted|signal",
              signal_node=signal.SIGTERM),
    NodeFault("sigterm-run", r"SIGTERM|interrupted|signal", signal_run=signal.SIGTERM),
)


def _node_process(token: str, rank: int, module: bytes) -> int | None:
    """The pid of node `rank`'s `python -m MODULE` (harness: its `preflight run`; pytest: the
    session of its node-local checks)."""
    for pid in procs.token_processes(token):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"PREFLIGHT_NODE_RANK={rank}".encode() in environ and cmd[1:3] == [b"-m", module]:
            return pid
    return None


def _wait_for_local_checks(token: str, rank: int, timeout_s: float) -> int:
    """Until node `rank` runs its node-local checks (mid-run: it joined the cluster and has not
    reported yet, for as long as its check session runs); the pid of its `preflight run`."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        main = _node_process(token, rank, b"harness")
        if main is not None and _node_process(token, rank, b"pytest") is not None:
            return main
        time.sleep(0.05)
    pytest.fail(f"node{rank} never ran its node-local checks within {timeout_s:g} s")


def _hard_bound(output: str) -> float:
    m = re.search(r"hard upper bound ([\d.]+) s", output)
    assert m, f"the selftest printed no hard upper bound:\n{output[-2000:]}"
    return float(m.group(1))


def _problems(fault: NodeFault, run: procs.Run, work: Path, signalled_at: float | None) -> list[str]:
    """Every property of the cell the run violated (all of them, so one failure says it all)."""
    problems = []
    if run.returncode is None:
        return [f"it did not end: the test killed it after {run.duration_s:.0f} s"]
    if fault.signal_run:
        took = run.duration_s - (signalled_at or 0.0)
        if run.returncode != 128 + fault.signal_run:
            problems.append(f"exit {run.returncode}, not 128 + {fault.signal_run.name}")
        if took > SIGNAL_BOUND_S + SLACK_S:
            problems.append(f"ended {took:.1f} s after the signal")
        if not re.search(fault.words, run.output):
            problems.append(f"its output does not say /{fault.words}/")
    else:
        if run.returncode != 1:
            problems.append(f"exit {run.returncode}, not 1 (a failed cluster)")
        if run.duration_s > _hard_bound(run.output) + SLACK_S:
            problems.append(f"took {run.duration_s:.0f} s, past the hard bound + {SLACK_S:g} s")
    if run.left_running:
        problems.append(f"left running: {run.left_running}")
    started = [r for r in range(NODES) if not (fault.inject == "absent" and r == BAD)]
    for rank in started:
        node_dir = work / f"node{rank}"
        if (rank != BAD or fault.writes_report) and not (node_dir / "report.json").is_file():
            problems.append(f"node{rank} wrote no report.json")
        if (rank != BAD or fault.writes_junit) and not (node_dir / "junit.xml").is_file():
            problems.append(f"node{rank} wrote no junit.xml")
        if (node_dir / "EXECUTED").exists():
            problems.append(f"node{rank} handed off")
    for rank in [] if fault.signal_run else [r for r in started if r != BAD]:
        failure = work / f"node{rank}" / "failure"
        text = failure.read_text() if failure.is_file() else ""
        if not (f"node{BAD}" in text and re.search(fault.words, text, re.I)):
            problems.append(f"node{rank}'s failure reason does not name node{BAD} and "
                            f"/{fault.words}/: {text[:1000] or '(no failure file)'}")
    return problems


@pytest.mark.parametrize("fault", NODE_FAULTS, ids=[f.name for f in NODE_FAULTS])
def test_node_fault(shipped: Shipped, tmp_path: Path, fault: NodeFault) -> None:
    token = procs.run_token(f"node-{fault.name}")
    work = tmp_path / "work"
    argv = [str(shipped.preflight), "selftest", "cluster", "--nodes", str(NODES),
            "--work-dir", str(work)]
    if fault.inject:
        argv += ["--inject", f"{fault.inject}={BAD}"]
    env = {"PATH": f"{shipped.bin}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "TMPDIR": str(tmp_path), "E2E_RUN_TOKEN": token}
    began = time.monotonic()
    proc = procs.start(argv, env=env, cwd=tmp_path)
    try:
        signalled_at = None
        if fault.signal_node or fault.signal_run:
            node_main = _wait_for_local_checks(token, BAD, timeout_s=120)
            if fault.signal_run:
                proc.send_signal(fault.signal_run)
            else:
                os.kill(node_main, fault.signal_node)
            signalled_at = time.monotonic() - began
        run = procs.finish(proc, argv, began, bound_s=HARD_BOUND_S, token=token)
        problems = _problems(fault, run, work, signalled_at)
        assert problems == [], "\n".join(problems) + run.describe()
    finally:
        procs.kill_leftovers(token)
