"""nccl-tests output (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
...): the text table of every version seen in the wild, launcher prefixes included, and the `-J`
JSON file. Reads rows like::

    #       size         count      type   redop    root     time   algbw   busbw #wrong ...
      1073741824     268435456     float     sum      -1   6759.0  158.86  297.86      0 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 70.742
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, TextIO

from harness.parsers import ParseError
from harness.parsers.commands import command_collective, command_nranks
from harness.parsers.reader import MAX_DOCUMENT_CHARS, Input, as_input
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_float, ascii_int

__all__ = [
    "BUS_FACTORS",
    "INSPECT",
    "Measurement",
    "NcclTestsResult",
    "Row",
    "bus_factor",
    "inspect_nccl_tests",
    "parse_nccl_tests",
]

#: busbw / algbw per collective, as nccl-tests computes it (src/<collective>.cu, GetBw).
BUS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "hypercube": lambda n: 1.0,  # its algbw already counts the (n-1) peers (src/hypercube.cu)
}


def bus_factor(collective: str | None, nranks: int | None) -> float | None:
    """busbw / algbw for `collective` over `nranks` ranks; None when either is unknown."""
    if collective not in BUS_FACTORS or not nranks:
        return None
    return BUS_FACTORS[collective](nranks)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One half of a row (out-of-place or in-place). `wrong` is None when not checked (N/A); in
    old `error` tables it is None too, or 1 where rccl-tests starred the deviation (`3e-01*`)."""

    time_us: float | None
    algbw_gb_s: float | None
    busbw_gb_s: float | None
    wrong: int | None
    max_error: float | None = None
    """Old versions (`error` column): the largest deviation seen, not a count; judged by the
    footer's out-of-bounds count instead."""

    def to_dict(self) -> dict[str, Any]:
        return {"time_us": self.time_us, "algbw_gb_s": self.algbw_gb_s,
                "busbw_gb_s": self.busbw_gb_s, "wrong": self.wrong}


@dataclass(frozen=True, slots=True)
class Row:
    """One message size. `ip` is None when the row was cut short after the out-of-place half."""

    size_bytes: int
    count: int
    dtype: str | None
    redop: str | None
    root: int | None
    oop: Measurement
    ip: Measurement | None

    @property
    def busbw_gb_s(self) -> float | None:
        """Mean of the out-of-place and in-place busbw (what nccl-tests' average is made of)."""
        values = [m.busbw_gb_s for m in (self.oop, self.ip) if m and m.busbw_gb_s is not None]
        return sum(values) / len(values) if values else None

    @property
    def wrong(self) -> int | None:
        values = [m.wrong for m in (self.oop, self.ip) if m and m.wrong is not None]
        return sum(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        return {"size_bytes": self.size_bytes, "count": self.count, "oop": self.oop.to_dict(),
                "ip": None if self.ip is None else self.ip.to_dict()}


@dataclass(frozen=True, slots=True)
class NcclTestsResult:
    """Everything one nccl-tests run printed that a check can judge."""

    collective: str | None
    """`all_reduce`, `all_gather`, ... (from the banner, the binary name, or the columns)."""
    nranks: int | None
    """Ranks in the test, from the `#  Rank N Group ...` lines; None when they were not printed."""
    dtype: str | None
    redop: str | None
    rows: tuple[Row, ...]
    avg_busbw_gb_s: float | None
    """`# Avg bus bandwidth` (mean over every row); None when the footer is missing, never 0."""
    out_of_bounds: int | None
    """`# Out of bounds values : N`; None when the footer is missing."""
    completed: bool
    """The footer was printed (the sweep finished)."""
    errors: tuple[str, ...] = ()
    """Failure lines (`Test CUDA failure ...`, `Test NCCL failure ...`, timeouts), in order."""
    busbw_mismatches: tuple[str, ...] = ()
    """Rows whose printed busbw differs from algbw x the collective's factor."""
    checked: bool | None = None
    """Data validation on (`validation: 1` / `-c 1`); None when the banner was not printed."""
    hosts: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    min_bw_failed: bool = False
    """`NCCL_TESTS_MIN_BW` was set and the average missed it (the footer says FAILED)."""
    truncated_rows: int = 0
    """Table lines that were cut short and could not be read."""
    source_format: str = "text"
    warnings: tuple[str, ...] = field(default=())
    commands: tuple[str, ...] = ()
    """Command lines pasted with the output (harness.parsers.unwrap): context for the
    collective and the rank count when the banner does not give them."""
    num_runs: int = 1
    """Separate runs in the output (a banner after a footer starts the next): a log that
    concatenates runs, or, from one launch, one whole test per process (no MPI)."""

    @property
    def num_wrong(self) -> int | None:
        """Wrong elements over every row, or None when the data was not checked (`-c 0`, N/A)."""
        values = [r.wrong for r in self.rows if r.wrong is not None]
        return None if self.checked is False or not values else sum(values)

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.size_bytes, default=None)

    @property
    def num_nodes(self) -> int | None:
        return len(self.hosts) or None

    def at_size(self, size_bytes: int) -> Row | None:
        """The last row measured at exactly `size_bytes` (a sweep may repeat sizes)."""
        found = [r for r in self.rows if r.size_bytes == size_bytes]
        return found[-1] if found else None

    def to_dict(self) -> dict[str, Any]:
        """The `preflight inspect nccl-tests --json` document."""
        largest = self.largest
        return {
            "collective": self.collective,
            "nranks": self.nranks,
            "dtype": self.dtype,
            "redop": self.redop,
            "rows": [r.to_dict() for r in self.rows],
            "avg_busbw_gb_s": self.avg_busbw_gb_s,
            "largest": None if largest is None else {
                "size_bytes": largest.size_bytes, "busbw_gb_s": largest.busbw_gb_s},
            "num_wrong": self.num_wrong,
            "out_of_bounds": self.out_of_bounds,
            "completed": self.completed,
            "errors": list(self.errors) + list(self.busbw_mismatches),
            "commands_seen": list(self.commands),
        }


