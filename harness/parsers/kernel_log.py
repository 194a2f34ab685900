"""NVIDIA XID events in a kernel log (`dmesg`, `journalctl -k`, syslog, or a saved file), each with
the action the XID catalogue (harness.base.gpu_actions.XID_ACTIONS) gives it, and the NVSwitch SXid events."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Generic, TextIO, TypeVar

from harness.base.gpu_actions import xid_action
from harness.base.gpu_record import pci_key
from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.kernel_log_events import BOOT_WINDOW_S, KernelLog, SxidEvent, XidEvent
from harness.parsers.kernel_log_format import KERNEL, Line, Tally, classify, ends_mid_line, lines_to_read
from harness.parsers.kernel_log_init import InitFailure, init_failure
from harness.parsers.reader import Input, as_input
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_int

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "inspect_kernel_log", "parse_kernel_log"]

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
#: A pretty-printed JSON event's time on a line of its own (`"ts":"2024-08-21T18:35:35Z",`: a
#: SageMaker HyperPod health-monitoring-agent event, docs.aws.amazon.com
#: sagemaker-hyperpod-eks-resiliency-health-monitoring-agent), taken as the time of the untimed
#: kernel message within the next JSON_TIME_LINES lines of the same event.
_JSON_TIME = re.compile(r'^\s*"(?:ts|time|timestamp|@timestamp|eventTime)"\s*:\s*'
                        r'"(?P<time>\d{4}-\d\d-\d\d[T ][0-9:.]+(?:Z|[+-]\d\d:?\d\d)?)"')
JSON_TIME_LINES = 20
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
#: The detail lines that follow (NVIDIA/open-gpu-kernel-modules src/common/nvswitch/kernel/
#: error_nvswitch.c _nvswitch_dump_error_entry): `..: 24007, Severity 1 Engine instance 12 Sub-engine
#: instance 00`, `..: 24007, Data {0x...}`. The severity is NVSWITCH_ERROR_SEVERITY_TYPE
#: (src/common/nvswitch/interface/ctrl_dev_nvswitch.h): 0 NONFATAL, 1 FATAL.
_SXID_DETAIL = re.compile(
    r"nvidia-nvswitch(?P<switch>[0-9]+): SXid \(PCI:(?P<pci>[0-9A-Fa-f:.]+)\): (?P<sxid>[0-9]+), "
    r"(?P<msg>(?:Severity (?P<severity>[0-9]+) |Data ).*)$"
)
_SEVERITY_FATAL = {"0": False, "1": True}
#: Said of an SXid read from its detail lines alone.
NO_FIRST_LINE = "the SXid's first line (Fatal or Non-fatal) is not in the log"
#: Events kept in full (a log flooded with one Xid keeps memory flat): past it, an event is
#: kept only when its GPU/switch, code and action are new, so no kind of fault is lost.
#: (10,000 let the peak grow 44% from a 20 MB to a 500 MB log, 27.7 -> 40.0 MB, the events
#: and their JSON; 1,000: 27.7 -> 27.8 MB, bench/bench_line_kinds.py --rss 20,500.)
MAX_EVENTS = 1_000
#: Hard bound on events kept, new kinds included.
MAX_KINDS = 2 * MAX_EVENTS


_Event = TypeVar("_Event")


class _Kept(Generic[_Event]):
    """Events in order, bounded: every one up to MAX_EVENTS, then one per new kind."""

    def __init__(self) -> None:
        self.items: list[_Event] = []
        self.kinds: set[tuple[object, ...]] = set()
        self.omitted = 0

    def add(self, item: _Event, kind: tuple[object, ...]) -> None:
        new = kind not in self.kinds
        if len(self.items) < MAX_EVENTS or (new and len(self.items) < MAX_KINDS):
            self.items.append(item)
            self.kinds.add(kind)
        else:
            self.omitted += 1


def _pid(raw: str | None) -> int | None:
    return ascii_int(raw) if raw else None


class _Reader:
    """The state of one pass over a log: `feed` reads one unwrapped line, `plain` a run of
    ordinary dmesg lines (the lines kernel_log_format.lines_to_read leaves out) by counting them."""

    def __init__(self) -> None:
        self.events: _Kept[XidEvent] = _Kept()
        self.sxids: _Kept[SxidEvent] = _Kept()
        self.fallen: dict[object, XidEvent] = {}  # the first report per GPU without an Xid line
        self.init_failed: dict[object, InitFailure] = {}  # per GPU: its first, with the count
        self.tally = Tally()
        self.boots: list[tuple[int, str | None]] = []
        self.first: Line | None = None
        self.fallen_pci: str | None = None
        self.fallen_at, self.fallen_time = 0, None
        self.json_time: str | None = None
        self.json_at = 0
        self.headed: dict[tuple[int, str, int], bool] = {}  # (switch, pci, SXid): first line read

    def lost(self, pci: str, when: str | None, at: int) -> None:
        key = pci_key(pci) or pci
        if key not in self.fallen and len(self.fallen) < MAX_EVENTS:
            self.fallen[key] = _fallen(pci, when, at)

    def plain(self, lines: list[str]) -> None:
        """A run of ordinary dmesg lines (`[ 12.345678] text` without a word any rule reads):
        all each of them changes is the count of kernel lines, and the first line."""
        self.tally.kernel += len(lines)
        if self.first is None and lines:
            self.first = classify(lines[0])

    def feed(self, n: int, raw: str) -> None:
        """Read line `n` (1-based, the file's numbering), unwrapped."""
        ln = classify(raw)
        if ln.kind == KERNEL:
            self.tally.kernel += 1  # the common case, counted here (Tally.add does the same)
        else:
            self.tally.add(ln)
        line, when = ln.text, ln.time
        if line[:1] in ' \t"' and '"' in line and (jt := _JSON_TIME.match(line)):
            self.json_time, self.json_at = jt["time"], n  # an event's time, on its own line
        elif when is None and self.json_time is not None and n - self.json_at <= JSON_TIME_LINES:
            when = self.json_time  # the untimed message of that event (a pretty-printed JSON)
        if ln.kind == KERNEL and self.first is None:
            self.first = ln
        if ln.boot and len(self.boots) < MAX_EVENTS:
            self.boots.append((n, when))
        fallen_pci = self.fallen_pci
        if "NVRM:" not in line:
            if fallen_pci and n - self.fallen_at <= 3 and _FALLEN.search(line):
                self.lost(fallen_pci, self.fallen_time, self.fallen_at)
                self.fallen_pci = None
            elif "SXid" in line and (sx := _sxid(line, when, n, self.headed)) is not None:
                self.sxids.add(*sx)
            return
        m = _XID.search(line)
        xid = ascii_int(m["xid"]) if m else None
        if m and xid is not None:
            msg = (m["msg"] or "").strip().rstrip(">").strip()
            if '"NVRM:' in line:  # a JSON event's string value: `"message":"NVRM: Xid ...",`
                msg = msg.partition('"')[0].strip()
            name = (m["name"] or "").strip().strip("'") or None
            action = xid_action(xid, msg)
            self.events.add(XidEvent(xid, m["pci"], _pid(m["pid"]),
                                     None if name == "<unknown>" else name, msg,
                                     action, when, n, m["mig"].strip() or None),
                            (pci_key(m["pci"]), xid, action))
            return
        start = _FALLEN_START.search(line)
        if start:
            self.fallen_pci, self.fallen_at, self.fallen_time = start["pci"], n, when
            return
        if fallen_pci and n - self.fallen_at <= 3 and _FALLEN.search(line):
            self.lost(fallen_pci, self.fallen_time, self.fallen_at)
            self.fallen_pci = None
            return
        one_line = _FALLEN_LINE.search(line) if "fallen" in line else None
        if one_line:
            self.lost(one_line["pci"], when, n)
        elif (failed := init_failure(line, when, n)) is not None:
            key = pci_key(failed.pci) or failed.pci
            first = self.init_failed.get(key)
            if first is not None:
                self.init_failed[key] = dataclasses.replace(first, count=first.count + 1)
            elif len(self.init_failed) < MAX_EVENTS:
                self.init_failed[key] = failed


def _read(source: Input, reader: _Reader, *, by_line: bool = False) -> None:
    """Feed every line of `source` to `reader`, unwrapped, numbered as in the file. Only the
    lines that are not ordinary dmesg lines (lines_to_read) are read one by one, and of them only
    those that may carry a wrapper (Unwrapper.candidates) go through `unwrap`: the runs between
    them are counted. (An ordinary dmesg line, `[ 12.345678] text`, starts with no wrapper:
    tests/test_parsers_kernel_log_fast.py.) `by_line`: every line read one by one, each
    candidate unwrapped: the reference the tests hold the fast path to."""
    unwrapper = Unwrapper(timestamps=False)  # kernel-log stamps are read by classify()
    unwrap, pending, feed = unwrapper.unwrap, unwrapper.pending, reader.feed
    n = 0  # lines before the batch
    for batch in source.batches():
        to_read = None if by_line else lines_to_read(batch)
        if to_read is None:
            candidates = unwrapper.candidates(batch)
            for i, line in enumerate(batch, n + 1):
                raw = unwrap(line) if candidates is None or i - n - 1 in candidates or pending() \
                    else line
                if raw is not None:  # None: a fence, a `# dmesg | grep Xid` command line
                    feed(i, raw)
            n += len(batch)
            continue
        found = unwrapper.candidates([batch[i] for i in to_read])
        candidates = set(to_read) if found is None else {to_read[j] for j in found}
        done = 0  # lines of batch read
        for index in [*to_read, len(batch)]:
            while done < index and pending():  # a command continues into these lines
                raw = unwrap(batch[done])
                done += 1
                if raw is not None:
                    feed(n + done, raw)
            if done < index:
                reader.plain(batch[done:index])
            if index < len(batch):
                line = batch[index]
                raw = unwrap(line) if index in candidates or pending() else line
                if raw is not None:
                    feed(n + index + 1, raw)
            done = index + 1
        n += len(batch)


def parse_kernel_log(text: str | Input, *, require_kernel_lines: bool = True,
                     by_line: bool = False) -> KernelLog:
    """Parse a kernel log. Reads `NVRM: Xid (PCI:0000:10:1c): 79, pid=1234, name=python, GPU has
    fallen off the bus.` in any prefix (dmesg, syslog, journalctl, its JSON), the Xid-less `NVRM:
    The NVIDIA GPU 0000:b3:00.0 ... fallen off the bus` and `NVRM: GPU 0000:b3:00.0: GPU has
    fallen off the bus.` (reported as Xid 79, once per GPU, and not at all for a GPU whose Xid 79
    line is in the log) and NVSwitch `SXid` lines. Raises ParseError when nothing was found and
    the text is not positively a kernel log (harness.parsers.kernel_log_format: empty input, a
    tool's error message, random bytes are not, and their lack of Xid lines proves nothing).
    Memory stays flat on a flooded log: see MAX_EVENTS. `by_line`: see _read."""
    reader = _Reader()
    _read(as_input(text), reader, by_line=by_line)
    events, sxids, fallen, first, boots = (reader.events, reader.sxids, reader.fallen,
                                           reader.first, reader.boots)
    problem = reader.tally.shape.problem
    found: list[XidEvent] = events.items
    failed = tuple(reader.init_failed.values())
    if require_kernel_lines and problem and not (found or fallen or sxids.items or failed):
        # Only "no XID" needs the text to be a kernel log; an Xid line is evidence of a fault
        # wherever it is (a paste with commentary around it).
        raise ParseError(problem)
    if fallen:
        # The driver prints the Xid 79 line and its own "has fallen off the bus" line together, and
        # may repeat the latter: one event per lost GPU, so the check names each GPU once.
        seen = {pci_key(e.pci) for e in found if e.xid == 79}
        found = sorted([*found, *(e for e in fallen.values() if pci_key(e.pci) not in seen)],
                       key=lambda e: e.line)
    return KernelLog(tuple(found), reader.tally.kernel, tuple(sxids.items),
                     first_time=first.time if first else None,
                     from_boot=_from_boot(first, boots), boots=tuple(boots),
                     omitted=events.omitted + sxids.omitted, init_failures=failed)


def _sxid(line: str, when: str | None, n: int, headed: dict[tuple[int, str, int], bool]
          ) -> tuple[SxidEvent, tuple[object, ...]] | None:
    """The event (and its kind) an SXid line starts: its first line, or a detail line of an SXid
    whose first line is not in the log (once per switch and SXid); None for another detail line."""
    sx = _SXID.search(line)
    detail = None if sx else _SXID_DETAIL.search(line)
    m = sx or detail
    sxid, switch = (ascii_int(m["sxid"]), ascii_int(m["switch"])) if m else (None, None)
    if m is None or sxid is None or switch is None:
        return None
    key = (switch, m["pci"], sxid)
    if sx is not None:
        if len(headed) < MAX_KINDS:
            headed[key] = True
        return (SxidEvent(sxid, switch, sx["pci"], sx["severity"] == "Fatal", sx["msg"].strip(),
                          when, n), (*key, sx["severity"]))
    if key in headed or len(headed) >= MAX_KINDS:
        return None
    headed[key] = False
    fatal = _SEVERITY_FATAL.get(m["severity"]) if m["severity"] else None
    return (SxidEvent(sxid, switch, m["pci"], fatal, f"{m['msg'].strip()} ({NO_FIRST_LINE})",
                      when, n), (*key, fatal))


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


def inspect_kernel_log(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """`preflight inspect kernel-log FILE`: keys xid_events [{xid, pci, mig, pid, process, time,
    message, action}], sxid_events [{sxid, switch, pci, fatal, time, message}], init_failures
    [{pci, code, time, count}] (GPUs the driver could not initialise), num_lines (kernel
    lines read), first_time, from_boot (null: cannot tell), window (what the log covers), and
    `cut` when its last line has no line end (the checks error on such a log: the lines it lost
    may hold XIDs)."""
    source = as_input(stream)
    log = parse_kernel_log(source)
    out = {"xid_events": [{"xid": e.xid, "pci": e.pci, "mig": e.mig, "pid": e.pid,
                           "process": e.process, "time": e.time, "message": e.message,
                           "action": e.action}
                          for e in log.events],
           "sxid_events": [{"sxid": e.sxid, "switch": e.switch, "pci": e.pci, "fatal": e.fatal,
                            "time": e.time, "message": e.message} for e in log.sxid_events],
           "init_failures": [{"pci": e.pci, "code": e.code, "time": e.time, "count": e.count}
                             for e in log.init_failures],
           "num_lines": log.num_lines, "first_time": log.first_time, "from_boot": log.from_boot,
           "window": log.window}
    if (end := source.stats.open_end) is not None:  # quoted as the tool wrote it
        out["cut"] = ends_mid_line("the log", Unwrapper(timestamps=False).unwrap(end) or end)
    if log.omitted:
        out["notes"] = [f"{log.omitted:,} more events repeated a GPU, code and action already "
                        f"listed after the first {MAX_EVENTS:,}: not listed"]
    return out


INSPECT = {"kernel-log": inspect_kernel_log}
