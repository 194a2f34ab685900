"""PF-GPU-019's judge: XIDs in a window (the profile's `xid_window_h` hours, since the job or
node started), their rate, and application-caused XIDs told apart from hardware ones. Pure
functions over KernelLog events.

Application-caused: 13 (Graphics Engine Exception), 31 (GPU memory page fault), 43 (GPU stopped
processing) and 45 (preemptive cleanup) unless its text names another Xid as the cause
("caused by previous Xid 79": then it is that Xid's class). Sources: NVIDIA k8s-device-plugin
`internal/rm/health.go` ignoredXids ("Application errors: the GPU should still be healthy");
NVIDIA's XID catalogue (RESTART_APP for 13 and 31); Meta GCM NON_CRITICAL_ERRORS. 68 and 109
are in the device plugin's list too but this project's catalogue resets the GPU for 109
(NVSentinel: RESET_GPU), so they stay hardware here. Repeated application XIDs on one GPU from
several processes are worth a look: gpud notes 13 "in rare cases can be caused by the hardware
degradation"."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

__all__ = ["APPLICATION_XIDS", "XidWindow", "event_epoch", "is_application", "summarize"]

class XidEvent(Protocol):
    """What the window reads of one Xid line (harness.parsers.kernel_log_events.XidEvent): the judge
    imports no parser."""

    @property
    def xid(self) -> int: ...
    @property
    def pci(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def process(self) -> str | None: ...
    @property
    def message(self) -> str: ...
    @property
    def time(self) -> str | None: ...


APPLICATION_XIDS = frozenset({13, 31, 43, 45})
_CAUSED_BY = re.compile(r"caused by previous Xid ([0-9]{1,9})\b")
_UPTIME = re.compile(r"^[0-9]+\.[0-9]+$")


def is_application(xid: int, message: str = "") -> bool:
    """Whether the XID is application-caused (see the module docstring)."""
    if xid == 45:
        cause = _CAUSED_BY.search(message)
        if cause and int(cause[1]) != 45:
            return is_application(int(cause[1]))
    return xid in APPLICATION_XIDS


def event_epoch(time: str | None, *, boot_epoch: float | None, now: datetime) -> float | None:
    """Epoch seconds of a kernel-log time as KernelLog keeps it: dmesg's seconds since boot,
    ISO (journalctl -o short-iso), `dmesg -T` ctime, or syslog's year-less `Jun 10 03:09:55`
    (this year, or the last one when that would be in the future). None when unknown."""
    if not time:
        return None
    text = time.strip()
    if _UPTIME.match(text):
        return boot_epoch + float(text) if boot_epoch is not None else None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace(",", "."))
        return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    except ValueError:
        pass
    for fmt in ("%a %b %d %H:%M:%S %Y", "%b %d %H:%M:%S"):
        try:
            when = datetime.strptime(" ".join(text.split()), fmt)
        except ValueError:
            continue
        if fmt.endswith("%S"):
            when = when.replace(year=now.year)
            if when.replace(tzinfo=UTC) > now:
                when = when.replace(year=now.year - 1)
        return when.replace(tzinfo=UTC).timestamp()
    return None


@dataclass(slots=True)
class XidWindow:
    """The events of one window, split by cause."""

    start_epoch: float
    hours: float
    application: list[XidEvent] = field(default_factory=list)
    hardware: list[XidEvent] = field(default_factory=list)
    undated: int = 0
    """Events whose time could not be placed: counted in no window (PF-GPU-006 still sees them)."""

    @property
    def hardware_per_hour(self) -> float:
        return len(self.hardware) / self.hours if self.hours > 0 else 0.0

    @property
    def application_per_hour(self) -> float:
        return len(self.application) / self.hours if self.hours > 0 else 0.0

    def suspicious_application(self, min_events: int = 3, min_processes: int = 2) -> list[str]:
        """GPUs with at least `min_events` application XIDs from `min_processes` processes."""
        by_gpu: dict[str, list[XidEvent]] = {}
        for event in self.application:
            by_gpu.setdefault(event.pci, []).append(event)
        return sorted(pci for pci, events in by_gpu.items() if len(events) >= min_events
                      and len({e.process or e.pid for e in events}) >= min_processes)


def summarize(events: Sequence[XidEvent], *, window_s: float, now: datetime,
              boot_epoch: float | None, since_epoch: float | None = None) -> XidWindow:
    """The events of the last `window_s` seconds (not before `since_epoch`, e.g. the job's
    start, nor before the boot), split into application and hardware XIDs."""
    start = now.timestamp() - window_s
    for floor in (since_epoch, boot_epoch):
        if floor is not None:
            start = max(start, floor)
    out = XidWindow(start, max(0.0, (now.timestamp() - start) / 3600))
    for event in events:
        when = event_epoch(event.time, boot_epoch=boot_epoch, now=now)
        if when is None:
            out.undated += 1
        elif when >= start:
            (out.application if is_application(event.xid, event.message)
             else out.hardware).append(event)
    return out
