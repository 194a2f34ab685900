"""The plain `nvidia-smi` summary table (old and new layouts, Windows driver models, `ERR!`
cells, a GPU printed again by `nvidia-smi -l`), read into a GpuInventory."""

from __future__ import annotations

import itertools
import re

from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.parsers.nvidia_smi_common import (
    BUS_ID,
    MAX_GPUS,
    Side,
    clean_value,
    smi_lines,
    to_float,
    with_lost,
)
from harness.parsers.reader import Input, as_input
from harness.parsers.values import ascii_int

_TABLE_VERSIONS = re.compile(
    r"(?:Driver|KMD) Version:\s*(?P<driver>[0-9.]+)(?:.*?CUDA (?:UMD )?Version:\s*(?P<cuda>[0-9.]+))?"
)
# `|   0  NVIDIA A40                     On  |   00000000:4F:00.0 Off |                    0 |`;
# on Windows the column is `Driver-Model` (`WDDM`, `TCC`, `MCDM`); a GPU that stopped answering
# shows `ERR!` for its name.
TABLE_ROW1 = re.compile(
    # (The name is words with single spaces between them: `.+?` before `\s+` rescanned a run of
    # blanks from each of its characters.)
    rf"^\|\s*(?P<index>[0-9]+)\s+(?P<name>\S+(?: \S+)*?)\s+(?P<pm>On|Off|WDDM|TCC|MCDM|N/A|ERR!)\s*\|\s*"
    rf"(?P<bus>{BUS_ID})\s+\S+\s*\|\s*(?P<ecc>\S+)\s*\|\s*$"
)
# `|  0%   29C    P8             23W /  300W |       1MiB /  46068MiB |      0%      Default |`;
# a GPU without its own memory (GB10's unified memory) shows `| Not Supported          |`; a
# laptop GPU may show neither draw nor cap (`N/A / ERR!`).
_TABLE_ROW2 = re.compile(
    # (No `/` in a reading: `\S+\s*/` retried every `/` of a long word.)
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<power>N/A|[^\s/]+)\s*/\s*(?P<cap>[^\s|]+)\s*"
    r"\|(?:\s*[^\s/|]+\s*/\s*(?P<mem>[^\s|]+)\s*|[^|]*)\|"
)
#: Cells of a GPU's second row whose `ERR!` alone does not mean a lost GPU: a fan that reports
#: no speed (GeForce cards, gpud's 525.125.06 fixture) or a power cap a laptop GPU does not
#: report (`N/A / ERR!`); the GPU still answers for every other reading.
_ERR_ALONE_HARMLESS = ("fan", "cap")
#: An author's note after a table line's closing `|` (`|  # ← RTX 5070 が認識されている`, a
#: WSL write-up in tests/samples/nvidia-smi): not part of the row.
_TABLE_NOTE = re.compile(r"\|[ \t]+(?:#|<=+|<-+|←)[^|]*$")


#: The facts (harness.base.gpu_facts keys) the table's columns hold: its name, persistence
#: (`Persistence-M`; on Windows the column is the driver model instead), ECC (`Volatile
#: Uncorr. ECC`), temperature, performance state and memory size.
TABLE_SHOWS = frozenset(("model", "persistence", "ecc_mode", "ecc_volatile", "temperature",
                         "pstate", "memory"))


def _table_ecc(cell: str) -> tuple[bool | None, int | None]:
    """The `Volatile Uncorr. ECC` cell: a count when ECC is on, `On` for a MIG-enabled GPU (the
    counts are per MIG device), `Off` when it is off, `N/A` where the GPU has none, `ERR!` when
    it could not be read."""
    count = ascii_int(cell) if cell[:1] != "-" else None
    if count is not None:
        return True, count
    return {"On": (True, None), "Off": (False, None)}.get(cell, (None, None))


