"""`nvidia-smi -q` text (Linux and Windows drivers, old and new ECC layouts), `nvidia-smi -q -x`
XML, the plain `nvidia-smi` table, and `nvidia-smi --query-gpu=... --format=csv[,noheader]
[,nounits]` (one row per GPU, or rows that are samples of a `-l` time series), read into the
GpuInventory NVML also produces."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from harness.gpu import GpuInfo, GpuInventory, health_problems, pci_key
from harness.parsers import ParseError
from harness.parsers.reader import MAX_DOCUMENT_CHARS, Input, as_input
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_int

__all__ = [
    "INSPECT",
    "SmiCsv",
    "inspect_nvidia_smi",
    "parse_nvidia_smi",
    "parse_smi_csv",
    "parse_smi_query",
    "parse_smi_table",
    "parse_smi_xml",
]

#: Values that mean "no value": nvidia-smi prints N/A for unsupported, brackets for failures,
#: `ERR!` in the table for a reading that failed, `Not Found` for the CUDA version when no
#: libcuda is visible, and (R575+) `Requested functionality has been deprecated`.
_NO_VALUE = {"n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]",
             "unknown error", "[insufficient permissions]", "[gpu is lost]", "", "none",
             "err!", "not found", "requested functionality has been deprecated",
             "[requested functionality has been deprecated]"}
#: Values that mean the GPU itself is in a fault state.
_RESET_VALUES = {"[gpu requires reset]", "[gpu is lost]"}
#: Values that mean a reading failed (not "not supported"): kept as the GPU's query errors, so
#: that a fact nvidia-smi could not read is known to be unknown.
_ERROR_VALUES = {"[unknown error]", "[insufficient permissions]", "err!"}

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_GPU_HEADER = re.compile(rf"^GPU\s+(?P<bus>{_BUS})\s*$")
_ANY_GPU_HEADER = re.compile(rf"^[ \t]*GPU\s+{_BUS}\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>[^:]*?\S)\s+:\s?(?P<value>.*)$")
_NUMBER = re.compile(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?(?![0-9])")
#: A GPU the driver cannot open is left out of every output format and named on a line of its own
#: instead: `Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error` (R610),
#: `... for GPU0000:CB:00.0: Unknown Error`, `... for gpu 0000:3B:00.0: GPU is lost. Reboot ...`;
#: the reason may continue on the next line, or be missing.
_LOST = re.compile(
    r"Unable to determine the device handle for GPU\s*(?:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f])|(?P<index>[0-9]+)(?::\s*(?P<bus2>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}\.[0-9A-Fa-f]))?)[ \t]*:[^\n]*",
    re.I,
)
#: `nvidia-smi -q` sections a fragment is recognised by when pasted without its GPU line
#: (`ECC Errors`, `Retired Pages`, `Remapped Rows`, or grep's `SRAM Uncorrectable : 1` lines).
FRAGMENT_SECTIONS = ("ecc mode", "ecc errors", "retired pages", "remapped rows",
                     "gpu reset status")
_FRAGMENT_KEYS = re.compile(
    r"^\s*(?:(?:ECC Errors|ECC Mode|Retired [Pp]ages|Remapped Rows|GPU Reset Status)\s*$|"
    r"(?:[SD]RAM (?:Unc|C)orrectable|Pending Page Blacklist|Double Bit ECC|Single Bit ECC)"
    r"[\w -]*?\s+:)")
#: Authors' markers after a value (`Pending : Yes <===`, `: 0  ← SRAM ...`): not the value.
_ANNOTATION = re.compile(r"\s+(?:<=+|<-+|←|#\s).*$")
_ATTACHED = re.compile(r"^\s*Attached GPUs\s*:\s*([0-9]+)|<attached_gpus>([0-9]+)<")
#: What nvidia-smi prints instead of any output when it cannot read the GPUs at all.
_FAILURE = re.compile(r"^\s*(Failed to initialize NVML: .*|NVIDIA-SMI has failed because .*"
                      r"|No devices were found|Driver/library version mismatch.*)$")
#: R610 marks the old version keys: `Driver Version : 610.57.04 [Deprecated; will be removed in
#: CUDA 14.0. Use KMD Version instead]`.



#: GPUs kept (a node has at most 16; a `-q -l` loop repeats the same ones, kept once each).
MAX_GPUS = 1024
#: Lines a key : value tree keeps per GPU, and section depth (real dumps: ~400 and 4).
MAX_KEYS = 10_000
MAX_DEPTH = 16
#: `Unable to determine the device handle` lines kept.
MAX_LOST = 256


@dataclass(slots=True)
class _Side:
    """What any format's pass notes besides its GPUs: lost GPUs, nvidia-smi's own failure line,
    `Attached GPUs`."""

    lost: dict[str, tuple[str | None, str | None, str]] = dataclasses.field(default_factory=dict)
    failure: str | None = None
    attached: int | None = None
    omitted: int = 0  # GPUs past MAX_GPUS
    commands: list[str] = dataclasses.field(default_factory=list)
    fragment: bool = False
    sections: dict[str, None] = dataclasses.field(default_factory=dict)
    """The `-q` sections seen (lower case), for `sections_present` / `sections_absent`."""
    reset_printed: set[int] = dataclasses.field(default_factory=set)
    """GPUs whose output says whether they need a reset (a `GPU Reset Status` value that is not
    `deprecated`, a `[GPU requires reset]` value, a pending row remap)."""

    def see(self, line: str) -> None:
        if "Unable to determine" in line and len(self.lost) < MAX_LOST:
            for m in _LOST.finditer(line):
                self.lost.setdefault(m.group(0).strip(), (m["index"], m["bus"] or m["bus2"],
                                                           m.group(0).strip()))
        if self.failure is None and (m := _FAILURE.match(line)):
            self.failure = m[1].strip()
        if self.attached is None and "ttached" in line and (m := _ATTACHED.search(line)):
            self.attached = ascii_int(m.group(1) or m.group(2))

    def not_read(self, what: str) -> ParseError:
        """The ParseError for input without GPUs, quoting nvidia-smi's own failure line if any."""
        return ParseError(f"{what}; nvidia-smi says: {self.failure}" if self.failure else what)

    def notes(self) -> list[str]:
        return [f"{self.omitted} more GPUs after the first {MAX_GPUS} not kept"] if self.omitted else []


