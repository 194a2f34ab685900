"""One run per report folder. `preflight run` holds a lock on its report folder (REPORT_DIR/HOST)
from before it writes anything there until it exits or hands off, so that two runs given the
same folder (two nodes with one name on a shared file system, a second job on the node, a
retry while the first still runs) never read each other's results or overwrite each other's
report. The second run stops with exit 2 naming the first: its pid, its machine and when it
started (docs/reports.md says why it does not write beside it instead).

How: an advisory `flock` on REPORT_DIR/.preflight.lock, and the holder's identity written in
that file for the message. The kernel drops the flock when the holder exits, however it exits
(a crash, SIGKILL), and at the hand-off (the file is opened close-on-exec); a file whose writer
is gone is stale and taken over, saying so. A file system that does not share flocks between
machines (Lustre mounted with `localflock`, some NFS set-ups) is covered by the identity: a lock
written on another machine (another boot id) holds until the end of that run's hard upper bound
(`until`, in the file), after which it is stale too. Hand-written on the standard library:
`fcntl.flock` and a JSON line are all it takes (the `filelock` package would add a dependency
to every training image for the same flock, without the holder's identity).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

from harness.base.jsontypes import JSONObject

__all__ = ["LOCK_NAME", "ReportLock", "ReportLockBusy"]

#: A dot file: not uploaded with the report folder (harness.report.publish skips them).
LOCK_NAME = ".preflight.lock"
#: Seconds a lock is held for before the run knows its own hard upper bound (profile resolution,
#: the suites: seconds); `ReportLock.extend` then sets the real one.
START_HOLD_S = 900.0


class ReportLockBusy(Exception):
    """Another run holds the report folder; str() names it and says what to do."""


def _boot_id() -> str:
    """This kernel's boot (shared by every container on the machine: they share its flocks)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


class ReportLock:
    """This run's hold on one report folder: `acquire`, `extend` once the run's bound is known,
    `release` before exit or hand-off (idempotent)."""

    def __init__(self, path: Path, fd: int, identity: JSONObject) -> None:
        self.path, self._fd, self.identity = path, fd, identity
        self.took_over: JSONObject | None = None
        """The stale lock this run replaced (its writer was gone), if any."""

    @classmethod
    def acquire(cls, folder: Path, *, host: str, hold_s: float = START_HOLD_S) -> ReportLock:
        """Lock `folder` (created if missing) for this process; ReportLockBusy naming the
        holder when another run has it; OSError when the folder cannot be written."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            shared = cls._flock(fd, path)
            holder = _read(fd)
            if holder and cls._live(holder, shared):
                raise ReportLockBusy(_busy(folder, holder))
            now = time.time()
            identity: JSONObject = {
                "pid": os.getpid(), "machine": socket.gethostname(), "boot_id": _boot_id(),
                "host": host, "started_at": _iso(now), "started": round(now, 3),
                "until": round(now + hold_s, 3)}
            lock = cls(path, fd, identity)
            lock.took_over = holder or None
            lock._write()
            return lock
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _flock(fd: int, path: Path) -> bool:
        """Take the flock; False where the file system has none (the identity decides then)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ReportLockBusy(_busy(path.parent, _read(fd))) from None
        except OSError:  # ENOLCK / EOPNOTSUPP: no flocks on this mount
            return False
        return True

    @staticmethod
    def _live(holder: JSONObject, flocked: bool) -> bool:
        """Whether the run written in the file may still be running (we hold the flock, or the
        file system has none)."""
        if holder.get("boot_id") == _boot_id():  # this machine: the flock is the truth
            if flocked:
                return False
            return _alive(holder.get("pid"))
        until = holder.get("until")
        return isinstance(until, int | float) and until > time.time()

    def extend(self, hold_s: float) -> None:
        """Hold the lock for `hold_s` more seconds (the run's hard upper bound, once known)."""
        if self._fd < 0:
            return
        self.identity["until"] = round(time.time() + hold_s, 3)
        with contextlib.suppress(OSError):
            self._write()

    def release(self) -> None:
        """Empty the file (no identity left to honour) and drop the flock; idempotent."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)

    def _write(self) -> None:
        data = (json.dumps(self.identity) + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def _read(fd: int) -> JSONObject:
    """The identity in the lock file ({} when empty or not ours to read)."""
    try:
        data = os.pread(fd, 4096, 0)
        found = json.loads(data) if data.strip() else {}
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _busy(folder: Path, holder: JSONObject) -> str:
    """What the second run says: who holds the folder, since when, and what to do."""
    if holder:
        started = holder.get("started")
        ago = (f", {max(0.0, time.time() - started):.0f} s ago"  # started is rounded: never "-0"
               if isinstance(started, int | float) else "")
        who = (f"pid {holder.get('pid', '?')} on {holder.get('machine', '?')}, started "
               f"{holder.get('started_at', '?')}{ago}")
    else:
        who = "a run that has not written its name yet"
    return (f"the report folder {folder} is in use by another preflight run ({who}): two runs "
            "in one folder would read each other's results. Give each run its own folder "
            "(--report-dir, PREFLIGHT_REPORT_DIR or PREFLIGHT_HOSTNAME), or wait for that run "
            f"to end (lock: {folder / LOCK_NAME})")
