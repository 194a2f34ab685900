"""Host readiness facts: /dev/shm, free space and writability of paths, mounts that answer, the
open-files limit, processes stuck in D state, clock sync. Files are read under the sysroot
(PREFLIGHT_SYSROOT / --preflight-sysroot), so tests point these at a fake tree.

A path on a network filesystem can hang every call on it (a dead NFS server with `hard`, a
Lustre OST gone): statvfs and the write test run in a child process under `harness.base.proc.run`'s
hard timeout, so a hung mount costs its bound and is named, and the child (killable: NFS waits
are TASK_KILLABLE) is killed. /dev/shm is tmpfs (memory) and is read in-process."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.base import proc
from harness.parsers.host import Mount, limits_row, parse_chronyc_tracking, parse_mounts, parse_stat

__all__ = [
    "MOUNT_TIMEOUT_S",
    "KernelClock",
    "PathSpace",
    "Stuck",
    "chrony",
    "kernel_clock",
    "mounts",
    "nofile_limits",
    "path_space",
    "shm_space",
    "stuck_processes",
    "under",
]

#: Bound of one path's statvfs + write test, s, when the profile gives none (a healthy NFS or
#: Lustre answers in milliseconds; NFS's own `timeo=600` retry is 60 s, far past any preflight).
MOUNT_TIMEOUT_S = 10.0
#: Bound of `chronyc tracking`, s (it asks the local chronyd over a socket).
CHRONYC_TIMEOUT_S = 5.0

# The child: one JSON line for statvfs, then (asked with a second argument) one for the write
# test, so a write that hangs after statvfs answered is told apart from a mount that hangs.
_CHILD = """\
import json, os, sys, tempfile
p = sys.argv[1]
try:
    s = os.statvfs(p)
    print(json.dumps({"frsize": s.f_frsize, "blocks": s.f_blocks, "bavail": s.f_bavail,
                      "readonly": bool(s.f_flag & os.ST_RDONLY)}), flush=True)
except OSError as e:
    print(json.dumps({"error": e.strerror or str(e)}), flush=True)
    sys.exit(0)
if len(sys.argv) > 2:
    try:
        fd, name = tempfile.mkstemp(dir=p, prefix=".preflight-write-")
        os.write(fd, b"x"); os.fsync(fd); os.close(fd); os.unlink(name)
        print(json.dumps({"writable": True}), flush=True)
    except OSError as e:
        print(json.dumps({"writable": False, "error": e.strerror or str(e)}), flush=True)