def _lines(source: Input, side: _Side | None = None) -> Iterator[str]:
    """The input's lines, unwrapped (harness.parsers.unwrap); each one shown to `side`, which
    keeps the command lines seen."""
    unwrapper = Unwrapper()
    for batch in source.batches():
        for line in unwrapper.lines(batch):
            if side is not None:
                side.see(line)
            yield line
    if side is not None:
        side.commands = unwrapper.commands


def _unwrap(text: str) -> str:
    """The text with line ends normalised and launcher / log-shipper prefixes removed."""
    return "\n".join(_lines(as_input(text)))


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    if " " in v and ("<" in v or "←" in v or "#" in v):
        v = _ANNOTATION.sub("", v)
    return None if v.lower() in _NO_VALUE or v.lower() in _RESET_VALUES else v


def _num(value: str | None) -> float | None:
    v = _clean(value)
    m = _NUMBER.match(v) if v else None
    return float(m.group(0)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return None if n is None else int(n)


def _serial(value: str | None) -> str | None:
    """A board serial; R580 prints `0` (not N/A) for GPUs without one (laptops, GeForce)."""
    v = _clean(value)
    return None if v == "0" else v


def _version(value: str | None) -> str | None:
    return _clean(_without_bracket_suffix(value)) if value else None


def _without_bracket_suffix(value: str) -> str:
    """`value` without a trailing `[...]` (R610's `[Deprecated; ...]`, a CSV header's `[MiB]`).
    (In Python: the regex form searched from every `[` to the end, quadratic on `[[[[`.)"""
    end = value.rstrip()
    if end.endswith("]"):
        start = end.rfind("[")
        if start >= 0 and "]" not in end[start:-1]:
            return end[:start].rstrip()
    return value


_YES = frozenset(("yes", "enabled", "active", "on", "true", "1"))
_NO = frozenset(("no", "disabled", "not active", "inactive", "off", "false", "0"))


def _yes(value: str | None) -> bool | None:
    """True / False for a yes or no nvidia-smi prints; None for anything else (`Unknown
    Error`, `N/A`): unknown, never a no."""
    v = _clean(value)
    if v is None:
        return None
    v = v.lower()
    return True if v in _YES else False if v in _NO else None


class _Block:
    """One GPU section of `nvidia-smi -q` as {lower-case key path: value}."""

    def __init__(self, bus_id: str) -> None:
        self.bus_id = bus_id
        self.values: dict[tuple[str, ...], str] = {}

    def get(self, *path: str) -> str | None:
        return self.values.get(tuple(p.lower() for p in path))

    def first(self, *paths: tuple[str, ...]) -> str | None:
        for path in paths:
            value = self.get(*path)
            if value is not None:
                return value
        return None

    def children(self, *path: str) -> dict[str, str]:
        """Direct and nested values under a section, keyed by their last name."""
        prefix = tuple(p.lower() for p in path)
        return {k[-1]: v for k, v in self.values.items()
                if len(k) > len(prefix) and k[:len(prefix)] == prefix}

    def raw_values(self) -> list[str]:
        return [v.strip().lower() for v in self.values.values()]


@dataclass(frozen=True, slots=True)
class _Query:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    blocks: list[_Block]


def _tree(lines: Iterable[str], side: _Side, *, fragment: bool = False) -> _Query:
    """Read the indented key : value tree; GPU sections start at `GPU 00000000:53:00.0`. A GPU
    seen again (a `nvidia-smi -q -l` loop) keeps its latest section, in its first place. A
    `fragment` (sections pasted without their GPU line) is read as one GPU of unknown bus."""
    top: dict[str, str] = {}
    blocks: dict[str, _Block] = {}
    block: _Block | None = None
    stack: list[tuple[int, str]] = []
    base = 0
    if fragment:
        block, base = _Block(""), -1
        blocks[""] = block
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" \t"))
        stripped = line.strip()
        header = _GPU_HEADER.match(stripped) if stripped[:3] == "GPU" else None
        if header:
            key = pci_key(header["bus"]) or header["bus"]
            block = _Block(header["bus"])
            if key in blocks or len(blocks) < MAX_GPUS:
                blocks[key] = block  # a GPU seen before keeps its place
            else:
                side.omitted += 1  # read, not kept
            stack, base = [], indent
            continue
        m = _KEY_VALUE.match(stripped)
        if block is None or indent <= base:
            if m and len(top) < MAX_KEYS:
                top[m["key"].strip().lower()] = m["value"].strip()
            if block is not None and indent <= base:
                block = None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = tuple(name for _, name in stack)
        if m and m["value"].strip():
            if len(block.values) < MAX_KEYS:
                block.values[(*path, m["key"].strip().lower())] = m["value"].strip()
        elif len(stack) < MAX_DEPTH:  # a section header (`ECC Errors`), or `Key :` with nothing after it
            name = (m["key"] if m else stripped).strip().lower()[:200]
            if not stack and name in FRAGMENT_SECTIONS:
                side.sections[name] = None
            stack.append((indent, name))
    attached = _int(top.get("attached gpus"))
    # R610 prints `KMD Version` / `CUDA UMD Version` next to the deprecated old keys.
    driver = _version(top.get("kmd version")) or _version(top.get("driver version"))
    cuda = _version(top.get("cuda umd version")) or _version(top.get("cuda version"))
    return _Query(driver, cuda, attached, list(blocks.values()))


