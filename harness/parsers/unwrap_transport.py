"""A source read inside the wrappers a launcher or log shipper puts around every line, for the
parsers that read a tool's lines as it printed them (DCGM's JSON and tables, the training step's
output) rather than line by line through the whole Unwrapper.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from harness.parsers.reader import Input
from harness.parsers.unwrap import Unwrapper

__all__ = ["inside_transport"]


class _LineStream(io.TextIOBase):
    """A text stream over an iterator of lines (each without its line end)."""

    def __init__(self, lines: Iterator[str]) -> None:
        super().__init__()
        self._lines = lines
        self._buffer = ""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        want = -1 if size is None else size
        parts = [self._buffer]
        have = len(self._buffer)
        while want < 0 or have < want:
            line = next(self._lines, None)
            if line is None:
                break
            parts.append(line + "\n")
            have += len(line) + 1
        text = "".join(parts)
        cut = len(text) if want < 0 else want
        self._buffer = text[cut:]
        return text[:cut]


def inside_transport(source: Input) -> Input:
    """`source` read inside the wrappers a launcher or log shipper puts around every line (srun
    `--label`, Open MPI `--tag-output`, `kubectl logs --prefix` / `--timestamps`, docker
    json-file records, CloudWatch copies, a markdown `> ` quote, colours;
    Unwrapper.transported), for the parsers that read a tool's lines as it printed them (DCGM's
    JSON and tables, the training step's output); `source` itself when the first lines carry
    none of them."""
    unwrapper = Unwrapper()
    head = source.head(8192).splitlines()[:64]
    if all(unwrapper.transported(line) == line for line in head):
        return source
    lines = (unwrapper.transported(line) for line in source.lines())
    return Input(_LineStream(line for line in lines if line is not None), max_line=source.max_line)
