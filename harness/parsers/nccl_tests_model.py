"""nccl-tests results: what one run of `all_reduce_perf` (or another collective) measured, the
bus-bandwidth factors nccl-tests applies, and the bounds on what a parse keeps. The text table is
read by harness.parsers.nccl_tests_table, the `-J` JSON file by harness.parsers.nccl_tests_json;
harness.parsers.nccl_tests is the entry point (parse_nccl_tests, `preflight inspect nccl-tests`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONObject

__all__ = [
    "BUS_FACTORS",
    "MAX_ERRORS",
    "MAX_RANKS",
    "MAX_ROWS",
    "MAX_RUN_NAMES",
    "Measurement",
    "NcclTestsResult",
    "Row",
    "bus_factor",
    "collective_name",
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

    def to_dict(self) -> JSONObject:
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
        """Wrong elements over both halves; None when neither counted them."""
        oop, ip = self.oop.wrong, None if self.ip is None else self.ip.wrong
        if oop is None:
            return ip
        return oop if ip is None else oop + ip

    def to_dict(self) -> JSONObject:
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
        if self.checked is False:
            return None
        values = [w for r in self.rows if (w := r.wrong) is not None]
        return sum(values) if values else None

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

    def to_dict(self) -> JSONObject:
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


#: Bounds on what one run keeps (memory stays flat on any log): a sweep has tens of rows, a job
#: at most some 100,000 ranks; past them rows and ranks are counted, not kept.
MAX_ROWS = 10_000
MAX_RANKS = 200_000
MAX_ERRORS = 200
#: Runs named in the "the output holds N runs" warning.
MAX_RUN_NAMES = 20


def collective_name(program: str) -> str:
    """`./build/all_reduce_perf_mpi` -> `all_reduce`."""
    name = program.rsplit("/", 1)[-1]
    name = re.sub(r"(_perf)?(_mpi)?$", "", name)
    return name
