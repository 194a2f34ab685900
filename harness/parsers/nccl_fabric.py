"""What an NCCL_DEBUG=INFO log says about the GPU fabric NCCL used: multi-node NVLink (MNNVL),
NVLink SHARP (NVLS) and CollNet / SHARP in-network reduction. It gathers facts; the checks in
checks/test_nvl_domain.py and checks/test_ib_sharp.py judge them.

Lines read (format strings from NVIDIA/nccl; versions where they changed):

- `MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x` (src/init.cc,
  >= 2.20.3; decoded by harness.parsers.nccl_mnnvl), `comm %p rank %d nRanks %d nNodes %d
  localRanks %d localRank %d MNNVL %d` (src/init.cc) and the IMEX failure WARN `MNNVL (cliqueSize
  %d) is available but not working on this system. Check the IMEX ...` (src/mnnvl.cc, >= 2.27.3).
- `NVLS multicast support is %savailable on dev %d` (src/transport/nvls.cc, >= 2.17.1; later
  versions append `(NVLS_NCHANNELS %d)` or `, transport %s, symmetric multimem %s`), `NVLS comm
  %p headRank %d nHeads %d nvlsRanks %d ...` (nvls.cc: NVLS buffers were set up) and `%d coll
  channels, %d collnet channels, %d nvls channels, %d p2p channels, ...` (src/init.cc; older
  versions omit the collnet and nvls counts).
- `Coll %02d : %d [send] via COLLNET/%s/%d%s` (<= 2.8), `CollNet %02d : ...` (2.9-2.12) and
  `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s` (src/transport/coll_net.cc), `NET/Plugin:
  Loaded collnet plugin %s (vN)` (src/plugin/net/*.cc), the fallback WARN `Cannot initialize
  CollNet, using point-to-point network instead` (src/transport.cc) and `CollNet is not supported
  or fails to initialize, ignoring NCCL_ALGO=...` (src/graph/tuning.cc); from the SHARP plugin
  (Mellanox/nccl-rdma-sharp-plugins src/sharp_plugin.c): `SHARP rank %d/%d initialized on
  %s` and `SHARP coll init error: ...`; the SHARP library's own `ERROR ...` lines.
  Recorded: NVIDIA/nccl-tests#311 (tests/data/nccl_log/real_collnet_sharp_*.log).
- `NAME set by environment to VALUE.` (src/misc/param.cc): the NCCL settings the run saw.

Lines are read through harness.parsers.reader (any size, flat memory); a wrapper before the
`host:pid:tid [rank] NCCL` prefix (mpirun, srun, kubectl --prefix) is skipped by searching
inside each line."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO

from harness.parsers.nccl_mnnvl import MnnvlLine, parse_mnnvl_lines
from harness.parsers.reader import Input, as_input

__all__ = ["MnnvlRank", "NcclFabricLog", "parse_fabric_log"]

#: Distinct messages kept per kind (every rank prints the same lines).
MAX_KEPT = 50
#: Characters around a line's keyword that its pattern is searched in (the longest real line
#: read here, a `NET/IB : Using` list of 8 HCAs, is under 300 characters after the keyword).
WINDOW = 400

_PREFIX = re.compile(r"(?P<host>[\w.-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL (?:INFO|WARN)")
_COMM = re.compile(r"comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes "
                   r"(?P<nnodes>\d+) localRanks \d+ localRank \d+ MNNVL (?P<mnnvl>\d+)")
_NVLS_SUPPORT = re.compile(r"NVLS multicast support is (?P<not>not )?available on dev (?P<dev>\S+)")
_CHANNELS = re.compile(r"(?P<coll>\d+) coll channels,(?: (?P<collnet>\d+) collnet channels,)?"
                       r"(?: (?P<nvls>\d+) nvls channels,)? \d+ p2p channels")
_COLLNET = re.compile(r"Coll(?:Net)? (?P<ch>\d+)(?:/\d+)? : (?P<rank>\d+) \[(?:send|receive)\] "
                      r"via COLLNET/(?P<net>[^/\s]+)/(?P<dev>\d+)(?P<gdr>/GDRDMA)?")
_COLLNET_PLUGIN = re.compile(r"Loaded collnet plugin (?P<name>.+?) \(v\d+\)")
_SHARP_RANK = re.compile(r"SHARP rank (?P<rank>\d+)/(?P<size>\d+) initialized on (?P<dev>\S+)")
_ENV = re.compile(r"NCCL INFO (?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\.?$")
_FABRIC_WORDS = re.compile(r"NVLS|nvls|MNNVL|IMEX|CollNet|COLLNET|SHARP")
_COLLNET_FAIL = ("Cannot initialize CollNet", "CollNet is not supported or fails to initialize",
                 "SHARP coll init error")


@dataclass(frozen=True, slots=True)
class MnnvlRank:
    """One rank's MNNVL line with the host and pid of the NCCL prefix (None when cut off)."""

    host: str | None
    pid: int | None
    line: MnnvlLine


