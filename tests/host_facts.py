"""Canned clock facts for checks/test_host.py (the rest of its facts come from a fake sysroot)."""

from __future__ import annotations

from harness.fixtures.host import ClockState
from harness.probes import host


def _clock(synced: bool) -> ClockState:
    return ClockState(host.kernel_clock(lambda: (0, 0 if synced else host.STA_UNSYNC, 1, 1)),
                      None, None, "chronyc is not installed")


SCENARIOS = {"synced": {"host_clock": _clock(True)}, "unsynced": {"host_clock": _clock(False)}}


def _xid_log():
    from pathlib import Path

    from harness.parsers.kernel_log import parse_kernel_log

    data = Path(__file__).parent / "data" / "kernel_log"
    return parse_kernel_log((data / "real_dmesg-T-xid13-109-31-pt_main_thread.txt").read_text())


SCENARIOS["xid_2024"] = {"kernel_log": _xid_log()}


def _efa(names: tuple[str, ...]):
    from harness.probes.network import EfaDevices

    return EfaDevices(names, tuple(f"uverbs{i}" for i in range(len(names))))


#: PF-NET-012/013: two EFA devices in the fake sysroot; bandwidth_runs is stubbed (the test's
#: conftest records the counter window itself).
SCENARIOS["two_efa"] = {"efa_devices_if_expected": _efa(("rdmap0s27", "rdmap1s27")),
                        "bandwidth_runs": []}
