"""One module per `preflight` command (harness.cli parses and dispatches); what they share:
the exit codes automation keys on, and the usage error every command may raise."""

from __future__ import annotations

import contextlib
import os
import sys

__all__ = ["EXIT_FAILED", "EXIT_HARNESS", "EXIT_OK", "EXIT_USAGE", "UsageError", "say_crash"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HARNESS = 3


class UsageError(Exception):
    """Bad input from the user; str() is the message (exit 2)."""


def say_crash(exc: BaseException) -> None:
    """An uncaught exception on stderr: one line naming it (an unusable report folder: that
    alone), then, for a bug, its traceback; redacted."""
    import traceback

    from harness.base.redact import Redactor
    from harness.report.model import ReportDirError, describe_crash

    redactor = Redactor(os.environ)
    with contextlib.suppress(OSError, ValueError):  # stderr on a full disk: the code says it
        print(f"preflight: harness error: {redactor.text(describe_crash(exc))}", file=sys.stderr)
        if not isinstance(exc, ReportDirError):
            print(redactor.text("".join(traceback.format_exception(exc))).rstrip(),
                  file=sys.stderr)
        sys.stderr.flush()
