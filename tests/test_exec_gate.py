"""RunGuard.exec_gate, the last step before the trainer: a signal that came before it, whether
still unread in the wakeup pipe or already taken by the watcher, means the trainer never starts,
the cleanup writes its report and the process exits 128+N. Each case runs in its own Python
process (the cleanup ends the process with os._exit); the hand-off writes a marker instead of
exec'ing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r'''
import os, signal, sys, time
from harness.run.interrupt import RunGuard

log = open(sys.argv[1], "a", buffering=1)
case = sys.argv[2]
guard = RunGuard()
if case == "pending":
    guard._watch = lambda: None  # nothing reads the wakeup pipe: the signal waits there
guard.install()


def finalize(signum):
    time.sleep(1.0)  # a report takes a while: the main thread reaches the gate meanwhile
    log.write(f"report written for signal {signum}\n")


guard.set_finalizer(finalize)
if case == "pending":
    os.kill(os.getpid(), signal.SIGTERM)  # its Python handler is a no-op: it only wakes the pipe
if case == "taken":
    with guard.section():  # the report being written, as `preflight run` does before the gate
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # the watcher took it; the cleanup waits for this section to end

def hand_off():
    log.write("trainer started\n")
    return 0

rc = guard.exec_gate(hand_off)
log.write(f"exec_gate returned {rc}\n")
'''


def _run(tmp_path: Path, case: str) -> tuple[int, list[str]]:
    log = tmp_path / "log"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(log), case], timeout=60,
                          capture_output=True, text=True)
    lines = log.read_text().splitlines() if log.exists() else []
    return proc.returncode, lines


@pytest.mark.parametrize("case", ["pending", "taken"])
def test_a_signal_before_the_gate_stops_the_hand_off(tmp_path, case):
    """`pending`: the signal is still in the wakeup pipe when the gate looks (the watcher has
    not read it); `taken`: it came while the report was being written, the watcher read it,
    and the cleanup is waiting to write the interrupted report when the gate is reached."""
    rc, lines = _run(tmp_path, case)
    assert rc == 143, lines
    assert "trainer started" not in lines
    assert lines == ["report written for signal 15"]


def test_without_a_signal_the_gate_hands_off(tmp_path):
    rc, lines = _run(tmp_path, "none")
    assert rc == 0 and lines == ["trainer started", "exec_gate returned 0"]
