"""Process-tree bookkeeping: find every process a tool started, however it detached, and stop
them all without ever waiting on one that cannot die.

How descendants are found, and why this way (evaluated on Linux 6.x in a container, as root and
not; no cgroup of our own, no privilege):

- PR_SET_CHILD_SUBREAPER (prctl(2), Linux >= 3.4, unprivileged, allowed by Docker's default
  seccomp profile; what tini, dumb-init and systemd use): once set, every orphan below us is
  re-parented to us instead of to init, so `setsid child &` and double forks stay in our tree
  and the ppid chain of every process we started leads back to us. Set once per process
  (`become_subreaper`), cleared before the hand-off (the setting survives execve).
- The tree is read from /proc/PID/stat (ppid, state, start time) in one pass over /proc:
  ~83 processes here scan in ~2 ms, 1000 in ~25 ms (bench/bench_proctree.py). The cheaper
  /proc/PID/task/TID/children needs CONFIG_PROC_CHILDREN (missing on this machine's kernel) and
  is documented as racy.
- Attribution: every process `harness.base.proc.run` starts carries TAG_VAR in its environment, the
  tags of its ancestors' calls followed by its own; descendants inherit it. An orphan that was
  re-parented to us is no longer under its tool, so the tag (read from /proc/PID/environ, ours to
  read) says which call it belongs to: concurrent calls never kill each other's processes, and
  a call started inside a pytest session still owns what that session's tools left behind.
  Without a subreaper (prctl refused) the tag alone finds orphans wherever they went.
- cgroups (cgroup.kill, v2) would be exact, but need a writable cgroup of our own: not there in
  a default container (this machine: v1, read-only). A process that clears its environment and
  double-forks is still ours through the subreaper, and the run-wide sweep
  (`stop(descendants_of_self)`) at hand-off or on a signal takes it.

Stopping (`Stopper`): SIGTERM the set, wait a grace, then freeze it (SIGSTOP) round after round
until no new process appears (a forking tool cannot outrun it), SIGKILL, SIGCONT. Processes are
named by (pid, start time), so a recycled pid is never signalled. A process in uninterruptible
sleep (D state: a hung driver call) dies only when its call returns: nothing here waits for it
beyond the grace; it is reported as unkillable.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from harness.base.settings import get_str

__all__ = ["TAG_VAR", "ProcInfo", "Stopper", "become_subreaper", "call_members", "child_tag",
           "clear_subreaper", "descendants", "descendants_of_self", "is_subreaper", "now_ticks",
           "pipe_holders", "snapshot", "started_since"]

TAG_VAR = "PREFLIGHT_PROC_TAG"
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_subreaper = False
_counter = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    state: str
    """R, S, D (uninterruptible), Z (zombie: exited, not yet reaped), T (stopped)..."""
    start: int
    """Start time in clock ticks since boot: with the pid, names one process for good."""


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make orphans below this process re-parent to it (once per process); False when refused."""
    global _subreaper
    if not _subreaper:
        _subreaper = _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    return _subreaper


def clear_subreaper() -> None:
    """Before exec: the training command must not inherit the role."""
    global _subreaper
    if _subreaper:
        _prctl(_PR_SET_CHILD_SUBREAPER, 0)
        _subreaper = False


def is_subreaper() -> bool:
    return _subreaper


def child_tag() -> str:
    """The tag for a new call: this process's own tags, then a new unique one."""
    mine = f"{os.getpid()}.{next(_counter)}.{secrets.token_hex(3)}"
    inherited = get_str(TAG_VAR) or ""
    return f"{inherited},{mine}" if inherited else mine


def _read_stat(pid: int) -> ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # "pid (comm) state ppid ..."; comm may hold spaces and parentheses: split after the last ')'.
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return ProcInfo(pid, int(fields[1]), fields[0].decode(), int(fields[19]))
    except (IndexError, ValueError):
        return None


def snapshot() -> dict[int, ProcInfo]:
    """Every process on this machine (in our pid namespace) as pid -> ProcInfo."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (info := _read_stat(int(name))) is not None:
            out[info.pid] = info
    return out


def descendants(roots: Iterable[int], snap: Mapping[int, ProcInfo]) -> set[int]:
    """`roots` (those alive in `snap`) and every process below them."""
    children: dict[int, list[int]] = {}
    for info in snap.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found, todo = set(), [r for r in roots if r in snap]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def tagged(pid: int, tag: str) -> bool:
    """Whether process `pid` was started by the call tagged `tag` (or below it)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return False
    key = TAG_VAR.encode() + b"="
    for entry in env.split(b"\0"):
        if entry.startswith(key):
            return tag.encode() in entry[len(key):].split(b",")
    return False


def call_members(tool_pid: int, tag: str, snap: Mapping[int, ProcInfo]) -> set[int]:
    """The processes of one `proc.run` call: the tool's live tree, and orphans carrying its tag
    (re-parented to us, or anywhere when we are not a subreaper) with everything below them."""
    me = os.getpid()
    roots = {tool_pid}
    for info in snap.values():
        if info.pid in (me, tool_pid) or info.state == "Z":
            continue
        if (info.ppid == me or not _subreaper) and tagged(info.pid, tag):
            roots.add(info.pid)
    return descendants(roots, snap) - {me}


