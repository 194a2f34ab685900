"""nccl-tests table rows a batch at a time: the fast path of harness.parsers.nccl_tests.

A table is mostly rows (`   1048576   262144   float   sum   -1   203.2   5.16 ...`). Read line by
line, each costs a clean-up, a dozen literal tests and a token-by-token parse; a sweep of tens of
rows does not notice, a long table (a soak run's thousands of rows) or a log of concatenated runs
does. The reader's batch is joined by `\\n` and read with anchored matches:

- `rows_pattern(layout)`: a stretch of the table's well-formed rows (every column of the header's
  layout, numbers spelt as harness.parsers.values reads them, lower-case words) is taken by one
  match; each is a row `_parse_row` reads whole (`quick_row` builds it without the checks), so
  past MAX_ROWS they are only counted;
- `ROW_SHAPED`: a stretch of lines that start with blanks, digits and a blank and hold only
  printable ASCII without `[`: never a wrapper of harness.parsers.unwrap (every rule there needs
  a `:`, `@`, `/`, `-` or a letter after a leading digit run: `_candidate`), so each is its own
  text; a skimmed run's are passed over unless one names or ends a run.

What neither takes (a `nan` cell, a cut row, an upper-case word, a word holding ROW_WORDS) is read
line by line, so the result is that of reading every line alone
(tests/test_parsers_nccl_tests_rows.py reads every recorded sample both ways, bare, CRLF and under
each wrapper, and concatenated and long logs made to reach each path).
"""

from __future__ import annotations

import functools
import re

from harness.parsers.nccl_tests_model import Measurement, Row
from harness.parsers.nccl_tests_table import Layout

__all__ = ["ROW_SHAPED", "ROW_WORDS", "quick_row", "rows_pattern"]

#: A stretch of row-shaped lines, each after its `\n` (the batch is read as `"\n" + "\n".join`).
ROW_SHAPED = re.compile(r"(?:\n[ \t]*+[0-9]++[ \t][\t -Z\\\]-~]*+)++")  # (ASCII, no `[`: 2x the
# speed of a negated class that names U+FFFD)

_SEP = r"[ \t]++"
_INT = r"[0-9]{1,18}+"  # values.ascii_int: at most 18 digits
_SIGNED = r"[-+]?+[0-9]{1,18}+"
# values.ascii_float: finite (30 digits and a 2-digit exponent cannot overflow a float).
_FLOAT = r"[0-9]{1,30}+(?:\.[0-9]{1,30}+)?+(?:[eE][-+]?+[0-9]{1,2}+)?+"
_WRONG = r"(?:[0-9]{1,15}+|N/A)"  # exactly round(float(cell)) / None, as _wrong reads it
# A word cell (type, redop, other columns): lower case, so none of feed_line's literals but
# ROW_WORDS (the others hold an upper-case letter, `#` or a blank) can be in it.
_WORD = r"[a-z0-9_.+-]++"
#: feed_line's literals a lower-case word can hold (`failure`, `timeout`, `algbw`): a stretch
#: holding one is read line by line (one `str.find` each over the stretch; a lookahead in
#: _WORD cost a third of the pattern's time).
ROW_WORDS = ("ailure", "imeout", "algbw")


def _position(at: dict[str, int], *names: str) -> int | None:
    """Where `_Layout.cell(tokens, *names)` reads: the first of `names` the table has."""
    return next((at[n] for n in names if n in at), None)


def rows_pattern(layout: Layout) -> re.Pattern[str] | None:
    """The pattern of a stretch of this layout's well-formed rows (each one `_parse_row` reads
    as a whole row, not cut short), or None for a layout it does not cover."""
    at = layout.at
    size, count = _position(at, "size", "bytes"), _position(at, "count", "N")
    if size is None or count is None:
        return None
    halves = tuple(tuple(sorted(h.items())) for h in layout.halves)
    return _compiled(len(layout.lead), size, count, at.get("root"), halves, layout.width)


@functools.lru_cache(maxsize=64)
def _compiled(lead: int, size: int, count: int, root: int | None,
              halves: tuple[tuple[tuple[str, int], ...], ...], width: int
              ) -> re.Pattern[str] | None:
    cells = []
    for i in range(lead):
        if i in (size, count) or (i == 0 and i == root):
            cells.append(_INT)
        elif i == root:
            cells.append(_SIGNED)
        else:
            cells.append(r"[0-9]++" if i == 0 else _WORD)  # feed_line: the first cell is digits
    for half in halves:
        offsets = dict(half)
        roles = {offsets["time"]: _FLOAT, offsets["algbw"]: _FLOAT, offsets["busbw"]: _FLOAT}
        if len(roles) < 3 or offsets["wrong"] in roles or max(offsets.values()) >= width:
            return None
        roles[offsets["wrong"]] = _WRONG
        cells += [roles.get(i, _WORD) for i in range(width)]
    row = r"\n[ \t]*+" + _SEP.join(cells) + r"[ \t]*+(?=\n|\Z)"
    return re.compile(f"(?:{row})++")


def quick_row(tokens: list[str], layout: Layout) -> Row:
    """The row `_parse_row` reads from the cells of a line `rows_pattern` matched, for a table
    with a `#wrong` count column (`layout.counts_wrong`), without its checks (the pattern made
    them)."""
    at = layout.at
    lead = len(layout.lead)
    width = layout.width
    halves = []
    for h, offsets in enumerate(layout.halves):
        start = lead + h * width
        wrong = tokens[start + offsets["wrong"]]
        halves.append(Measurement(float(tokens[start + offsets["time"]]),
                                  float(tokens[start + offsets["algbw"]]),
                                  float(tokens[start + offsets["busbw"]]),
                                  None if wrong == "N/A" else int(wrong)))
    size = at["size"] if "size" in at else at["bytes"]
    count = at["count"] if "count" in at else at["N"]
    redop = at["redop"] if "redop" in at else at.get("op")
    return Row(size_bytes=int(tokens[size]), count=int(tokens[count]),
               dtype=tokens[at["type"]] if "type" in at else None,
               redop=None if redop is None else tokens[redop],
               root=int(tokens[at["root"]]) if "root" in at else None,
               oop=halves[0], ip=halves[1] if len(halves) > 1 else None)
