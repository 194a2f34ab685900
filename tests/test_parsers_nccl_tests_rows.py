"""nccl-tests' batch reader (harness.parsers.nccl_tests_rows, `_Runs.feed` fast path) reads what
the line-by-line reader reads (`parse_nccl_tests(..., fast=False)`, every line alone): on every
recorded sample, bare, CRLF and under each wrapper the shared unwrapper knows, whole and in
small batches; on concatenated logs whose skimmed runs are passed over once MAX_COMMANDS
command lines were seen; on a long table past MAX_ROWS with malformed rows inside it."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.parsers.nccl_tests_model import MAX_ROWS, NcclTestsResult
from harness.parsers.reader import Input
from harness.parsers.unwrap import MAX_COMMANDS
from tests.test_samples_wrapped import WRAPPERS

ROOTS = (Path(__file__).parent / "data" / "nccl_tests", Path(__file__).parent / "samples" / "nccl-tests")
SAMPLES = sorted(p for root in ROOTS if root.is_dir() for p in root.iterdir()
                 if p.is_file() and p.suffix in (".txt", ".log"))
TEXTS = [p.read_text(encoding="utf-8", errors="replace") for p in SAMPLES]


def _wrapped(text: str, wrapper: str) -> str:
    if wrapper == "bare":
        return text
    return "\n".join(WRAPPERS[wrapper](line) for line in text.split("\n"))


def _both(text: str, chunk: int | None = None, collective: str | None = None
          ) -> tuple[NcclTestsResult | str, NcclTestsResult | str]:
    out: list[NcclTestsResult | str] = []
    for fast in (True, False):
        try:
            out.append(parse_nccl_tests(Input(text, chunk=chunk), fast=fast,
                                        collective=collective))
        except ParseError as exc:
            out.append(f"ParseError: {exc}")
    return out[0], out[1]


def test_samples_exist():
    assert len(SAMPLES) >= 30


@pytest.mark.parametrize("wrapper", ["bare", *WRAPPERS])
def test_every_sample_reads_as_line_by_line(wrapper: str):
    for path, text in zip(SAMPLES, TEXTS, strict=True):
        for chunk in (None, 257):
            fast, slow = _both(_wrapped(text, wrapper), chunk)
            assert fast == slow, (path.name, wrapper, chunk)


#: Lines put between concatenated samples: command lines (past MAX_COMMANDS the skimmed runs'
#: lines are passed over), a `which` and its path, a continued command, and run markers hidden
#: by a colour or a docker record's escape.
BETWEEN = [
    "$ mpirun -np 16 ./build/all_reduce_perf -b 8 -e 1G -f 2",
    "+ mpirun --allow-run-as-root -np 8 all_gather_perf -b 1M",
    "$ which all_reduce_perf", "/opt/nccl-tests/build/all_reduce_perf",
    "$ srun -N 2 \\", "   ./build/alltoall_perf -b 8",
    "root@node-1:/# ./build/sendrecv_perf -g 8", "`./build/broadcast_perf -b 8 -e 128M`",
    "which is fine", "\x1b[32m# Avg bus bandwidth    : 12.5\x1b[0m",
    "# Avg bus bandwidth    : 99.0",
    '{"log":"# \\u0043ollective test starting: reduce_perf\\n","stream":"stdout"}',
    "# Collective[0]test starting: gather_perf",
]


@pytest.mark.parametrize("seed", range(4))
def test_concatenated_runs_read_as_line_by_line(seed: int):
    rng = random.Random(seed)
    parts = []
    for _ in range(60):
        parts += [rng.choice(BETWEEN), rng.choice(TEXTS)]
    joined = "\n".join(parts)
    for wrapper in ("bare", "srun-label", "docker-json-file", "crlf"):
        for collective in (None, "all_gather", "reduce"):
            fast, slow = _both(_wrapped(joined, wrapper), 4000, collective)
            assert fast == slow, (seed, wrapper, collective)
    assert isinstance(slow, NcclTestsResult)
    assert len(slow.commands) == MAX_COMMANDS and slow.num_runs > 10  # the skim path ran


HEAD = (
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "     (us)  (GB/s)  (GB/s)\n")
FOOT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 70.742\n"


def _row(size: int = 1024, count: int = 256, dtype: str = "float", redop: str = "sum",
         time: str = "147.1", wrong: str = "0", rest: str = "123.1    0.01    0.02      0") -> str:
    return (f"  {size:>10}  {count:>12}  {dtype:>8}  {redop:>6}      -1  {time:>7}    0.01    0.01"
            f"  {wrong:>5}    {rest}")


#: Row-shaped lines the row pattern must not take (each is read alone, as before).
ODD = [
    _row(time="-nan"), _row(rest=""), _row(redop="failure"), _row(dtype="FLOAT"),
    _row(wrong="N/A", rest="123.1    0.01    0.02    N/A"), _row(time="1e999"),
    _row(rest="123.1    0.01    0.02      0  extra"), _row(wrong="3"), _row(wrong="nan"),
    "  12 NCCL INFO not a row",
]


def _long_table(rows: int, odd_every: int = 0) -> str:
    lines = []
    for i in range(rows):
        if odd_every and i % odd_every == odd_every - 1:
            lines.append(ODD[(i // odd_every) % len(ODD)])
        else:
            lines.append(_row(size=8 << (i % 30), count=2 << (i % 30), time="123.5"))
    return HEAD + "\n".join(lines) + "\n" + FOOT


def test_a_long_table_past_max_rows_counts_the_rest():
    fast, slow = _both(_long_table(MAX_ROWS + 1234), chunk=50_000)
    assert fast == slow
    assert isinstance(fast, NcclTestsResult)
    assert len(fast.rows) == MAX_ROWS and fast.truncated_rows == 0
    assert f"1234 table row(s) after the first {MAX_ROWS} not kept" in fast.warnings


def test_malformed_rows_inside_a_long_table_are_read_alone():
    fast, slow = _both(_long_table(MAX_ROWS + 500, odd_every=97), chunk=30_000)
    assert fast == slow
    assert isinstance(fast, NcclTestsResult)
    assert fast.truncated_rows > 0 and fast.rows[-1].size_bytes > 0
    assert any(r.oop.wrong == 3 for r in fast.rows)


def test_removing_a_row_changes_what_is_counted():
    # The batch reader counts what it passes: one row less is one row less kept or counted.
    full, _ = _both(_long_table(300))
    text = _long_table(300)
    cut = text.replace(_row(size=8 << 5, count=2 << 5, time="123.5") + "\n", "", 1)
    fewer, slow = _both(cut)
    assert fewer == slow
    assert isinstance(full, NcclTestsResult) and isinstance(fewer, NcclTestsResult)
    assert len(fewer.rows) == len(full.rows) - 1


@pytest.mark.parametrize("last", ["", "\x1b[0m", "\r"])
def test_lines_read_alone_across_the_candidate_windows(last: str):
    # Rows srun-labelled (`3: `), each after a comment line: none is row-shaped, each is asked
    # whether it carries a wrapper, through windows of 64, 128, 256... lines (a row judged by
    # its neighbour's answer is read as plain and lost); a colour or CR on the last line only
    # makes every line of the batch a candidate.
    lines = []
    for line in _long_table(400, odd_every=61).splitlines():
        lines += [f"3: {line}", "# n"] if line[:1] == " " else [line]
    fast, slow = _both("\n".join(lines) + last + "\n")
    assert fast == slow
    assert isinstance(fast, NcclTestsResult) and len(fast.rows) > 350
