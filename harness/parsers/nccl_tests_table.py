"""The nccl-tests text table, line by line: the banner, `# Rank N ... device` lines, the header
(every column layout seen in the wild), the rows, the footer and failure lines. Launcher and paste
wrappers are removed by harness.parsers.unwrap before a line gets here; harness.parsers.nccl_tests
splits a log into runs and builds the result.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from harness.parsers.nccl_tests_model import (
    BUS_FACTORS,
    MAX_ERRORS,
    MAX_RANKS,
    MAX_ROWS,
    Measurement,
    Row,
    bus_factor,
    collective_name,
)
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_float, ascii_int

__all__ = ["COMM_NRANKS", "NOT_MPI", "STARTING", "TableState", "clean_line", "feed_line",
           "infer_collective", "table_mismatches"]

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
COMM_NRANKS = re.compile(r"\bcomm 0x[0-9a-f]+ rank [0-9]+ nranks ([0-9]+)\b")
_ERROR_LINES = [
    re.compile(r"Test (?:CUDA |NCCL )?failure .*"),
    re.compile(r"\bNCCL failure .*"),
    re.compile(r"Test timeout .*"),
    re.compile(r"Invalid number of GPUs.*"),
    re.compile(r"# error: .*"),
]


# --- banner, rank lines, header, footer --------------------------------------------------------

STARTING = re.compile(r"Collective test starting:\s*([A-Za-z_]\w*)")
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
class Layout:
    """Column positions of one table: the lead columns and the two halves."""

    lead: list[str]
    halves: list[dict[str, int]]  # per half: name -> offset from the half's start
    width: int                    # tokens per half
    counts_wrong: bool = True     # `#wrong` (a count) rather than the old `error` (a deviation)
    at: dict[str, int] = field(default_factory=dict)  # lead column -> its position

    def __post_init__(self) -> None:
        self.at = {name: i for i, name in enumerate(self.lead)}  # as dict(zip()): the last wins

    def cell(self, tokens: list[str], *names: str) -> str | None:
        """The first of the lead columns `names` this table has, in a row's `tokens`."""
        at = self.at
        for name in names:
            if name in at:
                return tokens[at[name]]
        return None

    @classmethod
    def from_header(cls, names: list[str]) -> Layout | None:
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
    def guess(cls, ntokens: int) -> Layout | None:
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
    if not exp:  # (the common case; ascii_int("") is None, read as 0)
        return 0.5 * 10.0 ** -decimals
    try:
        return 0.5 * 10.0 ** ((ascii_int(exp) or 0) - decimals)
    except OverflowError:
        return math.inf


# --- the text parser ---------------------------------------------------------------------------

@dataclass(slots=True)
class TableState:
    collective: str | None = None
    checked: bool | None = None
    ranks: dict[int, tuple[str, str]] = field(default_factory=dict)
    duplicate_ranks: set[int] = field(default_factory=set)
    banner: bool = False
    layout: Layout | None = None
    rows: list[Row] = field(default_factory=list)
    cells: list[tuple[list[str], Layout]] = field(default_factory=list)  # printed, per row
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
    #: A run whose facts are not reported (harness.parsers.nccl_tests._Runs: not the first run,
    #: nor the first of the collective asked for): only its name and end are read, no rows.
    skim: bool = False


def parse_row(tokens: list[str], layout: Layout) -> tuple[Row | None, bool]:
    """(row, cut short): a row needs the lead columns and at least the out-of-place half."""
    lead = len(layout.lead)
    if len(tokens) < lead + layout.width:
        return None, True
    cell = layout.cell  # (no closure per row)
    size = ascii_int(cell(tokens, "size", "bytes"))
    count = ascii_int(cell(tokens, "count", "N"))
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
        values = [ascii_float(c) for c in cells]  # (_num, without a call per cell)
        if wrong is False or (None in values and any(
                v is None and not _is_nan(c) for v, c in zip(values, cells, strict=True))):
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
        size_bytes=size, count=count, dtype=cell(tokens, "type"),
        redop=cell(tokens, "redop", "op"),
        root=ascii_int(cell(tokens, "root")),
        oop=halves[0], ip=halves[1] if len(halves) > 1 else None,
    ), len(halves) < len(layout.halves)


