"""GPU faults in the kernel log since boot: XIDs (PF-GPU-006) and fatal NVSwitch SXids
(PF-GPU-018), each GPU named with the action it needs. An unreadable log is never "no XIDs"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from checks.gpu_common import ACTION_REMEDY, UNREADABLE_LOG, Found, judge
from harness.base.errors import ProbeError
from harness.base.gpu_actions import MONITOR, REBOOT, worst_action
from harness.base.gpu_facts import explain_other
from harness.base.gpu_record import GpuInventory, gpu_label
from harness.checking import check, measure, not_applicable, warn
from harness.fixtures.gpu import require_gpus

if TYPE_CHECKING:  # types only: the parser and its probe load where the log is read (start-up)
    from harness.fixtures.reading import Reading
    from harness.parsers.kernel_log_events import KernelLog, SxidEvent, XidEvent
    from harness.profiles.model import Profile


@check(
    "PF-GPU-006",
    title="No XID error that needs a reset, reboot or replacement since boot",
    why="XIDs are the driver's record of GPU faults: 79 (fallen off the bus), 48 (double-bit "
    "ECC), 74 (NVLink), 54 ... each needs its action before the GPU can be trusted again. A "
    "GPU the driver could not initialise (`RmInitAdapter failed!`) has no Xid line: named too. "
    + "No Xid line counts as no XID only in text that is positively a kernel log; " + UNREADABLE_LOG,
    remedy="see the action named for each GPU (XID catalogue: harness/base/gpu_actions.py)",
    reads=explain_other(
        ["the kernel log since boot (or $PREFLIGHT_XID_SINCE): $PREFLIGHT_KERNEL_LOG, else "
         "`journalctl -k -b`, else `dmesg`; `NVRM: Xid (PCI:...): N, ...` lines, the action "
         "of each from NVIDIA's Xid catalogue; `NVRM: GPU <bus>: RmInitAdapter failed!` lines "
         "(reboot)"],
        UNREADABLE_LOG,
        "nothing: every GPU profile has a kernel log; an Xid code the catalogue does not list "
        "is watched (monitor, a warning), never ignored"),
)
def test_no_serious_xid(profile: Profile, tier: str, kernel_log_reading: Reading[KernelLog],
                        gpu_inventory_reading: Reading[GpuInventory]):
    require_gpus(profile)
    log = _kernel_log(kernel_log_reading, tier, "XIDs")
    if log is None:
        return
    xid_events = log.events
    inventory = gpu_inventory_reading.or_none()
    grouped: dict[tuple[str, int], list[XidEvent]] = {}
    for event in xid_events:
        grouped.setdefault((event.pci, event.xid), []).append(event)
    found: Found = []
    for (pci, xid), events in grouped.items():
        gpu = inventory.by_pci(pci) if inventory else None
        times = f" x{len(events)}" if len(events) > 1 else ""
        # One code can need different actions by its text (a Fatal and a Nonfatal NVLink5 Xid,
        # 94 with RST: Yes or No): the GPU needs the worst of them; show that event's text.
        action = worst_action([e.action for e in events]) or events[-1].action
        text = next(e for e in reversed(events) if e.action == action).message[:100]
        found.append((gpu_label(gpu, bus_id=pci),
                      f"Xid {xid}{times}" + (f" ({text})" if text else ""), action))
    for failed in log.init_failures:  # no Xid line: the GPU never came up (reboot, then RMA)
        gpu = inventory.by_pci(failed.pci) if inventory else None
        times = f" x{failed.count}" if failed.count > 1 else ""
        found.append((gpu_label(gpu, bus_id=failed.pci), f"RmInitAdapter failed{times} "
                       f"({failed.code}): the driver could not initialise the GPU", REBOOT))
    _measure_log(log, "XID events", len(xid_events))
    judge(f"XID errors (kernel log: {log.source or 'given'}, {log.window})", found)


def _kernel_log(reading: Reading[KernelLog], tier: str, what: str) -> KernelLog | None:
    """The kernel log; None when it cannot be read in the preflight tier. Many
    training containers may read neither the journal nor dmesg (dmesg_restrict, no
    CAP_SYSLOG): failing every job for that would make the preflight unusable there, so the
    preflight tier warns; certify and diagnose, run where the log is readable, error. A log
    that was read but is cut (IncompleteLogError) errors in every tier."""
    try:
        return reading.get()
    except ProbeError as exc:
        from harness.probes.kernel_log import IncompleteLogError  # loaded by the reading

        if tier != "preflight" or isinstance(exc, IncompleteLogError):
            raise
        warn(f"{what} not judged: {exc}", remedy="mount the host journal or set "
             "PREFLIGHT_KERNEL_LOG to a copy of the kernel log; `--tier certify` treats this as "
             "an error")
        return None


def _measure_log(log: KernelLog, what: str, count: int) -> None:
    """Record what the judged events came from (the tool or the PREFLIGHT_KERNEL_LOG file) and
    the window it covers, then the event count."""
    measure("kernel log", log.source or "given", "", name="kernel_log_source")
    measure("kernel log window", log.window, "", name="kernel_log_window")
    measure(f"{what} in the kernel log", count, "events", name="kernel_log_events")


@check(
    "PF-GPU-018",
    title="No fatal NVSwitch SXid error since boot",
    why="A fatal SXid is an NVSwitch (or one of its NVLinks) failing: NVLink traffic through it "
    "stops, NCCL hangs or errors, and the switch and its GPUs must be reset together (Fabric "
    "Manager user guide, error handling). As for PF-GPU-006, " + UNREADABLE_LOG,
    remedy=ACTION_REMEDY[REBOOT],
    reads=explain_other(
        ["the kernel log, as PF-GPU-006 reads it: `nvidia-nvswitchN: SXid (PCI:...): N, "
         "Fatal|Non-fatal, ...` lines and their `Severity` detail lines"],
        UNREADABLE_LOG,
        "on a profile without NVSwitch the check is not applicable"),
)
def test_no_fatal_sxid(profile: Profile, tier: str, kernel_log_reading: Reading[KernelLog]):
    require_gpus(profile)
    if not profile.nvswitch:
        not_applicable("the profile has no NVSwitch")
    log = _kernel_log(kernel_log_reading, tier, "NVSwitch SXids")
    if log is None:
        return
    sxid_events = log.sxid_events
    grouped: dict[tuple[int, str, int], list[SxidEvent]] = {}
    for event in sxid_events:
        grouped.setdefault((event.switch, event.pci, event.sxid), []).append(event)
    found: Found = []
    for (switch, pci, sxid), events in grouped.items():
        fatal = [e for e in events if e.fatal]
        shown = (fatal or events)[-1]
        times = f" x{len(events)}" if len(events) > 1 else ""
        # fatal None: read from its detail lines alone (unknown: a warning, never a pass).
        severity = ("Fatal" if fatal else "severity unknown"
                    if any(e.fatal is None for e in events) else "Non-fatal")
        found.append((f"NVSwitch {switch} (bus {pci})",
                      f"SXid {sxid}{times} ({severity}, {shown.message[:100]})",
                      REBOOT if fatal else MONITOR))
    _measure_log(log, "NVSwitch SXid events", len(sxid_events))
    judge(f"fatal NVSwitch SXid errors (kernel log: {log.source or 'given'}, {log.window})",
           found)