def _ecc_uncorrected(block: _Block, scope: str) -> int | None:
    """Uncorrected ECC count of one scope (`volatile` / `aggregate`) in either layout:
    new (`DRAM Uncorrectable`, `SRAM Uncorrectable[ Parity| SEC-DED]`) or old
    (`Double Bit` > `Total`, or its `Device Memory` where there is no total)."""
    values = {k: v for k, v in block.values.items() if k[:2] == ("ecc errors", scope)}
    new = [v for k, v in values.items()
           if len(k) == 3 and (k[2].startswith("dram uncorrectable") or
                               k[2].startswith("sram uncorrectable"))]
    if new:
        counts = [_int(v) for v in new]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None
    total = values.get(("ecc errors", scope, "double bit", "total"))
    if total is None:
        total = values.get(("ecc errors", scope, "double bit", "device memory"))
    return _int(total)


def _throttle(block: _Block) -> tuple[str, ...]:
    for section in ("clocks event reasons", "clocks throttle reasons"):
        reasons = block.children(section)
        if reasons:
            names = {k.lower(): k for k in _REASON_NAMES}
            return tuple(names.get(k, k) for k, v in reasons.items() if _yes(v))
    return ()


_REASON_NAMES = ("Idle", "Applications Clocks Setting", "SW Power Cap", "HW Slowdown",
                 "HW Thermal Slowdown", "HW Power Brake Slowdown", "Sync Boost",
                 "SW Thermal Slowdown", "Display Clock Setting")


