"""Running the installed `preflight` as a user would (a subprocess, from a folder outside the
checkout) and proving afterwards that nothing it started is still running.

Leftovers are found two ways: every process whose environment carries the run's token (all
that the run started inherit it), and every pid a fake tool recorded (with its start time, so
a reused pid is not mistaken for a survivor). Both are killed after the test either way, so a
failing cell never leaves sleepers on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds past the bound the product promises before the test itself stops a run.
KILL_AFTER_S = 30.0


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat fields after the command name; None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int, start: str | None = None) -> bool:
    """Running (not a zombie) and, when `start` is given, the same process (start time)."""
    fields = _stat(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start is None or fields[19] == start


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


def signal_mask(pid: int, field: str) -> int:
    """A signal mask of /proc/PID/status as a number (`SigBlk`: blocked, `SigCgt`: handled;
    bit N-1 is signal N); 0 once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def holds(pid: int, sig: int) -> bool:
    """`sig` is blocked in `pid` (pending until it is released)."""
    return bool(signal_mask(pid, "SigBlk") & (1 << (sig - 1)))


def handles(pid: int, sig: int) -> bool:
    """`pid` has a handler for `sig`."""
    return bool(signal_mask(pid, "SigCgt") & (1 << (sig - 1)))


def run_token(what: str) -> str:
    """A token for one run's processes (E2E_RUN_TOKEN), unique across xdist workers: a tmp
    folder's name is not (pytest cuts a long test name to the same 30 characters, and each
    worker numbers its folders from 0, so two parametrized cases met and killed each other's
    processes under -n 2)."""
    return f"{what}-{uuid.uuid4().hex}"


def token_processes(token: str) -> list[int]:
    """Live processes whose environment holds E2E_RUN_TOKEN=token."""
    needle = f"E2E_RUN_TOKEN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            found.append(int(entry.name))
    return sorted(found)


def recorded_processes(state: Path | None) -> list[tuple[int, str, str]]:
    """(pid, start time, tool) of every fake-tool process still running."""
    if state is None or not (state / "pids").is_dir():
        return []
    out = []
    for f in sorted((state / "pids").iterdir()):
        pid, start = f.read_text().split()
        if _alive(int(pid), start):
            out.append((int(pid), start, f.name.split(".")[0]))
    return out


def leftovers(token: str, state: Path | None = None) -> list[str]:
    """What the run left running, one line each (empty: nothing)."""
    lines = [f"pid {pid} ({tool}): {_cmdline(pid)}" for pid, _, tool in recorded_processes(state)]
    seen = {int(line.split()[1]) for line in lines}
    lines += [f"pid {pid}: {_cmdline(pid)}" for pid in token_processes(token) if pid not in seen]
    return lines


def kill_leftovers(token: str, state: Path | None = None) -> None:
    for pid, start, _ in recorded_processes(state):
        if _alive(pid, start):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    for pid in token_processes(token):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@dataclass
class Run:
    """One finished `preflight` command."""

    argv: list[str]
    returncode: int | None
    """None: the test had to kill it (it ran past its bound + KILL_AFTER_S)."""
    duration_s: float
    output: str
    report_dir: Path | None = None
    left_running: list[str] = field(default_factory=list)
    """Processes of the run still alive when it exited (see `leftovers`)."""
    ended_at: float = 0.0
    """time.monotonic() when it exited."""

    @property
    def report(self) -> dict[str, Any] | None:
        path = self.report_dir / "report.json" if self.report_dir else None
        if path is None or not path.exists():
            return None
        return json.loads(path.read_text())

    @property
    def junit_written(self) -> bool:
        return bool(self.report_dir) and (self.report_dir / "junit.xml").is_file()

    def check(self, check_id: str) -> dict[str, Any] | None:
        report = self.report or {}
        return next((c for c in report.get("checks", []) if c.get("id") == check_id), None)

    def outcomes(self) -> dict[str, str]:
        return {c["id"]: c["outcome"] for c in (self.report or {}).get("checks", [])}

    def describe(self) -> str:
        """What a failed assertion shows: status, time, the end of the output."""
        return (f"\n$ {' '.join(self.argv)}\nexit {self.returncode} after {self.duration_s:.1f} s"
                f"\n--- output (tail) ---\n{self.output[-4000:]}")


def start(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path) -> subprocess.Popen[str]:
    """Start a command in its own session (so the test can always stop all of it)."""
    return subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)


def finish(proc: subprocess.Popen[str], argv: Sequence[str], began: float, bound_s: float, *,
           token: str, state: Path | None = None, report_dir: Path | None = None) -> Run:
    """Wait for `proc` up to `bound_s` + KILL_AFTER_S; then look for leftovers."""
    try:
        out, _ = proc.communicate(timeout=max(1.0, began + bound_s + KILL_AFTER_S - time.monotonic()))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    ended = time.monotonic()
    time.sleep(0.5)  # a process killed as the run exited needs a moment to be gone
    return Run(list(argv), code, ended - began, out or "", report_dir, leftovers(token, state),
               ended)


def run(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, bound_s: float,
        token: str, state: Path | None = None, report_dir: Path | None = None) -> Run:
    began = time.monotonic()
    proc = start(argv, env=env, cwd=cwd)
    return finish(proc, argv, began, bound_s, token=token, state=state, report_dir=report_dir)
