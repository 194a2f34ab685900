"""What every nvidia-smi format's reader shares: the values nvidia-smi prints for "none" and
for a fault, the per-pass side notes (lost GPUs, nvidia-smi's own failure line, `Attached
GPUs`), value cleaning, and the lost-GPU records (harness.parsers.nvidia_smi is the entry)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from harness.base.gpu_record import GpuInfo, pci_key
from harness.parsers import ParseError
from harness.parsers.reader import Input
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_int

#: Values that mean "no value": nvidia-smi prints N/A for unsupported, brackets for failures,
#: `ERR!` in the table for a reading that failed, `Not Found` for the CUDA version when no
#: libcuda is visible, and (R575+) `Requested functionality has been deprecated`.
_NO_VALUE = {"n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]",
             "unknown error", "[insufficient permissions]", "[gpu is lost]", "", "none",
             "err!", "not found", "requested functionality has been deprecated",
             "[requested functionality has been deprecated]"}
#: Values that mean the GPU itself is in a fault state.
RESET_VALUES = {"[gpu requires reset]", "[gpu is lost]"}
#: Values that mean a reading failed (not "not supported"): kept as the GPU's query errors, so
#: that a fact nvidia-smi could not read is known to be unknown.
ERROR_VALUES = {"[unknown error]", "[insufficient permissions]", "err!"}

BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
GPU_HEADER = re.compile(rf"^GPU\s+(?P<bus>{BUS_ID})\s*$")
ANY_GPU_HEADER = re.compile(rf"^[ \t]*GPU\s+{BUS_ID}\s*$")
KEY_VALUE = re.compile(r"^(?P<key>[^:]*?\S)\s+:\s?(?P<value>.*)$")
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
#: A `Fabric > State` line pasted without its section header (`nvidia-smi -q | grep -A1 State`,
#: or a copy of the two lines): a fabric state NVML names (nvmlGpuFabricState_t, in nvidia-smi's
#: words) is unambiguous: no other `-q` key is a bare `State`.
_FABRIC_STATE = r"State\s+:\s*(?:Not Supported|Not Started|In Progress|Completed)\s*$"
#: `nvidia-smi -q` sections a fragment is recognised by when pasted without its GPU line
#: (`ECC Errors`, `Retired Pages`, `Remapped Rows`, `Fabric` (`nvidia-smi -q | grep -A5
#: Fabric`), or grep's `SRAM Uncorrectable : 1` lines).
FRAGMENT_SECTIONS = ("ecc mode", "ecc errors", "retired pages", "remapped rows",
                     "gpu reset status", "fabric")
FRAGMENT_KEYS = re.compile(
    r"^\s*(?:(?:ECC Errors|ECC Mode|Retired [Pp]ages|Remapped Rows|GPU Reset Status|Fabric)\s*$|"
    r"(?:[SD]RAM (?:Unc|C)orrectable|Pending Page Blacklist|Double Bit ECC|Single Bit ECC)"
    r"[\w -]*?\s+:|" + _FABRIC_STATE + ")")
#: A bare `State :` / `Status :` line whatever its value (the refusal names it when it is not
#: a fabric state).
STATE_KEY = re.compile(r"^\s*(?P<key>State|Status)\s+:\s?(?P<value>.*)$")
#: The keys of the Fabric section a header-less fragment files under `fabric`.
FABRIC_KEYS = frozenset(("state", "status"))
#: Where `nvidia-smi -q` prints each GPU fact the checks judge (harness.base.gpu_facts keys):
#: the sections (a key path's first key, lower case; `-q -x`: the element, `_` for ` `) that
#: hold it. A section printed without the fact's value (`Status : N/A`, the line cut from it)
#: leaves the fact unread; a section not printed at all is an excerpt that left it out.
#: NVLink states are NVML's alone.
Q_PLACES: dict[str, tuple[str, ...]] = {
    "model": ("product name",), "memory": ("fb memory usage",), "ecc_mode": ("ecc mode",),
    "ecc_volatile": ("ecc errors",), "ecc_aggregate": ("ecc errors",),
    "remap_pending": ("remapped rows",), "remap_failure": ("remapped rows",),
    "retired_pending": ("retired pages",), "retired_dbe": ("retired pages",),
    "temperature": ("temperature",),
    "clock_reasons": ("clocks event reasons", "clocks throttle reasons"),
    "persistence": ("persistence mode",), "pstate": ("performance state",),
    "pcie_gen": ("pci",), "pcie_gen_max": ("pci",), "pcie_width": ("pci",),
    "pcie_width_max": ("pci",), "reset_state": ("gpu reset status", "gpu recovery action"),
    "fabric_state": ("fabric",), "fabric_status": ("fabric",),
}


def q_shown(sections: Iterable[str]) -> frozenset[str]:
    """The facts (Q_PLACES) whose section is among `sections` (lower case, ` ` or `_`)."""
    heads = {name.replace("_", " ") for name in sections}
    return frozenset(k for k, places in Q_PLACES.items() if not heads.isdisjoint(places))


#: Authors' markers after a value (`Pending : Yes <===`, `: 0  ← SRAM ...`): not the value.
_ANNOTATION = re.compile(r"\s+(?:<=+|<-+|←|#\s).*$")
_ATTACHED = re.compile(r"^\s*Attached GPUs\s*:\s*([0-9]+)|<attached_gpus>([0-9]+)<")
#: What nvidia-smi prints instead of any output when it cannot read the GPUs at all.
_FAILURE = re.compile(r"^\s*(Failed to initialize NVML: .*|NVIDIA-SMI has failed because .*"
                      r"|No devices were found|Driver/library version mismatch.*)$")
#: R610 marks the old version keys: `Driver Version : 610.57.04 [Deprecated; will be removed in
#: CUDA 14.0. Use KMD Version instead]`.



#: `nvidia-smi -i 2 -q ...` / `--id=2`: the one GPU a command line selects.
_SELECT = re.compile(r"\bnvidia-smi\b.*?\s(?:-i\s*|--id[= ])([0-9]{1,4})(?![0-9,:])")

#: `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader`: the columns of rows
#: printed without their header.
_QUERY_NOHEADER = re.compile(r"\bnvidia-smi\b.*?--query-gpu[= ](\S+)(?=.*--format[= ]\S*noheader)")

#: GPUs kept (a node has at most 16; a `-q -l` loop repeats the same ones, kept once each).
MAX_GPUS = 1024
#: Lines a key : value tree keeps per GPU, and section depth (real dumps: ~400 and 4).
MAX_KEYS = 10_000
MAX_DEPTH = 16
#: `Unable to determine the device handle` lines kept.
MAX_LOST = 256


@dataclass(slots=True)
class Side:
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
    pending_index: int | None = None
    """The GPU index of the last `nvidia-smi -i N ...` command line seen (a prompt pasted above
    an output): the index of the next GPU section."""
    noheader_columns: tuple[str, ...] = ()
    """The columns of a `nvidia-smi --query-gpu=A,B --format=csv,noheader` command line seen
    above the rows (which then have no header line)."""
    bus_index: dict[object, int] = dataclasses.field(default_factory=dict)
    headerless_fabric: bool = False
    """A fragment whose `State : <fabric state>` line came without its `Fabric` header: its bare
    `State` / `Status` are the Fabric section's."""
    shown: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    """The GPU facts (harness.base.gpu_facts keys) the input printed a place for, by the GPU's
    bus id as read (`""`: a fragment's GPU; `"*"`: every GPU, a CSV's columns or the table's)."""

    def shown_on(self, gpu: GpuInfo) -> frozenset[str]:
        """The facts the input printed a place for on `gpu` (none for a GPU known only from a
        lost-GPU line: what it said is in its errors)."""
        return self.shown.get("*") or self.shown.get(gpu.bus_id or "", frozenset())
    """GPU sections (by pci_key) whose index a `-i N` command line above them gave."""

    def see(self, line: str) -> None:
        if "Unable to determine" in line and len(self.lost) < MAX_LOST:
            for m in _LOST.finditer(line):
                self.lost.setdefault(m.group(0).strip(), (m["index"], m["bus"] or m["bus2"],
                                                           m.group(0).strip()))
        # (prefiltered: each failure line holds `ail`, `No devices` or `mismatch`)
        if self.failure is None and ("ail" in line or "No devices" in line or "mismatch" in line
                                     ) and (m := _FAILURE.match(line)):
            self.failure = m[1].strip()
        if self.attached is None and "ttached" in line and (m := _ATTACHED.search(line)):
            self.attached = ascii_int(m.group(1) or m.group(2))

    def command(self, line: str) -> None:
        """A command line seen above the lines to come: `-i N` gives the next GPU section's index,
        `--query-gpu=A,B --format=csv,noheader` the columns of the rows after it."""
        m = _SELECT.search(line)
        self.pending_index = ascii_int(m[1]) if m else None
        q = _QUERY_NOHEADER.search(line)
        if q:
            self.noheader_columns = tuple(c for c in q[1].strip("'\"").split(",") if c)

    def not_read(self, what: str) -> ParseError:
        """The ParseError for input without GPUs, quoting nvidia-smi's own failure line if any."""
        return ParseError(f"{what}; nvidia-smi says: {self.failure}" if self.failure else what)

    def notes(self) -> list[str]:
        notes = [f"{self.omitted} more GPUs after the first {MAX_GPUS} not kept"] if self.omitted else []
        if self.headerless_fabric:
            notes.append("`State` / `Status` without their `Fabric` header line: read as the Fabric "
                         "section's (the state is one only the Fabric section prints)")
        return notes


