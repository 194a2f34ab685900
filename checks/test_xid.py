"""XIDs in a window: the last `xid_window_h` hours of the profile (default 2, AzHC's;
PREFLIGHT_XID_WINDOW_H for one run), their rate, and application-caused XIDs (13, 31, 43, 45)
told apart from hardware ones (harness/judges/xid.py).
PF-GPU-006 judges every XID since boot; this check says what is recent and whose it is."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base.gpu_actions import MONITOR
from harness.base.gpu_facts import explain_other
from harness.base.settings import get_float
from harness.checking import check, expect_none, measure, warn
from harness.fixtures.gpu import require_gpus
from harness.judges.xid import summarize

if TYPE_CHECKING:  # types only: the parser loads where the log is read (start-up)
    from harness.parsers.kernel_log_events import KernelLog, XidEvent
    from harness.profiles.model import Profile

#: Hours of kernel log judged instead of the profile's `xid_window_h` (default 2 h, AzHC's).
WINDOW_ENV = "PREFLIGHT_XID_WINDOW_H"
#: Epoch seconds the job started (set by a launcher that knows it): nothing older is judged.
JOB_START_ENV = "PREFLIGHT_JOB_START_EPOCH"


def _boot_epoch(sysroot: Path) -> float | None:
    try:
        uptime = float((sysroot / "proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return datetime.now(UTC).timestamp() - uptime


def _label(event: XidEvent) -> str:
    who = f", {event.process}" if event.process else (f", pid {event.pid}" if event.pid else "")
    return f"GPU {event.pci}: Xid {event.xid}{who} ({event.message[:80]})"


@check(
    "PF-GPU-019",
    title="No hardware XID in the recent window; application XIDs named as such",
    why="A hardware XID in the last hours means the GPU failed recently (AzHC fails on them "
    "within 2 h); 13, 31, 43 and 45 are usually caused by the application (NVIDIA "
    "k8s-device-plugin ignores them) and do not make the node unfit, but the same GPU "
    "raising them for several processes may be the hardware.",
    remedy="hardware: the action PF-GPU-006 names; application: fix or restart the "
    "application named, replace the GPU if it recurs across applications",
    reads=explain_other(
        ["the kernel log (PF-GPU-006's) with each Xid event's time, the boot time "
         "(/proc/uptime) and $PREFLIGHT_JOB_START_EPOCH"],
        "a log that cannot be read is an error; an event whose time cannot be placed is a "
        "warning (PF-GPU-006 still judges it)",
        "nothing"),
)
def test_xids_in_window(profile: Profile, sysroot: Path, environ: dict[str, str],
                        kernel_log: KernelLog):
    require_gpus(profile)
    log = kernel_log
    hours = get_float(WINDOW_ENV, environ) or profile.xid_window_h
    boot = _boot_epoch(sysroot if sysroot != Path("/") else Path(os.sep))
    window = summarize(log.events, window_s=hours * 3600, now=datetime.now(UTC),
                       boot_epoch=boot, since_epoch=get_float(JOB_START_ENV, environ))
    measure("XID window", round(window.hours, 2), "h", name="xid_window")
    measure("hardware XIDs in the window", len(window.hardware), "events",
            name="hardware_xids_in_the_window")
    measure("hardware XID rate", round(window.hardware_per_hour, 2), "per h",
            name="hardware_xid_rate")
    measure("application XIDs in the window", len(window.application), "events",
            name="application_xids_in_the_window")
    if window.undated:
        warn(f"{window.undated} XID event(s) have no time this check can place: judged by "
             "PF-GPU-006 only")
    for event in window.application:
        warn(f"application-caused {_label(event)}", remedy="fix or restart the application")
    for pci in window.suspicious_application():
        warn(f"GPU {pci}: application XIDs from several processes in {window.hours:.1f} h: "
             "may be the GPU", remedy="run `preflight run --tier diagnose` on this node")
    for event in (e for e in window.hardware if e.action == MONITOR):
        warn(f"hardware {_label(event)} -> monitor")
    expect_none(f"hardware XIDs needing action in the last {window.hours:.1f} h",
                [f"{_label(e)} -> {e.action}" for e in window.hardware if e.action != MONITOR],
                name="hardware_xids_needing_action_in_the_last_h")
