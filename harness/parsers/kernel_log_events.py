"""The records a kernel log is read into (harness.parsers.kernel_log reads the lines): one
XidEvent per Xid line, one SxidEvent per NVSwitch SXid, and the KernelLog that holds them with
what the log covers (from boot or not, its boots, its window), which the judges and checks read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.parsers.kernel_log_init import InitFailure

__all__ = ["BOOT_WINDOW_S", "KernelLog", "SxidEvent", "XidEvent"]

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
    """One NVSwitch SXid line: its first line (the one that says Fatal or Non-fatal), or where
    that line is not in the log, its first detail line (the `Severity N` one gives `fatal`)."""

    sxid: int
    switch: int
    """N of `nvidia-nvswitchN`."""
    pci: str
    """The NVSwitch's PCI address (not a GPU's)."""
    fatal: bool | None
    """None: read from its detail lines alone, without a `Severity` line (unknown)."""
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
    omitted: int = 0
    """Xid/SXid events past MAX_EVENTS that repeated a (GPU, Xid, action) already kept."""
    init_failures: tuple[InitFailure, ...] = ()
    """GPUs the driver could not initialise (`RmInitAdapter failed!`): no Xid line names them."""

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
            init_failures=tuple(e for e in self.init_failures if e.line >= start),
            boots=(self.boots[-1],), first_time=when or self.first_time, from_boot=True)