"""


def under(sysroot: Path, path: str | os.PathLike[str]) -> Path:
    """`path` inside the sysroot (the path itself on the real root)."""
    text = os.fspath(path)
    return Path(text) if sysroot == Path("/") else sysroot / text.lstrip("/")


@dataclass(frozen=True, slots=True)
class PathSpace:
    """What statvfs and a write test said about one path; `problem` says why not (None: read)."""

    path: str
    total_bytes: int | None = None
    free_bytes: int | None = None
    """Bytes an unprivileged process may still write (f_bavail * f_frsize)."""
    readonly: bool | None = None
    writable: bool | None = None
    """None: not tested (or the test did not finish)."""
    write_error: str | None = None
    problem: str | None = None
    duration_s: float = 0.0

    @property
    def used_pct(self) -> float | None:
        if not self.total_bytes or self.free_bytes is None:
            return None
        return 100.0 * (1 - self.free_bytes / self.total_bytes)


def _from_statvfs(path: str, st: os.statvfs_result) -> PathSpace:
    return PathSpace(path, st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize,
                     bool(st.f_flag & os.ST_RDONLY))


def shm_space(sysroot: Path = Path("/")) -> PathSpace:
    """/dev/shm's size, free bytes and whether a file can be created in it (tmpfs: in-process)."""
    where = under(sysroot, "/dev/shm")
    try:
        found = _from_statvfs("/dev/shm", os.statvfs(where))
    except OSError as exc:
        return PathSpace("/dev/shm", problem=f"statvfs failed: {exc.strerror or exc}")
    try:
        fd, name = tempfile.mkstemp(dir=where, prefix=".preflight-write-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return replace(found, writable=False, write_error=exc.strerror or str(exc))
    return replace(found, writable=True)


def path_space(path: str, *, sysroot: Path = Path("/"), timeout_s: float = MOUNT_TIMEOUT_S,
               write: bool = False, python: Sequence[str] | None = None) -> PathSpace:
    """statvfs of `path` (and, with `write`, create/fsync/unlink a file in it) in a child process
    bounded by `timeout_s`. `python` replaces the interpreter argv (tests: a fake that hangs)."""
    argv = [*(python or (sys.executable, "-I", "-S")), "-c", _CHILD, str(under(sysroot, path))]
    res = proc.run(argv + (["write"] if write else []), timeout_s=timeout_s)
    answers, garbage = [], []
    for line in res.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        (answers.append(record) if isinstance(record, dict) else garbage.append(line))
    base = PathSpace(path, duration_s=res.duration_s)
    if not answers:
        if res.timed_out:
            why = f"statvfs gave no answer within {res.timeout_s or timeout_s:g} s (hung mount?)"
        elif garbage:
            why = f"the statvfs probe printed no result: {garbage[0][:120]!r}"
        else:
            why = f"the statvfs probe failed: {res.describe()}"
        return replace(base, problem=why)
    first = answers[0]
    if "error" in first:
        return replace(base, problem=f"statvfs failed: {first['error']}")
    try:
        frsize = int(first["frsize"])
        found = PathSpace(path, int(first["blocks"]) * frsize, int(first["bavail"]) * frsize,
                          bool(first["readonly"]), duration_s=res.duration_s)
    except (KeyError, TypeError, ValueError):
        return replace(base, problem=f"unreadable statvfs answer {first!r:.120}")
    if not write:
        return found
    if len(answers) < 2:
        why = (f"statvfs answered but the write test gave no answer within "
               f"{res.timeout_s or timeout_s:g} s" if res.timed_out
               else f"the write test printed no result ({res.describe()})")
        return replace(found, write_error=why)
    second = answers[1]
    ok = second.get("writable") is True
    return replace(found, writable=ok,
                   write_error=None if ok else str(second.get("error", "unknown error")))


def mounts(sysroot: Path = Path("/")) -> list[Mount]:
    """This process's mounts (/proc/self/mounts, else /proc/mounts). OSError when unreadable."""
    try:
        text = under(sysroot, "/proc/self/mounts").read_text(errors="replace")
    except OSError:
        text = under(sysroot, "/proc/mounts").read_text(errors="replace")
    return parse_mounts(text)


def nofile_limits(sysroot: Path = Path("/")) -> tuple[int | None, int | None]:
    """(soft, hard) open-files limit; None = unlimited. The real root asks getrlimit; a fake
    sysroot is read from <sysroot>/proc/self/limits. OSError/ValueError when unknown."""
    if sysroot == Path("/"):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        inf = resource.RLIM_INFINITY
        return (None if soft == inf else soft), (None if hard == inf else hard)
    return limits_row(under(sysroot, "/proc/self/limits").read_text(errors="replace"),
                      "Max open files")


@dataclass(frozen=True, slots=True)
class Stuck:
    """A process in uninterruptible sleep (state D) for at least the asked age."""

    pid: int
    command: str
    age_s: float


def stuck_processes(min_age_s: float, sysroot: Path = Path("/")) -> tuple[list[Stuck], int]:
    """Processes in state D started at least `min_age_s` ago (proc(5) stat fields 3 and 22
    against /proc/uptime; Meta GCM check_dstate's rule), and how many processes were read.
    A container sees only its own PID namespace. OSError when /proc/uptime is unreadable."""
    root = under(sysroot, "/proc")
    uptime = float((root / "uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    found, seen = [], 0
    for entry in root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            row = parse_stat((entry / "stat").read_text(errors="replace"))
        except OSError:  # the process ended while we looked
            continue
        if row is None:
            continue
        seen += 1
        command, state, start = row
        age = uptime - start / ticks
        if state == "D" and age >= min_age_s:
            found.append(Stuck(int(entry.name), command, round(age, 1)))
    return sorted(found, key=lambda s: -s.age_s), seen


@dataclass(frozen=True, slots=True)
class KernelClock:
    """The kernel's NTP state (adjtimex(2) with modes=0: unprivileged, works in a container)."""

    synchronized: bool
    """STA_UNSYNC clear and the clock state is not TIME_ERROR."""
    maxerror_us: int
    esterror_us: int


class _Timex(ctypes.Structure):
    # struct timex (include/uapi/linux/timex.h); ctypes aligns the longs as the C compiler does.
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long),
                ("status", ctypes.c_int), ("constant", ctypes.c_long),
                ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time_sec", ctypes.c_long), ("time_usec", ctypes.c_long),
                ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long), ("jitter", ctypes.c_long),
                ("shift", ctypes.c_int), ("stable", ctypes.c_long), ("jitcnt", ctypes.c_long),
                ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long), ("stbcnt", ctypes.c_long),
                ("tai", ctypes.c_int), ("_pad", ctypes.c_int * 11)]


STA_UNSYNC = 0x0040
TIME_ERROR = 5


def kernel_clock(call: Callable[[], tuple[int, int, int, int]] | None = None) -> KernelClock:
    """The kernel's clock state. `call` returns (return value, status, maxerror, esterror)
    (tests); the default calls libc's adjtimex. OSError when the call is not available."""
    if call is None:
        call = _adjtimex
    state, status, maxerror, esterror = call()
    return KernelClock(not (status & STA_UNSYNC) and state != TIME_ERROR, maxerror, esterror)


def _adjtimex() -> tuple[int, int, int, int]:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.adjtimex
    except (OSError, AttributeError) as exc:
        raise OSError(f"adjtimex is not available: {exc}") from None
    tx = _Timex()
    state = fn(ctypes.byref(tx))
    if state < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"adjtimex failed: {os.strerror(errno)}")
    return state, tx.status, tx.maxerror, tx.esterror


def chrony(timeout_s: float = CHRONYC_TIMEOUT_S) -> tuple[object | None, str | None]:
    """(`chronyc tracking` parsed, None) or (None, why not): not installed, no chronyd, hung,
    garbage."""
    if proc.which("chronyc") is None:
        return None, "chronyc is not installed"
    res = proc.run(["chronyc", "tracking"], timeout_s=timeout_s)
    if not res.ok:
        return None, res.describe()
    try:
        return parse_chronyc_tracking(res.stdout), None
    except ValueError as exc:
        return None, f"`chronyc tracking`: {exc}"
