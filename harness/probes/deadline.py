"""A check's deadline shared by the sources a probe tries in turn (NVML, then nvidia-smi ...), and
the tools that hung earlier in this run, which are not waited on again. Every tool still runs
through `harness.proc.run`; this only decides how long it may take and says why it stopped."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from harness import proc

__all__ = ["HANG_MIN_S", "Deadline", "HungError", "bounded", "describe", "forget_hung", "hung",
           "mark_hung", "run", "share_hung"]

#: What `proc.run` may take past a tool's timeout: SIGTERM, its grace, SIGKILL, then reading the
#: pipes' last bytes (proc.KILL_GRACE_S each).
KILL_OVERHEAD_S = 3 * proc.KILL_GRACE_S
#: A tool given at least this long that did not answer counts as hung for the rest of the run;
#: one cut shorter by the deadline proves less and is asked again by the next check.
HANG_MIN_S = 10.0
#: Below this much time left a source is not started at all.
MIN_TRY_S = 1.0

T = TypeVar("T")

# Tool name -> why it counts as hung, in this process (an xdist worker is one) and, once
# `share_hung` names the run's results file, in every pytest session of the run (the node-local
# phase's workers and the exclusive phase): they append `{"event": "hung", ...}` lines to it,
# which the report reader ignores.
_HUNG: dict[str, str] = {}
_LOCK = threading.Lock()
_shared: dict[str, object] = {"path": None, "offset": 0}


def share_hung(path: str | os.PathLike[str] | None) -> None:
    """Share hung tools through `path` (the run's results JSONL; None: this process only)."""
    with _LOCK:
        _shared.update(path=None if path is None else str(path), offset=0)


def _read_shared() -> None:
    path = _shared["path"]
    if path is None:
        return
    try:
        with open(str(path), "rb") as fh:
            fh.seek(int(_shared["offset"]))  # type: ignore[call-overload]
            data = fh.read()
    except OSError:
        return
    end = data.rfind(b"\n") + 1
    _shared["offset"] = int(_shared["offset"]) + end  # type: ignore[call-overload]
    for line in data[:end].splitlines():
        if b'"hung"' not in line:
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "hung" and record.get("tool"):
            _HUNG.setdefault(str(record["tool"]), str(record.get("why", "")))


def hung(tool: str) -> str | None:
    """Why `tool` counts as hung in this run (None: it does not)."""
    with _LOCK:
        if tool not in _HUNG:
            _read_shared()
        return _HUNG.get(tool)


def mark_hung(tool: str, why: str) -> None:
    with _LOCK:
        if tool in _HUNG:
            return
        _HUNG[tool] = why
        path = _shared["path"]
    if path is not None:
        line = json.dumps({"event": "hung", "tool": tool, "why": why, "time": time.time()})
        try:
            fd = os.open(str(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # sharing is an optimisation: this process still remembers


def forget_hung() -> None:
    """Forget every hung tool and stop sharing (tests; a new run starts with none)."""
    with _LOCK:
        _HUNG.clear()
        _shared.update(path=None, offset=0)


@dataclass(frozen=True, slots=True)
class Deadline:
    """A monotonic time by which a probe must have returned, and whose it is (for messages)."""

    at: float
    owner: str = "the check"
    """`PF-GPU-001's 120 s timeout`: what set it."""

    @classmethod
    def after(cls, seconds: float, owner: str = "the check") -> Deadline:
        return cls(time.monotonic() + seconds, owner)

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def limit(self, cap_s: float) -> float:
        """How long a tool may run now: its own cap, or what is left once its kill is paid for
        (to 0.1 s, so that messages read `within 53.4 s`)."""
        left = math.floor((self.remaining() - KILL_OVERHEAD_S) * 10) / 10
        return max(0.0, min(cap_s, left))

    def note(self, limit_s: float, cap_s: float) -> str:
        """` (all that was left of PF-GPU-001's 120 s timeout)` when the deadline cut the cap."""
        return f" (all that was left of {self.owner})" if limit_s < cap_s else ""


class HungError(RuntimeError):
    """An in-process call (NVML) did not return within its limit; str() says which and how long."""


def describe(res: proc.ProcResult, note: str = "") -> str:
    """`res.describe()`; for a timeout also the deadline it had."""
    text = res.describe()  # a timeout's says its last line (or that it printed nothing)
    return text + note if res.timed_out else text


def run(argv: Sequence[str], deadline: Deadline | None, cap_s: float, *, tool: str | None = None,
        env: Mapping[str, str] | None = None) -> tuple[proc.ProcResult, str]:
    """Run `argv` within `deadline` (at most `cap_s`; no deadline: `cap_s`); (result, deadline
    note for messages). A tool that hung earlier in the run is not started (the result's
    `error` says so); one that times out now with at least HANG_MIN_S is remembered as hung."""
    name = tool or os.path.basename(str(argv[0]))
    args = tuple(str(a) for a in argv)
    why = hung(name)
    if why is not None:
        return proc.ProcResult(args, None, error=f"not started: {name} hung earlier in this "
                                                 f"run ({why})"), ""
    limit = deadline.limit(cap_s) if deadline is not None else cap_s
    if deadline is not None and limit < MIN_TRY_S:
        return proc.ProcResult(args, None,
                               error=f"not started: no time left of {deadline.owner}"), ""
    res = proc.run(argv, timeout_s=limit, env=env)
    note = deadline.note(limit, cap_s) if deadline is not None else ""
    if res.timed_out and limit >= min(cap_s, HANG_MIN_S):
        mark_hung(name, f"`{' '.join(args)}` gave no answer within {limit:g} s")
    return res, note


def bounded(fn: Callable[[], T], limit_s: float, what: str, *, tool: str) -> T:
    """`fn()` in a worker thread, waited on for `limit_s`: a call stuck in C (a driver that does
    not answer) cannot be interrupted, but the check need not wait for it. HungError when it
    did not return (the thread is left behind; `tool` is remembered as hung)."""
    why = hung(tool)
    if why is not None:
        raise HungError(f"not asked: {tool} hung earlier in this run ({why})")
    box: dict[str, object] = {}

    def call() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=call, name=f"preflight-{tool}", daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        mark_hung(tool, f"{what} gave no answer within {limit_s:g} s")
        raise HungError(f"{what} did not return within {limit_s:g} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
