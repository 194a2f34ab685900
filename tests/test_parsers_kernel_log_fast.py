"""The kernel-log reader's fast path (runs of ordinary dmesg lines counted, not read one by one;
issue 32 item 3) gives exactly what reading every line gives: on every recorded kernel log,
bare and under each wrapper of tests/test_samples_wrapped.py, among runs of ordinary lines, in
small and large chunks."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.kernel_log import parse_kernel_log
from harness.parsers.kernel_log_format import lines_to_read
from harness.parsers.reader import Input
from harness.parsers.unwrap import Unwrapper
from tests.test_samples_wrapped import WRAPPERS

ROOT = Path(__file__).parent
FILES = sorted(p for folder in (ROOT / "data" / "kernel_log", ROOT / "samples" / "kernel-log")
               for p in folder.iterdir() if p.suffix == ".txt")
ORDINARY = [f"[{k:>6}.{k:06d}] mlx5_core 0000:ab:00.0: Port module event: module 0, Cable plugged"
            for k in range(40)]


def _read(text: str, chunk: int | None, by_line: bool) -> object:
    try:
        return parse_kernel_log(Input(io.StringIO(text), chunk=chunk), by_line=by_line)
    except ParseError as exc:
        return str(exc)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fast_path_reads_as_every_line_read(path: Path):
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    # Among runs of ordinary lines too: the runs are what the fast path skips.
    among = [x for i, line in enumerate(lines) for x in (*ORDINARY[:i % 5 * 3], line)]
    wrong = []
    for name, wrap in {"bare": lambda s: s, **WRAPPERS}.items():
        for variant, body in (("as is", lines), ("among ordinary lines", among)):
            wrapped = "".join(wrap(line) + "\n" for line in body)
            for chunk in (97, None):
                if _read(wrapped, chunk, False) != _read(wrapped, chunk, True):
                    wrong.append((name, variant, chunk))
    assert not wrong, wrong


def test_ordinary_dmesg_lines_carry_no_wrapper():
    """The fast path hands ordinary dmesg lines on without the unwrapper: none of them may be a
    line an unwrapper rule changes (a rule added for `[ 12.3] ...` lines fails here)."""
    lines = [*ORDINARY, "[    0.000000] x", "[12345678.123456] NVRM loaded", "[ 1.5] $ dmesg",
             "[ 7.25] `srun x`", "[ 3.0] > quoted", "[ 3.0] 0: x", "[ 9.9] [1,0]<stdout>:x"]
    assert lines_to_read(lines) == []
    unwrapper = Unwrapper(timestamps=False)
    assert unwrapper.candidates(lines) == set()
    assert [unwrapper.unwrap(line) for line in lines] == lines


def test_lines_a_rule_reads_are_read():
    """Each word a rule looks for, a line in another format, and a colour code: read one by one
    (removing any of them from lines_to_read's list turns this red)."""
    base = ORDINARY[:3]
    for word in ("NVRM:", "SXid", "fallen", "Linux version "):
        assert lines_to_read([*base, f"[ 1.0] x {word} y", *base]) == [3]
    for other in ("Jun 10 03:09:55 host kernel: x", '{"MESSAGE":"x"}', "  continued", "",
                  "[pod/w/c] [ 1.0] x", "2025-06-01T12:00:00Z [ 1.0] x", "[1.0]x"):
        assert lines_to_read([*base, other, *base]) == [3], other
    assert lines_to_read([*base, "[ 1.0] \x1b[31mx\x1b[0m"]) is None


def test_runs_keep_count_first_time_and_line_numbers():
    text = "\n".join([*ORDINARY[5:], "[ 99.000000] NVRM: Xid (PCI:0000:10:00): 48, pid=1, "
                      "name=python, DBE", *ORDINARY[:3], "[100.000000] Linux version 6.8.0"]) + "\n"
    log = parse_kernel_log(text)
    assert (log.num_lines, log.first_time, log.from_boot) == (40, "5.000005", True)
    assert [(e.xid, e.line, e.time) for e in log.events] == [(48, 36, "99.000000")]
    assert log.boots == ((40, "100.000000"),)


def test_a_command_continued_into_ordinary_lines_is_unwrapped():
    """`$ dmesg \\` continues into the next line: that line is part of the command, whatever it
    looks like, and is not counted as a kernel line."""
    text = "\n".join(["$ dmesg -T \\", "[ 1.000000] --level=err", *ORDINARY[:4]]) + "\n"
    assert parse_kernel_log(text) == parse_kernel_log(text, by_line=True)
    assert parse_kernel_log(text).num_lines == 4


def test_a_message_continued_without_its_prefix_is_read():
    """The driver's multi-line "fallen off the bus" message, its second line without `NVRM:`
    (as a syslog relay prints it): read, not counted as an ordinary line."""
    text = "\n".join([*ORDINARY[:4], "[ 50.000000] NVRM: The NVIDIA GPU 0000:b3:00.0",
                      "[ 50.000000] (PCI ID: 10de:2330) installed in this system has",
                      "[ 50.000000] fallen off the bus and is not responding to commands.",
                      *ORDINARY[:4]]) + "\n"
    log = parse_kernel_log(text)
    assert log == parse_kernel_log(text, by_line=True)
    assert [(e.xid, e.pci, e.line) for e in log.events] == [(79, "0000:b3:00.0", 5)]
