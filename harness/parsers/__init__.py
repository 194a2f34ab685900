"""Parsers: pure functions from text to typed records, and the `preflight inspect` registry.

Each parser module may define `INSPECT = {"kind": function}`; `function(stream, *, profile)`
returns a JSON-able dict with the kind's documented keys, or raises ParseError when nothing in
the input was recognised. Modules are discovered, so adding a kind touches only its module.
Every parser reads its input through harness.parsers.reader (linear time, flat memory, long
lines cut) and unwraps each line through harness.parsers.unwrap (launcher tags, timestamps,
pastes); the registry adds a `notes` key to each result: what the reader or the parser left
out (lines cut, entries past a bound), empty when the input was read whole.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["InspectFn", "ParseError", "inspect_kind", "inspect_kinds", "not_text"]

InspectFn = Callable[..., dict[str, Any]]


class ParseError(ValueError):
    """The input did not contain what the parser reads; str() says what was missing."""


def inspect_kind(kind: str) -> InspectFn | None:
    """The `preflight inspect` function of one kind, None for an unknown kind. The module named
    after the kind (`nccl-log`: nccl_log) is tried first, so that a command imports only the
    parser it runs (interpreter start-up is part of `inspect`'s time on a log); every module
    when that one does not define the kind."""
    name = kind.replace("-", "_")
    if name.isidentifier():
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        else:
            if kind in getattr(module, "INSPECT", {}):
                return _with_notes(module.INSPECT[kind])
    return inspect_kinds().get(kind)


def inspect_kinds() -> dict[str, InspectFn]:
    """Every `preflight inspect` kind, from the INSPECT tables of the parser modules."""
    import pkgutil

    kinds: dict[str, InspectFn] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        kinds.update({kind: _with_notes(fn) for kind, fn in getattr(module, "INSPECT", {}).items()})
    return kinds


#: Characters of the input's head that `not_text` judges.
TEXT_SAMPLE_CHARS = 65536
#: Characters that text does not hold: C0 controls but tab, line ends, ESC (ANSI colours) and
#: NUL (/proc/PID/environ's separator), DEL, and U+FFFD (a byte that was not UTF-8).
_NOT_TEXT = re.compile("[\x01-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ufffd]")


def not_text(head: str) -> str | None:
    """Why `head` is not text any kind reads (binary data: random bytes, a core file, a
    compressed log), else None: more than 2 and more than 1% of its characters are controls or
    invalid UTF-8. Every kind refuses such input before its parser looks for its lines."""
    bad = len(_NOT_TEXT.findall(head))
    if bad > 2 and bad * 100 > len(head):
        return (f"not text: {bad} of the first {len(head):,} characters are control characters "
                "or invalid UTF-8 (binary data, a compressed file, or not UTF-8)")
    return None


def _with_notes(fn: InspectFn) -> InspectFn:
    """`fn` reading through one Input, its result with `notes` (the reader's, then the
    parser's), and a ParseError that says what the reader cut, with secrets redacted."""
    from harness.base.redact import Redactor
    from harness.parsers.reader import as_input

    @functools.wraps(fn)
    def inspect(stream: Any, *, profile: Any) -> dict[str, Any]:
        source = as_input(stream)
        try:
            if problem := not_text(source.head(TEXT_SAMPLE_CHARS)):
                raise ParseError(problem)
            result = fn(source, profile=profile)
        except ParseError as exc:
            # It may quote the input (a CSV row, a JSON error): redacted like the results are.
            text = Redactor().text(str(exc))
            raise ParseError(f"{text} ({'; '.join(source.notes())})" if source.notes()
                             else text) from None
        finally:
            source.close()
        result["notes"] = [*source.notes(), *result.pop("notes", [])]
        return result

    return inspect




def read_text(stream: TextIO) -> str:
    """Whole input as text, CRLF normalised. Kept for callers outside the parsers: a parser
    reads through harness.parsers.reader.Input instead (linear, flat memory)."""
    return stream.read().replace("\r\n", "\n").replace("\r", "\n")