#: The literals every line `_Side.see` reads holds (each found with `str.find`: memchr speed,
#: where an alternation is tried at every character).
_SEEN = ("ail", "Unable", "ttached", "No devices", "mismatch")


class Batch(list):  # type: ignore[type-arg]
    """A batch of lines with its text (`"\\n".join` of them), joined once for every reader."""

    text: str = ""


def _see(side: Side, text: str) -> None:
    """Show `side` each line of a batch's text that may be a failure, a lost GPU or `Attached
    GPUs`, once, in order."""
    starts = set()
    for literal in _SEEN:
        at = text.find(literal)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            starts.add(start)
            end = text.find("\n", at)
            at = text.find(literal, end) if end >= 0 else -1
    for start in sorted(starts):
        end = text.find("\n", start)
        side.see(text[start:] if end < 0 else text[start:end])


def smi_batches(source: Input, side: Side | None = None) -> Iterator[list[str]]:
    """The input's lines, unwrapped (harness.parsers.unwrap), in lists: a reader's batch as it
    is when no line of it may carry a wrapper (Unwrapper.candidates: one regex pass), else its
    lines unwrapped, the list cut where a command line was seen, so that the readers read the
    lines after `nvidia-smi -i N ...` with its `side.pending_index` set. `side` keeps the
    command lines seen, and sees each line that may name a failure. nvidia-smi starts no line
    with `#` or `//`: such a marker is a quote (a section commented out in a script or a doc)
    and is removed."""
    unwrapper = Unwrapper(comments=True)
    unwrap, pending, commands = unwrapper.unwrap, unwrapper.pending, unwrapper.commands
    seen = 0
    for lines in source.batches():
        batch = Batch(lines)
        batch.text = "\n".join(lines)
        found = unwrapper.candidates(batch, batch.text)
        if found is not None and not found and not pending():  # the fast path
            if side is not None:
                _see(side, batch.text)
            yield batch
            continue
        out: list[str] = []
        for i, line in enumerate(batch):
            if found is None or i in found or pending():
                text = unwrap(line)
                if len(commands) != seen:  # (appended to, never replaced)
                    seen = len(commands)
                    if side is not None:
                        if out:
                            _see(side, "\n".join(out))
                            yield out
                            out = []
                        side.command(commands[-1])
                if text is None:
                    continue
                line = text
            out.append(line)
        if out:
            if side is not None:
                _see(side, "\n".join(out))
            yield out
    if side is not None:
        side.commands = unwrapper.commands


