"""nccl-tests output (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
...): the text table of every version seen in the wild, launcher prefixes included, and the `-J`
JSON file. Reads rows like::

    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
      1073741824     268435456     float     sum      -1   6759.0  158.86  297.86      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 70.742

The pieces: harness.parsers.nccl_tests_model (the result, bus factors, bounds),
harness.parsers.nccl_tests_table (the text table's lines), harness.parsers.nccl_tests_json (the
`-J` file); this module splits a log into runs and is what callers import.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.commands import command_collective, command_nranks
from harness.parsers.nccl_tests_json import parse_json
from harness.parsers.nccl_tests_model import MAX_ERRORS, MAX_ROWS, MAX_RUN_NAMES, NcclTestsResult
from harness.parsers.nccl_tests_rows import ROW_SHAPED, RowScan, add_rows, row_scan
from harness.parsers.nccl_tests_table import (
    COMM_NRANKS,
    NOT_MPI,
    STARTING,
    Layout,
    TableState,
    clean_line,
    feed_line,
    infer_collective,
    table_mismatches,
)
from harness.parsers.reader import MAX_DOCUMENT_CHARS, Input, as_input
from harness.parsers.unwrap import MAX_COMMANDS, Unwrapper, is_docker_record
from harness.parsers.values import ascii_int

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = [
    "INSPECT",
    "inspect_nccl_tests",
    "parse_nccl_tests",
]


def parse_nccl_tests(text: str | Input, *, collective: str | None = None,
                     fast: bool = True) -> NcclTestsResult:
    """Parse nccl-tests output (text table or the `-J` JSON document), a str or an Input read
    in one streaming pass.

    `collective` names the test when the caller knows it (the binary it ran); otherwise it comes
    from the `# Collective test starting: all_reduce_perf` banner or the table's columns.
    Raises ParseError when the input holds neither a table row, a footer, nor a failure line.
    `fast=False` reads every line alone (the reference the batch reader is tested against).
    """
    source = as_input(text)
    head = source.head(4096).lstrip()
    if head[:1] == "{" and not is_docker_record(head):  # docker json-file records are lines
        doc = source.document()
        if doc is None:
            raise ParseError(f"JSON input larger than {MAX_DOCUMENT_CHARS >> 20} MiB: not an "
                             "nccl-tests -J document (those are a few KB)")
        return parse_json(doc, collective)
    runs = _Runs(collective, fast)
    for batch in source.batches():
        runs.feed(batch)
    state = runs.finish()
    if state.duplicate_ranks:
        state.errors.append(
            f"rank(s) {sorted(state.duplicate_ranks)[:50]} printed by more than one process: "
            f"{NOT_MPI}")
    if not (state.rows or state.oob is not None or state.avg is not None or state.errors
            or state.banner or state.ranks):
        raise ParseError(
            "no nccl-tests output found: no table rows (`  1048576  262144  float  sum ...`), "
            "no `# Avg bus bandwidth` footer and no `Test ... failure` line")
    # Ranks are numbered 0..n-1: the highest one printed counts them even in a trimmed copy;
    # without rank lines, NCCL's own `comm ... nranks 16 ... Init COMPLETE` lines count them.
    nranks = state.max_rank + 1 if state.ranks else state.comm_nranks
    commands = tuple(runs.unwrapper.commands)
    launched = command_nranks(commands)
    if launched is not None and (nranks is None or launched > nranks):
        nranks = launched  # a cut paste prints fewer rank lines than the command launched
    name = (collective or state.collective or command_collective(commands)
            or infer_collective(state.rows, nranks))
    hosts = tuple(dict.fromkeys(h for h, _ in state.ranks.values() if h))
    first = state.rows[0] if state.rows else None
    warnings = []
    if state.truncated:
        warnings.append(f"{state.truncated} table line(s) cut short")
    if state.omitted_rows:
        warnings.append(f"{state.omitted_rows} table row(s) after the first {MAX_ROWS} not kept")
    if state.num_errors > len(state.errors):
        warnings.append(f"{state.num_errors - MAX_ERRORS} more failure line(s) not kept")
    if runs.count > 1:
        names = ", ".join(runs.names) + (", ..." if runs.count > len(runs.names) else "")
        warnings.append(f"the output holds {runs.count} runs ({names}); only the "
                        f"{'first' if state is runs.first else collective} is reported")
    return NcclTestsResult(
        collective=name,
        nranks=nranks,
        dtype=first.dtype if first else None,
        redop=first.redop if first else None,
        rows=tuple(state.rows),
        avg_busbw_gb_s=state.avg,
        out_of_bounds=state.oob,
        completed=state.avg is not None and not state.errors,
        errors=tuple(state.errors),
        busbw_mismatches=tuple(table_mismatches(state, name, nranks)),
        checked=state.checked if state.checked is not None else (
            True if any(r.wrong is not None for r in state.rows) else None),
        hosts=hosts,
        devices=tuple(name for _, (_, name) in sorted(state.ranks.items())),
        min_bw_failed=state.min_bw_failed,
        truncated_rows=state.truncated,
        warnings=tuple(warnings),
        num_runs=runs.count,
        commands=commands,
    )


class _Runs:
    """The runs of a log, one state each: a banner after a footer starts the next run of a
    concatenated log (a script looping over collectives), whose rows must not join the previous
    table. Only the first run and the first run of `collective` are kept (flat memory); the
    others are counted and named."""

    def __init__(self, collective: str | None, fast: bool = True) -> None:
        self.collective = collective
        self.current = TableState()
        self.first: TableState | None = None
        self.chosen: TableState | None = None  # the first run of `collective`
        self.count = 1
        self.names: list[str] = []
        self.unwrapper = Unwrapper(host_prefix=True)
        self.fast = fast
        self._layout: Layout | None = None
        self._scan: RowScan | None = None

    def feed(self, lines: list[str]) -> None:
        """One reader batch. `fast` (harness.parsers.nccl_tests_rows): a skimmed run's lines
        that cannot name or end a run are passed over a stretch at a time, a reported run's
        well-formed rows are read a stretch at a time; every other line is read alone."""
        if not self.fast:
            self._lines(lines, 0, len(lines))
            return
        unwrapper = self.unwrapper
        text = "\n" + "\n".join(lines)
        self._coloured: bool | None = None  # (_plain: computed when first needed)
        self._window: tuple[int, int, set[int]] = (0, 0, set())
        i, pos = 0, 0  # line i starts after the `\n` at text[pos]
        marks = _Marks(text, _SKIM_MARKS)
        while i < len(lines):
            if (self.current.skim and not unwrapper.pending()
                    and len(unwrapper.commands) >= MAX_COMMANDS):
                # Nothing of a skimmed run's line counts but its name and end, and the command
                # lines (only the first MAX_COMMANDS are kept): pass over to the next line
                # that may hold one of _SKIM_MARKS (read whole: never as plain).
                at = marks.next(pos + 1)
                if at < 0:
                    unwrapper.host = None
                    return
                skipped = text.count("\n", pos + 1, at)
                if skipped:
                    unwrapper.host = None
                    i += skipped
                    pos = text.rfind("\n", 0, at)
                self._line(lines[i], False)
            elif (read := self._rows(lines, text, i, pos, len(text)))[0]:
                i += read[0]
                pos = read[1]
                continue
            elif (m := ROW_SHAPED.match(text, pos)) is not None:
                # The stretch ends where its ASCII class does, which can be inside a line (a
                # U+FFFD or a `[` after a row's cells): the block reaches to that line's end, so
                # no row is scanned as ending there (its cells then `0\ufffd` to int()).
                end = text.find("\n", m.end())
                end = len(text) if end < 0 else end
                count = text.count("\n", pos, end)
                self._block(lines, text, i, i + count, pos, end)
                i += count
                pos = end
                continue
            else:
                self._line(lines[i], self._plain(lines, text, i))
            pos += len(lines[i]) + 1
            i += 1

    def _plain(self, lines: list[str], text: str, i: int) -> bool:
        """Line i of the batch (joined as `text`) carries no wrapper: Unwrapper.candidates of
        the whole batch, asked of a window of lines from i on (64, then twice as many each time:
        a batch's banner or footer lines do not pay for its thousands of rows). The same answer:
        each candidate match ends before its line's `\\n` (a window holds the next line's start
        for the lookaheads), and a colour, CR or U+FFFD anywhere in the batch, which makes every
        line a candidate, is looked for in the whole batch."""
        if self.unwrapper.pending():
            return False
        if self._coloured is None:
            self._coloured = "\x1b" in text or "\r" in text or "\ufffd[" in text
        if self._coloured:
            return False
        start, stop, found = self._window
        if not start <= i < stop:
            stop = min(i + max(64, 2 * (stop - start)), len(lines))
            found = self.unwrapper.candidates(lines[i:stop + 1]) or set()  # (never None here)
            start = i
            self._window = (start, stop, found)
        return i - start not in found

    def _block(self, lines: list[str], text: str, i: int, stop: int, pos: int, end: int) -> None:
        """Lines i..stop of the batch, row-shaped, at text[pos:end]: never a wrapper, so each is
        its own text (unless a command continues into it): a skimmed run's are skipped unless
        one names or ends a run; a reported run's well-formed rows are read a stretch at a
        time (row_scan), any other line alone."""
        unwrapper = self.unwrapper
        while i < stop:
            count, after = self._rows(lines, text, i, pos, end)
            if count:
                i += count
                pos = after
                continue
            if (self.current.skim and not unwrapper.pending()
                    and _SKIM_STOP.search(text, pos, end) is None):
                unwrapper.host = None  # (what clean_line does to a plain line)
                return
            self._line(lines[i], not unwrapper.pending())  # read alone
            pos += len(lines[i]) + 1
            i += 1

    def _rows(self, lines: list[str], text: str, i: int, pos: int, end: int) -> tuple[int, int]:
        """(how many, where they end): the reported run's well-formed rows from line i of the
        batch (at text[pos], up to `end`), read a stretch at a time; (0, pos) for none."""
        state = self.current
        if state.skim or self.unwrapper.pending():
            return 0, pos
        scan = self._row_scan(state)
        if scan is None:
            return 0, pos
        count, stop, worded = scan.match(text, pos, end)
        if not count:
            return 0, pos
        if worded:
            for raw in lines[i:i + count]:  # a word feed_line looks for: each line alone
                self._line(raw, True)
        else:
            _add_rows(state, lines[i:i + count])
            self.unwrapper.host = None  # (what clean_line does to a plain line)
        return count, stop

    def _row_scan(self, state: TableState) -> RowScan | None:
        layout = state.layout
        if layout is None:
            return None
        if self._layout is not layout:
            self._layout, self._scan = layout, row_scan(layout)
        return self._scan

    def _lines(self, lines: list[str], first: int, stop: int) -> None:
        """Lines first..stop of the batch, one at a time."""
        # Lines that cannot carry a wrapper (Unwrapper.candidates) skip the per-line unwrapping;
        # NCCL's own lines and hydra-style rank tags are still taken out (clean_line).
        unwrapper = self.unwrapper
        part = lines[first:stop] if first or stop < len(lines) else lines
        candidates = unwrapper.candidates(part)
        for i, raw in enumerate(part):
            self._line(raw, candidates is not None and i not in candidates
                       and not unwrapper.pending())

    def _line(self, raw: str, plain: bool) -> None:
        """One line; `plain`: it carries no wrapper and no command continues into it."""
        if (plain and self.current.skim and "Collective test" not in raw
                and "Avg bus" not in raw and "nThread" not in raw and "NCCL " not in raw
                and "[" not in raw[:160]):
            # A skimmed run's plain line that neither names nor ends a run (its rows): only
            # what clean_line does to a plain line.
            self.unwrapper.host = None
            return
        raw = raw.rstrip()
        line = clean_line(raw, self.unwrapper, plain)
        current = self.current
        if not line:
            if "Init COMPLETE" in raw and (m := COMM_NRANKS.search(raw)) is not None:
                nranks = ascii_int(m[1])
                if nranks is not None:
                    current.comm_nranks = max(current.comm_nranks or 0, nranks)
            return
        ended = current.avg is not None or current.concluded
        if ended and ("nThread" in line or STARTING.search(line)):
            self._close()
            # Only the first run and the first of `collective` are reported: the others'
            # rows are not read (their name and end are).
            self.current = TableState(skim=not self.collective or self.chosen is not None)
            self.count += 1
        # Failure lines are kept as the tool printed them: its `host: ` prefix (which node
        # failed), not the launcher's or log shipper's wrappers around it.
        host = self.unwrapper.host
        feed_line(self.current, f"{host}: {line}" if host else line, line)

    def _close(self) -> None:
        state = self.current
        if len(self.names) < MAX_RUN_NAMES:
            self.names.append(state.collective or "?")
        if self.first is None:
            self.first = state
        if self.collective and self.chosen is None and state.collective == self.collective:
            self.chosen = state

    def finish(self) -> TableState:
        self._close()
        assert self.first is not None
        return self.chosen or self.first


#: What a skimmed run's row-shaped line must hold to matter (the `_line` skip test, a stretch
#: at a time).
_SKIM_STOP = re.compile("Collective test|Avg bus|nThread|NCCL ")
#: What a skimmed run's line may hold once MAX_COMMANDS command lines were seen: the start of
#: what names or ends a run (`Collective test`, `Avg bus`, `nThread`: a hydra rank tag inside
#: them is replaced by a blank, so their first word stays), a `which` command (its path lines
#: are output), and what unwrapping can turn into them (a colour, a CR, U+FFFD, a docker
#: record's `\u` escape).
_SKIM_MARKS = ("Collective", "Avg", "nThread", "which", "\\u", "\x1b", "\r", "\ufffd")


class _Marks:
    """The next position of any of `literals` in `text`, by `str.find` (a regex alternation of
    them tries every position in sre), each literal's next one kept until it is passed."""

    def __init__(self, text: str, literals: tuple[str, ...]) -> None:
        self.text = text
        self.found = dict.fromkeys(literals, -2)  # literal -> its next position; -1: no more

    def next(self, pos: int) -> int:
        """The first position >= pos of one of the literals, -1 when none is left."""
        best = -1
        for literal, at in self.found.items():
            if -1 < at < pos or at == -2:
                at = self.found[literal] = self.text.find(literal, pos)
            if at >= 0 and (best < 0 or at < best):
                best = at
        return best