# --- line clean-up -----------------------------------------------------------------------------

# Launcher and paste wrappers are removed by harness.parsers.unwrap (with the pdsh `host: `
# prefix, which only this parser's lines never start with).
#: Why every process ran the whole test on its own (said wherever the output shows it).
NOT_MPI = "the binary was not built with MPI (make MPI=1), so every process ran its own test alone"
_NCCL_LOG = re.compile(r"\bNCCL (?:INFO|WARN|TRACE|ABORT)\b")
_RANK_TAG = re.compile(r"\[[0-9]+\]")
_RANK_TAG_START = re.compile(r"\s*\[[0-9]+\]")
# Searched only in lines that hold `NCCL INFO` and `Init COMPLETE` (no `.*` around it: two of
# them rescanned the line from every `comm` in it).
_COMM_NRANKS = re.compile(r"\bcomm 0x[0-9a-f]+ rank [0-9]+ nranks ([0-9]+)\b")
_ERROR_LINES = [
    re.compile(r"Test (?:CUDA |NCCL )?failure .*"),
    re.compile(r"\bNCCL failure .*"),
    re.compile(r"Test timeout .*"),
    re.compile(r"Invalid number of GPUs.*"),
    re.compile(r"# error: .*"),
]


# --- banner, rank lines, header, footer --------------------------------------------------------

_STARTING = re.compile(r"Collective test starting:\s*([A-Za-z_]\w*)")
_CONCLUDED = re.compile(r"Collective test concluded:\s*([A-Za-z_]\w*)")
_VALIDATION = re.compile(r"\bvalidation:\s*([0-9]+)")
_RANK = re.compile(
    r"^#?\s*Rank\s+(?P<rank>[0-9]+)\s+(?:Group\s+[0-9]+\s+)?(?:Pid\s+[0-9]+\s+)?on\s+(?:(?P<host>\S+)\s+)??"
    r"device\s+(?P<dev>[0-9]+)\s+\[[^\]]*\]\s*(?P<name>.*)$"
)
_OOB = re.compile(r"Out of bounds values\s*:\s*([0-9]+)\s*(OK|FAILED)?")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([-+0-9.eE]+|nan|inf)\s*(OK|FAILED)?")
_TIME_NAMES = {"time", "cputime"}
_WRONG_NAMES = {"#wrong", "error", "res", "wrong"}