@dataclass(frozen=True, slots=True)
class NcclFabricLog:
    """MNNVL, NVLS and CollNet facts of one NCCL log; empty where the log says nothing."""

    mnnvl: tuple[MnnvlRank, ...] = ()
    """One entry per (host, pid, busId): a rank that printed its line twice counts once."""
    comm_mnnvl: tuple[tuple[int, int], ...] = ()
    """(nNodes, MNNVL flag) of each distinct `comm ... MNNVL %d` line."""
    mnnvl_errors: tuple[str, ...] = ()
    """NCCL's `MNNVL ... is available but not working` WARN messages (IMEX)."""
    nvls_available: int = 0
    nvls_unavailable: int = 0
    """Distinct devices whose `NVLS multicast support is [not] available` line says so."""
    nvls_comms: int = 0
    """Distinct `NVLS comm ... nvlsRanks` lines: NVLS buffers were set up."""
    nvls_channels: tuple[int, ...] = ()
    collnet_channel_counts: tuple[int, ...] = ()
    """From the `N coll channels, N collnet channels, N nvls channels` lines (distinct values)."""
    collnet_plugin: str | None = None
    """`SHARP` from `Loaded collnet plugin SHARP (v8)`; None when no collnet plugin loaded."""
    collnet_connections: int = 0
    """Distinct `CollNet NN/N : rank [send|receive] via COLLNET/...` lines."""
    collnet_networks: tuple[str, ...] = ()
    collnet_gdr: bool | None = None
    """True when every CollNet line has /GDRDMA, False when one lacks it, None: no line."""
    collnet_errors: tuple[str, ...] = ()
    """CollNet / SHARP failure messages (NCCL's fallback WARN, the plugin's init error)."""
    sharp_ranks: int = 0
    """Distinct `SHARP rank r/n initialized on dev` lines."""
    sharp_library_errors: tuple[str, ...] = ()
    """The SHARP library's `ERROR ...` lines (e.g. `SHArP Job init error: No resource`)."""
    warnings: tuple[str, ...] = ()
    """Distinct NCCL WARN messages that name NVLS, MNNVL, IMEX, CollNet or SHARP."""
    env: dict[str, str] = field(default_factory=dict)
    """`NCCL_X set by environment to Y` settings the run printed."""

    @property
    def has_nccl_lines(self) -> bool:
        return bool(self.mnnvl or self.comm_mnnvl or self.nvls_available or
                    self.nvls_unavailable or self.nvls_channels or self.env or
                    self.collnet_plugin or self.collnet_connections or self.warnings)

    @property
    def nvls_used(self) -> bool:
        """NCCL set up NVLS buffers or channels for a communicator of this run."""
        return self.nvls_comms > 0 or any(n > 0 for n in self.nvls_channels)

    @property
    def collnet_used(self) -> bool:
        """CollNet connections were made and no rank fell back to point-to-point."""
        return self.collnet_connections > 0 and not self.collnet_errors


def _message(line: str, start: int) -> str:
    return line[start:].strip()[:300]


def _around(line: str, key: str, before: int = 0, after: int = WINDOW) -> str:
    """The part of `line` around `key` that a regex may look at: every pattern here is
    searched in a bounded window, so a flooded line (megabytes of one word or digit run) costs
    linear time, never the quadratic backtracking of an unanchored `[\\w.-]+` or `\\d+`."""
    at = line.find(key)
    return "" if at < 0 else line[max(0, at - before):at + len(key) + after]