def smi_lines(source: Input, side: Side | None = None) -> Iterator[str]:
    """The input's lines, unwrapped, one by one (see _batches)."""
    for batch in smi_batches(source, side):
        yield from batch


def clean_value(value: str | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    if " " in v and ("<" in v or "←" in v or "#" in v):
        v = _ANNOTATION.sub("", v)
    return None if v.lower() in _NO_VALUE or v.lower() in RESET_VALUES else v


def to_float(value: str | None) -> float | None:
    v = clean_value(value)
    m = _NUMBER.match(v) if v else None
    return float(m.group(0)) if m else None


def to_int(value: str | None) -> int | None:
    n = to_float(value)
    return None if n is None else int(n)


def clean_serial(value: str | None) -> str | None:
    """A board serial; R580 prints `0` (not N/A) for GPUs without one (laptops, GeForce)."""
    v = clean_value(value)
    return None if v == "0" else v


def clean_version(value: str | None) -> str | None:
    return clean_value(without_bracket_suffix(value)) if value else None


def without_bracket_suffix(value: str) -> str:
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


def yes_no(value: str | None) -> bool | None:
    """True / False for a yes or no nvidia-smi prints; None for anything else (`Unknown
    Error`, `N/A`): unknown, never a no."""
    v = clean_value(value)
    if v is None:
        return None
    v = v.lower()
    return True if v in _YES else False if v in _NO else None
def needs_reset(flags: list[bool | None], fault: bool) -> bool | None:
    """Whether a GPU needs a reset: True when a flag says yes or a value says it is lost or needs
    one; False when a flag says no; None when no flag was printed (not read, not "no")."""
    if fault or any(flags):
        return True
    return False if any(f is False for f in flags) else None


def clean_recovery(value: str | None) -> str | None:
    """`GPU Recovery Action`: the word `None` (the driver needs nothing) kept as such, N/A and
    errors as no value."""
    if value is not None and value.strip().lower() == "none":
        return "None"
    return clean_value(value)


def clean_fabric_status(value: str | None) -> str | None:
    """`Fabric > Status`: `Success`, or the error the registration ended with (unbracketed: NVML's
    error string, `Unknown Error` included); N/A (not completed yet) and a bracketed failure to
    read it are no value."""
    v = (value or "").strip()
    if not v or v.lower() in ("n/a", "not supported") or v.startswith("["):
        return None
    return v


CSV_REASONS = {"hw_slowdown": "HW Slowdown", "hw_thermal_slowdown": "HW Thermal Slowdown",
                "hw_power_brake_slowdown": "HW Power Brake Slowdown",
                "sw_thermal_slowdown": "SW Thermal Slowdown", "sw_power_cap": "SW Power Cap"}


def with_lost(gpus: list[GpuInfo], side: Side, *, renumber: bool = False) -> tuple[GpuInfo, ...]:
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