@dataclass(slots=True)
class _Layout:
    """Column positions of one table: the lead columns and the two halves."""

    lead: list[str]
    halves: list[dict[str, int]]  # per half: name -> offset from the half's start
    width: int                    # tokens per half
    counts_wrong: bool = True     # `#wrong` (a count) rather than the old `error` (a deviation)
    at: dict[str, int] = field(default_factory=dict)  # lead column -> its position

    def __post_init__(self) -> None:
        self.at = {name: i for i, name in enumerate(self.lead)}  # as dict(zip()): the last wins

    @classmethod
    def from_header(cls, names: list[str]) -> _Layout | None:
        starts = [i for i, n in enumerate(names) if n in _TIME_NAMES]
        if not starts or "algbw" not in names:
            return None
        lead = names[:starts[0]]
        width = (starts[1] - starts[0]) if len(starts) > 1 else len(names) - starts[0]
        halves = []
        for s in starts[:2]:
            part = names[s:s + width]
            halves.append({
                "time": 0,
                "algbw": part.index("algbw") if "algbw" in part else 1,
                "busbw": part.index("busbw") if "busbw" in part else 2,
                "wrong": next((i for i, n in enumerate(part) if n in _WRONG_NAMES), 3),
            })
        counts = any(n in ("#wrong", "wrong") for n in names)
        return cls(lead, halves, width, counts_wrong=counts)

    @classmethod
    def guess(cls, ntokens: int) -> _Layout | None:
        """Layout from the token count alone, for output whose header was cut off."""
        leads = {13: ["size", "count", "type", "redop", "root"],
                 12: ["size", "count", "type", "redop"], 11: ["size", "count", "type"]}
        if ntokens not in leads:
            return None
        half = {"time": 0, "algbw": 1, "busbw": 2, "wrong": 3}
        # Tables without a root column predate `#wrong`: their 4th cell is the old error.
        return cls(leads[ntokens], [half, dict(half)], 4, counts_wrong=ntokens == 13)


def _header_names(line: str) -> list[str] | None:
    body = line.lstrip("#").split()
    if len(body) >= 6 and body[0] in ("size", "bytes") and ("algbw" in body):
        return body
    return None


def _num(token: str) -> float | None:
    """A finite number in ASCII (`nan`, `inf`, Unicode digits, `1_0`: None)."""
    return ascii_float(token)


def _is_nan(token: str) -> bool:
    """`nan`, `-nan` (glibc's printf of a negative NaN), `inf`: a number nccl-tests printed (a
    zero time gives an infinite bandwidth), not garbage; its value is unknown."""
    return token.lower().lstrip("+-") in ("nan", "inf")


def _wrong(token: str) -> int | bool | None:
    """#wrong cell: an int (scientific notation too), None for N/A, False when unreadable
    (`nan`, `inf` and garbage: the row's data check is unknown, never 0 wrong)."""
    if token.upper() == "N/A":
        return None
    value = _num(token.rstrip("*"))
    if value is None:
        return False
    return round(value)


def _resolution(token: str) -> float:
    """Half the last printed digit of a number (nccl-tests rounds to 2, 1 or 0 decimals)."""
    mantissa, _, exp = token.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    try:
        return 0.5 * 10.0 ** ((ascii_int(exp) or 0) - decimals)
    except OverflowError:
        return math.inf


# --- the text parser ---------------------------------------------------------------------------

@dataclass(slots=True)
class _State:
    collective: str | None = None
    checked: bool | None = None
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)
    duplicate_ranks: set[int] = field(default_factory=set)
    banner: bool = False
    layout: _Layout | None = None
    rows: list[Row] = field(default_factory=list)
    cells: list[tuple[list[str], _Layout]] = field(default_factory=list)  # printed, per row
    errors: list[str] = field(default_factory=list)
    oob: int | None = None
    avg: float | None = None
    min_bw_failed: bool = False
    concluded: bool = False
    truncated: int = 0
    comm_nranks: int | None = None
    num_errors: int = 0
    max_rank: int = -1
    omitted_rows: int = 0


