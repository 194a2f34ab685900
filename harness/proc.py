"""The one subprocess helper: every external tool runs through `run`, with a timeout that kills
the whole process group and returns whatever the tool printed before it was stopped."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["ProcResult", "run", "which"]

#: Seconds between SIGTERM and SIGKILL when a timed-out tool's group is stopped.
KILL_GRACE_S = 2.0


@dataclass(frozen=True, slots=True)
class ProcResult:
    """What a tool did: its exit status, output, and whether it was stopped or never started."""

    argv: tuple[str, ...]
    returncode: int | None
    """Exit status; negative for a signal; None when it never started or was killed on timeout."""
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    error: str | None = None
    """Why it could not run at all (binary missing, permission denied); None when it started."""
    timeout_s: float | None = field(default=None)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.error is None

    @property
    def output(self) -> str:
        """stdout then stderr, as a person would have seen them on a terminal (roughly)."""
        return self.stdout + (("\n" + self.stderr) if self.stderr else "")

    def describe(self) -> str:
        """One line saying what went wrong, for a check's error message."""
        cmd = " ".join(self.argv)
        if self.error is not None:
            return f"`{cmd}` could not run: {self.error}"
        if self.timed_out:
            return f"`{cmd}` did not finish within {self.timeout_s:g} s and was killed"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = str(-self.returncode)
            return f"`{cmd}` was killed by signal {name}"
        tail = (self.stderr or self.stdout).strip().splitlines()[-1:] or [""]
        return f"`{cmd}` exited with status {self.returncode}: {tail[0][:300]}"


def which(name: str, path: str | None = None) -> str | None:
    """Full path of an executable on PATH (or on `path`), or None."""
    return shutil.which(name, path=path)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL what is left after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


class _Reader(threading.Thread):
    """Drains one pipe so a chatty tool never blocks on a full pipe."""

    def __init__(self, pipe: IO[bytes] | None) -> None:
        super().__init__(daemon=True)
        self.pipe, self.chunks = pipe, []
        self.start()

    def run(self) -> None:
        if self.pipe is None:
            return
        with contextlib.suppress(OSError, ValueError):
            while chunk := self.pipe.read1(65536):
                self.chunks.append(chunk)

    def result(self, timeout_s: float) -> bytes:
        # A grandchild that escaped the group may hold the pipe open: take what arrived.
        self.join(timeout_s)
        return b"".join(self.chunks)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError, BrokenPipeError):
        pipe.write(data)
        pipe.close()


def _spawn(
    args: tuple[str, ...],
    timeout_s: float,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    stdin: Any,
    stdout: Any,
    stderr: Any,
) -> subprocess.Popen[bytes] | ProcResult:
    """Start the tool in its own session; a ProcResult saying why when it cannot start."""
    try:
        return subprocess.Popen(
            args, stdin=stdin, stdout=stdout, stderr=stderr,
            env=None if env is None else dict(env), cwd=cwd, start_new_session=True,
        )
    except FileNotFoundError:
        return ProcResult(args, None, error="command not found", timeout_s=timeout_s)
    except PermissionError as exc:
        return ProcResult(args, None, error=f"permission denied ({exc.strerror})",
                          timeout_s=timeout_s)
    except OSError as exc:
        return ProcResult(args, None, error=f"{type(exc).__name__}: {exc}", timeout_s=timeout_s)


def _wait_then_kill_group(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for the tool; on timeout stop its group. Either way whatever is left in the group
    (children of a tool that exited, survivors of the kill) is killed, so nothing outlives the
    call and the pipes reach EOF. Returns whether it timed out."""
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return timed_out


def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input_text: str | None = None,
    output_path: str | os.PathLike[str] | None = None,
) -> ProcResult:
    """Run `argv` with a hard timeout; never raises for tool failures, returns a ProcResult.

    The tool runs in a new session (its own process group) so that on timeout the group is
    killed, grandchildren included (mpirun's ranks, a shell's children). With `output_path`,
    stdout and stderr go to that file as they are printed (a live log for long runs) and the
    result's stdout holds its last OUTPUT_TAIL_BYTES.
    """
    if output_path is not None:
        return _run_to_file(argv, timeout_s=timeout_s, env=env, cwd=cwd, path=output_path)
    args = tuple(str(a) for a in argv)
    start = time.monotonic()
    stdin = subprocess.PIPE if input_text is not None else subprocess.DEVNULL
    spawned = _spawn(args, timeout_s, env, cwd, stdin, subprocess.PIPE, subprocess.PIPE)
    if isinstance(spawned, ProcResult):
        return spawned
    proc = spawned
    readers = [_Reader(proc.stdout), _Reader(proc.stderr)]
    if input_text is not None and proc.stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, input_text.encode()), daemon=True).start()
    timed_out = _wait_then_kill_group(proc, timeout_s)
    out, err = (r.result(KILL_GRACE_S) for r in readers)
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if proc.returncode is None:  # reap, or leave it to the OS if it is unkillable (D state)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
    return ProcResult(
        args,
        None if timed_out else proc.returncode,
        _decode(out),
        _decode(err),
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        timeout_s=timeout_s,
    )


#: How much of a file-backed run's output is kept in the ProcResult.
OUTPUT_TAIL_BYTES = 64 * 1024


def _run_to_file(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike[str] | None,
    path: str | os.PathLike[str],
) -> ProcResult:
    args = tuple(str(a) for a in argv)
    start = time.monotonic()
    with open(path, "ab") as out:
        spawned = _spawn(args, timeout_s, env, cwd, subprocess.DEVNULL, out, subprocess.STDOUT)
        if isinstance(spawned, ProcResult):
            return spawned
        proc = spawned
        timed_out = _wait_then_kill_group(proc, timeout_s)
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        fh.seek(max(0, fh.tell() - OUTPUT_TAIL_BYTES))
        tail = _decode(fh.read())
    return ProcResult(
        args, None if timed_out else proc.returncode, tail, "",
        duration_s=time.monotonic() - start, timed_out=timed_out, timeout_s=timeout_s,
    )