def _gpu_from_block(index: int, b: _Block, side: _Side | None = None) -> GpuInfo:
    link = ("pci", "gpu link info")
    reset_flag = b.first(("gpu reset status", "reset required"))
    drain_flag = b.first(("gpu reset status", "drain and reset recommended"))
    remap_pending = _yes(b.get("remapped rows", "pending"))
    requires_reset = (bool(_yes(reset_flag)) or bool(_yes(drain_flag))
                      or any(v in _RESET_VALUES for v in b.raw_values()))
    if side is not None and (requires_reset or _yes(reset_flag) is not None
                             or _yes(drain_flag) is not None):
        side.reset_printed.add(index)
    width_cur = _int(b.get(*link, "link width", "current"))
    retired_pending = b.first(("retired pages", "pending page blacklist"),
                              ("retired pages", "pending page retirement"),
                              ("retired pages", "pending"))  # R410 and before
    dbe = b.first(("retired pages", "double bit ecc"), ("retired pages", "double bit ecc", "count"))
    power = b.first(("gpu power readings", "power draw"), ("power readings", "power draw"),
                    ("gpu power readings", "instantaneous power draw"),
                    ("gpu power readings", "average power draw"))
    memory_mib = _num(b.get("fb memory usage", "total"))
    return GpuInfo(
        index=index,
        name=_clean(b.get("product name")),
        uuid=_clean(b.get("gpu uuid")),
        serial=_serial(b.get("serial number")),
        bus_id=_clean(b.get("pci", "bus id")) or b.bus_id or None,
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=_yes(b.first(("ecc mode", "current"))),
        ecc_uncorrected_volatile=_ecc_uncorrected(b, "volatile"),
        ecc_uncorrected_aggregate=_ecc_uncorrected(b, "aggregate"),
        remapped_rows_pending=remap_pending,
        remapped_rows_failure=_yes(b.get("remapped rows", "remapping failure occurred")),
        retired_pages_pending=_yes(retired_pending),
        retired_pages_dbe=_int(dbe),
        temperature_c=_num(b.get("temperature", "gpu current temp")),
        throttle_reasons=_throttle(b),
        power_draw_w=_num(power),
        persistence_mode=_yes(b.get("persistence mode")),
        performance_state=_clean(b.get("performance state")),
        pcie_gen_current=_int(b.get(*link, "pcie generation", "current")),
        pcie_gen_max=_int(b.get(*link, "pcie generation", "max")),
        pcie_gen_device_max=_int(b.get(*link, "pcie generation", "device max")),
        pcie_gen_host_max=_int(b.get(*link, "pcie generation", "host max")),
        pcie_width_current=width_cur,
        pcie_width_max=_int(b.get(*link, "link width", "max")),
        fabric_state=_clean(b.get("fabric", "state")),
        fabric_status=_clean(b.get("fabric", "status")),
        recovery_action=_clean(b.get("gpu recovery action")),
        requires_reset=requires_reset,
        query_errors=tuple(f"{' > '.join(k)}: {v}" for k, v in b.values.items()
                           if v.strip().lower() in _ERROR_VALUES),
    )


def _with_lost(gpus: list[GpuInfo], side: _Side, *, renumber: bool = False) -> tuple[GpuInfo, ...]:
    """`gpus` plus one record per `Unable to determine the device handle for GPU...` line: that
    GPU is lost (requires_reset, the line in query_errors). nvidia-smi numbers GPUs in PCI bus
    order, so a lost GPU named only by its bus, and every GPU of a `-q` dump (`renumber`: its
    sections carry no index) when one is lost, are numbered by bus order."""
    lost: dict[tuple[str | None, str | None], GpuInfo] = {}
    for raw_index, bus, line in side.lost.values():
        known = next((g for g in gpus if bus and pci_key(g.bus_id) == pci_key(bus)), None)
        if known is not None:  # listed anyway: keep its readings, mark it
            gpus[gpus.index(known)] = dataclasses.replace(
                known, requires_reset=True, query_errors=(*known.query_errors, line))
            continue
        index = ascii_int(raw_index)
        lost.setdefault((raw_index, bus), GpuInfo(-1 if index is None else index, bus_id=bus,
                                                  requires_reset=True, query_errors=(line,)))
    if not lost:
        return tuple(gpus)
    every = [*gpus, *lost.values()]
    if renumber and all(pci_key(g.bus_id) for g in every):
        every.sort(key=lambda g: pci_key(g.bus_id))  # type: ignore[arg-type, return-value]
        return tuple(dataclasses.replace(g, index=i) for i, g in enumerate(every))
    taken = {g.index for g in every}
    placed = []
    for g in every:
        if g.index < 0:
            key = pci_key(g.bus_id)
            index = sum(1 for o in gpus if key and pci_key(o.bus_id) and pci_key(o.bus_id) < key)
            index = index if index not in taken else max(taken) + 1
            taken.add(index)
            g = dataclasses.replace(g, index=index)
        placed.append(g)
    return tuple(sorted(placed, key=lambda g: g.index))


def parse_smi_query(text: str | Input) -> GpuInventory:
    """Parse `nvidia-smi -q`. Reads `Driver Version : 535.154.05` and per-GPU sections starting
    `GPU 00000000:53:00.0`; GPUs are indexed in file order (nvidia-smi prints them by index, but
    a `-q -i N` excerpt starts at 0). Raises ParseError when no GPU section is found."""
    return _query(as_input(text), _Side())