def _parse_row(tokens: list[str], layout: _Layout) -> tuple[Row | None, bool]:
    """(row, cut short): a row needs the lead columns and at least the out-of-place half."""
    lead = len(layout.lead)
    if len(tokens) < lead + layout.width:
        return None, True
    at = layout.at

    def cell(*names: str) -> str | None:
        for name in names:
            if name in at:
                return tokens[at[name]]
        return None

    size = ascii_int(cell("size", "bytes"))
    count = ascii_int(cell("count", "N"))
    if size is None or count is None:
        return None, False
    halves: list[Measurement] = []
    for h, offsets in enumerate(layout.halves):
        start = lead + h * layout.width
        part = tokens[start:start + layout.width]
        if len(part) < max(offsets.values()) + 1:
            break
        wrong = _wrong(part[offsets["wrong"]])
        cells = (part[offsets["time"]], part[offsets["algbw"]], part[offsets["busbw"]])
        values = [_num(c) for c in cells]
        if wrong is False or any(v is None and not _is_nan(c)
                                 for v, c in zip(values, cells, strict=True)):
            if h == 0:
                return None, True
            break
        if layout.counts_wrong:
            halves.append(Measurement(values[0], values[1], values[2], wrong))  # type: ignore[arg-type]
        else:
            # rccl-tests marks a deviation above its tolerance with `*` (`2e-01*`): a wrong row.
            deviation = part[offsets["wrong"]]
            halves.append(Measurement(values[0], values[1], values[2],
                                      1 if deviation.endswith("*") else None,
                                      _num(deviation.rstrip("*"))))
    if not halves:
        return None, True
    return Row(
        size_bytes=size, count=count, dtype=cell("type"),
        redop=cell("redop", "op"),
        root=ascii_int(cell("root")),
        oop=halves[0], ip=halves[1] if len(halves) > 1 else None,
    ), len(halves) < len(layout.halves)


def _clean(raw: str, unwrapper: Unwrapper) -> str:
    if "NCCL " in raw and _NCCL_LOG.search(raw):
        return ""
    if "[" in raw[:64] and _RANK_TAG_START.match(raw):
        # A launcher that tags every write() with `[rank]` (MPICH/Intel MPI hydra style): nccl-tests
        # prints a row in three writes, so the tags sit inside the row too (`-1[0]  1626.5`).
        raw = _RANK_TAG.sub(" ", raw)
    return unwrapper.unwrap(raw) or ""


#: Bounds on what one run keeps (memory stays flat on any log): a sweep has tens of rows, a job
#: at most some 100,000 ranks; past them rows and ranks are counted, not kept.
MAX_ROWS = 10_000
MAX_RANKS = 200_000
MAX_ERRORS = 200
#: Runs named in the "the output holds N runs" warning.
MAX_RUN_NAMES = 20
_ERROR_LITERALS = ("ailure", "imeout", "Invalid number", "# error")


