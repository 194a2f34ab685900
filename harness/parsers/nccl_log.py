"""NCCL debug logs (`NCCL_DEBUG=INFO`): the network NCCL really used, aws-ofi-nccl's provider and
NICs, GPUDirect RDMA on the NET channels, warnings, known failures and PyTorch watchdog timeouts.

Reads lines like `ip-10-0-0-1:79:2500 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is
efa-direct (found 32 nics)` under any wrapper (Open MPI `[1,0]<stdout>:`, srun `0: `, timestamps,
CloudWatch `| ts | line` copies), streaming: memory stays flat in the size of the log.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TextIO

from harness.parsers import ParseError
from harness.parsers.commands import command_nranks
from harness.parsers.nccl_failures import FAILURES, KnownFailure
from harness.parsers.reader import MAX_LINE_CHARS, Input, as_input
from harness.parsers.unwrap import Unwrapper
from harness.parsers.values import ascii_int

__all__ = [
    "FAILURES",
    "INSPECT",
    "FailureHit",
    "KnownFailure",
    "NcclLogSummary",
    "WatchdogTimeout",
    "inspect_nccl_log",
    "parse_nccl_log",
    "parse_nccl_log_stream",
]


_FAILURE_RES = tuple((re.compile(f.pattern), f) for f in FAILURES)


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


#: Cap on warnings/errors/timeouts kept (distinct lines): memory stays flat on huge logs.
MAX_KEPT = 200
#: Cap on the distinct names kept of each kind (networks, versions, variables).
MAX_NAMES = 64
#: Characters of a line kept in a warning, error or timeout record.
MAX_TEXT = 4096


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
    num_net_channels: int = 0
    """Distinct `NCCL INFO ... via NET/...` channel lines (a line seen twice counts once, until
    more than SEEN_CAP distinct lines reset the memory of what was seen)."""
    num_gdr_channels: int = 0
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
        """True: every NET channel line has GDRDMA; False: one lacks it, the plugin said GDR
        is unavailable, or the network is a socket one (Socket, FastSocket: through the host's
        TCP stack, never GPUDirect); None: no NET channel lines and no explicit evidence."""
        if self.gdr_negative or self._socket_for_certain:
            return False
        if self.num_net_channels == 0:
            return None
        return self.num_gdr_channels == self.num_net_channels

    @property
    def _socket_for_certain(self) -> bool:
        """The network is a socket one, and NCCL said it used it (`Using network`, channel
        lines) or it is an external socket plugin (loaded plugins come first). NCCL's own
        `NET/Socket : Using` device line alone does not say the traffic went there."""
        return self.network in SOCKET_NETWORKS and (
            self.network == "FastSocket" or self.network_evidence is None)

    @property
    def gdr_evidence(self) -> str | None:
        """The fact `gdr` rests on, in words; None when `gdr` is None."""
        if self._socket_for_certain:
            return f"NET/{self.network} carries data through the host's TCP stack: no GPUDirect RDMA"
        if self.gdr_negative:
            return "the plugin or NCCL said GPUDirect RDMA is unavailable"
        if self.num_net_channels:
            return f"GDRDMA on {self.num_gdr_channels}/{self.num_net_channels} NET channel lines"
        return None

    @property
    def uses_socket(self) -> bool:
        return (self.network or "").lower() == "socket"

    @property
    def uses_libfabric(self) -> bool:
        """NCCL used aws-ofi-nccl (`Libfabric`, `AWS Libfabric`, `OFI`)."""
        return self.network is not None and ("ibfabric" in self.network or "OFI" in self.network)

    def describe(self) -> str:
        """One line for a failure message: `NET/Socket: aws-ofi-nccl did not load (...)`."""
        if self.network is None:
            if self.errors:
                return f"no network selected: {self.errors[0].cause}"
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
        return f"{head}: " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
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


# --- Scanning --------------------------------------------------------------------------------
# Whole chunks are searched with two literal-prefixed regexes (C speed); the matched lines
# are de-duplicated with a dict (every rank prints the same ones), so each distinct line is
# interpreted (and each distinct channel line counted) once in Python. CR and everything after
# a `|` (a CloudWatch console copy, `| ts | line | line`) are cut off later, per distinct payload.

# Candidate lines: WARN, the INFO payloads whose first letter can start a fact (NET/..., NCCL
# version, Using network, comm/ncclCommInitRank/Init timings (nranks), Failed to initialize,
# socketPollConnect retries),
# Channel/Ring lines that go `via NET/` (not the P2P/SHM ones: many, and distinct per rank),
# torch's `NCCL error`, and PyTorch's watchdog lines (ProcessGroupNCCL.cpp / WorkNCCL(SeqNum).
# A cheap first-letter filter beats a full alternation in sre; Python sorts out the rest, once
# per distinct line. Finding the NET channel lines in this pass costs less than a second pass.
# `[^\n]*` rather than `.*` (same match without DOTALL): sre runs it ~35% faster.
_MAIN = re.compile(
    rb"NCCL[ .(](?:INFO (?:[NUcnIFs]|[CR][^\n]*via NET/)|WARN|error|version|cpp:|SeqNum)[^\n]*")
#: libfabric's own warnings (`libfabric:85:...:fi_getinfo_():1392<warn> fi_getinfo: provider efa
#: output empty list`): one more pass over each chunk.
_LIBFABRIC_WARN = re.compile(rb"<warn> ([^\n]*)")
#: aws-ofi-nccl's own logger (its test binaries; plugins NCCL did not load): `INFO: Function:
#: ofi_init Line: 1076: NET/OFI ...`. Searched only in chunks without NCCL lines.
_OLD_PLUGIN_LITERAL = b"Function: "
_OLD_PLUGIN = re.compile(r"(INFO|WARN): Function: \w+ Line: [0-9]+: (NET/OFI .*)")


def _text(raw: bytes) -> str:
    """A payload as text: cut at `|` (CloudWatch copies), without CR and outer blanks."""
    return raw.partition(b"|")[0].decode("utf-8", "replace").strip()


def _line_of(chunk: bytes, raw: bytes, end: int, anchor: bytes) -> str:
    """The line that ends in `raw` (its first occurrence in the chunk), from the `|`-separated
    segment that holds `anchor`: `_MAIN` matched only the line's tail, and what stands before it
    matters (the rank before `WorkNCCL(SeqNum=`, the source file before `NCCL WARN Cuda failure`).
    Called once per distinct tail, for these rare tails only."""
    stop = chunk.find(raw, 0, end) + len(raw)
    line = bytes(chunk[chunk.rfind(b"\n", 0, stop) + 1:stop])
    cut = line.rfind(b"|", 0, max(line.find(anchor), 0)) + 1
    return line[cut:].decode("utf-8", "replace").strip()


def _segments_with(chunk: bytes, literal: bytes, end: int) -> list[bytes]:
    """The `|`-separated segments of the lines of chunk[:end] that contain `literal`."""
    found = []
    pos = chunk.find(literal, 0, end)
    while pos >= 0:
        start = chunk.rfind(b"\n", 0, pos) + 1
        stop = chunk.find(b"\n", pos, end)
        stop = end if stop < 0 else stop
        found += [bytes(seg) for seg in chunk[start:stop].split(b"|") if literal in seg]
        pos = chunk.find(literal, stop, end)
    return found


_OFI_RULES = (
    (re.compile(r"(?:Initializing|Using) aws-ofi-nccl (\S+)"), "version"),
    (re.compile(r"Selected [Pp]rovider is ([\w;-]+),?(?: fabric is (\S+))?"
                r"(?: \(found ([0-9]+) nics\))?"), "provider"),
    (re.compile(r"Using transport protocol (\w+)"), "protocol"),
    (re.compile(r"Adding (\w+)=(\S*) to environment"), "env"),
    (re.compile(r"Setting (\w+) environment variable to (\S+?)\.?(?:\s|$)"), "env"),
    (re.compile(r"Setting (NCCL_\w+) to (\S+)"), "env"),
    (re.compile(r"Skipping adding (\w+) to environment"), "skip"),
    (re.compile(r"Running on (\S+) platform"), "platform"),
    (re.compile(r"Using Libfabric version (\S+)"), "libfabric"),
    (re.compile(r"GDR disabled on GDR-supported|GDR not supported"), "nogdr"),
    (re.compile(r"aws-ofi-nccl initialization failed"), "failed"),
)
# (Names are taken to the line's end and stripped in Python: a lazy group before `\s*$`
# rescanned a run of blanks from each of its characters.)
_LOADED = re.compile(r"Loaded (?:net|NET) plugin (.+)$")
_LOADED_VERSION = re.compile(r" \(v[0-9]+\)$")
_PLUGIN_FAILED = re.compile(r"Failed to initialize NET plugin (.+)$")
_USING_NETWORK = re.compile(r"Using network (.+)$")
_NRANKS = re.compile(r"nranks ([0-9]+)")
_VERSION = re.compile(r"NCCL version ([0-9][^\s|]*)")
_IB_DEVS = re.compile(r"NET/IB ?: Using (.*?)(?:;|$)")
_SOCKET_DEVS = re.compile(r"NET/(Socket|FastSocket) ?: Using (.*?)(?:;|$)")
#: `socketPollConnect: connect returned Connection refused, retrying (3/34) after sleep ...`
#: (NCCL 2.19+ src/misc/socket.cc): a peer that is not listening; one warning, the latest try.
_RETRY = re.compile(r"(socketPollConnect: .*?retrying) \(([0-9]+)/([0-9]+)\)")
#: Networks that carry data through the host's TCP stack: never GPUDirect RDMA (NCCL's
#: net_socket.cc has no GDR support; Google's nccl-fastsocket is a TCP plugin).
SOCKET_NETWORKS = frozenset(("Socket", "FastSocket"))
_DEV_INDEX = re.compile(r"\[[0-9]+\]\S")
#: NCCL's own GDR verdict per NIC (2.12+): `NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`.
_GDR_DISABLED = re.compile(r"NET/(.+?) ?: GPU Direct RDMA Disabled for HCA")
#: PyTorch's watchdog line, found wherever it is in a payload (`ProcessGroupNCCL.cpp:607] [Rank 0]
#: Watchdog ...`, `what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception:
#: [Rank 5] Watchdog ...`); each field is optional: a line cut short keeps what it has.
_WATCHDOG = re.compile(r"(?:\[(?:PG [^\]]*)?Rank ([0-9]+)\] )?Watchdog caught collective operation timeout")
_WATCHDOG_FIELDS = (
    re.compile(r"SeqNum=([0-9]+)"),
    re.compile(r"OpType=(\w+)"),
    re.compile(r"Timeout\(ms\)=([0-9]+)"),
    re.compile(r"ran for ([0-9]+) ?m"),
)
_CHUNK_BYTES = 1 << 20
"""Chunk size: small enough that the several passes over a chunk hit the CPU cache."""


#: Distinct payloads remembered (so each is interpreted once) before the memory is reset, and
#: the bytes they may hold.
SEEN_CAP = 100_000
SEEN_BYTES = 64 << 20
#: A line longer than this is judged by its first MAX_LINE_BYTES (the rest is read and dropped).
MAX_LINE_BYTES = MAX_LINE_CHARS


class _Scanner:
    """Interprets each chunk as it comes: only payloads not seen before reach Python code."""

    def __init__(self) -> None:
        self.facts = _Facts()
        self.seen: dict[bytes, None] = {}
        self.seen_bytes = 0
        self.saw_nccl = False
        self.cut_lines = 0
        self.commands: list[str] | None = None  # read from the input's head, once

    def feed(self, chunk: bytes, end: int | None = None) -> None:
        """Scan `chunk[:end]`, which must end at a line boundary (or the end of input)."""
        end = len(chunk) if end is None else end
        if self.commands is None:
            self.commands = _head_commands(chunk, end)
        facts, seen = self.facts, self.seen
        found = _MAIN.findall(chunk, 0, end)
        fresh = [p for p in dict.fromkeys(found) if p not in seen]
        size = sum(map(len, fresh))
        if len(seen) + len(fresh) > SEEN_CAP or self.seen_bytes + size > SEEN_BYTES:
            seen.clear()  # pathological logs (addresses in every WARN)
            self.seen_bytes = 0
        seen.update(dict.fromkeys(fresh))
        self.seen_bytes += size
        for raw in fresh:
            text = _text(raw)
            if text.startswith("NCCL INFO "):
                if "via NET/" in text:
                    facts.channel(text.partition("via NET/")[2])
                else:
                    facts.info(text[10:])
            elif text.startswith("NCCL WARN Cuda failure"):  # `transport/nvls.cc:158 NCCL WARN`
                facts.warn(text[10:], context=_line_of(chunk, raw, end, b"NCCL WARN"))
            elif text.startswith("NCCL WARN "):
                facts.warn(text[10:])
            elif text.startswith("NCCL version "):
                facts.version(text[13:].split()[0])
            elif text.startswith("NCCL.cpp:"):  # `ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog`
                facts.timeout(text)
                if "NCCL error" in text:  # `... raised the following async exception: NCCL error`
                    facts.fault(text.partition("] ")[2])
            elif text.startswith("NCCL(SeqNum="):  # `what():  [PG 3 Rank 5] ... WorkNCCL(SeqNum=`
                facts.timeout(_line_of(chunk, raw, end, b"Watchdog caught"))
                if "NCCL error" in text:
                    facts.fault(text)
            else:  # torch's `NCCL error in: ..., NCCL version 2.27.3`
                facts.fault(text)
                if m := _VERSION.search(text):
                    facts.version(m[1].rstrip(","))
        for raw in dict.fromkeys(_LIBFABRIC_WARN.findall(chunk, 0, end)):
            facts.fault(_text(raw))
        if not found and chunk.find(_OLD_PLUGIN_LITERAL, 0, end) >= 0:
            for raw in dict.fromkeys(_segments_with(chunk, _OLD_PLUGIN_LITERAL, end)):
                if m := _OLD_PLUGIN.search(_text(raw)):
                    (facts.warn if m[1] == "WARN" else facts.info)(m[2])
        if not self.saw_nccl and not facts.recognised:
            self.saw_nccl = chunk.find(b"NCCL INFO", 0, end) >= 0

    def summary(self) -> NcclLogSummary:
        commands = tuple(self.commands or ())
        if not self.facts.recognised and not self.saw_nccl:
            raise ParseError(
                "nothing recognised as an NCCL debug log: no `NCCL INFO`/`NCCL WARN` lines, "
                "aws-ofi-nccl (NET/OFI) lines or PyTorch NCCL watchdog lines "
                "(was the job run with NCCL_DEBUG=INFO?)"
            )
        summary = self.facts.build()
        launched = command_nranks(commands)
        return dataclasses.replace(
            summary, commands=commands,
            nranks=summary.nranks if summary.nranks is not None else launched)


#: Where command lines pasted above a log are looked for (the log's own lines follow them).
HEAD_BYTES = 64 << 10


def _head_commands(chunk: bytes, end: int) -> list[str]:
    """The command lines (prompts, `$ cmd`, bare `mpirun ...`) in the input's first HEAD_BYTES,
    read through the unwrapper: once per input, so the scan of the rest stays at C speed."""
    unwrapper = Unwrapper()
    head = bytes(chunk[:min(end, HEAD_BYTES)]).decode("utf-8", "replace")
    for line in head.splitlines():
        unwrapper.unwrap(line)
    return unwrapper.commands


class _Facts:
    """Interprets distinct payloads (order-independent: logs interleave ranks)."""

    def __init__(self) -> None:
        self.recognised = 0
        self.versions: list[str] = []
        self.plugin_loaded: str | None = None
        self.plugin_failed = False
        self.ofi_seen = False
        self.ofi_version: str | None = None
        self.networks: list[str] = []
        self.provider: str | None = None
        self.fabric: str | None = None
        self.ofi_nics: int | None = None
        self.ib_nics: int | None = None
        self.socket_nics: int | None = None
        self.fastsocket_nics: int | None = None
        self.ib_warned: str | None = None
        self.retries: tuple[int, str, str] = (0, "", "")
        self.failed_plugins: list[str] = []
        self.protocol: str | None = None
        self.platform: str | None = None
        self.libfabric: str | None = None
        self.nogdr = False
        self.gdr_disabled_nets: set[str] = set()
        self.net_channels: Counter[str] = Counter()
        self.gdr_channels = 0
        self.nranks: int | None = None
        self.env_added: dict[str, str] = {}
        self.env_skipped: list[str] = []
        self.warnings: dict[str, None] = {}
        self.errors: dict[tuple[int, str], FailureHit] = {}
        self.timeouts: dict[object, WatchdogTimeout] = {}

    # Each method handles one kind of payload.
    def version(self, v: str) -> None:
        self.recognised += 1
        if v not in self.versions and len(self.versions) < MAX_NAMES:
            self.versions.append(v[:MAX_TEXT])

    def info(self, text: str) -> None:
        self.recognised += 1
        if text.startswith("NET/OFI"):
            self.ofi_seen = True
            self._ofi(text[8:])
            return
        # Each regex is tried only where its literal is (`in` is ~10x cheaper than a search):
        # logs of many ranks are mostly distinct `comm 0x.. rank N` lines that match none.
        if "Using network" in text and (m := _USING_NETWORK.search(text)):
            name = m[1].rstrip()[:MAX_TEXT]
            if name and name not in self.networks and len(self.networks) < MAX_NAMES:
                self.networks.append(name)
        elif "Loaded " in text and (m := _LOADED.search(text)):
            self.plugin_loaded = _LOADED_VERSION.sub("", m[1].rstrip())[:MAX_TEXT] or None
        elif "Failed to init" in text and (m := _PLUGIN_FAILED.search(text)):
            if "ibfabric" in m[1] or "OFI" in m[1]:  # NCCL's own IB failing on EFA is normal
                self.plugin_failed = True
                self.fault(text)
            if not m[1].startswith(("IB", "Socket")) and len(self.warnings) < MAX_KEPT:
                self.warnings[text[:MAX_TEXT]] = None  # an external plugin NCCL did not use
        elif "nranks " in text and (m := _NRANKS.search(text)):
            self.nranks = max(self.nranks or 0, ascii_int(m[1]) or 0) or None
        elif "NCCL version " in text and (m := _VERSION.search(text)):
            self.version(m[1])
        elif "NET/IB" in text and (m := _IB_DEVS.search(text)):
            self.ib_nics = max(self.ib_nics or 0, len(_DEV_INDEX.findall(m[1])))
        elif "Socket" in text and (m := _SOCKET_DEVS.search(text)):
            nics = len(_DEV_INDEX.findall(m[2]))
            if m[1] == "FastSocket":
                self.fastsocket_nics = max(self.fastsocket_nics or 0, nics)
            else:
                self.socket_nics = max(self.socket_nics or 0, nics)
        elif "socketPollConnect" in text and (m := _RETRY.search(text)):
            tries = ascii_int(m[2]) or 0
            if tries > self.retries[0]:
                self.retries = (tries, m[3], m[1])
        elif ("GPU Direct RDMA Disabled" in text and (m := _GDR_DISABLED.search(text))
              and len(self.gdr_disabled_nets) < MAX_NAMES):
            self.gdr_disabled_nets.add(m[1])

    def _ofi(self, text: str) -> None:
        for regex, kind in _OFI_RULES:
            m = regex.search(text)
            if m is None:
                continue
            if kind == "version":
                self.ofi_version = self.ofi_version or m[1]
            elif kind == "provider":
                self.provider, self.fabric = m[1], m[2] or self.fabric
                if m[3] is not None and (nics := ascii_int(m[3])) is not None:
                    self.ofi_nics = max(self.ofi_nics or 0, nics)
            elif kind == "protocol":
                self.protocol = m[1]
            elif kind == "env":
                if m[1] in self.env_added or len(self.env_added) < MAX_KEPT:
                    self.env_added[m[1]] = m[2].strip('"')[:MAX_TEXT]  # 1.11: `to "simple"`
            elif kind == "skip":
                if m[1] not in self.env_skipped and len(self.env_skipped) < MAX_KEPT:
                    self.env_skipped.append(m[1])
            elif kind == "platform":
                self.platform = m[1]
            elif kind == "libfabric":
                self.libfabric = m[1]
            elif kind == "nogdr":
                self.nogdr = True
                self.fault("NET/OFI " + text)
            elif kind == "failed":
                self.plugin_failed = True
            return
        self.fault("NET/OFI " + text, info=True)

    def warn(self, text: str, context: str | None = None) -> None:
        self.recognised += 1
        if len(self.warnings) < MAX_KEPT:
            self.warnings[text[:MAX_TEXT]] = None
        if text.startswith("NET/IB") and self.ib_warned is None:
            self.ib_warned = text[:MAX_TEXT]  # only NCCL's IB transport prints these
        if text.startswith("NET/OFI"):
            self.ofi_seen = True
            # 1.1x prints `GDR disabled on GDR-supported instance type` and its init failure as
            # WARN lines: the same facts as at INFO level.
            self._ofi(text[8:])
        self.fault(text, context=context)

    def fault(self, text: str, info: bool = False, context: str | None = None) -> None:
        """Record `text` as an error when it (or its whole line, `context`) matches the
        known-failure catalogue (an INFO line only by an entry that is not `warn_only`)."""
        self.recognised += 1
        for index, (regex, failure) in enumerate(_FAILURE_RES):
            if info and failure.warn_only:
                continue
            if regex.search(context or text):
                key = (index, text[:MAX_TEXT])
                if key not in self.errors and len(self.errors) < MAX_KEPT:
                    self.errors[key] = FailureHit(text[:MAX_TEXT], failure.cause, failure.remedy)
                return

    def timeout(self, text: str) -> None:
        """A line holding `Watchdog caught collective operation timeout`; one record per rank and
        collective (torch repeats it in the `watchdog thread terminated` line)."""
        self.recognised += 1
        m = _WATCHDOG.search(text)
        if m is None or len(self.timeouts) >= MAX_KEPT:
            return
        line = text[m.start():][:MAX_TEXT]
        seq, op, timeout_ms, ran = (f.search(line) for f in _WATCHDOG_FIELDS)
        t = WatchdogTimeout(
            rank=ascii_int(m[1]), seq_num=ascii_int(seq[1]) if seq else None,
            op_type=op[1] if op else None,
            timeout_ms=ascii_int(timeout_ms[1]) if timeout_ms else None,
            ran_for_ms=ascii_int(ran[1]) if ran else None, line=line)
        key = line if t.seq_num is None else (t.rank, t.seq_num, t.op_type, t.ran_for_ms)
        self.timeouts.setdefault(key, t)

    def channel(self, tail: str) -> None:
        """`Libfabric/0/GDRDMA`, `IB/1(8)/GDRDMA/Shared`, `Socket/0`: the text after `via NET/`
        of one distinct channel line (a communicator created twice prints the same lines)."""
        self.recognised += 1
        name, sep, rest = tail.partition("/")
        if not sep or not "0" <= rest[:1] <= "9":  # a truncated last line: `via NET/Libfab`
            return
        if name not in self.net_channels and len(self.net_channels) >= MAX_NAMES:
            return
        self.net_channels[name] += 1
        if "/GDRDMA" in tail:
            self.gdr_channels += 1

    def _network(self) -> str | None:
        if self.net_channels:
            return self.net_channels.most_common(1)[0][0]
        if "Socket" in self.networks:  # some rank fell back: the job runs at socket speed
            return "Socket"
        if self.networks:
            return self.networks[0]
        # No `Using network` (NCCL < 2.6, or a log cut short): NCCL initialises its own IB and
        # Socket transports only when no plugin came before them, so their device lines name the
        # network when no plugin was seen or the plugin failed.
        if self.ofi_seen and not self.plugin_failed:
            return None
        if self.ib_nics:
            return "IB"
        if self.fastsocket_nics:
            return "FastSocket"
        if self.socket_nics:
            return "Socket"
        if self.ib_warned is not None:
            return "IB"
        return None

    def _retry_warning(self) -> tuple[str, ...]:
        tries, of, text = self.retries
        return (f"{text} ({tries}/{of}): a peer was not listening (the latest try seen)",) if tries else ()

    def _network_evidence(self, network: str | None) -> str | None:
        """Why `network` is known when no `Using network` / channel line said it."""
        if network is None or self.net_channels or network in self.networks:
            return None
        if network == "IB" and not self.ib_nics and self.ib_warned:
            return f"NET/IB WARN: {self.ib_warned} (only NCCL's IB transport prints NET/IB)"
        return f"the NET/{network} device line (`NET/{network} : Using ...`)"

    def build(self) -> NcclLogSummary:
        network = self._network()
        libfabric_net = network is not None and ("ibfabric" in network or "OFI" in network)
        plugin = None
        if self.ofi_seen or (self.plugin_loaded and "ibfabric" in self.plugin_loaded):
            plugin = "aws-ofi-nccl"
        elif self.plugin_loaded:
            plugin = self.plugin_loaded
        provider = fabric = nics = None
        if network is None and self.ofi_seen and not self.plugin_failed:
            # No `Using network` line (a trimmed paste): the plugin's own selection is what it
            # offers NCCL; the network stays unknown.
            provider, fabric, nics = self.provider, self.fabric, self.ofi_nics
        elif network is None:
            provider = self.provider
        elif libfabric_net:
            provider, fabric, nics = self.provider, self.fabric, self.ofi_nics
        elif network.lower() == "socket":
            provider, nics = "socket", self.socket_nics
        elif network == "FastSocket":
            provider, nics = "fastsocket", self.fastsocket_nics
        elif network.upper().startswith("IB"):
            provider, nics = "ib", self.ib_nics
        else:
            provider = network.lower()
        return NcclLogSummary(
            nccl_version=self.versions[0] if self.versions else None,
            plugin=plugin,
            plugin_version=self.ofi_version if plugin == "aws-ofi-nccl" else None,
            plugin_failed=self.plugin_failed,
            network=network,
            networks_seen=tuple(self.networks),
            provider=provider,
            fabric=fabric,
            num_nics=nics,
            protocol=self.protocol if libfabric_net or (network is None and self.ofi_seen)
            else None,
            platform=self.platform,
            libfabric_version=self.libfabric,
            gdr_negative=self.nogdr or network in self.gdr_disabled_nets,
            num_net_channels=sum(self.net_channels.values()),
            num_gdr_channels=self.gdr_channels,
            net_channels_by_network=dict(self.net_channels),
            nranks=self.nranks,
            env_added=dict(self.env_added),
            env_skipped=tuple(self.env_skipped),
            warnings=tuple(self.warnings) + self._retry_warning(),
            network_evidence=self._network_evidence(network),
            # Most specific cause first (catalogue order), then in the order seen.
            errors=tuple(hit for _, hit in sorted(self.errors.items(), key=lambda kv: kv[0][0])),
            timeouts=tuple(self.timeouts.values()),
        )


def _chunks_of_lines(lines: Iterable[str]) -> Iterator[bytes]:
    """Group text lines into ~8 MB byte chunks that end at line boundaries."""
    batch: list[str] = []
    size = 0
    for line in lines:
        batch.append(line if line.endswith("\n") else line + "\n")
        size += len(line)
        if size >= _CHUNK_BYTES:
            yield "".join(batch).encode("utf-8", "replace")
            batch, size = [], 0
    if batch:
        yield "".join(batch).encode("utf-8", "replace")


def parse_nccl_log(lines: Iterable[str] | str) -> NcclLogSummary:
    """Summarise an NCCL debug log given as text or as an iterable of lines (streamed).

    Raises ParseError when nothing in it is an NCCL, aws-ofi-nccl or watchdog line.
    """
    if isinstance(lines, str):
        lines = lines.splitlines()
    scanner = _Scanner()
    for chunk in _chunks_of_lines(lines):
        scanner.feed(chunk)
    return scanner.summary()


def parse_nccl_log_stream(
    streams: IO[bytes] | Iterable[IO[bytes]], chunk_bytes: int = _CHUNK_BYTES
) -> NcclLogSummary:
    """Summarise one binary stream, or several (one log per rank) as one log; the fast path."""
    return _scan_streams(streams, chunk_bytes).summary()


def _scan_streams(streams: IO[bytes] | Iterable[IO[bytes]], chunk_bytes: int) -> _Scanner:
    scanner = _Scanner()
    for fh in [streams] if hasattr(streams, "read") else streams:  # type: ignore[union-attr]
        if hasattr(fh, "readinto"):
            _feed_readinto(scanner, fh, chunk_bytes)
            continue
        rest = b""
        skipping = False  # inside a line longer than MAX_LINE_BYTES, after its first part
        while True:
            data = fh.read(chunk_bytes)  # type: ignore[union-attr]
            if not data:
                break
            if skipping:
                nl = data.find(b"\n")
                if nl < 0:
                    continue
                data, skipping = data[nl + 1:], False
            if rest:
                data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                if len(rest) >= MAX_LINE_BYTES:
                    scanner.feed(rest[:MAX_LINE_BYTES])
                    scanner.cut_lines += 1
                    rest, skipping = b"", True
                continue
            scanner.feed(data, cut)
            rest = data[cut:]
        if rest:
            scanner.feed(rest)
    return scanner


def _feed_readinto(scanner: _Scanner, fh: Any, chunk_bytes: int) -> None:
    """Read into one reused buffer (no per-chunk copy); the partial last line of a chunk moves
    to the buffer's front; a line longer than the buffer grows it, up to MAX_LINE_BYTES: past
    that the line is judged by its first MAX_LINE_BYTES and the rest is dropped."""
    buf = bytearray(2 * chunk_bytes)
    filled = 0
    skipping = False
    while True:
        if len(buf) - filled < chunk_bytes:
            buf.extend(bytes(chunk_bytes))  # a line longer than a chunk: room for more of it
        with memoryview(buf) as view:
            n = fh.readinto(view[filled:filled + chunk_bytes])
        if not n:
            break
        end = filled + n
        if skipping:  # filled is 0: the buffer holds only new data
            nl = buf.find(b"\n", 0, end)
            if nl < 0:
                continue
            buf[:end - nl - 1] = buf[nl + 1:end]
            end, skipping = end - nl - 1, False
        cut = buf.rfind(b"\n", 0, end) + 1
        if cut == 0:
            if end >= MAX_LINE_BYTES:
                scanner.feed(bytes(buf[:MAX_LINE_BYTES]))
                scanner.cut_lines += 1
                filled, skipping = 0, True
            else:
                filled = end
            continue
        scanner.feed(buf, cut)
        buf[:end - cut] = buf[cut:end]
        filled = end - cut
    if filled:
        scanner.feed(bytes(buf[:filled]))


def inspect_nccl_log(stream: TextIO | Input, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect nccl-log FILE`: the keys of NcclLogSummary.to_json()."""
    source = as_input(stream)
    binary = source.binary()
    if binary is None:
        return _judged(parse_nccl_log(source.lines()), profile)
    scanner = _scan_streams(binary, _CHUNK_BYTES)
    cut = (f"{scanner.cut_lines} line(s) longer than {MAX_LINE_BYTES:,} bytes were judged by "
           f"their first {MAX_LINE_BYTES:,}") if scanner.cut_lines else ""
    try:
        out = _judged(scanner.summary(), profile)
    except ParseError as exc:
        raise ParseError(f"{exc} ({cut})" if cut else str(exc)) from None
    if cut:
        out["notes"] = [cut]
    return out


def _judged(summary: NcclLogSummary, profile: Any) -> dict[str, Any]:
    """The summary's keys, and `verdicts`: the network checks' own judgement of it for the
    profile (harness.judges; PF-NET-006 to 011)."""
    from harness import judges

    return {**summary.to_json(),
            "verdicts": [v.to_json() for v in judges.nccl_log_verdicts(profile, summary)]}


INSPECT = {"nccl-log": inspect_nccl_log}
