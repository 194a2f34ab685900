"""The harness's own error types that cross rooms: a probe that could not read a fact raises
`ProbeError` (probes/, fixtures/, detect/), and the check model (harness.checking) turns it into
the check's `error` outcome. Here, in base/, so that a probe need not import the check model."""

from __future__ import annotations

__all__ = ["ProbeError"]


class ProbeError(RuntimeError):
    """A probe could not produce the fact a check needs (tool missing, hung, garbage output).
    The check's outcome is `error`, which counts as a failure."""