def _add_rows(state: TableState, lines: list[str]) -> None:
    """Well-formed rows (row_scan took them) into `state`, as feed_line adds them."""
    layout = state.layout
    assert layout is not None
    keep = lines[:max(MAX_ROWS - len(state.rows), 0)]
    if keep:
        add_rows(state.rows, state.cells, keep, layout)
    state.omitted_rows += len(lines) - len(keep)


def inspect_nccl_tests(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """`preflight inspect nccl-tests FILE`: keys collective, nranks, dtype, redop, rows
    [{size_bytes, count, oop {time_us, algbw_gb_s, busbw_gb_s, wrong}, ip {...}}],
    avg_busbw_gb_s, largest {size_bytes, busbw_gb_s}, num_wrong, out_of_bounds, completed,
    errors (failure lines, then busbw mismatches), and `verdicts`: the bandwidth gates' own
    judgement of the busbw for the profile (harness.judges.bandwidth; PF-BW-001/002)."""
    from harness.base.redact import Redactor
    from harness.judges import bandwidth

    result = parse_nccl_tests(as_input(stream))
    doc = result.to_dict()
    rows, doc["rows"] = doc["rows"], []
    # Redacted as cmd_inspect would, but for the rows: Row.to_dict holds only numbers and None
    # (up to 10,000 rows, 30,000 dicts: nothing in them to redact), put back in their place.
    doc = Redactor().obj(
        {**doc, "verdicts": [v.to_json() for v in bandwidth.nccl_tests_verdicts(profile, result)]})
    doc["rows"] = rows
    return doc


#: inspect_nccl_tests' result is redacted whole (its rows are numbers): cmd_inspect takes it as it is.
inspect_nccl_tests.redacted = True  # type: ignore[attr-defined]


INSPECT = {"nccl-tests": inspect_nccl_tests}