def _feed(state: _State, raw: str, line: str) -> None:
    stripped = line.strip()
    if not stripped:
        return
    if any(literal in raw for literal in _ERROR_LITERALS):
        for rx in _ERROR_LINES:
            m = rx.search(raw)
            if m:
                state.num_errors += 1
                if len(state.errors) < MAX_ERRORS:
                    state.errors.append(raw.strip()[:500])
                return
    if "Collective test" in stripped:
        if (m := _STARTING.search(stripped)) is not None:
            state.collective = _collective_name(m[1])
            return
        if (m := _CONCLUDED.search(stripped)) is not None:
            state.concluded = True
            state.collective = state.collective or _collective_name(m[1])  # the banner may be cut
            return
    if "nThread" in stripped:
        state.banner = True
        if (m := _VALIDATION.search(stripped)) is not None:
            state.checked = m[1] != "0"
        return
    if "Rank" in stripped and (m := _RANK.match(stripped)) is not None:
        rank = ascii_int(m["rank"])
        if rank is None:
            return
        state.max_rank = max(state.max_rank, rank)
        if rank in state.ranks:
            state.duplicate_ranks.add(rank)
        if rank in state.ranks or len(state.ranks) < MAX_RANKS:
            state.ranks[rank] = (m["host"] or "", m["name"].strip()[:200])
        return
    if "Out of bounds" in stripped and (m := _OOB.search(stripped)) is not None:
        state.oob = ascii_int(m[1])
        return
    if "Avg bus" in stripped and (m := _AVG.search(stripped)) is not None:
        state.avg = _num(m[1])
        state.min_bw_failed = m[2] == "FAILED"
        return
    names = _header_names(stripped) if "algbw" in stripped else None  # `#` may be lost
    if names is not None:
        state.layout = _Layout.from_header(names)
        return
    if not "0" <= stripped[0] <= "9":  # `#` lines, prose
        return
    tokens = stripped.split()
    if not (tokens[0].isdigit() and tokens[0].isascii()):
        return
    layout = state.layout or _Layout.guess(len(tokens))
    if layout is None:
        if len(tokens) < 11:
            state.truncated += 1
        return
    row, cut = _parse_row(tokens, layout)
    if row is not None:
        if len(state.rows) < MAX_ROWS:
            state.rows.append(row)
            state.cells.append((tokens[:len(layout.lead) + 2 * layout.width], layout))
        else:
            state.omitted_rows += 1
    if cut:
        state.truncated += 1


def _collective_name(program: str) -> str:
    """`./build/all_reduce_perf_mpi` -> `all_reduce`."""
    name = program.rsplit("/", 1)[-1]
    name = re.sub(r"(_perf)?(_mpi)?$", "", name)
    return name


def _infer_collective(rows: list[Row], nranks: int | None) -> str | None:
    """From redop/root and the busbw/algbw ratio, when the banner named no collective."""
    if not rows:
        return None
    row = max(rows, key=lambda r: r.size_bytes)
    if row.redop in (None, "none"):
        # broadcast has a root; all_gather and alltoall share columns and factor: ambiguous.
        return "broadcast" if row.root not in (None, -1) else None
    if row.root not in (None, -1):
        return "reduce"
    algbw, busbw = row.oop.algbw_gb_s, row.oop.busbw_gb_s
    if not algbw or busbw is None:
        return None
    ratio = busbw / algbw
    if not nranks:
        # `sum -1` and no rank count: all_reduce's factor 2(n-1)/n is the only one above 1,
        # reduce_scatter's (n-1)/n the only one below; near 1 the three are alike.
        return "all_reduce" if ratio > 1.05 else "reduce_scatter" if ratio < 0.95 else None
    # sendrecv prints `sum -1` too; on 2 ranks its factor equals all_reduce's: then say nothing.
    factors = {c: BUS_FACTORS[c](nranks) for c in ("all_reduce", "reduce_scatter", "sendrecv")}
    best = min(factors, key=lambda c: abs(factors[c] - ratio))
    tied = [c for c in factors if abs(factors[c] - factors[best]) < 1e-9]
    return best if len(tied) == 1 else None


def _mismatches(state: _State, collective: str | None, nranks: int | None) -> list[str]:
    factor = bus_factor(collective, nranks)
    if factor is None:
        return []
    problems = []
    for row, (tokens, layout) in zip(state.rows, state.cells, strict=True):
        lead = len(layout.lead)
        for h, (name, m) in enumerate((("out-of-place", row.oop), ("in-place", row.ip))):
            if m is None or m.algbw_gb_s is None or m.busbw_gb_s is None:
                continue
            start = lead + h * layout.width
            offsets = layout.halves[h]
            alg_tok, bus_tok = tokens[start + offsets["algbw"]], tokens[start + offsets["busbw"]]
            tolerance = _resolution(alg_tok) * factor + _resolution(bus_tok) + 1e-9
            expected = m.algbw_gb_s * factor
            if abs(expected - m.busbw_gb_s) > tolerance:
                problems.append(
                    f"busbw mismatch at {row.size_bytes} bytes ({name}): printed "
                    f"{m.busbw_gb_s:g} GB/s, algbw {m.algbw_gb_s:g} x {factor:.4g} "
                    f"({collective}, {nranks} ranks) = {expected:.4g} GB/s")
    return problems


