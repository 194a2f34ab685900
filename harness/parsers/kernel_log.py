"""NVIDIA XID events in a kernel log (`dmesg`, `journalctl -k`, syslog, or a saved file), each with
the action the XID catalogue (harness.gpu.XID_ACTIONS) gives it, and the NVSwitch SXid events."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, TextIO

from harness.gpu import pci_key, xid_action
from harness.parsers import ParseError, read_text
from harness.parsers.kernel_log_format import KERNEL, Line, Tally, classify

__all__ = ["INSPECT", "KernelLog", "SxidEvent", "XidEvent", "inspect_kernel_log", "parse_kernel_log"]

# `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has fallen off the bus.`
# Older drivers: `NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000009 intr 00800000`;
# newer: `pid='<unknown>', name=<unknown>, ...`; a MIG GPU adds its instances to the address:
# `NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, ...` (kernel_rc.c, XID_PRINT_WITH_ATTR).
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)(?P<mig>(?: GPU-C?I:\d+)*)\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>'?<unknown>'?|-?\d+))?(?:, name=(?P<name>[^,]*))?(?:,\s*(?P<msg>.*))?$"
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
    r"nvidia-nvswitch(?P<switch>\d+): SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<sxid>\d+), "
    r"(?P<severity>Fatal|Non-fatal),\s*(?P<msg>.*)$"
)
#: A log whose first line is this many seconds after boot or less reaches back to the boot.
BOOT_WINDOW_S = 5.0


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
    """Every Xid event of a log, in order, how many kernel lines it had, and what it covers."""

    events: tuple[XidEvent, ...]
    num_lines: int
    sxid_events: tuple[SxidEvent, ...] = ()
    first_time: str | None = None
    """The time of its first kernel line, as the log wrote it (None: the lines carry none)."""
    from_boot: bool | None = None
    """True: the log reaches back to the boot (the kernel's `Linux version` banner, or a first
    line within BOOT_WINDOW_S of it); False: it starts later (the ring buffer wrapped, the
    journal was rotated or vacuumed, a `--since` window); None: it cannot tell."""
    boots: tuple[tuple[int, str | None], ...] = ()
    """(line number, time) where a boot starts (the banner, or journalctl's `-- Boot ... --`):
    a saved file may hold several."""
    source: str = ""
    """What was read (`journalctl -k -b`, `dmesg`, `PREFLIGHT_KERNEL_LOG=/path`); set by the probe."""
    since: str | None = None
    """The window asked for (`journalctl --since`), when one was."""

    @property
    def window(self) -> str:
        """What the log covers, for messages: `since boot`, `since <time> (not from boot: ...)`."""
        if self.since:
            return f"since {self.since} (the window asked for)"
        if self.from_boot:
            return "since boot"
        if self.from_boot is False:
            start = f"since {self.first_time}" if self.first_time else "since a later point"
            return (f"{start} only (the log does not reach back to the boot: ring buffer "
                    "wrapped or journal rotated; older XIDs are not seen)")
        return "over the window the log covers (its start relative to boot is unknown)"

    def last_boot(self) -> KernelLog:
        """The events after the last boot in the log (a saved file can hold several boots)."""
        if len(self.boots) < 2:
            return self
        start, when = self.boots[-1]
        return dataclasses.replace(
            self, events=tuple(e for e in self.events if e.line >= start),
            sxid_events=tuple(e for e in self.sxid_events if e.line >= start),
            boots=(self.boots[-1],), first_time=when or self.first_time, from_boot=True)


def _pid(raw: str | None) -> int | None:
    return int(raw) if raw and raw.lstrip("-").isdigit() else None


def parse_kernel_log(text: str, *, require_kernel_lines: bool = True) -> KernelLog:
    """Parse a kernel log. Reads `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has
    fallen off the bus.` in any prefix (dmesg, syslog, journalctl, its JSON), the Xid-less `NVRM:
    The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus` and `NVRM: GPU 0000:b3:00.0: GPU has
    fallen off the bus.` (reported as Xid 79, once per GPU, and not at all for a GPU whose Xid 79
    line is in the log) and NVSwitch `SXid` lines. Raises ParseError when nothing was found and
    the text is not positively a kernel log (harness.parsers.kernel_log_format: empty input, a
    tool's error message, random bytes are not, and their lack of Xid lines proves nothing)."""
    events: list[XidEvent] = []
    fallen: list[XidEvent] = []
    sxids: list[SxidEvent] = []
    tally = Tally()
    boots: list[tuple[int, str | None]] = []
    first: Line | None = None
    fallen_pci: str | None = None
    fallen_at, fallen_time = 0, None
    for n, raw in enumerate(read_text_lines(text), 1):
        ln = classify(raw)
        if ln.kind == KERNEL:
            tally.kernel += 1  # the common case, counted here (Tally.add does the same)
        else:
            tally.add(ln)
        line, when = ln.text, ln.time
        if ln.kind == KERNEL and first is None:
            first = ln
        if ln.boot:
            boots.append((n, when))
        if "NVRM:" not in line:
            if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
                fallen.append(_fallen(fallen_pci, fallen_time, fallen_at))
                fallen_pci = None
            elif "SXid" in line:
                sx = _SXID.search(line)
                if sx:
                    sxids.append(SxidEvent(int(sx["sxid"]), int(sx["switch"]), sx["pci"],
                                           sx["severity"] == "Fatal", sx["msg"].strip(),
                                           when, n))
            continue
        m = _XID.search(line)
        if m:
            xid = int(m["xid"])
            msg = (m["msg"] or "").strip().rstrip(">").strip()
            name = (m["name"] or "").strip().strip("'") or None
            events.append(XidEvent(xid, m["pci"], _pid(m["pid"]),
                                   None if name == "<unknown>" else name, msg,
                                   xid_action(xid, msg), when, n,
                                   m["mig"].strip() or None))
            continue
        start = _FALLEN_START.search(line)
        if start:
            fallen_pci, fallen_at, fallen_time = start["pci"], n, when
            continue
        if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
            fallen.append(_fallen(fallen_pci, fallen_time, fallen_at))
            fallen_pci = None
            continue
        one_line = _FALLEN_LINE.search(line) if "fallen" in line else None
        if one_line:
            fallen.append(_fallen(one_line["pci"], when, n))
    problem = tally.shape.problem
    if require_kernel_lines and problem and not (events or fallen or sxids):
        # Only "no XID" needs the text to be a kernel log; an Xid line is evidence of a fault
        # wherever it is (a paste with commentary around it).
        raise ParseError(problem)
    if fallen:
        # The driver prints the Xid 79 line and its own "has fallen off the bus" line together, and
        # may repeat the latter: one event per lost GPU, so the check names each GPU once.
        seen = {pci_key(e.pci) for e in events if e.xid == 79}
        for event in fallen:
            if pci_key(event.pci) not in seen:
                seen.add(pci_key(event.pci))
                events.append(event)
        events.sort(key=lambda e: e.line)
    return KernelLog(tuple(events), tally.kernel, tuple(sxids),
                     first_time=first.time if first else None,
                     from_boot=_from_boot(first, boots), boots=tuple(boots))


def _from_boot(first: Line | None, boots: list[tuple[int, str | None]]) -> bool | None:
    """Whether the log reaches back to the boot (see KernelLog.from_boot)."""
    if boots:
        return True
    if first is None:
        return None
    if first.uptime is not None:
        return float(first.uptime) <= BOOT_WINDOW_S
    return False if first.time else None


def _fallen(pci: str, when: str | None, line: int) -> XidEvent:
    return XidEvent(79, pci, None, None, "GPU has fallen off the bus (reported without an Xid "
                    "line)", xid_action(79), when, line)


def read_text_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def inspect_kernel_log(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect kernel-log FILE`: keys xid_events [{xid, pci, mig, pid, process, time,
    message, action}], sxid_events [{sxid, switch, pci, fatal, time, message}]."""
    log = parse_kernel_log(read_text(stream))
    return {"xid_events": [{"xid": e.xid, "pci": e.pci, "mig": e.mig, "pid": e.pid,
                            "process": e.process, "time": e.time, "message": e.message,
                            "action": e.action}
                           for e in log.events],
            "sxid_events": [{"sxid": e.sxid, "switch": e.switch, "pci": e.pci, "fatal": e.fatal,
                             "time": e.time, "message": e.message} for e in log.sxid_events]}


INSPECT = {"kernel-log": inspect_kernel_log}
