"""A shell script's lines as the commands a shell would run (for harness.parsers.env_script):
backslash continuations joined, comments dropped, a quoted value that spans lines kept whole;
runs of plain lines, and whole segments read before, taken at once."""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Iterator

from harness.base.settings import get_bool
from harness.parsers.reader import MAX_LINE_CHARS
from harness.parsers.shell_words import shell_words as _shell_words
from harness.parsers.shell_words import strip_comment as _strip_comment

try:
    from harness.parsers import _nccl_scan
except ImportError:  # built without a C compiler: every line takes the Python path below
    _nccl_scan = None

__all__ = ["ENV_RUN", "MEMO_CHARS", "MEMO_LINES", "QUICK_ASSIGN", "QUICK_ASSIGNS", "VAR_NAME",
           "Item", "Run", "Segment", "c_scans", "logical_lines", "scan_function"]

VAR_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: A command is at most one value's worth of characters (the store cuts a value there too).
_MAX_COMMAND_CHARS = MAX_LINE_CHARS

# A line whose quoted value may run on: `NAME="...`, `export NAME='...`, `declare -x NAME="...`.
_OPENS_VALUE = re.compile(rf"^\s*(?:(?:export|declare\s+-x|typeset\s+-x|ENV)\s+)?{VAR_NAME}=[\"']")
#: A quoted value may run over this many lines before the rest is taken as broken input.
_MAX_VALUE_LINES = 50
#: Backslash-continued lines joined into one command at most (a Dockerfile RUN has tens).
_MAX_CONTINUED_LINES = 1000

#: A line that is no command when nothing is pending: blank or a comment (one that does not end
#: in a backslash, which logical_lines reads as a continuation).
_NOOP_LINE = re.compile(r"[ \t]*(?:#.*)?", re.S)

#: A run of lines that need no lexer, each ending in `\n`: blank lines, comments (not ending in
#: a backslash) and plain `NAME=value` / `export NAME=value` lines (a value without blanks,
#: quotes, escapes, `;&|`, `#` or parentheses, so its one shell word is the text itself; a
#: comment may follow). One match takes the run (most of a script), where the per-line state
#: machine below costs ~5 us a line.
_PLAIN_VALUE = r"[^\s\"'\\;&|#()]*"
_END = r"(?:#[^\n]*(?<!\\))?\n"  # an optional comment, not a continuation, and the line end
_QUICK = re.compile(rf"(?:[ \t]*{_END}|[ \t]*(?:export[ \t]+)?{VAR_NAME}={_PLAIN_VALUE}"
                    rf"(?:[ \t]+{_END}|\n))+")
QUICK_ASSIGN = re.compile(rf"^[ \t]*(?:export[ \t]+)?({VAR_NAME})=({_PLAIN_VALUE})", re.M)
#: QUICK_ASSIGN's matches in a whole _QUICK run: findall over "\n" + the run. (Found from each
#: line end, a literal the search skips to: `^` under re.M is tried at every character, 25%
#: more time over the 15 MB of runs in a 20 MB script.)
QUICK_ASSIGNS = re.compile(rf"\n[ \t]*(?:export[ \t]+)?({VAR_NAME})=({_PLAIN_VALUE})")


#: Distinct command lines whose reading parse_script keeps, and the longest kept. A script's
#: lines recur through a log that holds it many times (the 20 MB bench input reads each of its
#: commands ~2,000 times); each is lexed and read once, its assignments then replayed in order.
#: Past the bound a line is read as before: the memo stays small on any input.
MEMO_LINES = 4096
MEMO_CHARS = 1024


#: Lines joined into one text for _QUICK at a time (a batch is a chunk's lines, ~25k): the
#: joined text and a run in it are the only copies, kept small.
_BLOCK_LINES = 1024


class Segment:
    """The items of a segment: the lines from a point where no command is pending to a blank
    line (the first _SEGMENT_MIN characters on), that one included, when no command is pending
    there either and none follows a `$ ` prompt. A script held many times in a log repeats its
    segments: logical_lines yields one read before as one item, (False, its text, its
    Segment), and parse_script applies what it did (`effects`, after env output or not)
    without reading its lines again."""

    __slots__ = ("effects", "items")

    def __init__(self, items: list[Item]) -> None:
        self.items = items
        self.effects: dict[bool, object] = {}


#: Segments kept: their text in all at most _MEMO_SEGMENT_CHARS (the items and effects kept
#: with them are of the same order); a segment ends at the first blank line _SEGMENT_MIN
#: characters past its start (fewer, longer segments: each costs a look-up and an update).
_MEMO_SEGMENT_CHARS = 4 << 20
_SEGMENT_MIN = 2048
#: ... where the C scan reads the lines (ENV_RUN): a run of them ends where a segment does, and
#: they cost little to read again, so segments are longer (most often the rest of a block).
#: Measured on 20 MB of distinct script lines: 0.40 s with 2 KiB segments, 0.34 s with these;
#: on the repeated bench input 0.20 and 0.22 s (the Python path: 0.27 s with 2 KiB, 0.63 s).
_SEGMENT_MIN_C = 64 << 10