def _query(source: Input, side: _Side, *, fragment: bool = False) -> GpuInventory:
    q = _tree(_lines(source, side), side, fragment=fragment)
    if q.blocks and not q.blocks[0].bus_id:
        side.fragment = True
    if not q.blocks and not side.lost:
        if q.attached_gpus == 0:
            return GpuInventory("nvidia-smi -q", q.driver_version, q.cuda_version, (), 0)
        raise side.not_read("no `GPU 0000xxxx:BB:DD.F` section found: not `nvidia-smi -q` output")
    gpus = _with_lost([_gpu_from_block(i, b, side) for i, b in enumerate(q.blocks)], side,
                      renumber=True)
    return GpuInventory("nvidia-smi -q", q.driver_version, q.cuda_version, gpus, q.attached_gpus)


# ---- the plain `nvidia-smi` table ----

_TABLE_VERSIONS = re.compile(
    r"(?:Driver|KMD) Version:\s*(?P<driver>[0-9.]+)(?:.*?CUDA (?:UMD )?Version:\s*(?P<cuda>[0-9.]+))?"
)
# `|   0  NVIDIA A40                     On  |   00000000:4F:00.0 Off |                    0 |`;
# on Windows the column is `Driver-Model` (`WDDM`, `TCC`, `MCDM`); a GPU that stopped answering
# shows `ERR!` for its name.
_TABLE_ROW1 = re.compile(
    # (The name is words with single spaces between them: `.+?` before `\s+` rescanned a run of
    # blanks from each of its characters.)
    rf"^\|\s*(?P<index>[0-9]+)\s+(?P<name>\S+(?: \S+)*?)\s+(?P<pm>On|Off|WDDM|TCC|MCDM|N/A|ERR!)\s*\|\s*"
    rf"(?P<bus>{_BUS})\s+\S+\s*\|\s*(?P<ecc>\S+)\s*\|\s*$"
)
# `|  0%   29C    P8             23W /  300W |       1MiB /  46068MiB |      0%      Default |`
_TABLE_ROW2 = re.compile(
    # (No `/` in a reading: `\S+\s*/` retried every `/` of a long word.)
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<power>[^\s/]+)\s*/\s*[^\s|]+\s*"
    r"\|\s*[^\s/|]+\s*/\s*(?P<mem>[^\s|]+)\s*\|"
)


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
    return _table(as_input(text), _Side())


def _table(source: Input, side: _Side) -> GpuInventory:
    versions: re.Match[str] | None = None
    gpus: dict[int, GpuInfo] = {}
    row1: re.Match[str] | None = None  # a GPU's first row, waiting for its second
    row1_line = ""
    for line in itertools.chain(_lines(source, side), [""]):
        if versions is None and "Version:" in line:
            versions = _TABLE_VERSIONS.search(line)
        if row1 is not None:
            _table_gpu(row1, row1_line, line, gpus, side)
            row1 = None
        stripped = line.strip()
        m = _TABLE_ROW1.match(stripped) if stripped[:1] == "|" else None
        if m:
            row1, row1_line = m, line
    if not gpus and not side.lost:
        raise side.not_read("no GPU rows (`|   0  NVIDIA H100 ...  On  |   00000000:53:00.0 Off |`) "
                            "in the nvidia-smi table")
    return GpuInventory("nvidia-smi", versions["driver"] if versions else None,
                        versions["cuda"] if versions else None,
                        _with_lost(sorted(gpus.values(), key=lambda g: g.index), side))


def _table_gpu(m: re.Match[str], line: str, next_line: str, gpus: dict[int, GpuInfo],
               side: _Side) -> None:
    """Record the GPU of table row `m` (its second row is `next_line`)."""
    index = ascii_int(m["index"])
    if index is None:
        return
    if index not in gpus and len(gpus) >= MAX_GPUS:
        side.omitted += 1
        return
    row2 = _TABLE_ROW2.match(next_line.strip())
    err = "ERR!" in line or "ERR!" in next_line
    memory_mib = _num(row2["mem"]) if row2 else None
    perf = _clean(row2["perf"]) if row2 else None
    ecc_enabled, ecc_errors = _table_ecc(m["ecc"])
    gpus[index] = GpuInfo(
        index=index,
        name=_clean(m["name"]),
        bus_id=m["bus"],
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=ecc_enabled,
        ecc_uncorrected_volatile=ecc_errors,
        temperature_c=_num(row2["temp"]) if row2 else None,
        power_draw_w=_num(row2["power"]) if row2 else None,
        persistence_mode={"On": True, "Off": False}.get(m["pm"]),
        performance_state=perf if perf and perf.startswith("P") else None,
        requires_reset=err,
    )


# ---- XML (-q -x) ----

def _xml_text(node: Any, path: str) -> str | None:
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _xml_ecc(gpu: Any, scope: str) -> int | None:
    """Uncorrected count of a scope in the new (`dram_uncorrectable`, `sram_uncorrectable*`)
    or old (`double_bit/total`) XML layout."""
    node = gpu.find(f"ecc_errors/{scope}")
    if node is None:
        return None
    new = [_int(c.text) for c in node
           if c.tag.startswith(("dram_uncorrectable", "sram_uncorrectable"))]
    if new:
        known = [n for n in new if n is not None]
        return sum(known) if known else None
    return _int(_xml_text(node, "double_bit/total") or _xml_text(node, "double_bit/device_memory"))


