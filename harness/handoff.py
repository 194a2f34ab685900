"""Hand-off: replace this process with the training command (same PID, same environment, so
signals from the scheduler reach the trainer directly)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["EXIT_EXEC_FAILED", "exec_command"]

#: The shell's convention for "command not found / not executable".
EXIT_EXEC_FAILED = 127

# Indirection so the tests can record the hand-off instead of performing it.
_execvp = os.execvp


def exec_command(argv: Sequence[str]) -> int:
    """Exec `argv`; returns only if exec failed (with EXIT_EXEC_FAILED, after saying why)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        _execvp(argv[0], list(argv))
    except OSError as exc:
        print(f"preflight: cannot run {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_EXEC_FAILED
    return 0  # only reached when _execvp is replaced (tests)