class Run:
    """What the C scan (harness/parsers/_env_lines.c, env_run) read of a run of lines
    (blank, comments, simple assignments, lines the memo holds or the C lexer lexes), nothing
    pending before or after it: `ops` and `unset` as env_script._effect makes them where no
    `env` output is being read (there its `text` is read again on the Python path). The text
    is cut from its block only then (most runs are never read again)."""

    __slots__ = ("block", "ops", "start", "stop", "unset")

    def __init__(self, ops: list, unset: int, block: str, start: int, stop: int) -> None:
        self.ops, self.unset = ops, unset
        self.block, self.start, self.stop = block, start, stop

    @property
    def text(self) -> str:
        return self.block[self.start:self.stop]


def scan_function(name: str) -> Callable | None:
    """The extension's function `name` (harness/parsers/_env_*.c), None where it is not
    built (no C compiler) or was built from an older source."""
    return getattr(_nccl_scan, name, None)


def c_scans() -> bool:
    """Whether the C scans may read (PREFLIGHT_ENV_NO_C=1: the pure-Python path, for the
    tests that compare the two). Read where a reading starts (a malformed value is the CLI's
    clear error there, not an import's)."""
    return not get_bool("PREFLIGHT_ENV_NO_C")


#: The C scan of common lines (env_run); None reads every line on the Python path (the same
#: results: tests/test_env_lines_c.py, tests/test_parsers_env_equivalence.py).
ENV_RUN: Callable[[str, int, int, dict, int, int], tuple[int, list, int]] | None = (
    scan_function("env_run"))
#: The C join of a backslash-continued command (env_join), None: joined line by line below.
ENV_JOIN: Callable[[str, int, int], tuple[str, int] | None] | None = scan_function("env_join")
#: The C lexer of a command in its common forms (env_words), None: shell_words lexes every one.
#: It raises ValueError where shell_words would (a quote or `$(` not closed: a value whose lines
#: are joined until it lexes, serve.sh's `NVSHMEM_LIB="$(python3 -c '...` over 4 lines).
ENV_WORDS: Callable[[str], list[str] | None] | None = scan_function("env_words")
#: The C reading of a command's words (env_reading: env_script._reading's port, the one env_run
#: uses), None: env_script._reading reads every one.
ENV_READING: Callable[[list[str]], tuple] | None = scan_function("env_reading")

Item = tuple[bool, str, "list[str] | tuple[str] | slice | Segment | Run | None"]