def _xml_gpu(index: int, g: Any) -> GpuInfo:
    t = lambda path: _xml_text(g, path)  # noqa: E731
    link = "pci/pci_gpu_link_info"
    reasons = []
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        for child in g.findall(f"{section}/*"):
            name = _CSV_REASONS.get(child.tag.removeprefix(prefix))
            if name and _yes(child.text):
                reasons.append(name)
    texts = [(e.text or "").strip().lower() for e in g.iter()]
    memory_mib = _num(t("fb_memory_usage/total"))
    return GpuInfo(
        index=index,
        name=_clean(t("product_name")),
        uuid=_clean(t("uuid")),
        serial=_serial(t("serial")),
        bus_id=_clean(t("pci/pci_bus_id")) or g.get("id"),
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=_yes(t("ecc_mode/current_ecc")),
        ecc_uncorrected_volatile=_xml_ecc(g, "volatile"),
        ecc_uncorrected_aggregate=_xml_ecc(g, "aggregate"),
        remapped_rows_pending=_yes(t("remapped_rows/remapped_row_pending")),
        remapped_rows_failure=_yes(t("remapped_rows/remapped_row_failure")),
        retired_pages_pending=_yes(t("retired_pages/pending_retirement")
                                   or t("retired_pages/pending_blacklist")),
        retired_pages_dbe=_int(t("retired_pages/double_bit_retirement/retired_count")),
        temperature_c=_num(t("temperature/gpu_temp")),
        throttle_reasons=tuple(dict.fromkeys(reasons)),
        power_draw_w=_num(t("gpu_power_readings/power_draw") or t("power_readings/power_draw")
                          or t("gpu_power_readings/instant_power_draw")),
        persistence_mode=_yes(t("persistence_mode")),
        performance_state=_clean(t("performance_state")),
        pcie_gen_current=_int(t(f"{link}/pcie_gen/current_link_gen")),
        pcie_gen_max=_int(t(f"{link}/pcie_gen/max_link_gen")),
        pcie_gen_device_max=_int(t(f"{link}/pcie_gen/max_device_link_gen")),
        pcie_gen_host_max=_int(t(f"{link}/pcie_gen/max_host_link_gen")),
        pcie_width_current=_int(t(f"{link}/link_widths/current_link_width")),
        pcie_width_max=_int(t(f"{link}/link_widths/max_link_width")),
        fabric_state=_clean(t("fabric/state")),
        fabric_status=_clean(t("fabric/status")),
        recovery_action=_clean(t("gpu_recovery_action")),
        requires_reset=(bool(_yes(t("gpu_reset_status/reset_required")))
                        or bool(_yes(t("gpu_reset_status/drain_and_reset_recommended")))
                        or any(v in _RESET_VALUES for v in texts)),
        query_errors=tuple(f"{e.tag}: {(e.text or '').strip()}" for e in g.iter()
                           if (e.text or "").strip().lower() in _ERROR_VALUES),
    )


def parse_smi_xml(text: str | Input) -> GpuInventory:
    """Parse `nvidia-smi -q -x`. Reads `<nvidia_smi_log><driver_version>555.42.06</...>` and
    `<gpu id="00000000:01:00.0">` elements (their DTD is never fetched). A document larger
    than MAX_DOCUMENT_CHARS (16 MiB; 8 GPUs print ~150 KB) is a ParseError."""
    return _xml(as_input(text), _Side())


def _xml(source: Input, side: _Side) -> GpuInventory:
    import xml.etree.ElementTree as ET

    # Log lines (a lost GPU's `Unable to determine the device handle ...`) may precede it.
    body: list[str] = []
    size = 0
    for line in _lines(source):
        if not body and "<?xml" not in line and "<nvidia_smi_log" not in line:
            side.see(line)
            continue
        size += len(line) + 1
        if size > MAX_DOCUMENT_CHARS:
            raise ParseError(f"nvidia-smi XML larger than {MAX_DOCUMENT_CHARS >> 20} MiB: not "
                             "one `nvidia-smi -q -x` document")
        body.append(line)
    text = "\n".join(body)
    start = min((i for i in (text.find("<?xml"), text.find("<nvidia_smi_log")) if i >= 0),
                default=0)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text[start:], count=1)
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML does not parse: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    side.attached = _int(_xml_text(root, "attached_gpus"))
    elements = root.findall("gpu")
    side.omitted += max(len(elements) - MAX_GPUS, 0)
    gpus = _with_lost([_xml_gpu(i, g) for i, g in enumerate(elements[:MAX_GPUS])], side,
                      renumber=True)
    if not gpus and side.attached != 0:
        raise ParseError("<nvidia_smi_log> without <gpu> elements")
    return GpuInventory("nvidia-smi -q -x", _version(_xml_text(root, "driver_version")),
                        _version(_xml_text(root, "cuda_version")), gpus, side.attached)


