"""One chunk of an NCCL debug log scanned at C speed (harness.parsers.nccl_log interprets what
is found): docker json-file records decoded, colours dropped, the candidate payloads found and
de-duplicated, libfabric's own warnings, aws-ofi-nccl's old logger. A chunk's scan depends on
the chunk alone.

The candidate payloads and libfabric's warnings are found by harness/parsers/_nccl_scan.c
where the wheel was built with it (a C compiler at install time; the build is optional), and by
the `MAIN` / `LIBFABRIC_WARN` regexes otherwise: the same lists either way
(tests/test_nccl_scan.py), 3-5x faster in C (bench/README.md).
"""

from __future__ import annotations

import dataclasses
import re

from harness.parsers.nccl_log_lines import (
    ANSI_BYTES,
    LIBFABRIC_WARN,
    MAIN,
    OLD_PLUGIN_LITERAL,
    first_line,
    line_after,
    line_of,
    segments_with,
)
from harness.parsers.unwrap import Unwrapper, docker_line

try:
    from harness.parsers import _nccl_scan
except ImportError:  # built without a C compiler: the regexes give the same lists
    _nccl_scan = None

__all__ = ["HEAD_BYTES", "ChunkScan", "scan_chunk"]

#: Where command lines pasted above a log are looked for (the log's own lines follow them).
HEAD_BYTES = 64 << 10


def _docker_lines(chunk: bytes, end: int) -> bytes:
    """chunk[:end] with each docker json-file record replaced by the line it holds (the NCCL
    payload is JSON-escaped in it, and the record's tail would end the payload)."""
    lines = bytes(chunk[:end]).split(b"\n")
    for i, line in enumerate(lines):
        if line.lstrip()[:7] == b'{"log":':
            text = line.decode("utf-8", "replace")
            lines[i] = docker_line(text).encode("utf-8", "replace")
    return b"\n".join(lines)


@dataclasses.dataclass(slots=True)
class ChunkScan:
    """What one chunk holds, found from the chunk alone; _Scanner.apply interprets it, chunks in
    input order (and asks the chunk for the whole line of a few rare payloads)."""

    found: list[bytes]
    """The distinct `MAIN` payloads not seen in earlier chunks, first seen first."""
    warns: list[bytes]
    """The distinct libfabric `<warn>` payloads."""
    old_plugin: list[bytes]
    """aws-ofi-nccl's own logger's segments, in a chunk without `MAIN` payloads."""
    nccl_info: bool
    """`NCCL INFO` is in the chunk (looked for only where asked, or where nothing was found)."""
    chunk: bytes
    end: int
    bare: list[bytes] = dataclasses.field(default_factory=list)
    """Lines without NCCL's prefix that still say what failed (`_bare_lines`), distinct."""

    def line_of(self, raw: bytes, anchor: bytes) -> str:
        """harness.parsers.nccl_log_lines.line_of in this chunk."""
        return line_of(self.chunk, raw, self.end, anchor)

    def line_after(self, raw: bytes) -> str | None:
        """The line after the one that ends in `raw` (None: it starts the next chunk)."""
        return line_after(self.chunk, raw, self.end)

    def first_line(self) -> str:
        return first_line(self.chunk, self.end)

    def last_errors(self) -> tuple[list[bytes], bytes | None]:
        """What torch's `Last error:` lines introduce (`_last_errors`), distinct, and the
        prefix of one that ends the chunk: asked for only once torch's `NCCL error` was seen
        (a pass over the chunk, ~0.3 ms a MB)."""
        return _last_errors(self.chunk, self.end)

    def detail_after(self, prefix: bytes) -> list[bytes]:
        """The chunk's first line, read as the detail of a `Last error:` line with `prefix`
        that ended the previous chunk."""
        stop = self.chunk.find(b"\n", 0, self.end)
        line = bytes(self.chunk[:self.end if stop < 0 else stop])
        return _detail_lines({_without(line, prefix): None})


