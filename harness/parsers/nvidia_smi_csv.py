"""`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`: one row per GPU, or rows
that are samples of a `-l` time series (each GPU keeps its last), read into a GpuInventory."""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass

from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.parsers import ParseError
from harness.parsers.nvidia_smi_common import (
    CSV_REASONS,
    MAX_GPUS,
    RESET_VALUES,
    Side,
    clean_fabric_status,
    clean_serial,
    clean_value,
    smi_lines,
    to_float,
    to_int,
    with_lost,
    without_bracket_suffix,
    yes_no,
)
from harness.parsers.reader import Input, as_input

#: CSV header name (as nvidia-smi prints it) -> GpuInfo field. Both the current
#: `clocks_event_reasons.*` and the older `clocks_throttle_reasons.*` names are read.
_CSV_FIELDS: dict[str, str] = {
    "index": "index", "name": "name", "gpu_name": "name", "uuid": "uuid", "gpu_uuid": "uuid",
    "serial": "serial", "gpu_serial": "serial", "pci.bus_id": "bus_id", "gpu_bus_id": "bus_id",
    "memory.total": "memory_total_gib",
    "ecc.mode.current": "ecc_enabled",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrected_volatile",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrected_aggregate",
    "retired_pages.pending": "retired_pages_pending",
    "retired_pages.double_bit.count": "retired_pages_dbe",
    "remapped_rows.pending": "remapped_rows_pending",
    "remapped_rows.failure": "remapped_rows_failure",
    "temperature.gpu": "temperature_c", "power.draw": "power_draw_w",
    "persistence_mode": "persistence_mode", "pstate": "performance_state",
    "pcie.link.gen.current": "pcie_gen_current", "pcie.link.gen.max": "pcie_gen_max",
    "pcie.link.gen.gpumax": "pcie_gen_device_max", "pcie.link.gen.hostmax": "pcie_gen_host_max",
    "pcie.link.width.current": "pcie_width_current", "pcie.link.width.max": "pcie_width_max",
    "fabric.state": "fabric_state", "fabric.status": "fabric_status",
}
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
#: `clocks_event_reasons.active` is NVML's bitmask (nvmlClocksEventReason* constants).
_REASON_BITS = {0x1: "Idle", 0x2: "Applications Clocks Setting", 0x4: "SW Power Cap",
                0x8: "HW Slowdown", 0x10: "Sync Boost", 0x20: "SW Thermal Slowdown",
                0x40: "HW Thermal Slowdown", 0x80: "HW Power Brake Slowdown",
                0x100: "Display Clock Setting"}
_HEX = re.compile(r"^0x[0-9A-Fa-f]+$")
_BOOL_FIELDS = {"ecc_enabled", "retired_pages_pending", "remapped_rows_pending",
                "remapped_rows_failure", "persistence_mode"}
_INT_FIELDS = {"index", "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate",
               "retired_pages_dbe", "pcie_gen_current", "pcie_gen_max", "pcie_gen_device_max",
               "pcie_gen_host_max", "pcie_width_current", "pcie_width_max"}
_FLOAT_FIELDS = {"temperature_c", "power_draw_w"}


@dataclass(frozen=True, slots=True)
class SmiCsv:
    """A `--query-gpu` CSV: the last sample of each GPU, and how many samples there were."""

    inventory: GpuInventory
    num_samples: int
    columns: tuple[str, ...]


def _csv_value(field_name: str, raw: str) -> bool | int | float | str | None:
    if field_name in _BOOL_FIELDS:
        return yes_no(raw)
    if field_name in _INT_FIELDS:
        return to_int(raw)
    if field_name in _FLOAT_FIELDS:
        return to_float(raw)
    if field_name == "memory_total_gib":
        mib = to_float(raw)
        return None if mib is None else round(mib / 1024, 2)
    if field_name == "fabric_status":
        return clean_fabric_status(raw)
    return clean_serial(raw) if field_name == "serial" else clean_value(raw)


def parse_smi_csv(text: str | Input, columns: tuple[str, ...] | None = None) -> SmiCsv:
    """Parse `nvidia-smi --query-gpu=index,name,... --format=csv` (with or without units).
    Reads `index, name, temperature.gpu, power.draw [W]` then `0, NVIDIA H100, 34, 71.52 W`.
    With `noheader` pass the queried `columns`. Rows that repeat a GPU (a `-l` time series with
    `timestamp`) are samples: each GPU keeps its last row."""
    return read_smi_csv(as_input(text), Side(), columns)


