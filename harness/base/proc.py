"""The one subprocess helper: every external tool runs through `run`. It never raises for a
tool's failure and never outlives its bound:

- The timeout is the caller's, shortened to end before the running check's deadline and the
  run's (harness.base.deadline), with STOP_RESERVE_S left to stop the tool.
- On timeout the tool's whole tree is stopped (SIGTERM, grace, SIGKILL): its process group and
  every descendant, also those in their own session (`setsid child &`) or double-forked
  (harness.base.proctree: subreaper + a tag in the environment). When the tool exits, whatever it
  left running is killed, so a detached child holding the pipe cannot stall the call.
- Output is capped (head and tail kept, the dropped amount said): memory stays flat however
  much a tool prints.
- describe() names the tool, its arguments, the deadline and its last output.

Why not subprocess.run/communicate: communicate keeps all output (no cap) and reads until EOF,
which a detached grandchild holding the pipe delays until it exits; this loop reads both pipes
itself (selectors, no threads), so it can cap, notice the tool's exit, and give up on a pipe held
by a process that cannot be killed (D state).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from harness.base import deadline as _deadline
from harness.base import proctree
from harness.base.proc_result import DEFAULT_OUTPUT_CAP, ProcResult

__all__ = ["KILL_GRACE_S", "budget", "kill_tree", "run", "stop_starting", "which"]

#: Seconds between SIGTERM and SIGKILL when a timed-out tool's tree is stopped, and the most
#: a call then waits for the tree to die and the pipes to close.
KILL_GRACE_S = _deadline.KILL_GRACE_S
#: Seconds kept back from a check's or the run's deadline: the SIGTERM grace, the SIGKILL wait,
#: and a second for the check to turn the result into its message.
STOP_RESERVE_S = 2 * KILL_GRACE_S + 1.0
#: A tool is not started with less time than this left: it could not do its work.
MIN_TIMEOUT_S = 0.5
#: With `output_path`: bytes of the end of the output kept in the result (the file has it all).
OUTPUT_TAIL_BYTES = 64 * 1024
#: Seconds between checks of the tool's exit while its pipes are quiet.
POLL_S = 0.05

_refusal: str | None = None


def stop_starting(reason: str | None) -> None:
    """From now on (until reset with None) `run` starts nothing and says `reason` (the run was
    interrupted by a signal: nothing new may start while the run is being stopped)."""
    global _refusal
    _refusal = reason


def which(name: str, path: str | None = None) -> str | None:
    """Full path of an executable on PATH (or on `path`), or None."""
    return shutil.which(name, path=path)


class _Capture:
    """One pipe's output: the first `head` bytes, the last `tail` bytes, the count of the rest;
    everything also goes to `sink` when given."""

    def __init__(self, head: int, tail: int, sink: IO[bytes] | None = None) -> None:
        self.head_cap, self.tail_cap, self.sink = head, tail, sink
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        if self.sink is not None:
            self.sink.write(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail += data
            if len(self.tail) > 2 * self.tail_cap:  # trim in bulk: amortised O(1) per byte
                del self.tail[:-self.tail_cap]

    def result(self) -> tuple[str, int]:
        tail = self.tail[-self.tail_cap:] if self.tail_cap else b""
        dropped = self.total - len(self.head) - len(tail)
        mark = (f"\n[gpu-preflight: {dropped:,} bytes of output dropped here]\n".encode()
                if dropped and self.sink is None else b"")
        text = bytes(self.head) + mark + bytes(tail)
        return text.decode("utf-8", errors="replace"), (0 if self.sink is not None else dropped)


def _spawn(args: tuple[str, ...], env: Mapping[str, str] | None, tag: str,
           cwd: str | os.PathLike[str] | None, stdin: Any, stderr: Any,
           ) -> subprocess.Popen[bytes] | str:
    """Start the tool in its own session, tagged; a string saying why when it cannot start."""
    child_env = dict(os.environ if env is None else env)
    child_env[proctree.TAG_VAR] = tag
    try:
        return subprocess.Popen(args, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr,
                                env=child_env, cwd=cwd, start_new_session=True)
    except FileNotFoundError:
        return "command not found"
    except PermissionError as exc:
        return f"permission denied ({exc.strerror})"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


@dataclass(slots=True)
class _Ended:
    timed_out: bool = False
    leftovers: int = 0
    unkillable: tuple[int, ...] = ()


def _drive(proc: subprocess.Popen[bytes], tag: str, timeout_s: float,
           captures: Mapping[int, _Capture], stdin_data: bytes | None) -> _Ended:
    """Read the pipes until the tool and everything it started are gone, stopping the tree at
    the timeout and killing leftovers when the tool exits; every wait is bounded."""
    stopper = proctree.Stopper(lambda snap: proctree.call_members(proc.pid, tag, snap),
                               groups=[proc.pid])
    sel = selectors.DefaultSelector()
    for fd, capture in captures.items():
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ, capture)
    if stdin_data is not None and proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, _STDIN)
    ended, state = _Ended(), "run"
    step_at = time.monotonic() + timeout_s  # when the current state gives up
    exited = holders_sought = False
    try:
        while True:
            now = time.monotonic()
            if not exited and proc.poll() is not None:
                exited = True
                if state == "run":  # the tool is done: its leftovers may hold the pipes
                    left = stopper.running()
                    ended.leftovers = len(left)
                    if left:
                        stopper.kill()
                    state, step_at = "drain", now + KILL_GRACE_S
            if state == "run" and now >= step_at:
                ended.timed_out = True
                stopper.terminate()
                state, step_at = "term", now + KILL_GRACE_S
            elif state == "term" and (now >= step_at or (exited and not stopper.running())):
                stopper.kill()
                state, step_at = "drain", now + KILL_GRACE_S
            elif state == "drain" and (now >= step_at or (exited and not _has_readers(sel))):
                break  # everything is read; or a pipe is held by what SIGKILL cannot stop
            elif state == "drain" and not holders_sought and now >= step_at - KILL_GRACE_S + 0.2:
                holders_sought = True  # still open: a writer that shed its tag holds it
                held = _holders(sel)
                ended.leftovers += len(held - set(stopper.seen))
                stopper.adopt(held)
                stopper.kill()
            wait = min(max(step_at - now, 0.0), POLL_S)
            if not sel.get_map():  # pipes closed: wait for the exit itself (promptly)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
                continue
            for key, _ in sel.select(wait):
                if key.data is _STDIN:
                    stdin_data = _write_some(sel, proc, stdin_data or b"")
                else:
                    _read_some(sel, key.fd, key.data)
    except BaseException:  # KeyboardInterrupt (a signal in the check session): stop it all
        stopper.kill()
        raise
    else:  # killed members may still be exiting: give them the grace before naming them
        end = time.monotonic() + KILL_GRACE_S
        while stopper.alive() and time.monotonic() < end:
            time.sleep(0.01)
        ended.unkillable = tuple(sorted(stopper.alive()))
    finally:
        with contextlib.suppress(OSError):
            sel.close()
        if not exited:
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:  # not dead yet (D state): reap it whenever it dies
                threading.Thread(target=proc.wait, name=f"reap {proc.pid}", daemon=True).start()
        stopper.reap(exclude=[proc.pid])
    return ended


_STDIN = object()


def _holders(sel: selectors.BaseSelector) -> set[int]:
    """Processes (ours, when we are a subreaper) holding the write end of a pipe still open."""
    inodes = {os.fstat(key.fd).st_ino for key in sel.get_map().values() if key.data is not _STDIN}
    if not inodes:
        return set()
    snap = proctree.snapshot()
    candidates = (proctree.descendants_of_self(snap) if proctree.is_subreaper()
                  else set(snap) - {os.getpid()})
    return proctree.pipe_holders(inodes, candidates)


def _has_readers(sel: selectors.BaseSelector) -> bool:
    return any(key.data is not _STDIN for key in sel.get_map().values())


def _read_some(sel: selectors.BaseSelector, fd: int, capture: _Capture) -> None:
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    except OSError:
        data = b""
    if data:
        capture.add(data)
    else:  # EOF: no writer left
        sel.unregister(fd)


def _write_some(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], data: bytes) -> bytes:
    assert proc.stdin is not None
    fd = proc.stdin.fileno()
    try:
        sent = os.write(fd, data[:1 << 16])
    except BlockingIOError:
        return data
    except OSError:  # the tool closed its stdin or exited
        sent = len(data)
    data = data[sent:]
    if not data:  # all written: close it, so that the tool sees EOF
        sel.unregister(fd)
        with contextlib.suppress(OSError):
            proc.stdin.close()
    return data


def run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    input_text: str | None = None,
    output_path: str | os.PathLike[str] | None = None,
    max_output_bytes: int = DEFAULT_OUTPUT_CAP,
) -> ProcResult:
    """Run `argv` with a hard timeout; never raises for tool failures, returns a ProcResult.

    `timeout_s` is shortened to end STOP_RESERVE_S before the soonest deadline in force (the
    running check's, the run's, a `harness.base.deadline.scope`); the result says so. stdout and
    stderr keep their first and last `max_output_bytes / 2` bytes each. With `output_path`,
    stdout and stderr go to that file as they are printed (a live log for long runs; appended,
    never capped) and the result's stdout holds its last OUTPUT_TAIL_BYTES.
    """
    args = tuple(str(a) for a in argv)
    start = time.monotonic()
    limit, shortened = _deadline.fit(timeout_s, STOP_RESERVE_S)
    if _refusal is not None:
        return ProcResult(args, None, error=f"not started: {_refusal}", timeout_s=timeout_s)
    if shortened is not None and limit < MIN_TIMEOUT_S:
        return ProcResult(args, None, timeout_s=timeout_s, error=(
            f"not started: {shortened.what} is {max(shortened.left(), 0.0):.1f} s away, too "
            f"close for a {timeout_s:g} s tool (stopping one that overruns takes "
            f"{STOP_RESERVE_S:g} s)"))
    proctree.become_subreaper()
    tag = proctree.child_tag()
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(output_path, "ab", buffering=0)) if output_path else None
        spawned = _spawn(args, env, tag, cwd,
                         subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                         subprocess.STDOUT if sink else subprocess.PIPE)
        if isinstance(spawned, str):
            return ProcResult(args, None, error=spawned, timeout_s=limit)
        proc = spawned
        assert proc.stdout is not None
        half = max_output_bytes // 2
        out_cap = (_Capture(0, OUTPUT_TAIL_BYTES, sink) if sink
                   else _Capture(half, max_output_bytes - half))
        err_cap = _Capture(half, max_output_bytes - half)
        captures = {proc.stdout.fileno(): out_cap}
        if proc.stderr is not None:
            captures[proc.stderr.fileno()] = err_cap
        try:
            ended = _drive(proc, tag, limit, captures,
                           None if input_text is None else input_text.encode())
        finally:
            for pipe in (proc.stdin, proc.stdout, proc.stderr):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
    out, out_dropped = out_cap.result()
    err, err_dropped = err_cap.result()
    return ProcResult(
        args, None if ended.timed_out else proc.returncode, out, err,
        duration_s=time.monotonic() - start, timed_out=ended.timed_out, timeout_s=limit,
        requested_timeout_s=timeout_s if shortened else None,
        shortened_by=shortened.what if shortened else None,
        stdout_dropped=out_dropped, stderr_dropped=err_dropped, output_cap=max_output_bytes,
        leftovers=ended.leftovers, unkillable=ended.unkillable,
    )


def budget(timeout_s: float) -> float:
    """The timeout `run` would use now for `timeout_s` (shortened by the deadlines in force; <= 0
    when there is no time left): for a caller that splits it (a fallback chain) or hands a tool
    its own internal timeout."""
    return _deadline.fit(timeout_s, STOP_RESERVE_S)[0]


def kill_tree(pid: int, grace_s: float = KILL_GRACE_S) -> set[int]:
    """Stop process `pid` and every descendant (started by other means than `run`, e.g. the
    selftest's node processes): SIGTERM, `grace_s`, SIGKILL. Returns the pids that survived."""
    proctree.become_subreaper()
    stopper = proctree.Stopper(lambda snap: proctree.descendants([pid], snap), groups=[pid])
    survivors = stopper.stop(grace_s, KILL_GRACE_S)
    stopper.reap(exclude=[pid])  # orphans re-parented to us; `pid` is its Popen owner's to reap
    return survivors