def logical_lines(batches: Iterable[list[str]], known: Container[str] = (),
                   segments: dict[str, Segment] | None = None, *, scan: bool = True
                   ) -> Iterator[Item]:
    """(after a `$ ` prompt, text, shell words) per command: backslash continuations joined,
    comments dropped, and a quoted value that spans lines (`declare -x A="x<newline>y"`) kept
    whole (up to _MAX_VALUE_LINES lines and _MAX_COMMAND_CHARS characters). What is still
    pending when the input ends is dropped, as a shell would never run it. With `scan` and
    `known` a dict (parse_script's memo) and ENV_RUN built, a run of lines the C scan reads
    comes as one item, (False, "", Run) (Run.text: its text); else a run of _QUICK lines (when
    nothing is pending) comes as one item, (False, its text, slice(0, its length)). A
    command in `known` (parse_script's memo: lexed before) comes unlexed, with None for its
    words; text that is no command (an unclosed quote) comes as (text,). With `segments`, a
    Segment read before comes as one item, and a new one is kept there (bounded). Continued
    commands are joined, and commands lexed, in C where ENV_JOIN and ENV_WORDS are built."""
    scan = scan and c_scans()
    env_run = ENV_RUN if scan and isinstance(known, dict) else None
    env_join = ENV_JOIN if scan else None
    env_words = ENV_WORDS if scan else None
    segment_min = _SEGMENT_MIN if env_run is None else _SEGMENT_MIN_C
    parts: list[str] = []  # the pending command's pieces
    size = 0
    joined = 0  # lines in the pending command
    newlines = 0  # ... joined at an open quote (the value's own line breaks)
    open_quote = False  # pending because a quote is open (lexing again needs a new quote)
    new_quote = False  # a quote character came since the last failed attempt
    continued = False  # pending ends in a backslash continuation
    prompted = False
    unlexed: set[str] = set()  # texts that failed to lex (a value's first lines), bounded
    # the segment being read: its text, where it ends, its items (None: it is not kept)
    seg_text, seg_end = "", 0
    seg_items: list[Item] | None = None
    item: Item
    kept = 0  # characters of the segments kept

    def lex(text: str) -> list[str] | None:
        """The words of `text`, None when `known` holds it; ValueError where it cannot be lexed."""
        if text in known:
            return None
        if text in unlexed:
            raise ValueError("not closed")
        try:
            if env_words is not None and (words := env_words(text)) is not None:
                return words  # (no `#`, so no comment to strip)
            return _shell_words(_strip_comment(text))
        except ValueError:
            if len(unlexed) < MEMO_LINES and len(text) <= MEMO_CHARS:
                unlexed.add(text)
            raise

    for batch in batches:
        for first in range(0, len(batch), _BLOCK_LINES):
            block = "\n".join(batch[first:first + _BLOCK_LINES]) + "\n"
            pos, end = 0, len(block)
            seg_end, seg_items = 0, None  # (a segment ends inside its block)
            while pos < end:
                if not parts:
                    if pos >= seg_end:  # a new segment (the last one is kept if it ended here)
                        if seg_items is not None and segments is not None and pos == seg_end:
                            segments[seg_text] = Segment(seg_items)
                            kept += len(seg_text)
                        seg_end = block.find("\n\n", pos + segment_min) + 2  # 1: none comes
                        seg_items = None
                        if seg_end == 1:
                            seg_end = end
                        elif segments is not None:
                            seg_text = block[pos:seg_end]
                            if (hit := segments.get(seg_text)) is not None:
                                yield False, seg_text, hit
                                pos = seg_end
                                continue
                            if kept + len(seg_text) <= _MEMO_SEGMENT_CHARS:
                                seg_items = []
                    if env_run is not None:
                        stop, ops, unset = env_run(block, pos, seg_end, known, MEMO_LINES,
                                                   MEMO_CHARS)
                        if stop > pos:  # (the run's text: Run.text, cut where it is read)
                            run_item = (False, "", Run(ops, unset, block, pos, stop))
                            if seg_items is not None:
                                seg_items.append(run_item)
                            yield run_item
                            pos = stop
                            if pos == seg_end:
                                continue
                    if env_run is None and (m := _QUICK.match(block, pos, seg_end)):
                        run = block[pos:m.end()]
                        if seg_items is not None:
                            seg_items.append((False, run, slice(0, len(run))))
                        yield False, run, slice(0, len(run))
                        pos = m.end()
                        if pos == seg_end:
                            continue
                nl = block.index("\n", pos)
                start, line, pos = pos, block[pos:nl], nl + 1
                if not parts:
                    if (not line or line[0] in " \t#") and _NOOP_LINE.fullmatch(line) and line[-1:] != "\\":
                        continue  # blank or a comment, nothing pending: no command (most of a script)
                    prompted = line.startswith("$ ")  # a pasted terminal prompt
                    line = line[2:] if prompted else line
                    if line[-1:] != "\\":  # a command on one line (an open quote: read on below)
                        try:
                            words = lex(line)
                        except ValueError:
                            pass
                        else:
                            if prompted:  # (a segment with a prompt in it is not kept)
                                seg_items = None
                            elif seg_items is not None:
                                seg_items.append((False, line, words))
                            yield prompted, line, words
                            continue
                    elif env_join is not None and not prompted and (
                            joined_text := env_join(block, start, end)) is not None:
                        try:  # a continued command joined in C (not: read line by line below)
                            words = lex(joined_text[0])
                        except ValueError:
                            pass  # an open quote
                        else:
                            item = (False, joined_text[0], words)
                            if seg_items is not None:
                                seg_items.append(item)
                            yield item
                            pos = joined_text[1]
                            continue
                elif continued and line.lstrip().startswith("#"):
                    continue  # Docker drops comment lines inside a continued instruction
                new_quote = new_quote or "'" in line or '"' in line or ")" in line  # `)`: ends a $(
                room = size + len(line) < _MAX_COMMAND_CHARS and joined < _MAX_CONTINUED_LINES
                continued = line.endswith("\\") and not line.endswith("\\\\") and room
                if continued:
                    parts.append(line[:-1] + " ")
                    size, joined = size + len(line), joined + 1
                    continue
                parts.append(line)
                text = "".join(parts)
                try:
                    if open_quote and not new_quote:
                        raise ValueError("the open quote is still open")  # lexing again cannot close it
                    item = (prompted, text, lex(text))
                except ValueError:  # an unclosed quote: a value that goes on in the next line, or prose
                    if room and (len(parts) > 1 or _OPENS_VALUE.match(text)) and newlines < _MAX_VALUE_LINES:
                        parts = [text + "\n"]
                        size, joined, newlines = len(text) + 1, joined + 1, newlines + 1
                        open_quote, new_quote = True, False
                        continue
                    item = (prompted, text, (text,))  # not a command: counted as skipped
                parts, size, joined, newlines, open_quote, new_quote = [], 0, 0, 0, False, False
                if prompted:
                    seg_items = None
                elif seg_items is not None:
                    seg_items.append(item)
                yield item
            if seg_items is not None and segments is not None and pos == seg_end and not parts:
                segments[seg_text] = Segment(seg_items)
                kept += len(seg_text)