def read_smi_csv(source: Input, side: Side, columns: tuple[str, ...] | None = None) -> SmiCsv:
    seen = [False]  # any line that is not a lost GPU's or "No devices were found"

    def kept(lines: Iterator[str]) -> Iterator[str]:
        for ln in lines:
            if ln.strip() and "Unable to determine" not in ln and ln.strip() != "No devices were found":
                seen[0] = True
                yield ln

    lines = kept(smi_lines(source, side))
    rows = csv.reader(lines, skipinitialspace=True)
    try:
        first = next(rows, None) if columns is None else None
        if columns is None and first is not None and side.noheader_columns and not any(
                _column(c) in _CSV_FIELDS for c in first):
            # `--format=csv,noheader` on the command line pasted above: that first row is data.
            columns, rows = side.noheader_columns, itertools.chain([first], rows)
        header = tuple(_column(c) for c in (columns if columns is not None else first or ()))
        known = [c for c in header
                 if c in _CSV_FIELDS or _reason(c) or _is_mask(c) or c == "driver_version"]
        if not known or not any(c in _CSV_FIELDS for c in header):
            for _ in lines:  # the rest of the input, for the lost-GPU and failure lines in it
                pass
        if side.lost and not any(c in _CSV_FIELDS for c in header):
            # Only GPUs the driver cannot open (plain `nvidia-smi` stops at the first one).
            return SmiCsv(GpuInventory("nvidia-smi csv", None, None, with_lost([], side)), 0, ())
        if columns is None and first is None:
            raise side.not_read("empty input: no CSV header or rows")
        if not known:
            raise side.not_read("no known --query-gpu column (index, name, pci.bus_id, "
                                f"temperature.gpu, ...) in the CSV header "
                                f"{', '.join(header)[:200]!r}")
        side.shown["*"] = _shown(header)
        key_col = next((c for c in ("index", "pci.bus_id", "uuid", "gpu_bus_id", "gpu_uuid")
                        if c in header), None)
        latest: dict[str, dict[str, object]] = {}
        driver = None
        num_samples = 0
        for row in rows:
            if len(row) != len(header):
                if row and [c.strip().lower() for c in row] == list(header):
                    continue  # a header repeated in a concatenated log
                raise ParseError(f"CSV row has {len(row)} values for {len(header)} columns: "
                                 f"{', '.join(row)[:200]!r}")
            num_samples += 1
            cells = dict(zip(header, row, strict=True))
            key = cells[key_col] if key_col else str(len(latest))
            if key not in latest and len(latest) >= MAX_GPUS:
                side.omitted += 1
                continue
            driver = _csv_record(cells, latest, key) or driver
    except csv.Error as exc:
        raise ParseError(f"not nvidia-smi CSV: {exc}") from None
    if not num_samples:
        if not seen[0]:
            raise side.not_read("empty input: no CSV header or rows")
        raise ParseError("the CSV has a header but no rows")
    gpus = []
    for n, record in enumerate(latest.values()):
        if record.get("index") is None:
            record["index"] = n
        gpus.append(GpuInfo(**record))
    gpus.sort(key=lambda g: g.index)
    return SmiCsv(GpuInventory("nvidia-smi csv", driver, None, with_lost(gpus, side)),
                  num_samples, header)


def _csv_record(cells: dict[str, str], latest: dict[str, dict[str, object]], key: str) -> str | None:
    """Store one CSV sample as the GPU's latest record; the driver version it names, if any."""
    record: dict[str, object] = {}
    reasons: list[str] | None = None  # None: no reason column
    reset = False
    driver = None
    for col, raw in cells.items():
        reset = reset or raw.strip().lower() in RESET_VALUES
        if col == "driver_version":
            driver = clean_value(raw) or driver
        elif col in _CSV_FIELDS:
            record[_CSV_FIELDS[col]] = _csv_value(_CSV_FIELDS[col], raw)
        elif _reason(col) and yes_no(raw) is not None:
            reasons = reasons or []
            if yes_no(raw):
                reasons.append(_reason(col))  # type: ignore[arg-type]
        elif _is_mask(col) and _HEX.match(raw.strip()):
            mask = int(raw.strip(), 16)
            reasons = [*(reasons or []), *(n for bit, n in _REASON_BITS.items() if mask & bit)]
    record["throttle_reasons"] = None if reasons is None else tuple(dict.fromkeys(reasons))
    # No --query-gpu column the fallback asks for says whether a GPU needs a reset: only a
    # `[GPU requires reset]` value does (else: not read).
    record["requires_reset"] = True if reset else None
    latest[key] = record
    return driver


#: The GpuInfo fields each GPU fact (harness.base.gpu_facts key) is read from, for the facts a
#: `--query-gpu` column can hold (the reset state has none: only a `[GPU requires reset]` value
#: says it).
_FACT_FIELDS = {
    "model": ("name",), "memory": ("memory_total_gib",), "ecc_mode": ("ecc_enabled",),
    "ecc_volatile": ("ecc_uncorrected_volatile",), "ecc_aggregate": ("ecc_uncorrected_aggregate",),
    "remap_pending": ("remapped_rows_pending",), "remap_failure": ("remapped_rows_failure",),
    "retired_pending": ("retired_pages_pending",), "retired_dbe": ("retired_pages_dbe",),
    "temperature": ("temperature_c",), "persistence": ("persistence_mode",),
    "pstate": ("performance_state",), "pcie_gen": ("pcie_gen_current",),
    "pcie_gen_max": ("pcie_gen_max", "pcie_gen_device_max", "pcie_gen_host_max"),
    "pcie_width": ("pcie_width_current",), "pcie_width_max": ("pcie_width_max",),
    "fabric_state": ("fabric_state",), "fabric_status": ("fabric_status",),
}


def _shown(header: tuple[str, ...]) -> frozenset[str]:
    """The facts the CSV's columns hold: what was queried (a fact not queried is not judged)."""
    fields = {_CSV_FIELDS[c] for c in header if c in _CSV_FIELDS}
    shown = {k for k, names in _FACT_FIELDS.items() if not fields.isdisjoint(names)}
    if any(_reason(c) or _is_mask(c) for c in header):
        shown.add("clock_reasons")
    return frozenset(shown)


def _column(cell: str) -> str:
    """A header cell as a field name: `memory.total [MiB]` -> `memory.total`."""
    return without_bracket_suffix(cell).strip().lower()


def _reason(column: str) -> str | None:
    for prefix in _REASON_PREFIXES:
        if column.startswith(prefix):
            return CSV_REASONS.get(column[len(prefix):])
    return None


def _is_mask(column: str) -> bool:
    return column in (prefix + "active" for prefix in _REASON_PREFIXES)
