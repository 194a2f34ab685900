"""nccl-tests' table row scan in C (harness/parsers/_nccl_rows.c, `_nccl_scan.table_rows`) takes
the stretch of rows the row pattern takes (`RowScan.match_regex`, the path of a build without a C
compiler): from every line of every recorded sample under each layout the samples print, and on
generated rows with each cell mutated at its bounds (digit counts, exponents, signs, `N/A`,
blanks, case, ROW_WORDS, characters past ASCII in 1-, 2- and 4-byte strings, an end inside a
row); and parse_nccl_tests reads the same with and without it."""

from __future__ import annotations

import random

import pytest

from harness.parsers import nccl_tests_rows
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.parsers.nccl_tests_rows import RowScan, row_scan
from harness.parsers.nccl_tests_table import Layout, TableState, feed_line
from harness.parsers.reader import Input
from tests.test_parsers_nccl_tests_rows import TEXTS, _long_table, _row, _wrapped

scan = pytest.importorskip("harness.parsers._nccl_scan", reason="built without a C compiler")
if not hasattr(scan, "table_rows"):
    pytest.skip("the extension was built from an older source", allow_module_level=True)

#: Layouts beyond the samples' own: no root, no redop, an `N/A`-only wrong column, one half.
SPECS = ["IIWWSFFFXFFFX", "IIWWFFFXFFFX", "IIWFFFXFFFX", "DIIWFFFX", "SIIWFFFXW", "IIFFFX"]


def _layouts() -> list[RowScan]:
    """The row scans of every header the samples print, and SPECS."""
    found: dict[bytes, RowScan] = {}
    for text in TEXTS:
        state = TableState()
        for line in text.splitlines():
            if "algbw" in line:
                feed_line(state, line, line)
                if state.layout is not None and (rs := row_scan(state.layout)) is not None:
                    found[rs.spec] = rs
    for spec in SPECS:
        found.setdefault(spec.encode(), RowScan(spec))
    return list(found.values())


LAYOUTS = _layouts()


def _same(rs: RowScan, text: str, pos: int, end: int) -> None:
    got = scan.table_rows(text, pos, end, rs.spec)
    assert got == rs.match_regex(text, pos, end), (rs.spec, text[pos:end][:300], pos, end)


def test_the_samples_hold_several_layouts():
    assert len(LAYOUTS) >= len(SPECS) + 2


def test_every_line_of_every_sample_gives_the_same_stretch():
    for text in TEXTS:
        for form in ("bare", "crlf", "srun-label"):
            joined = "\n" + "\n".join(_wrapped(text, form).splitlines())
            starts = [i for i, ch in enumerate(joined) if ch == "\n"]
            for rs in LAYOUTS:
                for pos in starts:
                    _same(rs, joined, pos, len(joined))


#: Cells to put in place of one cell of a well-formed row: each bound of the grammar on either
#: side, and what the pattern refuses.
CELLS = [
    "0", "7", "9" * 15, "9" * 16, "9" * 18, "9" * 19, "9" * 30, "9" * 31, "1.5", "1.", ".5",
    "1." + "5" * 30, "1." + "5" * 31, "1e5", "1e+05", "1E-5", "1e123", "1e", "1e+", "2.5e-07",
    "-1", "+1", "-", "--1", "N/A", "N/AA", "n/a", "nan", "-nan", "inf", "float", "sum", "none",
    "FLOAT", "a_b.c+d-e", "failure", "xtimeoutx", "algbw", "ailur", "3e-01*", "1\u00e9",
    "\ufffd", "1\U0001f600", "x" * 40, "",
]
BLANKS = [" ", "  ", "\t", " \t ", ""]


def _mutated(rng: random.Random, spec: str) -> str:
    cells = {"D": "123", "I": "1048576", "S": "-1", "F": "123.45", "X": "0", "W": "float"}
    row = [cells[c] for c in spec]
    for _ in range(rng.choice((0, 0, 1, 2))):
        row[rng.randrange(len(row))] = rng.choice(CELLS)
    if rng.random() < 0.1:
        row.append(rng.choice(CELLS))  # an extra cell
    if rng.random() < 0.1:
        row.pop()  # a cell short
    seps = [rng.choice(BLANKS[:3]) if rng.random() < 0.97 else rng.choice(BLANKS) for _ in row]
    return rng.choice(BLANKS) + "".join(c + s for c, s in zip(row, seps, strict=True)).rstrip(
        "" if rng.random() < 0.3 else " \t")


@pytest.mark.parametrize("seed", range(6))
def test_mutated_rows_give_the_same_stretch(seed: int):
    rng = random.Random(seed)
    for _ in range(300):
        rs = RowScan(rng.choice(SPECS))
        spec = rs.spec.decode()
        lines = [_mutated(rng, spec) for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.2:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(["# Avg bus bandwidth : 1", ""]))
        text = "\n" + "\n".join(lines) + rng.choice(["", "\n", "\n\n"])
        starts = [i for i, ch in enumerate(text) if ch == "\n"]
        for pos in starts[:3]:
            for end in (len(text), rng.randint(pos, len(text)), pos + 1):
                _same(rs, text, pos, end)


def test_the_scan_takes_a_stretch_and_stops_at_the_first_other_line():
    rs = RowScan("IIWWSFFFXFFFX")
    good = "\n" + _row()
    text = good * 3 + "\n" + _row(time="-nan") + good
    assert scan.table_rows(text, 0, len(text), rs.spec) == (3, len(good) * 3, False)
    worded = good + "\n" + _row(redop="failure") + good
    assert scan.table_rows(worded, 0, len(worded), rs.spec) == (3, len(worded), True)
    assert scan.table_rows(text, 1, len(text), rs.spec) == (0, 1, False)  # not at a `\n`
    with pytest.raises(ValueError, match="spec"):
        scan.table_rows(text, 0, len(text), b"IIQ")


def _read(text: str, chunk: int | None) -> str:
    return repr(parse_nccl_tests(Input(text, chunk=chunk)))


def test_the_parse_reads_the_same_without_the_c_scan(monkeypatch: pytest.MonkeyPatch):
    inputs = [*TEXTS, _long_table(12_000), _long_table(10_300, odd_every=97)]
    with_c = [_read(t, chunk) for t in inputs for chunk in (None, 4000)]
    monkeypatch.setattr(nccl_tests_rows, "_table_rows", None)
    assert [_read(t, chunk) for t in inputs for chunk in (None, 4000)] == with_c


def test_a_layout_the_scan_does_not_cover_has_none():
    layout = Layout(["size", "type"], [{"time": 0, "algbw": 1, "busbw": 2, "wrong": 3}], 4)
    assert row_scan(layout) is None  # no count column: every row read alone
