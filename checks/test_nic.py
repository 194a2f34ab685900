"""Per-device network health from sysfs: every EFA/IB port up, and no error counter grew while
the bandwidth checks ran (snapshots before and after, judged on the delta; docs/network.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.base.errors import ProbeError
from harness.checking import check, expect_none, measure, warn
from harness.fixtures.network import require_fabric
from harness.probes import nic_counters

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.fixtures.bandwidth import BandwidthRun
    from harness.probes.network import EfaDevices
    from harness.profiles.model import Profile

REMEDY_LINK = ("check the cable/switch port of the device named (`ibstat`, `rdma link`), "
               "then reboot or drain the node if the link stays down")


def _devices(efa: EfaDevices | None) -> tuple[str, ...] | None:
    """EFA profiles judge the EFA devices only (p6-b200 also lists non-EFA `ibp*` devices);
    other profiles (None: no EFA expected) every RDMA device."""
    return tuple(efa.sysfs) if efa is not None else None


@check(
    "PF-NET-012",
    title="Every EFA / InfiniBand port is ACTIVE with its physical link up",
    why="A port that is down, polling or disabled carries nothing: NCCL spreads traffic over "
    "the rest (or fails to connect), and the job runs slower without an error.",
    remedy=REMEDY_LINK,
)
def test_ports_active(profile: Profile, sysroot: Path,
                      efa_devices_if_expected: EfaDevices | None):
    require_fabric(profile)
    snap = nic_counters.snapshot(sysroot, _devices(efa_devices_if_expected))
    if snap.problem:
        raise ProbeError(snap.problem)
    ports = [n for n in snap.ports if not n.endswith("/-")]
    if not ports:
        raise ProbeError("no port under /sys/class/infiniband/*/ports: link state unknown")
    measure("RDMA ports read", len(ports), name="rdma_ports_read")
    expect_none("ports not ACTIVE / LinkUp", nic_counters.link_problems(snap),
                name="ports_not_active_linkup")


@check(
    "PF-NET-013",
    title="No EFA / InfiniBand error counter grew during the bandwidth runs",
    why="Counters read before and after the all_reduce runs show a bad link or NIC the "
    "bandwidth figure hides: RDMA work-request errors, unresponsive or impaired SRD "
    "connections, IB link_downed / symbol errors fail; drops, retransmit timeouts and IB "
    "receive errors warn. Absolute values include history since the NIC reset: not judged.",
    remedy="drain the node and check the device named (`rdma statistic show`, the switch "
    "port); a repeating failure needs the NIC or cable replaced",
    exclusive=True,
)
def test_counters_did_not_grow(profile: Profile, tier: str,
                               bandwidth_runs: list[BandwidthRun]):
    # `bandwidth_runs`: the runs whose counter windows are judged happen before this check
    # (here, if no check has run them yet).
    require_fabric(profile)
    windows = dict(nic_counters.WINDOWS)
    if not windows:
        why = ("no bandwidth run was measured through nccl-tests on this node (not installed, "
               "or the leader node runs the multi-node test): counter deltas unknown")
        if tier != "preflight":
            raise ProbeError(why)
        warn(why, remedy="install nccl-tests in the image; `--tier certify` treats this as an "
             "error")
        return
    failures, problems = [], []
    for scope, (before, after) in sorted(windows.items()):
        if before.problem or after.problem:
            problems.append(f"{scope}: {before.problem or after.problem}")
            continue
        result = nic_counters.judge(before, after)
        measure(f"{scope}: counters judged over {result.seconds:g} s", result.judged,
                name="counters_judged_over_s")
        failures += [f"{scope}: {f}" for f in result.failures]
        for text in result.warnings:
            warn(f"{scope}: {text}")
        for text in result.resets:
            warn(f"{scope}: counter went down (reset or wrap; delta unknown): {text}")
        problems += [f"{scope}: {u}" for u in result.unknown]
        if not result.judged and not result.failures:
            problems.append(f"{scope}: no judged counter is exposed by this driver (EFA needs "
                            "driver >= 2.17.0 for the SRD counters)")
    expect_none("error counters that grew during the bandwidth runs", failures,
                name="error_counters_that_grew_during_the_bandwidth_runs")
    if problems:
        raise ProbeError("counters not judged: " + "; ".join(problems[:10]))


#: Loopback bandwidth below which a device is warned about, Gbit/s (awsome-distributed-training
#: `6-efa-loopback.sh` warns below 20 Gbps on p4d/p5/p5e/p5en/p6-b200).
LOOPBACK_WARN_GBPS = 20.0


@check(
    "PF-NET-014",
    title="Every EFA / InfiniBand device passes a loopback benchmark (certify)",
    why="A device whose own path is broken (a bad NIC, firmware, a provider that cannot open "
    "it) only shows when traffic goes through it; the cluster all_reduce spreads over the "
    "rest. Server and client run on this host through the one device.",
    remedy="reset or replace the device named; check `fi_info -p efa -d DEV` / `ibstat DEV`",
    tier="certify",
    exclusive=True,
)
def test_device_loopback(profile: Profile, sysroot: Path,
                         efa_devices_if_expected: EfaDevices | None):
    from harness.base.proc import which
    from harness.probes.loopback import loopback, tool_for

    require_fabric(profile)
    fabric = str(profile.fabric)
    tool = tool_for(fabric)
    if which(tool) is None:
        pytest.skip(f"{tool} is not installed: no per-device loopback (install fabtests / "
                    "perftest in the image)")
    devices = _devices(efa_devices_if_expected)
    if devices is None:
        snap = nic_counters.snapshot(sysroot)
        devices = tuple(sorted({n.split("/")[0] for n in snap.ports}))
    if not devices:
        raise ProbeError("no RDMA device to test under /sys/class/infiniband")
    problems = []
    for device in devices:
        result = loopback(fabric, device)
        if result.problem:
            problems.append(f"{device}: {result.problem}")
            continue
        measure(f"{device} loopback ({tool})", result.gbit_per_s, "Gbit/s", name="rdma_loopback_bandwidth")
        if result.latency_us is not None:
            measure(f"{device} loopback small-message latency", result.latency_us, "us",
                    name="rdma_loopback_latency")
        if result.gbit_per_s is not None and result.gbit_per_s < LOOPBACK_WARN_GBPS:
            warn(f"{device}: loopback {result.gbit_per_s:.1f} Gbit/s < {LOOPBACK_WARN_GBPS:g}")
    expect_none("devices whose loopback failed", problems, name="devices_whose_loopback_failed")
