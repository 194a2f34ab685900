"""One step of a probe's fallback chain (NVML, then nvidia-smi -q -x, then -q ...): a tool run,
or an in-process call waited on, within the check's `harness.base.deadline.Deadline`, skipped when it
hung earlier in this run (the deadline module's hung-tool memory) and remembered when it hangs
now. Every tool still runs through `harness.base.proc.run`; this only decides how long it may take
and says why it stopped."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from harness.base import proc
from harness.base.deadline import HANG_MIN_S, Deadline, hung, mark_hung
from harness.base.proc_result import ProcResult

__all__ = ["MIN_TRY_S", "HungError", "bounded", "describe", "run"]

#: Below this much time left a source is not started at all.
MIN_TRY_S = 1.0

T = TypeVar("T")


class HungError(RuntimeError):
    """An in-process call (NVML) did not return within its limit; str() says which and how long."""


def describe(res: ProcResult, note: str = "") -> str:
    """`res.describe()`; for a timeout also the deadline it had."""
    text = res.describe()  # a timeout's says its last line (or that it printed nothing)
    return text + note if res.timed_out else text


def run(argv: Sequence[str], deadline: Deadline | None, cap_s: float, *, tool: str | None = None,
        env: Mapping[str, str] | None = None) -> tuple[ProcResult, str]:
    """Run `argv` within `deadline` (at most `cap_s`; no deadline: `cap_s`); (result, deadline
    note for messages). A tool that hung earlier in the run is not started (the result's
    `error` says so); one that times out now with at least HANG_MIN_S is remembered as hung."""
    name = tool or os.path.basename(str(argv[0]))
    args = tuple(str(a) for a in argv)
    why = hung(name)
    if why is not None:
        return ProcResult(args, None, error=f"not started: {name} hung earlier in this "
                                                 f"run ({why})"), ""
    limit = deadline.limit(cap_s) if deadline is not None else cap_s
    if deadline is not None and limit < MIN_TRY_S:
        return ProcResult(args, None,
                               error=f"not started: no time left of {deadline.what}"), ""
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