def parse_fabric_log(source: str | IO[str] | IO[bytes] | Input | Iterable[str]) -> NcclFabricLog:
    """The fabric facts of an NCCL log (text, a stream, or any iterable of lines)."""
    if isinstance(source, str | Input) or hasattr(source, "read"):
        lines: Iterable[str] = as_input(source).lines()  # type: ignore[arg-type]
    else:
        lines = source
    mnnvl: dict[tuple[str | None, int | None, int], MnnvlRank] = {}
    comms: set[tuple[int, int, int, int]] = set()
    nvls: dict[tuple[str | None, str, str], bool] = {}
    nvls_comms: set[str] = set()
    nvls_channels: set[int] = set()
    collnet_counts: set[int] = set()
    collnet: dict[str, bool] = {}
    networks: dict[str, None] = {}
    sharp: set[str] = set()
    kept: dict[str, dict[str, None]] = {k: {} for k in ("mnnvl", "collnet", "sharp", "warn")}
    env: dict[str, str] = {}
    plugin: str | None = None

    def keep(kind: str, text: str) -> None:
        if len(kept[kind]) < MAX_KEPT:
            kept[kind].setdefault(text, None)

    for line in lines:
        if "NCCL" not in line and "SHARP" not in line and "SHArP" not in line:
            continue
        prefix = _PREFIX.search(_around(line, " NCCL ", before=WINDOW, after=6))
        host, pid = (prefix["host"], int(prefix["pid"])) if prefix else (None, None)
        if "MNNVL busId" in line:
            for parsed in parse_mnnvl_lines(_around(line, "MNNVL busId")):
                mnnvl.setdefault((host, pid, parsed.bus_id), MnnvlRank(host, pid, parsed))
        elif " MNNVL " in line and (m := _COMM.search(_around(line, "comm 0x"))):
            comms.add((int(m["rank"]), int(m["nranks"]), int(m["nnodes"]), int(m["mnnvl"])))
        if "NCCL WARN" in line:
            at = line.index("NCCL WARN") + len("NCCL WARN")
            text = _message(line, at)
            if "MNNVL" in text and "not working" in text:
                keep("mnnvl", text)
            if any(s in text for s in _COLLNET_FAIL):
                keep("collnet", text)
            if _FABRIC_WORDS.search(line):
                keep("warn", text)
        if "NVLS" in line:
            if (m := _NVLS_SUPPORT.search(_around(line, "NVLS multicast support"))):
                nvls[(host, str(pid), m["dev"])] = m["not"] is None
            elif "NVLS comm 0x" in line:
                nvls_comms.add(line[line.index("NVLS comm 0x"):].split(" headRank")[0] + str(host))
        if " coll channels," in line and (m := _CHANNELS.search(
                _around(line, " coll channels,", before=12, after=60))):
            if m["nvls"] is not None:
                nvls_channels.add(int(m["nvls"]))
            if m["collnet"] is not None:
                collnet_counts.add(int(m["collnet"]))
        if "via COLLNET/" in line and (m := _COLLNET.search(
                _around(line, "via COLLNET/", before=WINDOW))):
            key = f"{host}:{m['rank']}:{m['ch']}:{m[0]}"
            collnet[key] = m["gdr"] is not None
            networks.setdefault(m["net"], None)
        elif "Loaded collnet plugin" in line and (m := _COLLNET_PLUGIN.search(
                _around(line, "Loaded collnet plugin"))):
            plugin = m["name"].strip()
        elif "SHARP rank" in line and (m := _SHARP_RANK.search(_around(line, "SHARP rank"))):
            sharp.add(f"{host}:{pid}:{m['rank']}/{m['size']}")
        elif "ERROR" in line and ("SHArP" in line or "sharp_" in line):
            keep("sharp", _message(line, line.index("ERROR")))
        if "set by environment to" in line and (m := _ENV.search(
                _around(line, "NCCL INFO NCCL_", after=WINDOW))):
            env.setdefault(m["name"], m["value"].strip())
    return NcclFabricLog(
        mnnvl=tuple(mnnvl.values()),
        comm_mnnvl=tuple(sorted({(n, f) for _, _, n, f in comms})),
        mnnvl_errors=tuple(kept["mnnvl"]),
        nvls_available=sum(nvls.values()), nvls_unavailable=sum(not v for v in nvls.values()),
        nvls_comms=len(nvls_comms), nvls_channels=tuple(sorted(nvls_channels)),
        collnet_channel_counts=tuple(sorted(collnet_counts)), collnet_plugin=plugin,
        collnet_connections=len(collnet), collnet_networks=tuple(networks),
        collnet_gdr=all(collnet.values()) if collnet else None,
        collnet_errors=tuple(kept["collnet"]), sharp_ranks=len(sharp),
        sharp_library_errors=tuple(kept["sharp"]), warnings=tuple(kept["warn"]), env=env,
    )