def descendants_of_self(snap: Mapping[int, ProcInfo]) -> set[int]:
    """Everything this process started and has not reaped (with a subreaper: ever started)."""
    me = os.getpid()
    return descendants([me], snap) - {me}


def now_ticks() -> int:
    """Now, in the unit of ProcInfo.start (clock ticks since boot)."""
    with open("/proc/uptime", "rb") as fh:
        return int(float(fh.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def started_since(ticks: int) -> Callable[[Mapping[int, ProcInfo]], set[int]]:
    """A `find` for Stopper: our descendants started at `ticks` or later (what one command
    started, not what the process hosting it, a test session, started before)."""
    def find(snap: Mapping[int, ProcInfo]) -> set[int]:
        return {p for p in descendants_of_self(snap) if snap[p].start >= ticks}
    return find


def pipe_holders(inodes: set[int], candidates: Iterable[int]) -> set[int]:
    """Those of `candidates` with a descriptor open on one of the pipes `inodes`: the process
    that keeps a pipe from reaching EOF even with an environment scrubbed of its tag."""
    out = set()
    for pid in candidates:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("pipe:[") and int(link[6:-1]) in inodes:
                out.add(pid)
                break
    return out


class Stopper:
    """Stops one set of processes, re-found by `find` (from a fresh snapshot) at every step, so
    that processes forked meanwhile are caught too. Non-blocking steps, so that a caller can
    keep draining pipes between them; `stop` chains them with waits."""

    def __init__(self, find: Callable[[Mapping[int, ProcInfo]], set[int]],
                 groups: Iterable[int] = ()) -> None:
        self.find, self.groups = find, tuple(groups)
        self.seen: dict[int, int] = {}
        """pid -> start time of every member ever signalled."""

    def _members(self) -> dict[int, ProcInfo]:
        """Found afresh, plus those signalled before that still run: a member whose parent
        died meanwhile was re-parented out of the tree `find` walks."""
        snap = snapshot()
        pids = self.find(snap) | {p for p, start in self.seen.items()
                                  if p in snap and snap[p].start == start}
        return {pid: snap[pid] for pid in pids if pid in snap}

    def _send(self, info: ProcInfo, sig: int) -> None:
        if info.pid <= 1 or self.seen.setdefault(info.pid, info.start) != info.start:
            return  # that pid now names another process
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(info.pid, sig)

    def _send_groups(self, sig: int) -> None:
        for pgid in self.groups:  # members that left our tree but kept the group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)

    def adopt(self, pids: Iterable[int]) -> None:
        """Make `pids` members too (from now on every step signals them)."""
        for pid in pids:
            if (info := _read_stat(pid)) is not None:
                self.seen.setdefault(pid, info.start)

    def terminate(self) -> None:
        """SIGTERM every member (and the groups): the polite request."""
        self._send_groups(signal.SIGTERM)
        for info in self._members().values():
            self._send(info, signal.SIGTERM)

    def kill(self, rounds: int = 50) -> None:
        """Freeze members until no new one appears, then SIGKILL them all (and SIGCONT: a
        member we could not kill must not stay stopped)."""
        frozen: dict[int, ProcInfo] = {}
        for _ in range(rounds):
            new = {p: i for p, i in self._members().items() if p not in frozen}
            if not new:
                break
            for info in new.values():
                self._send(info, signal.SIGSTOP)
            frozen.update(new)
        self._send_groups(signal.SIGKILL)
        for info in frozen.values():
            self._send(info, signal.SIGKILL)
        for info in frozen.values():
            self._send(info, signal.SIGCONT)

    def alive(self) -> set[int]:
        """Members ever signalled that are still running (a zombie has exited)."""
        out = set()
        for pid, start in self.seen.items():
            info = _read_stat(pid)
            if info is not None and info.start == start and info.state != "Z":
                out.add(pid)
        return out

    def running(self) -> set[int]:
        """Members running now (found afresh), signalled or not."""
        return {p for p, i in self._members().items() if i.state != "Z"}

    def reap(self, exclude: Iterable[int] = ()) -> None:
        """Collect the exit status of members that are our zombie children (re-parented
        orphans), leaving `exclude` (children a Popen object will wait for) alone."""
        me, skip = os.getpid(), set(exclude)
        for pid, start in self.seen.items():
            info = _read_stat(pid)
            if (pid in skip or info is None or info.start != start or info.ppid != me
                    or info.state != "Z"):
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)

    def stop(self, term_grace_s: float, kill_wait_s: float, poll_s: float = 0.05,
             wake: Callable[[], bool] | None = None) -> set[int]:
        """SIGTERM, wait up to `term_grace_s` (or until `wake()` says hurry), freeze and
        SIGKILL, wait up to `kill_wait_s`; returns the pids still alive (unkillable)."""
        self.terminate()
        end = time.monotonic() + term_grace_s
        while time.monotonic() < end and self.running() and not (wake and wake()):
            time.sleep(poll_s)
        self.kill()
        end = time.monotonic() + kill_wait_s
        while time.monotonic() < end and (self.alive() or self.running()):
            if self.running() - set(self.seen):  # new members appeared after the kill
                self.kill()
            time.sleep(poll_s)
        return self.alive() | self.running()
