"""The NCCL log's candidate scan in C (harness/parsers/_nccl_scan.c) finds what the regexes
find (harness.parsers.nccl_log_lines MAIN and LIBFABRIC_WARN), on every recorded log and on
generated ones made of the grammar's own pieces; where a C compiler is, CI builds it (a parse
that silently fell back would still pass every other test, 3-5x slower)."""

from __future__ import annotations

import random
import shutil
import sysconfig

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.parsers import ParseError, nccl_log, nccl_log_chunk, nccl_log_payloads
from harness.parsers.nccl_log_lines import (
    LIBFABRIC_WARN,
    MAIN,
    OFI_LITERALS,
    RANK_LINE,
    payload_text,
)
from tests.conftest import REPO

scan = pytest.importorskip("harness.parsers._nccl_scan", reason="built without a C compiler")

LOGS = sorted((REPO / "tests" / "data").rglob("*.log"))

#: MAIN's words (and LIBFABRIC_WARN's), each also cut short or with its last byte changed: the
#: near misses of every branch.
WORDS = (b"NCCL", b"INFO ", b"via NET/", b"via COLLNET/", b"WARN", b"error", b"version", b"cpp:",
         b"SeqNum", b"<warn> ")
LETTERS = [bytes([c]) for c in b" .(NUcnIFsGCRxvV<|/\r\x00\xff"]


def near(word: bytes) -> st.SearchStrategy[bytes]:
    return st.one_of(st.just(word), st.integers(1, len(word) - 1).map(lambda k: word[:k]),
                     st.sampled_from(LETTERS).map(lambda c: word[:-1] + c))


PIECE = st.one_of(st.sampled_from(WORDS).flatmap(near), st.sampled_from(LETTERS))
#: A line shaped like MAIN's: something, `NCCL`, its separator, a branch's word, the rest.
LINE = st.tuples(
    st.lists(PIECE, max_size=3).map(b"".join), near(b"NCCL"), st.sampled_from(LETTERS),
    st.one_of(st.sampled_from(LETTERS).map(lambda c: b"INFO " + c),
              st.sampled_from(WORDS[4:9]).flatmap(near)),
    st.lists(PIECE, max_size=6).map(b"".join), st.sampled_from([b"\n", b"\n", b""]),
).map(b"".join)


def regex_scan(chunk: bytes | bytearray, end: int, seen: dict[bytes, None]):
    every = dict.fromkeys(MAIN.findall(chunk, 0, end))
    return [p for p in every if p not in seen], len(every)


def same(chunk: bytes | bytearray, end: int, seen: dict[bytes, None] | None = None) -> None:
    seen = {} if seen is None else seen
    assert scan.candidates(chunk, end, seen) == regex_scan(chunk, end, seen)
    assert scan.tails(chunk, end, b"<warn> ") == list(dict.fromkeys(
        LIBFABRIC_WARN.findall(chunk, 0, end)))


