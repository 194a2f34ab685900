"""The first pass of harness.parsers.env over a saved environment: what form it has (NULs, the
first character, YAML or dict lines, rank prefixes, timestamps, script lines), for
parse_env_dump to choose its reader; batches of plain assignments judged whole, a line seen
before judged as before."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

from harness.parsers.env_script import ASSIGN, FLAG_WORDS
from harness.parsers.env_script_lines import VAR_NAME, c_scans, scan_function
from harness.parsers.env_yaml import DICT_ENTRY, INLINE_ENV, YAML_BLOCK, YAML_INLINE, YAML_NAME, list_item
from harness.parsers.reader import Input
from harness.parsers.unwrap import RANK_PREFIX

__all__ = ["Shape", "all_assignments", "assignment_text", "distinct_assignments", "is_tagged",
           "plain_script", "shape_of", "shaped", "untimed"]

_TIMESTAMP = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?"
                        r"(?:Z|[+-][0-9]{2}:?[0-9]{2})?(?:\s+|$)")
# A line that only a shell script (or a Dockerfile) has: its start, a trailing backslash, or a
# launcher flag's assignment. (`NAME=a b` alone is not one: `env` prints values with spaces as
# they are.) The flag's `-` comes first and the blank before it is a lookbehind, so that the
# search skips to each `-` with a literal scan (a dump's 120 KB JSON value: 0.05 ms, not 3).
_SCRIPT_START = re.compile(r"\s*(?:#|\$ |(?:export|declare|typeset|readonly|ENV|ARG|RUN|FROM)\s)")
_SCRIPT_FLAG = re.compile(
    rf"-(?<!\S-)(?:(?:x|e|-env)\s+|-env=|-export=[\"']?(?:[^\s,]*,)*){VAR_NAME}=")
# Batches of assignment lines only (most of an `env` dump): a batch whose first line starts with
# `NAME=` and in whose text no `\n` is followed by anything else is read as a whole. (The
# second pattern starts with its literal, so the search skips from one line end to the next.)
_ASSIGN_START = re.compile(rf"{VAR_NAME}=")
_NOT_ASSIGN_NEXT = re.compile(rf"\n(?!{VAR_NAME}=)")
_LONG_LINE = 512
#: The C scan of lines that tell _shape_lines nothing but their count (blank or not):
#: harness/parsers/_env_shape.c env_shape_run, None where it is not built; switched off by
#: PREFLIGHT_ENV_NO_C (env_script_lines.c_scans); the same shape either way.
SHAPE_RUN = scan_function("env_shape_run")


@dataclass(slots=True)
class Shape:
    """What one pass over the input tells about its form (parse_env_dump's first pass)."""

    nul: bool = False
    first: str = ""  # the first non-blank character
    structured: bool = False  # a YAML / Python-dict / cut-JSON line was seen
    nonblank: int = 0
    tagged: int = 0  # lines with a rank prefix
    first_rank: str | None = None
    script_tagged: bool = False  # a script-only line among the first rank's lines
    script_plain: bool = False  # ... among all lines (timestamps removed)
    timestamped: bool = False  # a line starts with a timestamp (_unwrap has one to take off)


def shape_of(source: Input) -> Shape:
    """The first pass: NULs, the first character, structure markers, rank prefixes, script
    lines. (Each regex is tried only where its literals are: the pass reads every line; a batch
    of plain assignments is judged as a whole, see _plain_batch; a line seen before is judged
    as before, see _shape_lines.)"""
    shape = Shape()
    for _ in shaped(source, shape):
        pass
    return shape


def shaped(source: Input, shape: Shape) -> Iterator[list[str]]:
    """Each batch of `source` once _shape's pass has judged it into `shape` (up to a NUL)."""
    previous: str | None = None  # the last non-blank line's list item (`- -x` then `- A=b`)
    memo: dict[str, _LineShape] = {}
    shape_run = SHAPE_RUN if c_scans() else None
    for batch in source.batches():
        text = None if shape.structured else assignment_text(batch)
        if text is not None and "\0" not in text and _plain_batch(text, shape.script_plain):
            shape.nonblank += len(batch)  # what the loop below finds on each of these lines
            shape.first = shape.first or batch[0][:1]
            previous = None
        else:
            previous = _shape_lines(batch, shape, previous, memo, shape_run)
            if shape.nul:
                return
        yield batch


def plain_script(shape: Shape) -> bool:
    """What parse_env_dump reads as a script, without rank prefixes or timestamps to take off
    (_unwrap would hand the batches on as they are), as far as `shape` has seen."""
    return (shape.script_plain and not (shape.nul or shape.structured or shape.timestamped)
            and shape.first not in ("[", "{") and shape.tagged * 2 < shape.nonblank)


#: What _shape_lines finds on a line by itself: its own structure marker (a YAML or dict line,
#: an inline `env={...}`), its list item, whether that item is an assignment, whether the line
#: is a script's.
_LineShape = tuple[bool, "str | None", bool, bool]
#: Distinct lines whose _LineShape is kept, and the longest kept: a script repeated through a
#: log (the 20 MB bench input holds each of its lines ~2,000 times) is judged once a line.
_MEMO_LINES = 4096
_MEMO_CHARS = 4096


def _shape_lines(batch: list[str], shape: Shape, previous: str | None,
                 memo: dict[str, _LineShape], shape_run: Callable | None = None) -> str | None:
    """_shape's line loop over one batch; the last non-blank line's list item. A line that
    can hold no rank prefix or timestamp (its first non-blank character is no digit or `[`),
    past the input's first non-blank line, is judged by itself once and kept in `memo`; with
    `shape_run` (SHAPE_RUN), lines that tell nothing but their count are passed over in C."""
    get = memo.get
    hits = 0  # non-blank lines judged from the memo since shape.nonblank was last brought up
    i, n = 0, len(batch)
    while i < n:
        if shape_run is not None and shape.script_plain and shape.first and not shape.structured:
            i, nonblank = shape_run(batch, i)  # lines that tell nothing but that they are there
            if nonblank:
                shape.nonblank += nonblank
                previous = None
            if i == n:
                break
        line = batch[i]
        i += 1
        if shape.structured:
            if "\0" in line:
                shape.nul = True
                break
            continue  # only a NUL can change the answer now
        known = get(line)
        if known is not None:  # (a line kept has no NUL)
            own, item, assign, script = known
            hits += 1
            if own or (assign and previous in FLAG_WORDS):
                shape.structured = True
            previous = item
            if script and not shape.script_plain:
                shape.script_plain = True
            continue
        if "\0" in line:
            shape.nul = True
            break
        shape.nonblank += hits
        hits = 0
        stripped = line.lstrip()
        if not stripped:
            continue
        shape.nonblank += 1
        keep = bool(shape.first) and stripped[:1] not in "[0123456789"
        if not shape.first:
            shape.first = stripped[:1]
            if shape.first == "[" and RANK_PREFIX.match(stripped):
                shape.first = "r"  # `[1,0]<stdout>:` is a rank prefix, not JSON
            shape.structured = shape.first in ("[", "{")
        item = list_item(line) if stripped[:1] in "-\"" else None
        own = bool((":" in line and _is_structured_line(line))
                   or ("{" in line and INLINE_ENV.search(line)))
        assign = item is not None and ASSIGN.match(item) is not None
        shape.structured = own or (assign and previous in FLAG_WORDS)
        previous = item
        if keep and len(memo) < _MEMO_LINES and len(line) <= _MEMO_CHARS:
            memo[line] = (own, item, assign, _is_script_line(line))  # (no timestamp to take off)
        m = RANK_PREFIX.match(line) if stripped[:1] in "[0123456789" else None
        if not shape.timestamped and "0" <= line[:1] <= "9":
            shape.timestamped = _TIMESTAMP.match(line) is not None
        if m is not None:
            rank = m["srun"] or m["mpi"]
            shape.tagged += 1
            if shape.first_rank is None:
                shape.first_rank = rank
            if rank == shape.first_rank and not shape.script_tagged:
                shape.script_tagged = _is_script_line(untimed(line[m.end():]))
        if not shape.script_plain:
            shape.script_plain = _is_script_line(untimed(line))
    shape.nonblank += hits
    return previous


def assignment_text(batch: list[str]) -> str | None:
    """The batch's lines joined by `\n`, where a batch path may take them: its first line starts
    with `NAME=`, and its lines are short on average (a few long ones, as a dump of 100 KB JSON
    values has, cost the line loop little, and joining them would cost more)."""
    return "\n".join(batch) if _joinable(batch, sum(map(len, batch))) else None


def distinct_assignments(batch: list[str]) -> tuple[dict[str, None], int, int] | None:
    """Where assignment_text would join `batch` and all_assignments take the text: its distinct
    lines but the last (in first order), its longest line's length and the text's length; else
    None. Whether each line starts with `NAME=` is asked once a distinct line (a dump saved once
    per rank or job repeats each line thousands of times), with the same two regexes."""
    chars = sum(map(len, batch))
    if not _joinable(batch, chars):
        return None
    body = dict.fromkeys(islice(batch, len(batch) - 1))
    if not all_assignments("\n".join([*body, batch[-1]])):
        return None
    return body, max(max(map(len, body), default=0), len(batch[-1])), chars + len(batch) - 1


def _joinable(batch: list[str], chars: int) -> bool:
    """What assignment_text and distinct_assignments both ask of a batch of `chars` characters:
    its first line starts with `NAME=`, and its lines are short on average."""
    return _ASSIGN_START.match(batch[0]) is not None and chars <= _LONG_LINE * len(batch)


def all_assignments(text: str) -> bool:
    """Every line of `text` after its first (an assignment) starts with `NAME=`."""
    return _NOT_ASSIGN_NEXT.search(text) is None


def _plain_batch(text: str, script_seen: bool) -> bool:
    """A batch that _shape's line loop would only count: assignments only (no list item, rank
    prefix, timestamp, YAML or dict line starts so; nor does a script keyword, which a blank
    follows), no inline `env={...}` map, and, until a script line was seen, no trailing
    backslash or launcher flag. The text-wide searches find each of these wherever a line's
    own would (and more, across line ends: such a batch goes through the loop instead)."""
    return (all_assignments(text)
            and not ("{" in text and INLINE_ENV.search(text))
            and (script_seen or not ("\\\n" in text or text.endswith("\\")
                                     or ("-" in text and _SCRIPT_FLAG.search(text)))))


def _is_structured_line(line: str) -> bool:
    """A Kubernetes `- name:` item, an `env:` block key, a `- {name: .., value: ..}` item, or a
    `"NAME": "value",` dict entry."""
    return bool(("name:" in line and (YAML_NAME.match(line) or YAML_INLINE.match(line)))
                or YAML_BLOCK.match(line) or DICT_ENTRY.match(line))


def _is_script_line(line: str) -> bool:
    """A line that only a shell script or a Dockerfile has (_SCRIPT_START, a trailing `\\`, or
    _SCRIPT_FLAG, tried only where a `-` and a `=` are)."""
    return bool(_SCRIPT_START.match(line) or line.endswith("\\")
                or ("=" in line and "-" in line and _SCRIPT_FLAG.search(line)))


def is_tagged(shape: Shape) -> bool:
    """Rank prefixes on at least half the non-blank lines: a launcher's copy of each rank's."""
    return bool(shape.tagged) and shape.tagged * 2 >= shape.nonblank


def untimed(line: str) -> str:
    """`line` without a leading ISO timestamp."""
    return _TIMESTAMP.sub("", line, count=1) if "0" <= line[:1] <= "9" else line