# ---- CSV (--query-gpu) ----

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
}
_CSV_REASONS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
                "hw_power_brake_slowdown": "HW Power Brake Slowdown",
                "sw_thermal_slowdown": "SW Thermal Slowdown", "sw_power_cap": "SW Power Cap"}
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


def _csv_value(field_name: str, raw: str) -> Any:
    if field_name in _BOOL_FIELDS:
        return _yes(raw)
    if field_name in _INT_FIELDS:
        return _int(raw)
    if field_name in _FLOAT_FIELDS:
        return _num(raw)
    if field_name == "memory_total_gib":
        mib = _num(raw)
        return None if mib is None else round(mib / 1024, 2)
    return _serial(raw) if field_name == "serial" else _clean(raw)


def parse_smi_csv(text: str | Input, columns: tuple[str, ...] | None = None) -> SmiCsv:
    """Parse `nvidia-smi --query-gpu=index,name,... --format=csv` (with or without units).
    Reads `index, name, temperature.gpu, power.draw [W]` then `0, NVIDIA H100, 34, 71.52 W`.
    With `noheader` pass the queried `columns`. Rows that repeat a GPU (a `-l` time series with
    `timestamp`) are samples: each GPU keeps its last row."""
    return _csv(as_input(text), _Side(), columns)


def _csv(source: Input, side: _Side, columns: tuple[str, ...] | None = None) -> SmiCsv:
    seen = [False]  # any line that is not a lost GPU's or "No devices were found"

    def kept(lines: Iterator[str]) -> Iterator[str]:
        for ln in lines:
            if ln.strip() and "Unable to determine" not in ln and ln.strip() != "No devices were found":
                seen[0] = True
                yield ln

    lines = kept(_lines(source, side))
    rows = csv.reader(lines, skipinitialspace=True)
    try:
        first = next(rows, None) if columns is None else None
        header = tuple(_column(c) for c in (columns if columns is not None else first or ()))
        known = [c for c in header
                 if c in _CSV_FIELDS or _reason(c) or _is_mask(c) or c == "driver_version"]
        if not known or not any(c in _CSV_FIELDS for c in header):
            for _ in lines:  # the rest of the input, for the lost-GPU and failure lines in it
                pass
        if side.lost and not any(c in _CSV_FIELDS for c in header):
            # Only GPUs the driver cannot open (plain `nvidia-smi` stops at the first one).
            return SmiCsv(GpuInventory("nvidia-smi csv", None, None, _with_lost([], side)), 0, ())
        if columns is None and first is None:
            raise side.not_read("empty input: no CSV header or rows")
        if not known:
            raise side.not_read("no known --query-gpu column (index, name, pci.bus_id, "
                                f"temperature.gpu, ...) in the CSV header "
                                f"{', '.join(header)[:200]!r}")
        key_col = next((c for c in ("index", "pci.bus_id", "uuid", "gpu_bus_id", "gpu_uuid")
                        if c in header), None)
        latest: dict[str, dict[str, Any]] = {}
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
    return SmiCsv(GpuInventory("nvidia-smi csv", driver, None, _with_lost(gpus, side)),
                  num_samples, header)


def _csv_record(cells: dict[str, str], latest: dict[str, dict[str, Any]], key: str) -> str | None:
    """Store one CSV sample as the GPU's latest record; the driver version it names, if any."""
    record: dict[str, Any] = {}
    reasons: list[str] = []
    reset = False
    driver = None
    for col, raw in cells.items():
        reset = reset or raw.strip().lower() in _RESET_VALUES
        if col == "driver_version":
            driver = _clean(raw) or driver
        elif col in _CSV_FIELDS:
            record[_CSV_FIELDS[col]] = _csv_value(_CSV_FIELDS[col], raw)
        elif _reason(col) and _yes(raw):
            reasons.append(_reason(col))  # type: ignore[arg-type]
        elif _is_mask(col) and _HEX.match(raw.strip()):
            mask = int(raw.strip(), 16)
            reasons.extend(name for bit, name in _REASON_BITS.items() if mask & bit)
    record["throttle_reasons"] = tuple(dict.fromkeys(reasons))
    record["requires_reset"] = reset
    latest[key] = record
    return driver


def _column(cell: str) -> str:
    """A header cell as a field name: `memory.total [MiB]` -> `memory.total`."""
    return _without_bracket_suffix(cell).strip().lower()