def parse_nccl_tests(text: str | Input, *, collective: str | None = None) -> NcclTestsResult:
    """Parse nccl-tests output (text table or the `-J` JSON document), a str or an Input read
    in one streaming pass.

    `collective` names the test when the caller knows it (the binary it ran); otherwise it comes
    from the `# Collective test starting: all_reduce_perf` banner or the table's columns.
    Raises ParseError when the input holds neither a table row, a footer, nor a failure line.
    """
    source = as_input(text)
    if source.head(4096).lstrip()[:1] == "{":
        doc = source.document()
        if doc is None:
            raise ParseError(f"JSON input larger than {MAX_DOCUMENT_CHARS >> 20} MiB: not an "
                             "nccl-tests -J document (those are a few KB)")
        return _parse_json(doc, collective)
    runs = _Runs(collective)
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
            or _infer_collective(state.rows, nranks))
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
        busbw_mismatches=tuple(_mismatches(state, name, nranks)),
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

    def __init__(self, collective: str | None) -> None:
        self.collective = collective
        self.current = _State()
        self.first: _State | None = None
        self.chosen: _State | None = None  # the first run of `collective`
        self.count = 1
        self.names: list[str] = []
        self.unwrapper = Unwrapper(host_prefix=True)

    def feed(self, lines: list[str]) -> None:
        for raw in lines:
            raw = raw.rstrip()
            line = _clean(raw, self.unwrapper)
            current = self.current
            if not line:
                if "Init COMPLETE" in raw and (m := _COMM_NRANKS.search(raw)) is not None:
                    nranks = ascii_int(m[1])
                    if nranks is not None:
                        current.comm_nranks = max(current.comm_nranks or 0, nranks)
                continue
            ended = current.avg is not None or current.concluded
            if ended and ("nThread" in line or _STARTING.search(line)):
                self._close()
                self.current = _State()
                self.count += 1
            _feed(self.current, raw, line)

    def _close(self) -> None:
        state = self.current
        if len(self.names) < MAX_RUN_NAMES:
            self.names.append(state.collective or "?")
        if self.first is None:
            self.first = state
        if self.collective and self.chosen is None and state.collective == self.collective:
            self.chosen = state

    def finish(self) -> _State:
        self._close()
        assert self.first is not None
        return self.chosen or self.first


# --- the -J JSON document ----------------------------------------------------------------------

