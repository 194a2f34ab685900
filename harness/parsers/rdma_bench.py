"""Per-device RDMA benchmark outputs: fabtests (`fi_rdm_pingpong`, `fi_rdm_bw`,
`fi_rdm_tagged_bw`, `fi_rma_bw`: one `show_perf` table) and perftest (`ib_write_bw`,
`ib_send_bw`, ...), as typed rows.

fabtests, ofiwg/libfabric `fabtests/common/shared.c` show_perf: header `bytes iters total time
MB/sec usec/xfer Mxfers/sec` (a leading name column when a test name is given); sizes use
binary suffixes (size_str: `1.5m` = 1.5 * 2^20), counts decimal ones (cnt_str: `20k`); MB/sec is
bytes / elapsed microseconds (10^6 B/s); pingpong tests print usec/xfer as one-way latency.

perftest, linux-rdma/perftest `src/perftest_parameters.h`: ` #bytes #iterations BW peak[UNIT]
BW average[UNIT] MsgRate[Mpps]`, UNIT `Gb/sec` (--report_gbits), `MiB/sec`, or `MB/sec` before
commit 1d202bb (2024, "Display proper unit for MiB/sec results"): both mean 2^20 B/s."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.parsers import ParseError

__all__ = ["FabtestsRow", "FabtestsTable", "PerftestResult", "PerftestRow", "parse_fabtests",
           "parse_perftest"]

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}
_FAB_HEADER = re.compile(r"^\s*(?:\S+\s+)?bytes\s+(?:#sent\s+#ack|iters)\s+total\s+time\s+"
                         r"MB/sec\s+usec/xfer\s+Mxfers/sec\s*$")
_NUM = r"[0-9]+(?:\.[0-9]+)?"
_FAB_ROW = re.compile(rf"^\s*(?:\S+\s+)?(?P<size>{_NUM})(?P<su>[kmg]?)\s+(?P<iters>{_NUM})"
                      rf"(?P<iu>[kmb]?)\s+{_NUM}[kmg]?\s+(?P<time>{_NUM})s\s+(?P<mbs>{_NUM})\s+"
                      rf"(?P<usec>{_NUM})\s+{_NUM}\s*$")
_FAB_CUT = re.compile(rf"^\s*(?:\S+\s+)?{_NUM}[kmg]?\s+{_NUM}[kmb]?\s+{_NUM}[kmg]?\s+{_NUM}s\b")


@dataclass(frozen=True, slots=True)
class FabtestsRow:
    size_bytes: int
    iterations: int
    mb_per_s: float
    """10^6 bytes per second."""
    usec_per_xfer: float

    @property
    def gbit_per_s(self) -> float:
        return self.mb_per_s * 8 / 1000


@dataclass(slots=True)
class FabtestsTable:
    rows: list[FabtestsRow] = field(default_factory=list)
    cut_rows: int = 0
    """Rows that start like a result but lack its columns (a truncated output)."""

    def peak_gbit_per_s(self) -> float | None:
        return max((r.gbit_per_s for r in self.rows), default=None)

    def latency_us(self, size_bytes: int | None = None) -> float | None:
        """usec/xfer at `size_bytes` (default: the smallest size measured)."""
        if not self.rows:
            return None
        if size_bytes is None:
            return min(self.rows, key=lambda r: r.size_bytes).usec_per_xfer
        return next((r.usec_per_xfer for r in self.rows if r.size_bytes == size_bytes), None)


def parse_fabtests(text: str) -> FabtestsTable:
    """The first show_perf table in `text` (a server+client transcript holds two: the first is
    read). ParseError when there is no header or no complete row."""
    table, in_table = FabtestsTable(), False
    for line in text.splitlines():
        if _FAB_HEADER.match(line):
            if in_table:
                break
            in_table = True
            continue
        if not in_table:
            continue
        m = _FAB_ROW.match(line)
        if m:
            table.rows.append(FabtestsRow(
                int(float(m["size"]) * _BINARY[m["su"]]), int(float(m["iters"]) * _DECIMAL[m["iu"]]),
                float(m["mbs"]), float(m["usec"])))
        elif _FAB_CUT.match(line):
            table.cut_rows += 1
        elif table.rows and line.strip():
            break
    if not in_table:
        raise ParseError("no fabtests table (`bytes iters total time MB/sec usec/xfer "
                         "Mxfers/sec`) in the output")
    if not table.rows:
        raise ParseError("the fabtests table has no complete row")
    return table


_PERF_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(?P<unit>[^\]]+)\]\s+"
                          r"BW average\[(?P=unit)\]")
_PERF_ROW = re.compile(rf"^\s*(?P<bytes>[0-9]+)\s+(?P<iters>[0-9]+)\s+(?P<peak>{_NUM})\s+"
                       rf"(?P<avg>{_NUM})\s+(?P<rate>{_NUM})\s*$")
_TO_GBIT = {"Gb/sec": 1.0, "MiB/sec": 8 * 2**20 / 1e9, "MB/sec": 8 * 2**20 / 1e9}


@dataclass(frozen=True, slots=True)
class PerftestRow:
    size_bytes: int
    iterations: int
    peak_gbit_per_s: float | None
    """None when perftest did not measure it (`-D` prints 0.00)."""
    avg_gbit_per_s: float
    msg_rate_mpps: float


@dataclass(slots=True)
class PerftestResult:
    unit: str
    """The unit perftest printed (`Gb/sec`, `MiB/sec`, `MB/sec`)."""
    rows: list[PerftestRow] = field(default_factory=list)

    def avg_gbit_per_s(self) -> float | None:
        """BW average of the largest message size measured."""
        return max(self.rows, key=lambda r: r.size_bytes).avg_gbit_per_s if self.rows else None


def parse_perftest(text: str) -> PerftestResult:
    """Every result row after the last results header, converted to Gbit/s. ParseError when
    there is no header, an unknown unit, or no row (the CUDA prelude of a run that died)."""
    lines = text.splitlines()
    header_at, unit = None, ""
    for i, line in enumerate(lines):
        m = _PERF_HEADER.search(line)
        if m:
            header_at, unit = i, m["unit"]
    if header_at is None:
        raise ParseError("no perftest results header (`#bytes #iterations BW peak[...]`)")
    if unit not in _TO_GBIT:
        raise ParseError(f"unknown perftest bandwidth unit [{unit}]")
    scale, result = _TO_GBIT[unit], PerftestResult(unit)
    for line in lines[header_at + 1:]:
        m = _PERF_ROW.match(line)
        if m:
            peak = float(m["peak"]) * scale
            result.rows.append(PerftestRow(int(m["bytes"]), int(m["iters"]), peak or None,
                                           float(m["avg"]) * scale, float(m["rate"])))
    if not result.rows:
        raise ParseError(f"perftest printed its [{unit}] header but no result row")
    return result