def test_recorded_logs_are_there():
    assert len(LOGS) > 40


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.relative_to(REPO / "tests" / "data").as_posix())
def test_every_recorded_log_scans_the_same(path):
    data = path.read_bytes()
    rng = random.Random(path.name)
    same(data, len(data))
    for _ in range(5):  # cut anywhere (a chunk ends at a line boundary, but the scan does not rely on it)
        same(bytearray(data), rng.randrange(len(data) + 1))
    found, _ = regex_scan(data, len(data), {})
    seen = dict.fromkeys(rng.sample(found, len(found) // 2))
    same(data, len(data), seen)


def near_all(word: bytes) -> list[bytes]:
    """`word`, each cut of it, and it with its last byte changed to each of LETTERS."""
    return [word] + [word[:k] for k in range(1, len(word))] + [word[:-1] + c for c in LETTERS]


def test_every_near_miss_of_every_branch_scans_the_same():
    """Exhaustive over MAIN's grammar, a dimension at a time: `NCCL` and its separator; each
    branch's word; the channel branch's `via` tails (and a tail cut by a line's end)."""
    heads = [n + sep + b"WARN x" for n in near_all(b"NCCL") for sep in LETTERS]
    branches = ([b"INFO " + c for c in LETTERS] + near_all(b"INFO ")
                + [w for word in WORDS[4:9] for w in near_all(word)])
    tails = [b"", b" x", b"vvia NET/", b"via via NET/", b" |via NET/x", b"via \nNET/"] + [
        b" 0 -> 1 " + t for word in (b"via NET/", b"via COLLNET/") for t in near_all(word)]
    lines = heads + [pre + b"NCCL " + branch + tail for pre in (b"", b"x NCC", b"[1,0]<stdout>:")
                     for branch in branches for tail in tails]
    chunk = b"\n".join(lines)
    assert len(regex_scan(chunk, len(chunk), {})[0]) > 500
    same(chunk, len(chunk))


@given(st.lists(LINE, max_size=30), st.integers(-5, 2000), st.sets(st.integers(0, 20), max_size=5))
@example([b"NCCL INFO Cvia NET/\n", b"NCCL INFO R via COLLNET/x\n"], 10**6, {0})
@example([b"NCCLNCCL(cpp:NCCL.WARN"], 13, set())
def test_generated_logs_scan_the_same(lines, end, seen_at):
    chunk = b"".join(lines)
    found, _ = regex_scan(chunk, len(chunk), {})
    same(chunk, end, dict.fromkeys(found[i] for i in seen_at if i < len(found)))


def parsed(path):
    """The summary of a parse through the chunked reader (4 KB: many chunk boundaries), or the
    ParseError's text."""
    try:
        with path.open("rb") as fh:
            return nccl_log.parse_nccl_log_stream(fh, chunk_bytes=4096)
    except ParseError as exc:
        return str(exc)


def test_a_parse_reads_the_same_with_and_without_it(monkeypatch):
    logs = [p for p in LOGS if p.parent.name == "nccl_log"]
    fast = [parsed(p) for p in logs]
    monkeypatch.setattr(nccl_log_chunk, "_nccl_scan", None)
    monkeypatch.setattr(nccl_log_payloads, "_holds_any", None)
    slow = [parsed(p) for p in logs]
    assert sum(not isinstance(f, str) for f in fast) > 30
    for path, f, s in zip(logs, fast, slow, strict=True):
        assert f == s, path.name


def test_bad_arguments_raise_instead_of_reading_out_of_bounds():
    with pytest.raises(TypeError):
        scan.candidates("NCCL WARN x", 11, {})
    with pytest.raises(TypeError):
        scan.candidates(b"NCCL WARN x", 11, [])
    with pytest.raises(ValueError, match="empty literal"):
        scan.tails(b"x", 1, b"")
    assert scan.candidates(memoryview(b"NCCL WARN x\n"), 99, {}) == ([b"NCCL WARN x"], 1)


#: Pieces of aws-ofi-nccl's literals (each cut short, or with a character changed), and
#: characters of every width str has (Latin-1, BMP, astral: holds_any reads only the first).
OFI_PIECES = st.one_of(
    st.sampled_from(OFI_LITERALS).flatmap(lambda w: st.one_of(
        st.just(w), st.integers(1, len(w)).map(lambda k: w[:k]), st.integers(1, len(w)).map(
            lambda k: w[k:]))),
    st.sampled_from([" ", "x", "0x1f", "\xe9", "\u20ac", "\U0001f600", "\x00"]))


@given(st.lists(OFI_PIECES, max_size=6).map("".join))
@example("NET/OFI Request 0x1001daa66d13 completed with error. RC: 103")
@example("\xe9 Using transport protocol RDMA")
def test_holds_any_says_what_the_loop_of_in_tests_says(text):
    """False only where no literal is in the text (the rules are then skipped: no rule matches
    without its literal); True where one is; True (the loop decides) past Latin-1."""
    held = any(literal in text for literal in OFI_LITERALS)
    got = scan.holds_any(text, OFI_LITERALS)
    assert got == held or (got and max(map(ord, text)) > 0xFF)


def test_holds_any_refuses_literals_it_cannot_read():
    for literals in [("",), ("\xe9",), (b"x",), ["x"]]:
        with pytest.raises(TypeError):
            scan.holds_any("x", literals)


def test_the_scan_is_built_where_a_compiler_is():
    """Checked where this suite runs (CI's editable install builds it in place)."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) here: the regexes scan")
    assert nccl_log_chunk._nccl_scan is scan


RANK_SHAPES = [
    b"NCCL INFO comm 0x5581 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0",
    b"NCCL INFO ncclCommInitRank comm 0x5581 rank 0 nranks 256 cudaDev 0 nvmlDev 0 busId 53000 "
    b"commId 0x9f - Init COMPLETE",
    b"NCCL INFO ncclCommInitRankConfig comm 0x1 rank 1 nranks 8 cudaDev 1 busId 1c0 - Init START",
    b"NCCL INFO comm 0xa rank 0 nranks 4 cudaDev 0 busId a0d0 - Destroy COMPLETE\r",
    b"NCCL INFO comm 0xa rank 0 nranks 0 cudaDev 0",
    # Not the shortcut's (the general path reads them):
    b"NCCL INFO comm 0xa rank 0 nranks 12 | 2024-05-01 | NCCL INFO comm 0xb rank 1 nranks 99",
    b"NCCL INFO comm 0xa rank 0 nranks 12x",
    b"NCCL INFO comm 0xa rank 0 nranks " + b"9" * 5000,  # no rank count (and past int()'s limit)
    b"NCCL INFO comm 0xZ rank 0 nranks 12",
    b"NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 16 total 0.51",
]


def test_rank_lines_read_by_the_shortcut_say_what_the_general_path_says():
    """harness.parsers.nccl_log reads RANK_LINE payloads by one match of the bytes; the
    general path (PayloadFacts.info) must agree on each, shortcut or not, one by one and in
    sequence (the count is the largest seen)."""
    from harness.parsers.nccl_log_payloads import PayloadFacts

    logs = [p for p in LOGS if p.parent.name == "nccl_log"]
    recorded = [raw for p in logs for raw in MAIN.findall(p.read_bytes())
                if RANK_LINE.match(raw)]
    assert len(recorded) > 20
    taken = 0
    for sequence in [[raw] for raw in RANK_SHAPES + recorded] + [RANK_SHAPES + recorded]:
        scanner, general = nccl_log._Scanner(), PayloadFacts(10)
        scanner.apply(nccl_log_chunk.ChunkScan(sequence, [], [], False, b"", 0))
        for raw in sequence:
            general.info(payload_text(raw)[10:])
        taken += sum(bool(RANK_LINE.match(raw)) for raw in sequence)
        got = scanner.facts
        assert (got.nranks, got.recognised) == (general.nranks, general.recognised), sequence
    assert taken > len(recorded)
