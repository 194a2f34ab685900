"""NCCL debug logs (`NCCL_DEBUG=INFO`): the network NCCL really used, aws-ofi-nccl's provider and
NICs, GPUDirect RDMA on the NET channels, warnings, known failures and PyTorch watchdog timeouts.

Reads lines like `ip-10-0-0-1:79:2500 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is
efa-direct (found 32 nics)` under any wrapper (Open MPI `[1,0]<stdout>:`, srun `0: `, timestamps,
CloudWatch `| ts | line` copies), streaming: memory stays flat in the size of the log.

The pieces: harness.parsers.nccl_log_lines (the line grammar), harness.parsers.nccl_log_chunk
(one chunk's scan, at C speed), harness.parsers.nccl_log_payloads (what each distinct payload
says), harness.parsers.nccl_log_summary (what they add up to), harness.parsers.nccl_log_facts
(the summary and its three-valued facts); this module reads the bytes, interprets the scans in
order and is what callers import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.commands import command_nranks
from harness.parsers.nccl_log_chunk import HEAD_BYTES, ChunkScan, scan_chunk
from harness.parsers.nccl_log_facts import NcclLogSummary
from harness.parsers.nccl_log_lines import DOCKER_LINE, OLD_PLUGIN, RANK_LINE, VERSION, payload_text
from harness.parsers.nccl_log_payloads import MAX_KEPT, PayloadFacts
from harness.parsers.nccl_log_summary import summarize
from harness.parsers.reader import MAX_LINE_CHARS, Input, as_input
from harness.parsers.unwrap import Unwrapper

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = [
    "INSPECT",
    "inspect_nccl_log",
    "parse_nccl_log",
    "parse_nccl_log_stream",
]

_CHUNK_BYTES = 1 << 20
"""Chunk size: small enough that the several passes over a chunk hit the CPU cache."""


#: Distinct payloads remembered (so each is interpreted once) before the memory is reset, and
#: the bytes they may hold: a log's repeated payloads are a few thousand (2,056 in
#: bench_nccl_log's 256-rank job); a log whose WARN lines each name their own address fills it
#: and starts again, holding ~5 MB at most (it held up to 100,000 payloads, ~28 MB).
SEEN_CAP = 16_384
SEEN_BYTES = 4 << 20
#: nccl-tests `Test NCCL failure` lines kept (one a rank at most matters).
MAX_TEST_FAILURES = 64
#: A line longer than this is judged by its first MAX_LINE_BYTES (the rest is read and dropped).
MAX_LINE_BYTES = MAX_LINE_CHARS


class _Scanner:
    """Interprets each chunk as it comes: only payloads not seen before reach Python code."""

    def __init__(self) -> None:
        self.facts = PayloadFacts(MAX_KEPT)  # read now: a test lowers it
        self.seen: dict[bytes, None] = {}
        self.seen_bytes = 0
        self.saw_nccl = False
        self.cut_lines = 0
        self.commands: list[str] | None = None  # read from the input's head, once
        self.docker = False  # docker json-file records: decoded line by line (the slow path)
        self.test_failures: list[str] = []  # nccl-tests' `Test NCCL failure` lines
        self.torch_errors = False  # torch's `NCCL error` seen: its `Last error:` lines are read
        self.last_error: bytes | None = None  # the prefix of a `Last error:` ending a chunk

    def feed(self, chunk: bytes, end: int | None = None) -> None:
        """Scan `chunk[:end]`, which must end at a line boundary (or the end of input)."""
        end = len(chunk) if end is None else end
        if self.commands is None:
            self.head(chunk, end)
        self.apply(scan_chunk(chunk, end, self.docker,
                              not self.saw_nccl and not self.facts.recognised, self.seen))

    def head(self, chunk: bytes, end: int) -> None:
        """Read what the input's first chunk says about all of it (commands, docker records)."""
        self.commands = _head_commands(chunk, end)
        self.docker = DOCKER_LINE.search(chunk, 0, min(end, HEAD_BYTES)) is not None

    def apply(self, scan: ChunkScan) -> None:
        """Interpret one chunk's scan (chunks in input order): payloads not seen before."""
        facts, seen = self.facts, self.seen
        if facts.wrapped is not None:  # a watchdog record wrapped across the chunk boundary
            facts.wrapped_tail(scan.first_line())
        fresh, ranks = [], []  # (scan.found: not in seen)
        rank_line = RANK_LINE.match
        for raw in scan.found:  # rank-count lines: distinct on every rank, so never remembered
            if (m := rank_line(raw)) is None:
                fresh.append(raw)
            else:
                ranks.append(m[1])
        if ranks:
            facts.rank_counts(ranks)
        size = sum(map(len, fresh))
        if len(seen) + len(fresh) > SEEN_CAP or self.seen_bytes + size > SEEN_BYTES:
            seen.clear()  # pathological logs (addresses in every WARN)
            self.seen_bytes = 0
        seen.update(dict.fromkeys(fresh))
        self.seen_bytes += size
        warns: list[str] = []  # a run of plain WARN payloads, read in one call (facts.warns)
        for raw in fresh:
            # payload_text(raw), inlined: this loop runs once per distinct payload (a WARN storm
            # whose every line names its own address: every line)
            text = raw.partition(b"|")[0].decode("utf-8", "replace").strip()
            if text.startswith("NCCL WARN ") and not text.startswith("Cuda failure", 10):
                warns.append(text)
                continue
            if warns:  # read before this payload, in the input's order
                facts.warns(warns)
                warns = []
            if text.startswith("NCCL WARN "):  # `transport/nvls.cc:158 NCCL WARN Cuda failure`
                facts.warn(text[10:], context=scan.line_of(raw, b"NCCL WARN"))
            elif text.startswith("NCCL INFO "):
                if "via NET/" in text:
                    facts.channel(text.partition("via NET/")[2])
                else:
                    facts.info(text[10:])
            elif text.startswith("NCCL version "):
                facts.version(text[13:].split()[0])
            elif text.startswith("NCCL.cpp:"):  # `ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog`
                facts.timeout(text, scan.line_after(raw))
                if "NCCL error" in text:  # `... raised the following async exception: NCCL error`
                    self.torch_error(text.partition("] ")[2])
                elif "have failed or timed out" in text or (  # the watchdog takes the process
                        "thread terminated" in text and "Watchdog caught" not in text):  # down
                    facts.fault(text.partition("] ")[2])
            elif text.startswith("NCCL(SeqNum="):  # `what():  [PG 3 Rank 5] ... WorkNCCL(SeqNum=`
                facts.timeout(scan.line_of(raw, b"Watchdog caught"), scan.line_after(raw))
                if "NCCL error" in text:
                    self.torch_error(text)
            else:  # torch's `NCCL error in: ..., NCCL version 2.27.3`
                self.torch_error(text)
        if warns:
            facts.warns(warns)
        for raw in scan.warns:
            key = b"<warn> " + raw  # (a `MAIN` payload starts with NCCL: no clash)
            if key not in seen:  # every rank prints it: judged once
                seen[key] = None
                self.seen_bytes += len(key)
                facts.fault(payload_text(raw))
        for raw in scan.bare:
            key = b"<bare> " + raw
            if key in seen:  # every rank prints it: judged once
                continue
            seen[key] = None
            self.seen_bytes += len(key)
            text = payload_text(raw)
            if text.startswith("NET/OFI "):
                facts.info(text)  # its level was lost with its prefix: read as INFO
            else:  # `Test NCCL failure ...`: judged at the end, where nothing else says why
                if "received signal" not in text:  # (Open MPI's crash banner: no NCCL log alone)
                    facts.recognised += 1
                if len(self.test_failures) < MAX_TEST_FAILURES:
                    self.test_failures.append(text)
        if self.torch_errors:  # NCCL's reason, on the line after torch's `Last error:`
            details, pending = scan.last_errors()
            if self.last_error is not None:  # a `Last error:` line ended the previous chunk
                details = [*scan.detail_after(self.last_error), *details]
            self.last_error = pending
            for raw in details:
                key = b"<last> " + raw
                if key not in seen:
                    seen[key] = None
                    self.seen_bytes += len(key)
                    facts.fault(payload_text(raw))
        for raw in scan.old_plugin:
            if m := OLD_PLUGIN.search(payload_text(raw)):
                (facts.warn if m[1] == "WARN" else facts.info)(m[2])
        self.saw_nccl = self.saw_nccl or scan.nccl_info

    def torch_error(self, text: str) -> None:
        """torch's `NCCL error ...` text: a failure, and the NCCL version it names (also where
        the text follows a `ProcessGroupNCCL.cpp:455]` tag on one line)."""
        self.torch_errors = True
        self.facts.fault(text)
        if m := VERSION.search(text):
            self.facts.version(m[1].rstrip(","))

    def summary(self) -> NcclLogSummary:
        commands = tuple(self.commands or ())
        if not self.facts.recognised and not self.saw_nccl:
            raise ParseError(
                "nothing recognised as an NCCL debug log: no `NCCL INFO`/`NCCL WARN` lines, "
                "aws-ofi-nccl (NET/OFI) lines or PyTorch NCCL watchdog lines "
                "(was the job run with NCCL_DEBUG=INFO?)"
            )
        if not self.facts.errors:
            # nccl-tests stopped on an error no WARN or plugin line explains (NCCL_DEBUG unset,
            # or a paste of the end only): its own failure line is the error. Where a WARN
            # line was judged, that line is the cause and this one its consequence.
            for text in self.test_failures:
                self.facts.fault(text)
        summary = summarize(self.facts)
        launched = command_nranks(commands)
        return dataclasses.replace(
            summary, commands=commands,
            nranks=summary.nranks if summary.nranks is not None else launched)


