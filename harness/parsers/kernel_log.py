"""NVIDIA XID events in a kernel log (`dmesg`, `journalctl -k`, syslog, or a saved file), each with
the action the XID catalogue (harness.gpu.XID_ACTIONS) gives it, and the NVSwitch SXid events."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TextIO

from harness.gpu import pci_key, xid_action
from harness.parsers import ParseError
from harness.parsers.reader import Input, as_input
from harness.parsers.values import ascii_int

__all__ = ["INSPECT", "KernelLog", "SxidEvent", "XidEvent", "inspect_kernel_log", "parse_kernel_log"]

# `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has fallen off the bus.`
# Older drivers: `NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000009 intr 00800000`;
# newer: `pid='<unknown>', name=<unknown>, ...`; a MIG GPU adds its instances to the address:
# `NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, ...` (kernel_rc.c, XID_PRINT_WITH_ATTR).
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)(?P<mig>(?: GPU-C?I:[0-9]+)*)\): (?P<xid>[0-9]+)"
    r"(?:, pid=(?P<pid>'?<unknown>'?|-?[0-9]+))?(?:, name=(?P<name>[^,]*))?(?:,\s*(?P<msg>.*))?$"
)
# Newer drivers say a GPU fell off the bus in a multi-line message without an Xid line:
# `NVRM: The NVIDIA GPU 0000:b3:00.0` ... `NVRM: fallen off the bus and is not responding`.
_FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f:.]+)\s*$")
_FALLEN = re.compile(r"fallen off the bus")
# The one-line forms, printed next to the Xid 79 line or (on a GPU lost at probe time, and by
# old drivers) alone: `NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.` (open-gpu-kernel-
# modules, NV_DEV_PRINTF) and `NVRM: GPU at 0000:01:00.0 has fallen off the bus.` (old drivers).
_FALLEN_LINE = re.compile(
    r"NVRM: GPU (?:at )?(?:PCI:)?(?P<pci>[0-9A-Fa-f]+:[0-9A-Fa-f:.]+?):? (?:GPU )?has fallen off the bus"
)
# NVSwitch errors: `nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up`;
# the same SXid's `Severity 1 Engine ...` and `Data {...}` lines that follow are details of it.
_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>[0-9]+): SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<sxid>[0-9]+), "
    r"(?P<severity>Fatal|Non-fatal),\s*(?P<msg>.*)$"
)
# What a kernel-log line starts with: dmesg `[ 1399.140323]`, `dmesg -T` `[Fri Jan  5 10:34:01
# 2024]`, syslog `Jun 10 03:09:55 host`, journalctl short-iso / `dmesg --time-format iso`
# `2024-10-01T09:14:40+0000 host`, or `host kernel:`; `dmesg -x` (`kern  :err   : [ 12.3]`, with
# `--time-format iso`: `kern  :warn  : 2025-01-21T04:41:44,285060+00:00`) and
# Talos' `talosctl dmesg` (`192.168.11.119: kern:     err: [2026-04-22T21:25:20.46Z]: NVRM: ...`).
_TIME = re.compile(
    r"^\s*(?:<[0-9]>)?(?:\S+: (?=kern:))?(?:[a-z]+\s*:\s*[a-z]+\s*: )?(?:\[\s*(?P<uptime>[0-9]+\.[0-9]+)\]"
    r"|\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9] [0-9]{4})\]"
    r"|\[?(?P<iso>[0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:[.,][0-9]+)?(?:[+-][0-9][0-9]:?[0-9][0-9]|Z)?)"
    r"|(?P<syslog>[A-Z][a-z]{2} [ 0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9](?:\.[0-9]+)?))"
)
_KERNELISH = re.compile(
    r"^\s*\[\s*[0-9]+\.[0-9]+\]|^\s*\[[A-Z][a-z]{2} [A-Z][a-z]{2} |\skernel: |^\s*NVRM: |^<[0-9]>"
    r"|^[0-9]{4}-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9][.,][0-9]{6}[+-][0-9][0-9]:[0-9][0-9] "
    r"|^[a-z]+\s*:\s*[a-z]+\s*: |^[0-9]+,[0-9]+,[0-9]+,[-+c][^;]*;"
)
# /dev/kmsg records: `6,3998,261229012,-;nvidia-nvswitch3: open` (priority, sequence, microseconds
# since boot, flags); the time is reported in seconds like dmesg's.
_KMSG = re.compile(r"^[0-9]+,[0-9]+,(?P<usec>[0-9]+),[-+c][^;]*;")


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One Xid line."""

    xid: int
    pci: str
    pid: int | None
    process: str | None
    message: str
    action: str
    time: str | None = None
    line: int = 0
    mig: str | None = None
    """The MIG instances the driver named (`GPU-I:05 GPU-CI:01`); None outside MIG."""


