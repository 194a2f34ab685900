"""The one input reader every parser reads through: linear time, flat memory, never a traceback.

An `Input` wraps what a parser was given (a text stream, a binary stream, or a str) and hands
out its lines, pass after pass if the parser needs more than one (format detection, then the
parse):

- bytes are decoded as UTF-8 with invalid sequences replaced (a byte-order mark picks UTF-8 or
  UTF-16: PowerShell's `>` writes UTF-16); `\\n`, `\\r\\n` and a lone `\\r` all end a line;
- the input is read CHUNK_CHARS at a time: nothing but one chunk and one line is held;
- a line longer than MAX_LINE_CHARS keeps its first MAX_LINE_CHARS characters; the rest, up to
  the next line end, is read and dropped (`stats.cut_lines` counts such lines, `notes()` says it);
- a stream that cannot seek (a pipe, stdin) is copied to a temporary file while the first pass
  reads it, so a second pass costs disk, not memory;
- `document()` reads a whole JSON/XML document, up to MAX_DOCUMENT_CHARS.

What launchers, log shippers and pastes put around each line (`[1,0]<stdout>:`, `0: `,
timestamps, fences, prompts...) is removed by harness.parsers.unwrap.Unwrapper, which the
line parsers run over these lines; the NCCL log's byte scanner anchors on `NCCL INFO`/`WARN`
inside each line instead (any wrapper before it is skipped at C speed).
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

__all__ = ["CHUNK_CHARS", "MAX_DOCUMENT_CHARS", "MAX_LINE_CHARS", "Input", "ReadStats", "as_input"]

#: Longest line kept whole (1 MiB). Tool output lines are short (nvidia-smi's longest values are
#: ~100 characters; an `env` line is at most MAX_ARG_STRLEN = 32 pages = 128 KiB, the kernel's
#: limit on one execve string, linux include/uapi/linux/binfmts.h); a longer line is a flood or
#: binary data, judged by its first 1 MiB.
MAX_LINE_CHARS = 1 << 20
#: How much is read at a time: `batches()` hands out the lines of about this many characters.
CHUNK_CHARS = 1 << 20
#: ... decoded and split DECODE_CHARS at a time: a 1 MiB piece decodes to a 2 MiB string where
#: one character is past Latin-1 (a `—` in a comment), which the decode writes and the split
#: reads again out of the CPU's cache: 20 MB of env scripts decode and split in 60 ms in 1 MiB
#: pieces, in 30 ms in 64 KiB ones (bench/README.md, "The input reader").
DECODE_CHARS = 1 << 16
#: Largest JSON/XML document read whole (16 MiB): `dcgmi diag -j` of 8 GPUs at level 4, a
#: `nvidia-smi -q -x` of 8 GPUs and an nccl-tests `-J` file are each well under 1 MiB.
MAX_DOCUMENT_CHARS = 16 << 20

_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
         (codecs.BOM_UTF16_BE, "utf-16-be"))


@dataclass(slots=True)
class ReadStats:
    """What the last complete pass saw."""

    lines: int = 0
    chars: int = 0
    cut_lines: int = 0
    """Lines longer than MAX_LINE_CHARS, cut to their first MAX_LINE_CHARS characters."""
    longest: int = 0
    """Length of the longest line, before any cut."""
    open_end: str | None = None
    """A last line that had no line end (as kept: at most the reader's max_line characters):
    the writer, or whatever copied it, stopped mid-line; None when the input ended as complete
    lines do."""


class Input:
    """A parser's input, read in chunks: `lines()` / `batches()` for line-by-line parsers,
    `head()` to sniff the format, `document()` for JSON and XML."""

    def __init__(self, source: str | IO[str] | IO[bytes], *, max_line: int | None = None,
                 chunk: int | None = None) -> None:
        self.max_line = MAX_LINE_CHARS if max_line is None else max_line
        self.chunk = CHUNK_CHARS if chunk is None else chunk
        self._step = min(self.chunk, DECODE_CHARS)  # what chunks() decodes at a time
        self.stats = ReadStats()
        self._text: str | None = source if isinstance(source, str) else None
        self._raw: Any = None
        self._binary = False
        self._start = 0
        self._spool: IO[str] | None = None
        self._source: Iterator[str] = iter(())
        self._started = False
        if self._text is None:
            raw = getattr(source, "buffer", None)  # read a text stream's bytes: our own decoding
            if raw is not None and _at_start(source):
                self._raw, self._binary = raw, True
            else:
                self._raw = source
                self._binary = isinstance(source, io.RawIOBase | io.BufferedIOBase)
            self._start = _tell(self._raw)

    def close(self) -> None:
        """Drop the spool of a pipe (the stream itself belongs to the caller)."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None
            self._source = iter(())

    def __del__(self) -> None:
        self.close()

    # ---- raw chunks ----

    def chunks(self) -> Iterator[str]:
        """One pass: the decoded text in pieces of about min(`chunk`, DECODE_CHARS) characters
        (line ends not normalised). A pass may stop early; the next one starts again from the
        beginning."""
        step = self._step
        if self._text is not None:
            for i in range(0, len(self._text), step):
                yield self._text[i:i + step]
            return
        if self._start is not None:  # a seekable stream: every pass reads it again
            if self._started:
                self._raw.seek(self._start)
            self._started = True
            yield from self._decoded()
            return
        # A pipe: what was read is spooled to a temporary file; later passes replay it first.
        if self._spool is None:
            import tempfile  # here: ~10 ms of CPU that `inspect FILE` need not pay

            self._spool = tempfile.TemporaryFile(  # noqa: SIM115 (lives as long as the Input)
                "w+", encoding="utf-8", errors="surrogatepass", newline="")
            self._source = self._decoded()
        spool = self._spool
        spool.seek(0)
        yield from iter(lambda: spool.read(step), "")
        for text in self._source:
            spool.seek(0, io.SEEK_END)
            spool.write(text)
            yield text

    def _decoded(self) -> Iterator[str]:
        step = self._step
        if not self._binary:
            yield from iter(lambda: self._raw.read(step), "")
            return
        first = self._raw.read(step)
        encoding, skip = "utf-8", 0
        for bom, name in _BOMS:
            if first.startswith(bom):
                encoding, skip = name, len(bom)
                break
        decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        data = first[skip:]
        while data:
            text = decoder.decode(data)
            if text:
                yield text
            data = self._raw.read(step)
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    # ---- lines ----

    def batches(self, sep: str | None = None) -> Iterator[list[str]]:
        """Lists of complete lines (without their line ends), one list per `chunk` characters
        read (about: the lines completed in them). With `sep` (`"\\0"` for /proc/PID/environ),
        records end at `sep` instead, CRs kept."""
        stats = self.stats = ReadStats()
        limit = self.max_line
        batch: list[str] = []  # the lines of the pieces read since the last batch
        held = 0  # ... and the characters of those pieces
        parts: list[str] = []  # pieces of a line that runs over chunk boundaries
        kept = 0  # characters in parts (at most limit)
        length = 0  # the line's whole length so far
        carry_cr = False
        for text in self.chunks():
            if sep is None:
                if carry_cr:
                    text = "\r" + text
                carry_cr = text.endswith("\r")
                if carry_cr:
                    text = text[:-1]  # a CRLF may be split between chunks: decide with the next
                if "\r" in text:
                    text = text.replace("\r\n", "\n").replace("\r", "\n")
            stats.chars += len(text)
            pieces = text.split(sep or "\n")
            tail = pieces.pop()
            if pieces:
                if parts:
                    parts, kept, length = _add(parts, kept, length, pieces[0], limit)
                    pieces[0] = "".join(parts)
                    stats.cut_lines += length > limit
                    stats.longest = max(stats.longest, length)
                    parts, kept, length = [], 0, 0
                longest = max(map(len, pieces))
                if longest > limit:
                    stats.cut_lines += sum(len(p) > limit for p in pieces)
                    pieces = [p[:limit] for p in pieces]
                stats.longest = max(stats.longest, longest)
                stats.lines += len(pieces)
                if batch:
                    batch += pieces
                else:
                    batch = pieces
            held += len(text)
            if held >= self.chunk and batch:
                yield batch
                batch, held = [], 0
            if tail:
                parts, kept, length = _add(parts, kept, length, tail, limit)
        if batch:
            yield batch
        if carry_cr:  # the input ended in a lone CR: that ends the last line
            parts = parts or [""]
        if parts:
            stats.lines += 1
            stats.cut_lines += length > limit
            stats.longest = max(stats.longest, length)
            last = "".join(parts)
            if not carry_cr:
                stats.open_end = last
            yield [last]

    def lines(self, sep: str | None = None) -> Iterator[str]:
        """Every line (or `sep`-ended record), without its line end."""
        for batch in self.batches(sep):
            yield from batch

    def binary(self) -> IO[bytes] | None:
        """The binary stream under this Input, positioned at its start, for a parser with its own
        byte-level reader (the NCCL log's); None for a str, a text-only stream or a pipe that
        was already read. (A pipe handed out this way cannot be read again.)"""
        if not self._binary or self._spool is not None:
            return None
        if self._started and self._start is not None:
            self._raw.seek(self._start)
        self._started = True
        return self._raw  # type: ignore[no-any-return]

    # ---- whole documents ----

    def head(self, chars: int = 4096) -> str:
        """The first `chars` characters (line ends not normalised); costs one short pass."""
        out: list[str] = []
        have = 0
        for text in self.chunks():
            out.append(text)
            have += len(text)
            if have >= chars:
                break
        return "".join(out)[:chars]

    def document(self, limit: int | None = None) -> str | None:
        """The whole input with line ends normalised, or None when it is longer than `limit`
        characters (default MAX_DOCUMENT_CHARS; only `limit` characters are ever held)."""
        limit = MAX_DOCUMENT_CHARS if limit is None else limit
        out: list[str] = []
        have = 0
        for text in self.chunks():
            have += len(text)
            if have > limit:
                return None
            out.append(text)
        return "".join(out).replace("\r\n", "\n").replace("\r", "\n")

    def notes(self) -> list[str]:
        """What the reader changed in the input, for the parser's report."""
        if not self.stats.cut_lines:
            return []
        return [f"{self.stats.cut_lines} line(s) longer than {self.max_line:,} characters (the "
                f"longest {self.stats.longest:,}) were cut to their first {self.max_line:,}"]


def _add(parts: list[str], kept: int, length: int, piece: str, limit: int
         ) -> tuple[list[str], int, int]:
    """Append `piece` to a pending line, keeping at most `limit` characters of it."""
    length += len(piece)
    if kept < limit:
        piece = piece[:limit - kept]
        parts.append(piece)
        kept += len(piece)
    return parts, kept, length


def _at_start(stream: Any) -> bool:
    """Nothing was read from the text stream yet (its buffer can be read directly)."""
    try:
        return not stream.seekable() or stream.tell() == stream.buffer.tell() == 0
    except (OSError, ValueError, AttributeError):
        return False


def _tell(stream: Any) -> int | None:
    """Where a seekable stream is now (a second pass seeks back to it); None for a pipe."""
    try:
        return stream.tell() if stream.seekable() else None
    except (OSError, ValueError, AttributeError):
        return None


def as_input(source: str | IO[str] | IO[bytes] | Input) -> Input:
    """`source` as an Input (an Input is returned as it is)."""
    return source if isinstance(source, Input) else Input(source)
