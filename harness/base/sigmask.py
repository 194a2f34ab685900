"""The signals `preflight run` answers with an interrupted report, held from the first
instruction of the console script (and `python -m harness`) until the run's RunGuard
(harness.run.interrupt) has its handlers in place: one that arrives while the modules load (~0.2 s,
over 1 s on a loaded machine) stays pending in the kernel and is taken then, instead of killing
the process with no report (SIGTERM's default action) or raising KeyboardInterrupt in an import.

Standard library only, and imported before anything else: this module must cost nothing."""

from __future__ import annotations

import signal

__all__ = ["SIGNALS", "hold", "pending", "release"]

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def hold() -> None:
    """Block SIGNALS in the calling thread (the main one, at start-up): from now on one that
    arrives waits, pending, for `release`. Threads started from now on inherit the mask."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def pending() -> bool:
    """One of SIGNALS arrived while they were held and waits."""
    return bool(signal.sigpending() & set(SIGNALS))


def release() -> None:
    """Unblock SIGNALS: a pending one is delivered at once, to the handlers then in place."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