def _libfabric_warnings(chunk: bytes, end: int) -> list[bytes]:
    """LIBFABRIC_WARN.findall(chunk, 0, end). Where `<` is rare (no Open MPI `<stdout>` tags)
    each is looked at in turn, found by memchr (bytes.find of one byte: ~20x faster than the
    regex's scan for `<warn> `); where they come closer than _MEMCHR_SPAN bytes apart, over
    _MEMCHR_TRIES of them, the regex takes the rest of the chunk."""
    found: list[bytes] = []
    pos = chunk.find(b"<", 0, end)
    base, tries = pos, 0
    while pos >= 0:
        if chunk.startswith(b"<warn> ", pos, end):
            stop = chunk.find(b"\n", pos, end)
            stop = end if stop < 0 else stop
            found.append(bytes(chunk[pos + 7:stop]))
            pos = stop
        pos = chunk.find(b"<", pos + 1, end)
        tries += 1
        if tries == _MEMCHR_TRIES and pos >= 0:
            if pos - base < _MEMCHR_TRIES * _MEMCHR_SPAN:
                return found + LIBFABRIC_WARN.findall(chunk, pos, end)
            base, tries = pos, 0
    return found


#: A `<` looked at costs about what the regex's scan of _MEMCHR_SPAN bytes costs (3.11, a
#: loaded 2-core VM: ~0.3 us and ~0.5 ns a byte); the choice is made every _MEMCHR_TRIES.
_MEMCHR_SPAN = 600
_MEMCHR_TRIES = 64


def scan_chunk(chunk: bytes, end: int, docker: bool, nccl_info: bool | None,
               seen: dict[bytes, None]) -> ChunkScan:
    """Scan `chunk[:end]` (ending at a line boundary): docker records decoded, colours dropped,
    the candidate payloads found and de-duplicated at C speed, less those in `seen` (the
    payloads of earlier chunks). `nccl_info` None: look for `NCCL INFO` where nothing else was
    found (all that the parse's verdict needs)."""
    if docker:
        chunk = _docker_lines(chunk, end)
        end = len(chunk)
    if chunk.find(b"\x1b", 0, end) >= 0:  # colours: a reset code would end the payload
        chunk = ANSI_BYTES.sub(b"", chunk[:end])
        end = len(chunk)
    if _nccl_scan is not None:
        found, in_chunk = _nccl_scan.candidates(chunk, end, seen)
        warns = _nccl_scan.tails(chunk, end, b"<warn> ")
    else:
        every = dict.fromkeys(MAIN.findall(chunk, 0, end))
        found, in_chunk = [p for p in every if p not in seen], len(every)
        warns = list(dict.fromkeys(_libfabric_warnings(chunk, end)))
    old: list[bytes] = []
    if not in_chunk and chunk.find(OLD_PLUGIN_LITERAL, 0, end) >= 0:
        old = list(dict.fromkeys(segments_with(chunk, OLD_PLUGIN_LITERAL, end)))
    if nccl_info is None:
        nccl_info = not in_chunk and not warns
    return ChunkScan(found, warns, old, nccl_info and chunk.find(b"NCCL INFO", 0, end) >= 0,
                     chunk, end, list(dict.fromkeys(_bare_lines(chunk, end))))


#: What a line without NCCL's `host:pid:tid [dev] NCCL INFO` prefix still says: nccl-tests'
#: `Test NCCL failure <file>:<line> '<error>'` (and `Test CUDA failure`), and aws-ofi-nccl's
#: `NET/OFI ...` as a line of its own (a paste or an NCCL_DEBUG_FILE copy that lost the
#: prefix). Found by bytes.find and one regex (a literal scan in C whose lookbehinds drop the
#: common `NCCL INFO NET/OFI`), outside the `MAIN` scan and its C twin. Each line found is read
#: inside its launcher's wrappers by the shared unwrapper (harness.parsers.unwrap), as every
#: other kind reads its lines.
_TEST_FAILURES = (b"Test NCCL", b"Test CUDA")  # before ` failure `
#: Open MPI's crash banner, `[host:pid] *** Process received signal ***` (a rank killed by a
#: signal, NCCL's own threads included: NVIDIA/nccl issue #1669), judged like `Test NCCL
#: failure`: where nothing else says why.
_SIGNAL = b"*** Process received signal ***"
_BARE_PLUGIN = re.compile(rb"NET/OFI (?<!NCCL INFO NET/OFI )(?<!NCCL WARN NET/OFI )")


