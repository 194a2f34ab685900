"""Parsers: pure functions from text to typed records, and the `preflight inspect` registry.

Each parser module may define `INSPECT = {"kind": function}`; `function(stream, *, profile)`
returns a JSON-able dict with the kind's documented keys, or raises ParseError when nothing in
the input was recognised. Modules are discovered, so adding a kind touches only its module.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["LAUNCHER_PREFIXES", "InspectFn", "ParseError", "inspect_kinds"]

#: What launchers and log shippers put before every line of a tool's output (regex sources, to
#: be anchored by the caller): Open MPI `--tag-output` (`[1,0]<stdout>:`), srun `--label`
#: (`0: `), an ISO timestamp (`kubectl logs --timestamps`, CloudWatch / Azure log copies).
LAUNCHER_PREFIXES = (
    r"\s*\[\d+,\d+\]<std(?:out|err)>:\s?",
    r"\s*\d+:\s",
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s",
)

InspectFn = Callable[..., dict[str, Any]]


class ParseError(ValueError):
    """The input did not contain what the parser reads; str() says what was missing."""


def inspect_kinds() -> dict[str, InspectFn]:
    """Every `preflight inspect` kind, from the INSPECT tables of the parser modules."""
    kinds: dict[str, InspectFn] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kinds.update(getattr(module, "INSPECT", {}))
    return kinds


def read_text(stream: TextIO) -> str:
    """Whole input as text, CRLF normalised (for parsers that need all of it at once)."""
    return stream.read().replace("\r\n", "\n").replace("\r", "\n")
