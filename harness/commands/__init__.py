"""One module per `preflight` command (harness.cli parses and dispatches); what they share:
the exit codes automation keys on, and the usage error every command may raise."""

from __future__ import annotations

__all__ = ["EXIT_FAILED", "EXIT_HARNESS", "EXIT_OK", "EXIT_USAGE", "UsageError"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_HARNESS = 3


class UsageError(Exception):
    """Bad input from the user; str() is the message (exit 2)."""
