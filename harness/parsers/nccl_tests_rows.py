"""nccl-tests table rows a batch at a time: the fast path of harness.parsers.nccl_tests.

A table is mostly rows (`   1048576   262144   float   sum   -1   203.2   5.16 ...`). Read line by
line, each costs a clean-up, a dozen literal tests and a token-by-token parse; a sweep of tens of
rows does not notice, a long table (a soak run's thousands of rows) or a log of concatenated runs
does. The reader's batch is joined by `\\n` and read with anchored matches:

- `row_scan(layout)`: a stretch of the table's well-formed rows (every column of the header's
  layout, numbers spelt as harness.parsers.values reads them, lower-case words) is taken by one
  scan (harness/parsers/_nccl_rows.c, or the same grammar's pattern without the C extension);
  each is a row `_parse_row` reads whole (`add_rows` builds them without the checks, one loop a
  stretch), so past MAX_ROWS they are only counted;
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
import operator
import re

from harness.parsers.nccl_tests_model import Measurement, Row
from harness.parsers.nccl_tests_table import Layout, parse_row

try:
    from harness.parsers import _nccl_scan
except ImportError:  # built without a C compiler: the row pattern gives the same stretches
    _nccl_scan = None
#: (an extension built from an older source has no table_rows: the pattern then)
_table_rows = getattr(_nccl_scan, "table_rows", None)

__all__ = ["ROW_SHAPED", "ROW_WORDS", "RowScan", "add_rows", "quick_row", "row_scan"]

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


#: Each cell of a row by its role (the letters harness/parsers/_nccl_rows.c reads): D the first
#: cell when it is not size, count or root (feed_line: the first cell is digits), I size and
#: count, S root, F time/algbw/busbw, X #wrong, W any other cell.
_CELLS = {"D": r"[0-9]++", "I": _INT, "S": _SIGNED, "F": _FLOAT, "X": _WRONG, "W": _WORD}


class RowScan:
    """A stretch of one layout's well-formed rows (each one `_parse_row` reads as a whole row,
    not cut short): `match(text, pos, end)` gives (how many, where they end, whether one of
    ROW_WORDS is among them), by harness/parsers/_nccl_rows.c where it is built and by
    `pattern` otherwise (the same answer: tests/test_nccl_rows_c.py)."""

    __slots__ = ("_pattern", "spec")

    def __init__(self, spec: str) -> None:
        self.spec = spec.encode("ascii")
        self._pattern: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        """The row pattern (compiled when first asked: the C scan does not need it)."""
        if self._pattern is None:
            spec = self.spec.decode("ascii")
            row = r"\n[ \t]*+" + _SEP.join(_CELLS[c] for c in spec) + r"[ \t]*+(?=\n|\Z)"
            self._pattern = re.compile(f"(?:{row})++")
        return self._pattern

    def match(self, text: str, pos: int, end: int) -> tuple[int, int, bool]:
        if _table_rows is not None:
            return _table_rows(text, pos, end, self.spec)  # type: ignore[no-any-return]
        return self.match_regex(text, pos, end)

    def match_regex(self, text: str, pos: int, end: int) -> tuple[int, int, bool]:
        """`match` by the pattern (a build without the C extension)."""
        m = self.pattern.match(text, pos, end)
        if m is None:
            return 0, pos, False
        start, stop = m.span()
        return (text.count("\n", start, stop), stop,
                any(text.find(word, start, stop) >= 0 for word in ROW_WORDS))


def row_scan(layout: Layout) -> RowScan | None:
    """The scan of a stretch of this layout's well-formed rows, or None for a layout it does
    not cover."""
    at = layout.at
    size, count = _position(at, "size", "bytes"), _position(at, "count", "N")
    if size is None or count is None:
        return None
    halves = tuple(tuple(sorted(h.items())) for h in layout.halves)
    return _compiled(len(layout.lead), size, count, at.get("root"), halves, layout.width)


@functools.lru_cache(maxsize=64)
def _compiled(lead: int, size: int, count: int, root: int | None,
              halves: tuple[tuple[tuple[str, int], ...], ...], width: int) -> RowScan | None:
    cells = []
    for i in range(lead):
        if i in (size, count) or (i == 0 and i == root):
            cells.append("I")
        elif i == root:
            cells.append("S")
        else:
            cells.append("D" if i == 0 else "W")
    for half in halves:
        offsets = dict(half)
        roles = {offsets["time"]: "F", offsets["algbw"]: "F", offsets["busbw"]: "F"}
        if len(roles) < 3 or offsets["wrong"] in roles or max(offsets.values()) >= width:
            return None
        roles[offsets["wrong"]] = "X"
        cells += [roles.get(i, "W") for i in range(width)]
    return RowScan("".join(cells))


def add_rows(rows: list[Row], cells: list[tuple[list[str], Layout]], lines: list[str],
             layout: Layout) -> None:
    """The rows of `lines` (each one `row_scan` took) and their printed cells into `rows` and
    `cells`, as feed_line adds them. A table with a `#wrong` count column and both halves (every
    nccl-tests version since 2.0) is read by one loop that takes each row's ten numbers with one
    itemgetter; other tables a row at a time (quick_row, parse_row)."""
    at = layout.at
    lead, width = len(layout.lead), layout.width
    if not layout.counts_wrong or len(layout.halves) != 2:
        for line in lines:
            tokens = line.split()
            rows.append(quick_row(tokens, layout) if layout.counts_wrong
                        else parse_row(tokens, layout)[0])  # type: ignore[arg-type]
            cells.append((tokens[:lead + 2 * width], layout))
        return
    size = at["size"] if "size" in at else at["bytes"]
    count = at["count"] if "count" in at else at["N"]
    picked = [size, count]
    for h, offsets in enumerate(layout.halves):
        picked += [lead + h * width + offsets[name] for name in ("time", "algbw", "busbw", "wrong")]
    numbers = operator.itemgetter(*picked)
    dtype = at.get("type")
    redop = at["redop"] if "redop" in at else at.get("op")
    root = at.get("root")
    make_row, measurement = Row, Measurement
    append_row, append_cells = rows.append, cells.append
    for line in lines:
        tokens = line.split()  # (row_scan took exactly lead + 2 * width cells)
        s, c, t0, a0, b0, w0, t1, a1, b1, w1 = numbers(tokens)
        append_row(make_row(
            int(s), int(c), None if dtype is None else tokens[dtype],
            None if redop is None else tokens[redop], None if root is None else int(tokens[root]),
            measurement(float(t0), float(a0), float(b0), None if w0 == "N/A" else int(w0)),
            measurement(float(t1), float(a1), float(b1), None if w1 == "N/A" else int(w1))))
        append_cells((tokens, layout))


def quick_row(tokens: list[str], layout: Layout) -> Row:
    """The row `_parse_row` reads from the cells of a line `row_scan` took, for a table
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
