"""Hand-off: replace this process with the training command (same PID, same environment, so
signals from the scheduler reach the trainer directly)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = ["EXIT_EXEC_FAILED", "cannot_exec", "exec_command"]

#: The shell's convention for "command not found / not executable".
EXIT_EXEC_FAILED = 127

# Indirection so the tests can record the hand-off instead of performing it.
_execvp = os.execvp


def exec_command(argv: Sequence[str]) -> None:
    """Exec `argv`; raises OSError when it cannot be exec'd (`cannot_exec` says why). Returns
    only when `_execvp` is replaced (tests)."""
    sys.stdout.flush()
    sys.stderr.flush()
    _execvp(argv[0], list(argv))


def cannot_exec(argv: Sequence[str], exc: OSError) -> str:
    """Why `argv` could not be exec'd: `cannot run 'trian.py': No such file or directory`."""
    return f"cannot run {argv[0]!r}: {exc.strerror or exc}"
