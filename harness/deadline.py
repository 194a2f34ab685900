"""How long a tool may still run: its own timeout, capped by the running check's deadline and by
the run's, less the time it takes to stop a tool that overruns. So the tool's own timeout fires,
with a message naming the tool, its arguments and its last output, before pytest-timeout stops
the whole check with a bare "Timeout (>120.0s) from pytest-timeout".

Three sources, the soonest wins:
- the check's: set by the plugin when pytest-timeout arms a check's timer
  (`TimeoutHooks.pytest_timeout_set_timer`, whose `settings.timeout` is the value pytest-timeout
  itself uses: marker, ini or --timeout). Process-wide, because pytest runs one check at a time
  per process and a check may call tools from its own threads;
- the run's: the runner hands its budget's end to every check session in DEADLINE_VAR;
- a caller's own (`scope`), e.g. one step of a fallback chain: context-local.
Times are time.monotonic(): CLOCK_MONOTONIC on Linux, one clock for every process of a machine
(and of a container: same kernel), so a deadline can cross a process boundary.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEADLINE_VAR", "Deadline", "TimeoutHooks", "current", "fit", "run_deadline_env",
           "scope", "set_check_deadline"]

DEADLINE_VAR = "PREFLIGHT_DEADLINE"
"""`<monotonic seconds> <what>`: the end of the run's budget, for the check sessions."""


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float
    """time.monotonic() by which the work must be over."""
    what: str
    """Whose deadline, for messages: "check PF-GPU-001's 120 s pytest-timeout"."""

    def left(self) -> float:
        return self.at - time.monotonic()


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
    value = env.get(DEADLINE_VAR, "")
    at, _, what = value.partition(" ")
    try:
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


class TimeoutHooks:
    """Registered by the plugin where pytest-timeout runs (its hooks exist only then): learns each
    check's timeout when pytest-timeout arms it. Returns None, so pytest-timeout's own
    implementation (trylast, firstresult) still arms the timer."""

    @staticmethod
    def _name(item: Any) -> str:
        spec = getattr(getattr(item, "function", None), "__preflight_check__", None)
        return f"check {spec.id}" if spec is not None else f"test {item.nodeid}"

    def pytest_timeout_set_timer(self, item: Any, settings: Any) -> None:
        seconds = float(settings.timeout)
        set_check_deadline(Deadline(time.monotonic() + seconds,
                                    f"{self._name(item)}'s {seconds:g} s pytest-timeout"))

    def pytest_timeout_cancel_timer(self, item: Any) -> None:
        set_check_deadline(None)
