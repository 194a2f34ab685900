"""NVIDIA XID events in a kernel log (`dmesg`, `journalctl -k`, syslog, or a saved file), each with
the action the XID catalogue (harness.gpu.XID_ACTIONS) gives it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TextIO

from harness.gpu import xid_action
from harness.parsers import ParseError, read_text

__all__ = ["INSPECT", "KernelLog", "XidEvent", "inspect_kernel_log", "parse_kernel_log"]

# `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has fallen off the bus.`
# Older drivers: `NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000009 intr 00800000`;
# newer: `pid='<unknown>', name=<unknown>, ...`.
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<xid>\d+)"
    r"(?:, pid=(?P<pid>'?<unknown>'?|-?\d+))?(?:, name=(?P<name>[^,]*))?(?:,\s*(?P<msg>.*))?$"
)
# Newer drivers say a GPU fell off the bus in a multi-line message without an Xid line:
# `NVRM: The NVIDIA GPU 0000:b3:00.0` ... `NVRM: fallen off the bus and is not responding`.
_FALLEN_START = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9A-Fa-f:.]+)\s*$")
_FALLEN = re.compile(r"fallen off the bus")
# What a kernel-log line starts with: dmesg `[ 1399.140323]`, `dmesg -T` `[Fri Jan  5 10:34:01
# 2024]`, syslog `Jun 10 03:09:55 host`, journalctl short-iso / `dmesg --time-format iso`
# `2024-10-01T09:14:40+0000 host`, or `host kernel:`.
_TIME = re.compile(
    r"^\s*(?:\[\s*(?P<uptime>\d+\.\d+)\]"
    r"|\[(?P<ctime>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]"
    r"|(?P<iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d:?\d\d|Z)?)"
    r"|(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?))"
)
_KERNELISH = re.compile(
    r"^\s*\[\s*\d+\.\d+\]|^\s*\[[A-Z][a-z]{2} [A-Z][a-z]{2} |\skernel: |^\s*NVRM: |^<\d>"
    r"|^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.,]\d{6}[+-]\d\d:\d\d "
)


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


@dataclass(frozen=True, slots=True)
class KernelLog:
    """Every Xid event of a log, in order, and how many kernel lines it had."""

    events: tuple[XidEvent, ...]
    num_lines: int


def _pid(raw: str | None) -> int | None:
    return int(raw) if raw and raw.lstrip("-").isdigit() else None


def parse_kernel_log(text: str, *, require_kernel_lines: bool = True) -> KernelLog:
    """Parse a kernel log. Reads `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has
    fallen off the bus.` in any prefix (dmesg, syslog, journalctl) and the Xid-less `NVRM: The
    NVIDIA GPU 0000:b3:00.0 ... fallen off the bus` (reported as Xid 79). Raises ParseError when
    no line looks like a kernel log line (empty input, or some other text)."""
    lines = read_text_lines(text)
    events: list[XidEvent] = []
    kernel_lines = 0
    fallen_pci: str | None = None
    fallen_at = 0
    for n, line in enumerate(lines, 1):
        nvrm = "NVRM:" in line
        if nvrm or _KERNELISH.search(line):
            kernel_lines += 1
        if not nvrm:
            if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
                events.append(_fallen(fallen_pci, fallen_at))
                fallen_pci = None
            continue
        m = _XID.search(line)
        if m:
            tm = _TIME.match(line)
            when = (tm["uptime"] or tm["ctime"] or tm["iso"] or tm["syslog"]) if tm else None
            xid = int(m["xid"])
            msg = (m["msg"] or "").strip().rstrip(">").strip()
            name = (m["name"] or "").strip().strip("'") or None
            events.append(XidEvent(xid, m["pci"], _pid(m["pid"]),
                                   None if name == "<unknown>" else name, msg, xid_action(xid),
                                   when, n))
            continue
        start = _FALLEN_START.search(line)
        if start:
            fallen_pci, fallen_at = start["pci"], n
            continue
        if fallen_pci and n - fallen_at <= 3 and _FALLEN.search(line):
            events.append(_fallen(fallen_pci, fallen_at))
            fallen_pci = None
    if require_kernel_lines and not kernel_lines:
        what = "empty input" if not any(ln.strip() for ln in lines) else "no kernel log lines"
        raise ParseError(f"{what}: expected dmesg / journalctl -k / syslog lines "
                         "(`[ 12.345678] ...`, `... kernel: ...`, `NVRM: ...`)")
    return KernelLog(tuple(events), kernel_lines)


def _fallen(pci: str, line: int) -> XidEvent:
    return XidEvent(79, pci, None, None, "GPU has fallen off the bus (reported without an Xid "
                    "line)", xid_action(79), None, line)


def read_text_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def inspect_kernel_log(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect kernel-log FILE`: keys xid_events [{xid, pci, pid, message, action}]."""
    log = parse_kernel_log(read_text(stream))
    return {"xid_events": [{"xid": e.xid, "pci": e.pci, "pid": e.pid, "message": e.message,
                            "action": e.action} for e in log.events]}


INSPECT = {"kernel-log": inspect_kernel_log}