def parse_smi_table(text: str | Input) -> GpuInventory:
    """Parse the plain `nvidia-smi` summary table. Reads `| NVIDIA-SMI 550.127.05  Driver
    Version: 550.127.05  CUDA Version: 12.4 |` (R610: `KMD Version:`, `CUDA UMD Version:`) and
    per GPU `|   0  NVIDIA A40   On  | 00000000:4F:00.0 Off |   0 |` then `|  0%   29C    P8
    23W /  300W | ... |`. Names may be cut (`Tesla V100-PCIE...`); `ERR!` in a GPU's row means
    the driver cannot read it, and a GPU the driver cannot open at all is named on an `Unable to
    determine the device handle` line above the table (both are reported as requiring a reset).
    A GPU printed again (`nvidia-smi -l`) keeps its latest rows."""
    return read_smi_table(as_input(text), Side())


def read_smi_table(source: Input, side: Side) -> GpuInventory:
    versions: re.Match[str] | None = None
    gpus: dict[int, GpuInfo] = {}
    row1: re.Match[str] | None = None  # a GPU's first row, waiting for its second
    row1_line = ""
    for line in itertools.chain(smi_lines(source, side), [""]):
        if versions is None and "Version:" in line:
            versions = _TABLE_VERSIONS.search(line)
        if row1 is not None:
            _table_gpu(row1, row1_line, line, gpus, side)
            row1 = None
        stripped = line.strip()
        if stripped[:1] == "|" and not stripped.endswith("|"):
            stripped = _TABLE_NOTE.sub("|", stripped)
        m = TABLE_ROW1.match(stripped) if stripped[:1] == "|" else None
        if m:
            row1, row1_line = m, line
    if not gpus and not side.lost:
        raise side.not_read("no GPU rows (`|   0  NVIDIA H100 ...  On  |   00000000:53:00.0 Off |`) "
                            "in the nvidia-smi table")
    return GpuInventory("nvidia-smi", versions["driver"] if versions else None,
                        versions["cuda"] if versions else None,
                        with_lost(sorted(gpus.values(), key=lambda g: g.index), side))


def _table_gpu(m: re.Match[str], line: str, next_line: str, gpus: dict[int, GpuInfo],
               side: Side) -> None:
    """Record the GPU of table row `m` (its second row is `next_line`)."""
    index = ascii_int(m["index"])
    if index is None:
        return
    if index not in gpus and len(gpus) >= MAX_GPUS:
        side.omitted += 1
        return
    row2 = _TABLE_ROW2.match(next_line.strip())
    err = "ERR!" in line or _row2_err(row2, next_line)
    memory_mib = to_float(row2["mem"]) if row2 else None
    perf = clean_value(row2["perf"]) if row2 else None
    ecc_enabled, ecc_errors = _table_ecc(m["ecc"])
    windows = m["pm"] in ("WDDM", "TCC", "MCDM")  # the Driver-Model column: no persistence
    side.shown[m["bus"]] = TABLE_SHOWS - {"persistence"} if windows else TABLE_SHOWS
    gpus[index] = GpuInfo(
        index=index,
        name=clean_value(m["name"]),
        bus_id=m["bus"],
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=ecc_enabled,
        ecc_uncorrected_volatile=ecc_errors,
        temperature_c=to_float(row2["temp"]) if row2 else None,
        power_draw_w=to_float(row2["power"]) if row2 else None,
        persistence_mode={"On": True, "Off": False}.get(m["pm"]),
        performance_state=perf if perf and perf.startswith("P") else None,
        requires_reset=True if err else None,
    )


def _row2_err(row2: re.Match[str] | None, next_line: str) -> bool:
    """Whether the GPU's second row shows `ERR!` in a reading that means the driver cannot
    read the GPU: any cell but the fan's and the power cap's (`_ERR_ALONE_HARMLESS`); a row
    this reader does not recognise counts any `ERR!`."""
    if "ERR!" not in next_line:
        return False
    if row2 is None:
        return True
    harmless = sum(row2[cell] == "ERR!" for cell in _ERR_ALONE_HARMLESS)
    return next_line.count("ERR!") > harmless
