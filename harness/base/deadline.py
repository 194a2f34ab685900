"""The one deadline of the harness: how long work may still take, and whose limit it is.

`Deadline` is a monotonic time and its owner. Three sources are in force, the soonest wins
(`current`, `fit`):
- the check's: set by the plugin when pytest-timeout arms a check's timer
  (`TimeoutHooks.pytest_timeout_set_timer`, whose `settings.timeout` is the value pytest-timeout
  itself uses: marker, ini or --timeout). Process-wide, because pytest runs one check at a time
  per process and a check may call tools from its own threads;
- the run's: the runner hands its budget's end to every check session in DEADLINE_VAR;
- a caller's own (`scope`), e.g. one step of a fallback chain: context-local.
`harness.base.proc.run` shortens a tool's own timeout to end, with the time to stop it, before the
soonest: the tool's timeout fires, naming the tool, its arguments and its last output, before
pytest-timeout stops the whole check with a bare "Timeout (>120.0s) from pytest-timeout".
A probe that tries sources in turn (NVML, then nvidia-smi ...) passes one Deadline down the
chain (`Deadline.limit`, `harness.probes.chain`).

The hung-tool memory: a tool that did not answer within HANG_MIN_S counts as hung for the rest
of the run (`mark_hung`, `hung`) and is not waited on again; `share_hung` shares it through the
run's results file with every pytest session of the run.

Times are time.monotonic(): CLOCK_MONOTONIC on Linux, one clock for every process of a machine
(and of a container: same kernel), so a deadline can cross a process boundary.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from harness.base.settings import get_str

if TYPE_CHECKING:
    import pytest

__all__ = ["DEADLINE_VAR", "HANG_MIN_S", "KILL_GRACE_S", "KILL_OVERHEAD_S", "Deadline",
           "TimeoutHooks", "current", "fit", "forget_hung", "hung", "mark_hung",
           "run_deadline_env", "scope", "set_check_deadline", "share_hung"]

DEADLINE_VAR = "PREFLIGHT_DEADLINE"
"""`<monotonic seconds> <what>`: the end of the run's budget, for the check sessions."""
#: harness.base.proc's stop of a tool that overran: SIGTERM, this grace, SIGKILL, this grace.
KILL_GRACE_S = 2.0
#: What `proc.run` may take past a tool's timeout: SIGTERM, its grace, SIGKILL, then reading the
#: pipes' last bytes (KILL_GRACE_S each).
KILL_OVERHEAD_S = 3 * KILL_GRACE_S
#: A tool given at least this long that did not answer counts as hung for the rest of the run;
#: one cut shorter by the deadline proves less and is asked again by the next check.
HANG_MIN_S = 10.0


@dataclass(frozen=True, slots=True)
class Deadline:
    """A monotonic time by which work must be over, and whose limit it is (for messages)."""

    at: float
    """time.monotonic() by which the work must be over."""
    what: str = "the check"
    """Whose deadline: "check PF-GPU-001's 120 s pytest-timeout", "PF-GPU-001's 120 s timeout"."""

    @classmethod
    def after(cls, seconds: float, what: str = "the check") -> Deadline:
        return cls(time.monotonic() + seconds, what)

    def left(self) -> float:
        return self.at - time.monotonic()

    def limit(self, cap_s: float, reserve_s: float = KILL_OVERHEAD_S) -> float:
        """How long a tool may run now: its own cap, or what is left once its kill is paid for
        (to 0.1 s, so that messages read `within 53.4 s`)."""
        left = math.floor((self.left() - reserve_s) * 10) / 10
        return max(0.0, min(cap_s, left))

    def note(self, limit_s: float, cap_s: float) -> str:
        """` (all that was left of PF-GPU-001's 120 s timeout)` when the deadline cut the cap."""
        return f" (all that was left of {self.what})" if limit_s < cap_s else ""


# --- the deadlines in force ---------------------------------------------------------------------

_check: Deadline | None = None
_scopes: contextvars.ContextVar[tuple[Deadline, ...]] = contextvars.ContextVar(
    "preflight_deadlines", default=())


def set_check_deadline(deadline: Deadline | None) -> None:
    """The running check's deadline (None when it ends); set by the plugin."""
    global _check
    _check = deadline


@contextlib.contextmanager
def scope(seconds: float, what: str) -> Iterator[Deadline]:
    """Within the block, every tool ends `seconds` from now at the latest (nestable)."""
    mine = Deadline(time.monotonic() + seconds, what)
    token = _scopes.set((*_scopes.get(), mine))
    try:
        yield mine
    finally:
        _scopes.reset(token)


def run_deadline_env(at: float, what: str) -> dict[str, str]:
    """The variable the runner puts in a check session's environment."""
    return {DEADLINE_VAR: f"{at:.3f} {what}"}


def _from_env(env: Mapping[str, str]) -> Deadline | None:
    """The run's deadline its parent passed down; a garbled one (its rule refuses it: a
    SettingError is a ValueError) is none: the run itself refused it at its start."""
    try:
        at, _, what = (get_str(DEADLINE_VAR, env) or "").partition(" ")
        return Deadline(float(at), what or "the run's budget")
    except ValueError:
        return None


def current() -> Deadline | None:
    """The soonest deadline in force here, or None."""
    found = [d for d in (_check, _from_env(os.environ), *_scopes.get()) if d is not None]
    return min(found, key=lambda d: d.at) if found else None


def fit(timeout_s: float, reserve_s: float) -> tuple[float, Deadline | None]:
    """(timeout to use, the deadline that shortened it or None): `timeout_s`, or less, so that
    the tool plus `reserve_s` to stop it ends by the soonest deadline. May be <= 0: no time."""
    deadline = current()
    if deadline is None:
        return timeout_s, None
    room = deadline.left() - reserve_s
    return (room, deadline) if room < timeout_s else (timeout_s, None)


class _TimerSettings(Protocol):
    """What these hooks read of pytest-timeout's `Settings` (a namedtuple of its plugin module,
    pytest_timeout.py; it calls the hook only with a timeout > 0)."""

    @property
    def timeout(self) -> float: ...


class TimeoutHooks:
    """Registered by the plugin where pytest-timeout runs (its hooks exist only then): learns each
    check's timeout when pytest-timeout arms it. Returns None, so pytest-timeout's own
    implementation (trylast, firstresult) still arms the timer."""

    @staticmethod
    def _name(item: pytest.Item) -> str:
        spec = getattr(getattr(item, "function", None), "__preflight_check__", None)
        return f"check {spec.id}" if spec is not None else f"test {item.nodeid}"

    def pytest_timeout_set_timer(self, item: pytest.Item, settings: _TimerSettings) -> None:
        seconds = float(settings.timeout)
        set_check_deadline(Deadline(time.monotonic() + seconds,
                                    f"{self._name(item)}'s {seconds:g} s pytest-timeout"))

    def pytest_timeout_cancel_timer(self, item: object) -> None:
        set_check_deadline(None)


# --- the tools that hung ------------------------------------------------------------------------

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