def _bare_lines(chunk: bytes, end: int) -> list[bytes]:
    found: list[bytes] = []
    starts = [m.start() for m in _BARE_PLUGIN.finditer(chunk, 0, end)]  # (sre's literal scan)
    pos = chunk.find(b" failure ", 0, end)  # one memmem for both of _TEST_FAILURES
    while pos >= 0:
        if chunk[max(pos - 9, 0):pos] in _TEST_FAILURES:
            starts.append(pos)
        pos = chunk.find(b" failure ", pos + 9, end)
    pos = chunk.find(_SIGNAL, 0, end) if _holds(chunk, end, _SIGNAL) else -1
    while pos >= 0 and len(starts) < _MAX_BARE:
        starts.append(pos)
        pos = chunk.find(_SIGNAL, pos + len(_SIGNAL), end)
    lines: dict[bytes, None] = {}  # distinct lines (every rank prints the same ones)
    for pos in sorted(starts):
        stop = chunk.find(b"\n", pos, end)
        lines[bytes(chunk[chunk.rfind(b"\n", 0, pos) + 1:end if stop < 0 else stop])] = None
        if len(lines) >= _MAX_BARE:
            break
    unwrapper = Unwrapper()
    for line in lines:
        text = _inner(unwrapper, line)
        if text is not None and (text.startswith("NET/OFI ") or "Test " in text
                                 or "received signal" in text):
            found.append(text.encode("utf-8"))
    return found


#: torch's rank tag before each line of an exception it prints (`[rank3]: NET/OFI Request ...
#: completed with error`, tests/data/nccl_log/real_nccl_2.28.8_rank_prefix_last_error_net_ofi
#: _undeliverable.log). Removed here, not by the shared unwrapper: the train-step parser reads
#: each line's rank from it.
_TORCH_RANK = re.compile(r"\[rank[0-9]+\]: ?")


def _inner(unwrapper: Unwrapper, line: bytes) -> str | None:
    """`line` inside its launcher's wrappers and torch's rank tag, stripped (None: only
    wrapping)."""
    text = unwrapper.transported(line.decode("utf-8", "replace"))
    if text is None:
        return None
    text = text.strip()
    if text[:5] == "[rank" and (m := _TORCH_RANK.match(text)) is not None:
        text = text[m.end():]
    return text


#: torch's NCCL exception gives NCCL's own last error on the line after `Last error:`
#: (`ncclInternalError: Internal check failed.` / `Last error:` / `Attribute busid of node nic
#: not found`; tests/data/nccl_log/SOURCES.md names the logs). That line says why the call
#: failed; the `NCCL error in:` line above it only that it did.
_LAST_ERROR = b"Last error:"


def _last_errors(chunk: bytes, end: int) -> tuple[list[bytes], bytes | None]:
    """The lines that follow a `Last error:` ending its line, distinct: each without the text
    its `Last error:` line has before the words (the same launcher, Ray or torch prefix on
    both lines), then read inside the transport wrappers; and where a `Last error:` line ends
    the chunk, that text (its detail is the next chunk's first line: `_detail_lines`)."""
    lines: dict[bytes, None] = {}
    pending = None
    pos = chunk.find(_LAST_ERROR, 0, end) if _holds(chunk, end, _LAST_ERROR) else -1
    while pos >= 0 and len(lines) < _MAX_BARE:
        start = chunk.rfind(b"\n", 0, pos) + 1
        stop = chunk.find(b"\n", pos, end)
        if stop < 0:  # the input's last line: nothing follows
            break
        after = stop
        if not chunk[pos + len(_LAST_ERROR):stop].strip():  # (else MAIN's payload holds it)
            if stop + 1 >= end:
                pending = bytes(chunk[start:pos])
                break
            after = chunk.find(b"\n", stop + 1, end)
            after = end if after < 0 else after
            lines[_without(bytes(chunk[stop + 1:after]), bytes(chunk[start:pos]))] = None
        pos = chunk.find(_LAST_ERROR, after, end)
    return _detail_lines(lines), pending


def _without(line: bytes, prefix: bytes) -> bytes:
    """`line` without the prefix its `Last error:` line had, where it has the same one."""
    return line[len(prefix):] if prefix.strip() and line.startswith(prefix) else line


def _detail_lines(lines: dict[bytes, None]) -> list[bytes]:
    unwrapper = Unwrapper()
    texts = (_inner(unwrapper, line) for line in lines)
    return list(dict.fromkeys(text.encode("utf-8") for text in texts if text))


def _holds(chunk: bytes, end: int, literal: bytes) -> bool:
    """Whether chunk[:end] holds `literal`: glibc's memmem through the C scanner where it is
    built (bytes.find's search for a literal that is not there costs 0.3-0.9 ms a MB, memmem
    0.02-0.16: a pass most chunks of most logs make in vain), bytes.find otherwise."""
    if _nccl_scan is not None:
        return bool(_nccl_scan.tails(chunk, end, literal))
    return chunk.find(literal, 0, end) >= 0


#: Bare lines kept a chunk (a flood of them is judged by its first ones).
_MAX_BARE = 1000