def _head_commands(chunk: bytes, end: int) -> list[str]:
    """The command lines (prompts, `$ cmd`, bare `mpirun ...`) in the input's first HEAD_BYTES,
    read through the unwrapper: once per input, so the scan of the rest stays at C speed."""
    unwrapper = Unwrapper()
    head = bytes(chunk[:min(end, HEAD_BYTES)]).decode("utf-8", "replace")
    for line in head.splitlines():
        unwrapper.unwrap(line)
    return unwrapper.commands


def _chunks_of_lines(lines: Iterable[str]) -> Iterator[bytes]:
    """Group text lines into ~8 MB byte chunks that end at line boundaries."""
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line if line.endswith("\n") else line + "\n")
        size += len(line)
        if size >= _CHUNK_BYTES:
            yield "".join(batch).encode("utf-8", "replace")
            batch, size = [], 0
    if batch:
        yield "".join(batch).encode("utf-8", "replace")


def parse_nccl_log(lines: Iterable[str] | str) -> NcclLogSummary:
    """Summarise an NCCL debug log given as text or as an iterable of lines (streamed).

    Raises ParseError when nothing in it is an NCCL, aws-ofi-nccl or watchdog line.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    scanner = _Scanner()
    for chunk in _chunks_of_lines(lines):
        scanner.feed(chunk)
    return scanner.summary()


def parse_nccl_log_stream(
    streams: IO[bytes] | Iterable[IO[bytes]], chunk_bytes: int = _CHUNK_BYTES
) -> NcclLogSummary:
    """Summarise one binary stream, or several (one log per rank) as one log; the fast path."""
    return _scan_streams(streams, chunk_bytes).summary()


def _scan_streams(streams: IO[bytes] | Iterable[IO[bytes]], chunk_bytes: int) -> _Scanner:
    scanner = _Scanner()
    for fh in [streams] if hasattr(streams, "read") else streams:  # type: ignore[union-attr]
        if hasattr(fh, "readinto"):
            _feed_readinto(scanner, fh, chunk_bytes)
            continue
        rest = b""
        skipping = False  # inside a line longer than MAX_LINE_BYTES, after its first part
        while True:
            data = fh.read(chunk_bytes)  # type: ignore[union-attr]
            if not data:
                break
            if skipping:
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data, skipping = data[nl + 1:], False
            if rest:
                data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                if len(rest) >= MAX_LINE_BYTES:
                    scanner.feed(rest[:MAX_LINE_BYTES])
                    scanner.cut_lines += 1
                    rest, skipping = b"", True
                continue
            scanner.feed(data, cut)
            rest = data[cut:]
        if rest:
            scanner.feed(rest)
    return scanner


def _feed_readinto(scanner: _Scanner, fh: Any, chunk_bytes: int) -> None:
    """Read into one reused buffer (no per-chunk copy); the partial last line of a chunk moves
    to the buffer's front; a line longer than the buffer grows it, up to MAX_LINE_BYTES: past
    that the line is judged by its first MAX_LINE_BYTES and the rest is dropped."""
    buf = bytearray(2 * chunk_bytes)
    filled = 0
    skipping = False
    while True:
        if len(buf) - filled < chunk_bytes:
            buf.extend(bytes(chunk_bytes))  # a line longer than a chunk: room for more of it
        with memoryview(buf) as view:
            n = fh.readinto(view[filled:filled + chunk_bytes])
        if not n:
            break
        end = filled + n
        if skipping:  # filled is 0: the buffer holds only new data
            nl = buf.find(b"\n", 0, end)
            if nl < 0:
                continue
            buf[:end - nl - 1] = buf[nl + 1:end]
            end, skipping = end - nl - 1, False
        cut = buf.rfind(b"\n", 0, end) + 1
        if cut == 0:
            if end >= MAX_LINE_BYTES:
                scanner.feed(bytes(buf[:MAX_LINE_BYTES]))
                scanner.cut_lines += 1
                filled, skipping = 0, True
            else:
                filled = end
            continue
        scanner.feed(buf, cut)
        buf[:end - cut] = buf[cut:end]
        filled = end - cut
    if filled:
        scanner.feed(bytes(buf[:filled]))


def inspect_nccl_log(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """`preflight inspect nccl-log FILE`: the keys of NcclLogSummary.to_json()."""
    source = as_input(stream)
    binary = source.binary()
    if binary is None:
        return _judged(parse_nccl_log(source.lines()), profile)
    scanner = _scan_streams(binary, _CHUNK_BYTES)
    cut = (f"{scanner.cut_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were judged by "
           f"their first {MAX_LINE_BYTES:,}") if scanner.cut_lines else ""
    try:
        out = _judged(scanner.summary(), profile)
    except ParseError as exc:
        raise ParseError(f"{exc} ({cut})" if cut else str(exc)) from None
    if cut:
        out["notes"] = [cut]
    return out


def _judged(summary: NcclLogSummary, profile: Profile | None) -> JSONObject:
    """The summary's keys, and `verdicts`: the network checks' own judgement of it for the
    profile (harness.judges.network; PF-NET-006 to 011)."""
    from harness.judges import network as judges

    return {**summary.to_json(),
            "verdicts": [v.to_json() for v in judges.nccl_log_verdicts(profile, summary)]}


INSPECT = {"nccl-log": inspect_nccl_log}
