"""Per-device network health from sysfs: EFA `hw_counters` and InfiniBand port `counters`,
read before and after a bandwidth run and judged on their delta, and each port's link state.

Layout (the RDMA core's, for every device under /sys/class/infiniband/<dev>/):
`ports/<n>/{state,phys_state,rate,link_layer}`, `ports/<n>/counters/*` (IB PMA counters),
`ports/<n>/hw_counters/*` (driver stats: EFA's port stats, mlx5's) and `hw_counters/*` (EFA's
device stats). Counter names: amzn/amzn-drivers `kernel/linux/efa/src/efa_verbs.c`
(EFA_DEFINE_DEVICE_STATS / EFA_DEFINE_PORT_STATS); IB: Meta GCM `check_ib_counters` docs.
A file that reads `N/A (no PMA)` (iWARP: prometheus/node_exporter#966) or fails to read is
unknown, never 0. Older EFA drivers lack the rdma_write_* (r2.5.0) and network (r2.17.0:
retrans_*, *_remote_*) counters: missing, not zero."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["FAIL_ON_GROWTH", "WARN_ON_GROWTH", "WINDOWS", "CounterJudgement", "PortState",
           "Snapshot", "judge", "link_problems", "snapshot", "window"]

#: Counters whose growth during a run fails the node: EFA RDMA work-request errors and SRD
#: connection failures (AWS "Monitor an Elastic Fabric Adapter"), IB link loss and physical
#: errors (Meta GCM treats link_downed as critical).
FAIL_ON_GROWTH = frozenset({
    "rdma_read_wr_err", "rdma_write_wr_err", "unresponsive_remote_events",
    "impaired_remote_conn_events", "link_downed", "link_error_recovery", "symbol_error",
})
#: Counters whose growth is warned about: drops and retransmit timeouts (awsome-distributed-
#: training's EFA loopback check warns on rx_drops / retrans_timeout_events > 0), IB receive
#: errors, buffer overruns and discards (Meta GCM warns on any).
WARN_ON_GROWTH = frozenset({
    "rx_drops", "retrans_timeout_events", "port_rcv_errors", "excessive_buffer_overrun_errors",
    "port_xmit_discards", "port_rcv_remote_physical_errors", "local_link_integrity_errors",
})
#: The RDMA core adds `lifespan` (the stats cache lifetime, ms) to every hw_counters directory.
_NOT_COUNTERS = frozenset({"lifespan"})


@dataclass(frozen=True, slots=True)
class PortState:
    """One port (`rdmap16s27/1`), or a device's own hw_counters (`rdmap16s27/-`)."""

    name: str
    state: str | None = None
    """`4: ACTIVE`."""
    phys_state: str | None = None
    """`5: LinkUp`."""
    counters: Mapping[str, int | None] = field(default_factory=dict)
    """Counter -> value; None when the file is unreadable or not a number."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    ports: Mapping[str, PortState]
    taken_at: float
    """time.monotonic() when read."""
    problem: str | None = None
    """Why there is nothing to read (no /sys/class/infiniband)."""


def _value(path: Path) -> int | None:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def _text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip() or None
    except OSError:
        return None


def _counters(directory: Path) -> dict[str, int | None]:
    if not directory.is_dir():
        return {}
    return {f.name: _value(f) for f in sorted(directory.iterdir())
            if f.name not in _NOT_COUNTERS and f.is_file()}


def snapshot(sysroot: Path = Path("/"), devices: tuple[str, ...] | None = None) -> Snapshot:
    """Every port's state and counters (of `devices` only, when given)."""
    root = (sysroot if sysroot != Path("/") else Path("/")) / "sys/class/infiniband"
    now = time.monotonic()
    if not root.is_dir():
        return Snapshot({}, now, problem=f"{root} does not exist (no RDMA device)")
    ports: dict[str, PortState] = {}
    for dev in sorted(root.iterdir()):
        if devices is not None and dev.name not in devices:
            continue
        device_level = _counters(dev / "hw_counters")
        if device_level:
            ports[f"{dev.name}/-"] = PortState(f"{dev.name}/-", counters=device_level)
        port_root = dev / "ports"
        for port in sorted(port_root.iterdir()) if port_root.is_dir() else ():
            name = f"{dev.name}/{port.name}"
            ports[name] = PortState(name, _text(port / "state"), _text(port / "phys_state"),
                                    {**_counters(port / "counters"),
                                     **_counters(port / "hw_counters")})
    return Snapshot(ports, now)


@dataclass(slots=True)
class CounterJudgement:
    """What grew between two snapshots, by severity, and what could not be judged."""

    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """Judged counters unreadable in either snapshot, ports that vanished."""
    resets: list[str] = field(default_factory=list)
    """Counters that went down (a reset or a wrap): their delta is unknown."""
    judged: int = 0
    """Judged counters read in both snapshots."""
    seconds: float = 0.0


def judge(before: Snapshot, after: Snapshot) -> CounterJudgement:
    """Growth of FAIL_ON_GROWTH counters fails, of WARN_ON_GROWTH warns; the rest (traffic,
    retrans_pkts: SRD retransmits by design) is not judged."""
    out = CounterJudgement(seconds=round(after.taken_at - before.taken_at, 1))
    for name, old in sorted(before.ports.items()):
        new = after.ports.get(name)
        if new is None:
            out.unknown.append(f"{name}: gone after the run")
            continue
        for counter in sorted(set(old.counters) & (FAIL_ON_GROWTH | WARN_ON_GROWTH)):
            a, b = old.counters.get(counter), new.counters.get(counter)
            if a is None or b is None:
                out.unknown.append(f"{name} {counter}: unreadable")
                continue
            if b < a:
                out.resets.append(f"{name} {counter}: {a} -> {b}")
                continue
            out.judged += 1
            if b > a:
                text = f"{name} {counter} +{b - a} (now {b})"
                (out.failures if counter in FAIL_ON_GROWTH else out.warnings).append(text)
    return out


def link_problems(snap: Snapshot) -> list[str]:
    """Ports not `ACTIVE` or whose physical state is not `LinkUp` (gpud: Polling / Disabled
    mean the connection to the switch is lost); a port whose state is unreadable is named."""
    found = []
    for name, port in sorted(snap.ports.items()):
        if name.endswith("/-"):
            continue
        if port.state is None:
            found.append(f"{name}: state unreadable")
        elif "ACTIVE" not in port.state.upper():
            found.append(f"{name}: state {port.state}")
        elif port.phys_state is not None and "LINKUP" not in port.phys_state.upper():
            found.append(f"{name}: physical state {port.phys_state}")
    return found


#: scope (`single-node`, `multi-node`) -> (before, after) of the bandwidth runs in this process.
WINDOWS: dict[str, tuple[Snapshot, Snapshot]] = {}


@contextlib.contextmanager
def window(sysroot: Path, scope: str) -> Iterator[None]:
    """Snapshot the counters around a block (a bandwidth run) into WINDOWS[scope]. Never
    raises for sysfs trouble: the snapshot then says what was missing."""
    before = snapshot(sysroot)
    try:
        yield
    finally:
        WINDOWS[scope] = (before, snapshot(sysroot))