def _reason(column: str) -> str | None:
    for prefix in _REASON_PREFIXES:
        if column.startswith(prefix):
            return _CSV_REASONS.get(column[len(prefix):])
    return None


def _is_mask(column: str) -> bool:
    return column in (prefix + "active" for prefix in _REASON_PREFIXES)


def parse_nvidia_smi(text: str | Input) -> GpuInventory:
    """`nvidia-smi -q` text, `-q -x` XML, the plain `nvidia-smi` table or a `--query-gpu` CSV,
    whichever the text is, also with a launcher's prefix on every line (`[1,0]<stdout>:`, srun
    `0: `, ISO timestamps)."""
    return _parse(as_input(text), _Side())


def _form(source: Input) -> str:
    """Which form the input is (one pass, stopped at the first `-q` section)."""
    head: list[str] = []
    size = 0
    for line in _lines(source):
        head.append(line)
        size += len(line) + 1
        if size >= 2000:
            break
    if "<nvidia_smi_log" in "\n".join(head)[:2000]:
        return "xml"
    banner = bus = row = fragment = False
    for line in _lines(source):
        if "NVSMI LOG" in line or (line.lstrip()[:3] == "GPU" and _ANY_GPU_HEADER.match(line)):
            return "query"
        banner = banner or "NVIDIA-SMI" in line
        bus = bus or "Bus-Id" in line
        stripped = line.strip()
        row = row or (stripped[:1] == "|" and bool(_TABLE_ROW1.match(stripped)))
        fragment = fragment or bool(_FRAGMENT_KEYS.match(line))
    # The banner may be cut from a pasted excerpt: a GPU row is enough.
    if (banner and bus) or row:
        return "table"
    return "fragment" if fragment else "csv"


def _parse(source: Input, side: _Side) -> GpuInventory:
    form = _form(source)
    if form == "xml":
        return _xml(source, side)
    if form in ("query", "fragment"):
        return _query(source, side, fragment=form == "fragment")
    if form == "table":
        return _table(source, side)
    try:
        return _csv(source, side).inventory
    except ParseError:
        if side.failure:
            raise ParseError(f"nvidia-smi could not read the GPUs: {side.failure}") from None
        raise


def inspect_nvidia_smi(stream: TextIO | Input, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect nvidia-smi FILE`: keys num_gpus, driver_version, cuda_version, gpus
    [{index, name, bus_id, uuid, serial, ecc_enabled, ecc_uncorrected_volatile,
    ecc_uncorrected_aggregate, remapped_rows_pending, remapped_rows_failure,
    retired_pages_pending, temperature_c, requires_reset}], problems [{gpu, what, action}]
    (temperature judged against the profile's max_gpu_temp_c; ECC off only for GPU profiles)."""
    side = _Side()
    inventory = _parse(as_input(stream), side)
    attached = side.attached
    keys = ("index", "name", "bus_id", "uuid", "serial", "ecc_enabled",
            "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_pending",
            "remapped_rows_failure", "retired_pages_pending", "temperature_c", "requires_reset")
    problems = []
    for gpu in inventory.gpus:
        for p in health_problems(gpu, max_temp_c=profile.max_gpu_temp_c,
                                 require_ecc=profile.has_gpus):
            problems.append({"gpu": p.gpu, "what": p.what, "action": p.action})
    gpus = [{k: getattr(g, k) for k in keys} for g in inventory.gpus]
    if inventory.source in ("nvidia-smi -q", "nvidia-smi"):
        for gpu, record in zip(inventory.gpus, gpus, strict=True):
            # Nothing printed about a reset (a `-q -d ECC` excerpt, the plain table, a 570 driver
            # on Volta saying `deprecated`): unknown, not "no reset needed".
            if gpu.remapped_rows_pending:
                # A pending row remap is applied at the next GPU reset (NVIDIA's "GPU Memory
                # Error Management" guide, Row Remapping): the GPU needs one.
                record["requires_reset"] = True
            elif not gpu.requires_reset and gpu.index not in side.reset_printed:
                record["requires_reset"] = None
    out = {
        "num_gpus": attached if attached is not None else len(inventory.gpus),
        "driver_version": inventory.driver_version,
        "cuda_version": inventory.cuda_version,
        "gpus": gpus,
        "problems": problems,
        "fragment": side.fragment,
        "sections_present": [name for name in FRAGMENT_SECTIONS if name in side.sections],
        "sections_absent": [name for name in FRAGMENT_SECTIONS if name not in side.sections]
        if side.fragment else [],
        "commands_seen": list(side.commands),
    }
    if side.notes():
        out["notes"] = side.notes()
    return out


INSPECT = {"nvidia-smi": inspect_nvidia_smi}
