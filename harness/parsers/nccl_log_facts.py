"""What an NCCL debug log proves about the network: NcclLogSummary, with its three-valued facts.

Each fact is true, false or unknown (None), and a true or false rests on a line of the log:
`gdr` (with `gdr_evidence`) is certainly False on a socket network (Socket, FastSocket: through
the host's TCP stack) or where the plugin or NCCL said GPUDirect RDMA is unavailable, True only
when every NET channel and CollNet connection line has GDRDMA, and None without such lines or
evidence;
`network` may rest on a device line or a NET/IB warning (`network_evidence` says which).
Unknown is never a pass. harness.parsers.nccl_log builds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.base.jsontypes import JSONObject

__all__ = ["SOCKET_NETWORKS", "FailureHit", "NcclLogSummary", "WatchdogTimeout"]


@dataclass(frozen=True, slots=True)
class FailureHit:
    """A log line that matched the known-failure catalogue."""

    line: str
    cause: str
    remedy: str


@dataclass(frozen=True, slots=True)
class WatchdogTimeout:
    """`[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE,
    ..., Timeout(ms)=600000) ran for 600123 milliseconds before timing out.`"""

    rank: int | None
    seq_num: int | None
    op_type: str | None
    timeout_ms: int | None
    ran_for_ms: int | None
    line: str


#: Networks that carry data through the host's TCP stack: never GPUDirect RDMA (NCCL's
#: net_socket.cc has no GDR support; Google's nccl-fastsocket is a TCP plugin).
SOCKET_NETWORKS = frozenset(("Socket", "FastSocket"))


@dataclass(frozen=True, slots=True)
class NcclLogSummary:
    """What an NCCL debug log proves about the network. None/empty where the log says nothing."""

    nccl_version: str | None = None
    plugin: str | None = None
    """`aws-ofi-nccl` when its lines appear, else the external plugin NCCL loaded, else None."""
    plugin_version: str | None = None
    plugin_failed: bool = False
    """The plugin loaded but failed to initialise (NCCL then used another network)."""
    network: str | None = None
    """The network NCCL used: `Libfabric`, `AWS Libfabric`, `IB`, `IBext_v8`, `Socket`, ..."""
    networks_seen: tuple[str, ...] = ()
    provider: str | None = None
    """`efa`, `ib`, `socket`, another libfabric provider (`cxi`), or None."""
    fabric: str | None = None
    num_nics: int | None = None
    protocol: str | None = None
    platform: str | None = None
    libfabric_version: str | None = None
    gdr_negative: bool = False
    """The plugin said GDR is unavailable (`GDR disabled ...`, `GDR not supported`), or NCCL did
    for a NIC of the network used (`NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`)."""
    socket_only: bool = False
    """NCCL said it has no external NET plugin and no IB device, so its socket transport is the
    only one left (certain without a `Using network` line)."""
    plugin_dlerror: str | None = None
    """Why NCCL could not load an external NET plugin (`NET/Plugin : dlerror=...`), as it said."""
    gdr_gpus: tuple[str, ...] = ()
    """GPUs (NCCL's bus id) of the init-time `GPU Direct RDMA Enabled|Disabled for GPU G / HCA
    N` lines: NCCL's GDR verdict per GPU and NIC, printed on one node as on many."""
    gdr_gpus_enabled: tuple[str, ...] = ()
    """Those with GPUDirect RDMA enabled to at least one NIC (a far NIC is disabled by
    distance on every healthy multi-socket node: only a GPU with none is a finding)."""
    num_net_channels: int = 0
    """Distinct `NCCL INFO ... via NET/...` channel lines (a line seen twice counts once, until
    more than SEEN_CAP distinct lines reset the memory of what was seen)."""
    num_gdr_channels: int = 0
    num_collnet_channels: int = 0
    """Distinct CollNet (SHARP) connection lines, `CollNet 00/0 : 0 [receive] via COLLNET/SHARP/1/
    GDRDMA` (GDR evidence; not NET channels)."""
    num_collnet_gdr_channels: int = 0
    net_channels_by_network: dict[str, int] = field(default_factory=dict)
    nranks: int | None = None
    env_added: dict[str, str] = field(default_factory=dict)
    env_skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    errors: tuple[FailureHit, ...] = ()
    timeouts: tuple[WatchdogTimeout, ...] = ()
    network_evidence: str | None = None
    """Why `network` is known when no `Using network` or channel line named it."""
    commands: tuple[str, ...] = ()
    """Command lines pasted above the log (harness.parsers.unwrap); `nranks` falls back on the
    ranks an nccl-tests command launches (`mpirun -np 2 ... all_reduce_perf -g 1`)."""

    @property
    def gdr(self) -> bool | None:
        """True: every NET channel and CollNet connection line has GDRDMA; False: one lacks
        it, the plugin said GDR is unavailable, or the network is a socket one (Socket,
        FastSocket: through the host's TCP stack, never GPUDirect); None: no such lines and no
        explicit evidence."""
        if self.gdr_negative or self._socket_for_certain:
            return False
        if self.num_net_channels + self.num_collnet_channels == 0:
            return None
        return (self.num_gdr_channels == self.num_net_channels
                and self.num_collnet_gdr_channels == self.num_collnet_channels)

    @property
    def _socket_for_certain(self) -> bool:
        """The network is a socket one, and NCCL said it used it (`Using network`, channel
        lines) or it is an external socket plugin (loaded plugins come first), or no plugin and
        no IB device leave it alone (`socket_only`). NCCL's own `NET/Socket : Using` device line
        alone does not say the traffic went there."""
        return self.network in SOCKET_NETWORKS and (
            self.network == "FastSocket" or self.network_evidence is None or self.socket_only)

    @property
    def gdr_evidence(self) -> str | None:
        """The fact `gdr` rests on, in words; None when `gdr` is None."""
        if self._socket_for_certain:
            return f"NET/{self.network} carries data through the host's TCP stack: no GPUDirect RDMA"
        if self.gdr_negative:
            return "the plugin or NCCL said GPUDirect RDMA is unavailable"
        lines = [f"GDRDMA on {gdr}/{n} {what} lines" for gdr, n, what in (
            (self.num_gdr_channels, self.num_net_channels, "NET channel"),
            (self.num_collnet_gdr_channels, self.num_collnet_channels, "CollNet connection"))
            if n]
        return ", ".join(lines) or None

    @property
    def uses_socket(self) -> bool:
        return (self.network or "").lower() == "socket"

    @property
    def uses_libfabric(self) -> bool:
        """NCCL used aws-ofi-nccl (`Libfabric`, `AWS Libfabric`, `OFI`)."""
        return self.network is not None and ("ibfabric" in self.network or "OFI" in self.network)

    @property
    def _not_loaded(self) -> str:
        return f"the NET plugin did not load (dlerror: {self.plugin_dlerror})"

    def describe(self) -> str:
        """One line for a failure message: `NET/Socket: aws-ofi-nccl did not load (...)`."""
        if self.network is None:
            if self.errors:
                return f"no network selected: {self.errors[0].cause}"
            if self.plugin_dlerror:
                return f"no network selected; {self._not_loaded}"
            if self.provider:
                return (f"no `Using network` line; {self.plugin or 'the NET plugin'} selected "
                        f"provider {self.provider}")
            return ("no network evidence in the NCCL log (single-node run, or NCCL_DEBUG not INFO "
                    "with NCCL_DEBUG_SUBSYS including INIT,NET)")
        head = f"NET/{self.network}"
        if self.uses_socket:
            if self.plugin == "aws-ofi-nccl" and self.plugin_failed:
                why = "aws-ofi-nccl loaded but failed to initialise"
                if self.errors:
                    why += f" ({self.errors[0].cause})"
            elif self.plugin == "aws-ofi-nccl":
                why = "aws-ofi-nccl loaded but NCCL used sockets (NCCL_NET=Socket?)"
            elif self.plugin_dlerror:
                why = self._not_loaded
            else:
                why = "aws-ofi-nccl did not load (check LD_LIBRARY_PATH, the plugin library)"
            return f"{head}: {why}; traffic goes over TCP sockets"
        parts = []
        if self.plugin:
            parts.append(self.plugin + (f" {self.plugin_version}" if self.plugin_version else ""))
        if self.provider:
            extra = ", ".join(x for x in (
                f"fabric {self.fabric}" if self.fabric else "",
                f"{self.num_nics} NICs" if self.num_nics is not None else "") if x)
            parts.append(f"provider {self.provider}" + (f" ({extra})" if extra else ""))
        if self.num_net_channels:
            parts.append(f"GDRDMA on {self.num_gdr_channels}/{self.num_net_channels} NET channels")
        elif self.gdr_negative:
            parts.append("GDR not available")
        else:
            parts.append("no NET channel lines")
        if self.num_collnet_channels:
            parts.append(f"GDRDMA on {self.num_collnet_gdr_channels}/{self.num_collnet_channels} "
                         "CollNet connections")
        return f"{head}: " + ", ".join(parts)

    def to_json(self) -> JSONObject:
        """The `preflight inspect nccl-log --json` record (keys documented in docs/network.md)."""
        return {
            "nccl_version": self.nccl_version,
            "plugin": self.plugin,
            "plugin_version": self.plugin_version,
            "network": self.network,
            "provider": self.provider,
            "fabric": self.fabric,
            "num_nics": self.num_nics,
            "protocol": self.protocol,
            "gdr": self.gdr,
            "gdr_evidence": self.gdr_evidence,
            "network_evidence": self.network_evidence,
            "libfabric_version": self.libfabric_version,
            "platform": self.platform,
            "num_net_channels": self.num_net_channels,
            "num_gdr_channels": self.num_gdr_channels,
            "num_collnet_channels": self.num_collnet_channels,
            "num_collnet_gdr_channels": self.num_collnet_gdr_channels,
            "gdr_gpus": list(self.gdr_gpus),
            "gdr_gpus_enabled": list(self.gdr_gpus_enabled),
            "nranks": self.nranks,
            "env_added": dict(self.env_added),
            "warnings": list(self.warnings),
            "errors": [{"line": e.line, "cause": e.cause, "remedy": e.remedy} for e in self.errors],
            "timeouts": [
                {"rank": t.rank, "seq_num": t.seq_num, "op_type": t.op_type,
                 "timeout_ms": t.timeout_ms, "ran_for_ms": t.ran_for_ms, "line": t.line}
                for t in self.timeouts
            ],
            "commands_seen": list(self.commands),
        }