def _json_num(value: Any) -> float | None:
    """A finite JSON number (not a bool, not NaN/Infinity, which Python's json accepts)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _json_int(value: Any) -> int | None:
    """An integer from a JSON number or numeric string (`"root": "0"`)."""
    if isinstance(value, str):
        return ascii_int(value)
    number = _json_num(value)
    return None if number is None or abs(number) >= 1e18 else round(number)


def _json_measure(obj: Any) -> Measurement | None:
    if not isinstance(obj, dict):
        return None
    return Measurement(_json_num(obj.get("time")) if "time" in obj else _json_num(obj.get("cpu_time")),
                       _json_num(obj.get("alg_bw")), _json_num(obj.get("bus_bw")),
                       _json_int(obj.get("nwrong")))


def _json_results(text: str) -> tuple[dict[str, Any], bool]:
    """The document, or what can be salvaged from a file cut short (result objects only)."""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            return doc, True
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    results = []
    for m in re.finditer(r'\{"size":', text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except (ValueError, RecursionError):
            continue
        results.append(obj)
        if len(results) >= MAX_ROWS:
            break
    salvaged: dict[str, Any] = {"results": results}
    for key in ("args", "config"):
        m = re.search(rf'"{key}":', text)
        if m:
            with contextlib.suppress(ValueError, RecursionError):
                salvaged[key], _ = decoder.raw_decode(text, m.end())
    return salvaged, False


def _parse_json(text: str, collective: str | None) -> NcclTestsResult:
    doc, whole = _json_results(text)
    results = doc.get("results") if isinstance(doc.get("results"), list) else []
    if not results and "average_bus_bandwidth" not in doc:
        raise ParseError("JSON input is not an nccl-tests -J document (no `results` list)")
    rows = []
    for obj in results[:MAX_ROWS]:
        if not isinstance(obj, dict):
            continue
        oop = _json_measure(obj.get("out_of_place"))
        ip = _json_measure(obj.get("in_place"))
        if oop is None and ip is None:
            continue
        redop, dtype = obj.get("redop"), obj.get("type")
        rows.append(Row(_json_int(obj.get("size")) or 0, _json_int(obj.get("count")) or 0,
                        dtype if isinstance(dtype, str) else None,
                        redop if isinstance(redop, str) else None, _json_int(obj.get("root")),
                        oop or ip, ip if oop else None))  # type: ignore[arg-type]
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    devices = config.get("devices") if isinstance(config.get("devices"), list) else []
    per_proc = max(_json_int(config.get("ngpus")) or 1, 1) * max(_json_int(config.get("nthreads")) or 1, 1)
    nranks = len(devices) * per_proc if devices else None
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    name = collective or (_collective_name(str(args[0])) if args else None)
    avg = doc.get("average_bus_bandwidth")
    avg_value = _json_num(avg.get("bandwidth")) if isinstance(avg, dict) else None
    oob = doc.get("out_of_bounds")
    raw_errors = doc.get("errors")
    errors = [str(e)[:500] for e in raw_errors[:MAX_ERRORS] if e] if isinstance(raw_errors, list) else []
    validation = config.get("validation")
    hosts = tuple(dict.fromkeys(str(d.get("hostname")) for d in devices if isinstance(d, dict)))
    return NcclTestsResult(
        collective=name, nranks=nranks,
        dtype=rows[0].dtype if rows else None, redop=rows[0].redop if rows else None,
        rows=tuple(rows),
        avg_busbw_gb_s=avg_value,
        out_of_bounds=_json_int(oob.get("count")) if isinstance(oob, dict) else None,
        completed=whole and avg_value is not None and not errors,
        errors=tuple(errors),
        busbw_mismatches=tuple(_json_mismatches(rows, name, nranks)),
        checked=None if validation is None else bool(validation),
        hosts=hosts,
        devices=tuple(str(d.get("device_info")) for d in devices[:1] if isinstance(d, dict)),
        min_bw_failed=isinstance(avg, dict) and avg.get("okay") is False,
        source_format="json",
        warnings=() if whole else ("JSON document cut short: rows salvaged",),
    )


def _json_mismatches(rows: list[Row], collective: str | None, nranks: int | None) -> list[str]:
    factor = bus_factor(collective, nranks)
    if factor is None:
        return []
    out = []
    for row in rows:
        for name, m in (("out-of-place", row.oop), ("in-place", row.ip)):
            if m is None or m.algbw_gb_s is None or m.busbw_gb_s is None:
                continue
            expected = m.algbw_gb_s * factor
            if abs(expected - m.busbw_gb_s) > 1e-3 * max(1.0, expected):
                out.append(f"busbw mismatch at {row.size_bytes} bytes ({name}): printed "
                           f"{m.busbw_gb_s:g} GB/s, algbw {m.algbw_gb_s:g} x {factor:.4g} = "
                           f"{expected:.4g} GB/s")
    return out


def inspect_nccl_tests(stream: TextIO | Input, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect nccl-tests FILE`: keys collective, nranks, dtype, redop, rows
    [{size_bytes, count, oop {time_us, algbw_gb_s, busbw_gb_s, wrong}, ip {...}}],
    avg_busbw_gb_s, largest {size_bytes, busbw_gb_s}, num_wrong, out_of_bounds, completed,
    errors (failure lines, then busbw mismatches), and `verdicts`: the bandwidth gates' own
    judgement of the busbw for the profile (harness.judges; PF-BW-001/002)."""
    from harness import judges

    result = parse_nccl_tests(as_input(stream))
    return {**result.to_dict(),
            "verdicts": [v.to_json() for v in judges.nccl_tests_verdicts(profile, result)]}


INSPECT = {"nccl-tests": inspect_nccl_tests}