def clean_line(raw: str, unwrapper: Unwrapper, plain: bool = False) -> str:
    """`raw` unwrapped ("" for wrapping and NCCL's own log lines); `plain`: it carries no
    wrapper (Unwrapper.candidates), so without a hydra rank tag it is its own text."""
    if "NCCL " in raw and _NCCL_LOG.search(raw):
        return ""
    if plain and "[" not in raw[:160]:
        unwrapper.host = None
        return raw
    if "[" in raw[:160]:
        inner = unwrapper.transported(raw) or ""  # (under a log shipper's wrappers too)
        if _RANK_TAG_START.match(inner):
            # A launcher that tags every write() with `[rank]` (MPICH/Intel MPI hydra style):
            # nccl-tests prints a row in three writes, so the tags sit inside the row too
            # (`-1[0]  1626.5`).
            raw = _RANK_TAG.sub(" ", inner)
    return unwrapper.unwrap(raw) or ""


_ERROR_LITERALS = ("ailure", "imeout", "Invalid number", "# error")


def feed_line(state: TableState, printed: str, line: str) -> None:
    """One line into `state`: `line` unwrapped, `printed` as the tool printed it (its own `host: `
    prefix kept; failure lines are kept so)."""
    stripped = line.strip()
    if not stripped:
        return
    if state.skim:
        _skim_line(state, printed, stripped)
        return
    if any(literal in printed for literal in _ERROR_LITERALS):
        for rx in _ERROR_LINES:
            m = rx.search(printed)
            if m:
                state.num_errors += 1
                if len(state.errors) < MAX_ERRORS:
                    state.errors.append(printed.strip()[:500])
                return
    if "Collective test" in stripped:
        if (m := STARTING.search(stripped)) is not None:
            state.collective = collective_name(m[1])
            return
        if (m := _CONCLUDED.search(stripped)) is not None:
            state.concluded = True
            state.collective = state.collective or collective_name(m[1])  # the banner may be cut
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
        state.layout = Layout.from_header(names)
        return
    if not "0" <= stripped[0] <= "9":  # `#` lines, prose
        return
    tokens = stripped.split()
    if not (tokens[0].isdigit() and tokens[0].isascii()):
        return
    layout = state.layout or Layout.guess(len(tokens))
    if layout is None:
        if len(tokens) < 11:
            state.truncated += 1
        return
    row, cut = parse_row(tokens, layout)
    if row is not None:
        if len(state.rows) < MAX_ROWS:
            state.rows.append(row)
            state.cells.append((tokens[:len(layout.lead) + 2 * layout.width], layout))
        else:
            state.omitted_rows += 1
    if cut:
        state.truncated += 1


def _skim_line(state: TableState, printed: str, stripped: str) -> None:
    """A line of a run that is not reported: its name and its end (the footer), as feed_line
    reads them, nothing else."""
    if "Collective test" in stripped or "Avg bus" in stripped:
        if any(literal in printed for literal in _ERROR_LITERALS) and any(
                rx.search(printed) for rx in _ERROR_LINES):
            return  # a failure line (feed_line reads it as one)
        if (m := STARTING.search(stripped)) is not None:
            state.collective = collective_name(m[1])
        elif (m := _CONCLUDED.search(stripped)) is not None:
            state.concluded = True
            state.collective = state.collective or collective_name(m[1])
        elif "Avg bus" in stripped and (m := _AVG.search(stripped)) is not None:
            state.avg = _num(m[1])


def infer_collective(rows: list[Row], nranks: int | None) -> str | None:
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


def table_mismatches(state: TableState, collective: str | None, nranks: int | None) -> list[str]:
    factor = bus_factor(collective, nranks)
    if factor is None:
        return []
    problems = []
    resolutions: dict[str, float] = {}  # cell -> _resolution(cell): a table repeats its cells
    for row, (tokens, layout) in zip(state.rows, state.cells, strict=True):
        lead = len(layout.lead)
        for h, (name, m) in enumerate((("out-of-place", row.oop), ("in-place", row.ip))):
            if m is None or m.algbw_gb_s is None or m.busbw_gb_s is None:
                continue
            start = lead + h * layout.width
            offsets = layout.halves[h]
            alg_tok, bus_tok = tokens[start + offsets["algbw"]], tokens[start + offsets["busbw"]]
            alg_res = resolutions.get(alg_tok)
            if alg_res is None:
                alg_res = resolutions[alg_tok] = _resolution(alg_tok)
            bus_res = resolutions.get(bus_tok)
            if bus_res is None:
                bus_res = resolutions[bus_tok] = _resolution(bus_tok)
            tolerance = alg_res * factor + bus_res + 1e-9
            expected = m.algbw_gb_s * factor
            if abs(expected - m.busbw_gb_s) > tolerance:
                problems.append(
                    f"busbw mismatch at {row.size_bytes} bytes ({name}): printed "
                    f"{m.busbw_gb_s:g} GB/s, algbw {m.algbw_gb_s:g} x {factor:.4g} "
                    f"({collective}, {nranks} ranks) = {expected:.4g} GB/s")
    return problems