@dataclass(frozen=True, slots=True)
class SxidEvent:
    """One NVSwitch SXid line (its first line: the one that says Fatal or Non-fatal)."""

    sxid: int
    switch: int
    """N of `nvidia-nvswitchN`."""
    pci: str
    """The NVSwitch's PCI address (not a GPU's)."""
    fatal: bool
    message: str
    time: str | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class KernelLog:
    """Every Xid event of a log, in order, and how many kernel lines it had."""

    events: tuple[XidEvent, ...]
    num_lines: int
    sxid_events: tuple[SxidEvent, ...] = ()
    omitted: int = 0
    """Xid/SXid events past MAX_EVENTS that repeated a (GPU, Xid, action) already kept."""


#: Events kept in full (a log flooded with one Xid keeps memory flat): past it, an event is
#: kept only when its GPU/switch, code and action are new, so no kind of fault is lost.
MAX_EVENTS = 10_000
#: Hard bound on events kept, new kinds included.
MAX_KINDS = 2 * MAX_EVENTS


class _Kept:
    """Events in order, bounded: every one up to MAX_EVENTS, then one per new kind."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.kinds: set[tuple[Any, ...]] = set()
        self.omitted = 0

    def add(self, item: Any, kind: tuple[Any, ...]) -> None:
        new = kind not in self.kinds
        if len(self.items) < MAX_EVENTS or (new and len(self.items) < MAX_KINDS):
            self.items.append(item)
            self.kinds.add(kind)
        else:
            self.omitted += 1


def _pid(raw: str | None) -> int | None:
    return ascii_int(raw) if raw else None


def parse_kernel_log(text: str | Input, *, require_kernel_lines: bool = True) -> KernelLog:
    """Parse a kernel log. Reads `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has
    fallen off the bus.` in any prefix (dmesg, syslog, journalctl), the Xid-less `NVRM: The
    NVIDIA GPU 0000:b3:00.0 ... fallen off the bus` and `NVRM: GPU 0000:b3:00.0: GPU has fallen
    off the bus.` (reported as Xid 79, once per GPU, and not at all for a GPU whose Xid 79 line is
    in the log) and NVSwitch `SXid` lines. Raises ParseError when no line looks like a kernel log
    line (empty input, or some other text)."""
    events = _Kept()
    fallen: dict[str, XidEvent] = {}  # the first report per GPU (pci_key) without an Xid line
    sxids = _Kept()
    kernel_lines = 0
    nonblank = False
    fallen_pci: str | None = None
    fallen_at = 0
    fallen_text = ""

    def lost(pci: str, line_text: str, at: int) -> None:
        key = pci_key(pci) or pci
        if key not in fallen and len(fallen) < MAX_EVENTS:
            fallen[key] = _fallen(pci, line_text, at)

    for n, line in enumerate(as_input(text).lines(), 1):
        nvrm = "NVRM:" in line
        if nvrm or _KERNELISH.search(line):
            kernel_lines += 1
        elif not nonblank and line.strip():
            nonblank = True
        if not nvrm:
            if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
                lost(fallen_pci, fallen_text, fallen_at)
                fallen_pci = None
            elif "SXid" in line:
                sx = _SXID.search(line)
                sxid, switch = (ascii_int(sx["sxid"]), ascii_int(sx["switch"])) if sx else (None, None)
                if sx and sxid is not None and switch is not None:
                    sxids.add(SxidEvent(sxid, switch, sx["pci"], sx["severity"] == "Fatal",
                                        sx["msg"].strip(), _when(line), n),
                              (switch, sx["pci"], sxid, sx["severity"]))
            continue
        m = _XID.search(line)
        xid = ascii_int(m["xid"]) if m else None
        if m and xid is not None:
            msg = (m["msg"] or "").strip().rstrip(">").strip()
            name = (m["name"] or "").strip().strip("'") or None
            action = xid_action(xid, msg)
            events.add(XidEvent(xid, m["pci"], _pid(m["pid"]),
                                None if name == "<unknown>" else name, msg,
                                action, _when(line), n, m["mig"].strip() or None),
                       (pci_key(m["pci"]), xid, action))
            continue
        start = _FALLEN_START.search(line)
        if start:
            fallen_pci, fallen_at, fallen_text = start["pci"], n, line
            continue
        if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
            lost(fallen_pci, fallen_text, fallen_at)
            fallen_pci = None
            continue
        one_line = _FALLEN_LINE.search(line) if "fallen" in line else None
        if one_line:
            lost(one_line["pci"], line, n)
    if require_kernel_lines and not kernel_lines:
        what = "empty input" if not nonblank else "no kernel log lines"
        raise ParseError(f"{what}: expected dmesg / journalctl -k / syslog lines "
                         "(`[ 12.345678] ...`, `... kernel: ...`, `NVRM: ...`)")
    found = events.items
    if fallen:
        # The driver prints the Xid 79 line and its own "has fallen off the bus" line together, and
        # may repeat the latter: one event per lost GPU, so the check names each GPU once.
        seen = {pci_key(e.pci) for e in found if e.xid == 79}
        found = sorted([*found, *(e for e in fallen.values() if pci_key(e.pci) not in seen)],
                       key=lambda e: e.line)
    return KernelLog(tuple(found), kernel_lines, tuple(sxids.items),
                     events.omitted + sxids.omitted)


def _when(line: str) -> str | None:
    tm = _TIME.match(line)
    if tm:
        return tm["uptime"] or tm["ctime"] or tm["iso"] or tm["syslog"]
    km = _KMSG.match(line)
    usec = ascii_int(km["usec"]) if km else None
    return None if usec is None else f"{usec // 1_000_000}.{usec % 1_000_000:06d}"


def _fallen(pci: str, line_text: str, line: int) -> XidEvent:
    return XidEvent(79, pci, None, None, "GPU has fallen off the bus (reported without an Xid "
                    "line)", xid_action(79), _when(line_text), line)


def inspect_kernel_log(stream: TextIO | Input, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect kernel-log FILE`: keys xid_events [{xid, pci, mig, pid, process, time,
    message, action}], sxid_events [{sxid, switch, pci, fatal, time, message}]."""
    log = parse_kernel_log(as_input(stream))
    out = {"xid_events": [{"xid": e.xid, "pci": e.pci, "mig": e.mig, "pid": e.pid,
                           "process": e.process, "time": e.time, "message": e.message,
                           "action": e.action}
                          for e in log.events],
           "sxid_events": [{"sxid": e.sxid, "switch": e.switch, "pci": e.pci, "fatal": e.fatal,
                            "time": e.time, "message": e.message} for e in log.sxid_events]}
    if log.omitted:
        out["notes"] = [f"{log.omitted:,} more events repeated a GPU, code and action already "
                        f"listed after the first {MAX_EVENTS:,}: not listed"]
    return out


INSPECT = {"kernel-log": inspect_kernel_log}
