"""Interpreting the distinct payloads of an NCCL debug log (each one once, in any order: logs
interleave ranks) into the facts of an NcclLogSummary: versions, plugin, network, provider, NICs,
GDR, channel counts, aws-ofi-nccl's environment, warnings, known failures, watchdog timeouts.
What they add up to once all are read (the network, provider, errors in order) is
harness.parsers.nccl_log_summary.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

from harness.parsers.nccl_failures import FAILURES
from harness.parsers.nccl_log_facts import (
    FailureHit,
    WatchdogTimeout,
)
from harness.parsers.nccl_log_lines import (
    DEV_INDEX,
    GDR_DISABLED,
    GDR_PAIR,
    IB_DEVS,
    LOADED,
    LOADED_VERSION,
    NRANKS,
    OFI_LITERALS,
    OFI_RULES,
    PLUGIN_FAILED,
    RETRY,
    SOCKET_DEVS,
    USING_NETWORK,
    VERSION,
    WATCHDOG,
    WATCHDOG_END,
    WATCHDOG_FIELDS,
)
from harness.parsers.values import ascii_int

try:  # (the C scan's module: `holds_any`; without it, each rule's `in` test decides alone)
    from harness.parsers._nccl_scan import holds_any as _holds_any
except ImportError:
    _holds_any = None

__all__ = ["COLLNET", "MAX_KEPT", "MAX_NAMES", "MAX_TEXT", "PayloadFacts"]

#: Every rank prints its own `comm 0x.. rank N nRanks 256` line: the count is read once.
_rank_count = functools.lru_cache(maxsize=256)(ascii_int)

_FAILURE_RES = tuple((re.compile(f.pattern), f) for f in FAILURES)

#: Cap on warnings/errors/timeouts kept (distinct lines): memory stays flat on huge logs.
MAX_KEPT = 200
#: Cap on the distinct names kept of each kind (networks, versions, variables).
MAX_NAMES = 64
#: A CollNet (SHARP) connection line, NVIDIA/nccl src/transport/coll_net.cc sendSetup/recvSetup:
#: `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s` (name, NIC, `/GDRDMA` when GPUDirect
#: RDMA is used, `(PCI)`); before NCCL 2.12 `CollNet %02d : %d [receive] via COLLNET/...`, and
#: `Coll %02d : ...` in the first CollNet releases. It reaches PayloadFacts.info (it holds no
#: `via NET/`); the text after this literal is read.
COLLNET = "via COLLNET/"
#: Characters of a line kept in a warning, error or timeout record.
MAX_TEXT = 4096
#: A `NET/Plugin` line saying NCCL loaded no external NET plugin (NVIDIA/nccl src/net.cc 2.4-2.18
#: `No plugin found (%s), using internal implementation`, with `dlerror=%s ` before it since 2.12;
#: src/plugin/net.cc 2.19+ `Could not find: %s. Using internal network plugin.` and
#: `Plugin load returned %d : %s : when loading %s`).
NO_PLUGIN = ("No plugin found", "Could not find:", "Using internal network plugin",
             "Plugin load returned")
#: Why dlopen failed, in those lines: a missing file, or a plugin whose own dependency is missing
#: (`libfabric.so.1: version `FABRIC_1.7' not found (required by .../libnccl-net.so)`).
DLERROR = re.compile(r"dlerror=(.+?) No plugin found|Plugin load returned [0-9]+ : (.+?)"
                     r"(?: : when loading|\.?$)")
#: Lines saying NCCL's own IB transport has no device (src/transport/net_ib.cc ncclIbInit
#: `NET/IB : No device found.`; 2.19+ src/misc/ibvwrap.cc `Failed to open libibverbs.so[.1]`;
#: src/misc/param.cc `NCCL_IB_DISABLE set by environment to 1.`).
IB_ABSENT = ("NET/IB : No device found", "Failed to open libibverbs",
             "NCCL_IB_DISABLE set by environment to 1")


class PayloadFacts:
    """Interprets distinct payloads (order-independent: logs interleave ranks)."""

    def __init__(self, max_kept: int = 200) -> None:
        self.max_kept = max_kept
        """Cap on the warnings, errors, timeouts and variables kept (harness.parsers.nccl_log
        passes its MAX_KEPT)."""
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
        self.no_plugin = False
        self.plugin_dlerror: str | None = None
        self.ib_absent = False
        self.retries: tuple[int, str, str] = (0, "", "")
        self.failed_plugins: list[str] = []
        self.protocol: str | None = None
        self.platform: str | None = None
        self.libfabric: str | None = None
        self.nogdr = False
        self.gdr_disabled_nets: set[str] = set()
        self.gdr_pairs: dict[tuple[str, str], bool] = {}
        """(GPU, NIC) -> NCCL's init-time GDR verdict (True: enabled)."""
        self.net_channels: Counter[str] = Counter()
        self.gdr_channels = 0
        self.collnet_channels = 0
        self.collnet_gdr_channels = 0
        self.nranks: int | None = None
        self.env_added: dict[str, str] = {}
        self.env_skipped: list[str] = []
        self.warnings: dict[str, None] = {}
        self.errors: dict[tuple[int, str], FailureHit] = {}
        self.timeouts: dict[object, WatchdogTimeout] = {}
        self.wrapped: str | None = None
        """A watchdog record without its end on the last line of a chunk: the next chunk's
        first line may hold the rest (harness.parsers.nccl_log passes it to `wrapped_tail`)."""

    # Each method handles one kind of payload.
    def rank_counts(self, counts: list[bytes]) -> None:
        """Payloads that say only a rank count (harness.parsers.nccl_log_lines.RANK_LINE)."""
        self.recognised += len(counts)
        n = max(map(int, counts))  # 1-9 ASCII digits (RANK_LINE): never a ValueError
        if n > (self.nranks or 0):
            self.nranks = n

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
        if "Using network" in text and (m := USING_NETWORK.search(text)):
            name = m[1].rstrip()[:MAX_TEXT]
            if name and name not in self.networks and len(self.networks) < MAX_NAMES:
                self.networks.append(name)
        elif "Loaded " in text and (m := LOADED.search(text)):
            self.plugin_loaded = LOADED_VERSION.sub("", m[1].rstrip())[:MAX_TEXT] or None
        elif "Failed to init" in text and (m := PLUGIN_FAILED.search(text)):
            if "ibfabric" in m[1] or "OFI" in m[1]:  # NCCL's own IB failing on EFA is normal
                self.plugin_failed = True
                self.fault(text)
            if not m[1].startswith(("IB", "Socket")) and len(self.warnings) < self.max_kept:
                self.warnings[text[:MAX_TEXT]] = None  # an external plugin NCCL did not use
        elif ("nranks " in text or "nRanks " in text) and (m := NRANKS.search(text)):
            self.nranks = max(self.nranks or 0, _rank_count(m[1]) or 0) or None
        elif "NCCL version " in text and (m := VERSION.search(text)):
            self.version(m[1])
        elif "NET/IB" in text and (m := IB_DEVS.search(text)):
            self.ib_nics = max(self.ib_nics or 0, len(DEV_INDEX.findall(m[1])))
        elif "Socket" in text and (m := SOCKET_DEVS.search(text)):
            nics = len(DEV_INDEX.findall(m[2]))
            if m[1] == "FastSocket":
                self.fastsocket_nics = max(self.fastsocket_nics or 0, nics)
            else:
                self.socket_nics = max(self.socket_nics or 0, nics)
        elif "socketPollConnect" in text and (m := RETRY.search(text)):
            tries = ascii_int(m[2]) or 0
            if tries > self.retries[0]:
                self.retries = (tries, m[3], m[1])
        elif "GPU Direct RDMA" in text and "for GPU" in text and (m := GDR_PAIR.search(text)):
            if len(self.gdr_pairs) < self.max_kept * 8:  # 8 GPUs x 32 NICs is 256 pairs
                self.gdr_pairs[(m[2], m[3])] = m[1] == "Enabled"
        elif ("GPU Direct RDMA Disabled" in text and (m := GDR_DISABLED.search(text))
              and len(self.gdr_disabled_nets) < MAX_NAMES):
            self.gdr_disabled_nets.add(m[1])
        elif COLLNET in text:
            self.collnet_channel(text.partition(COLLNET)[2])
        elif text.startswith("NET/Plugin"):
            self.plugin_line(text)
        elif text.startswith(IB_ABSENT):
            self.ib_absent = True

    def plugin_line(self, text: str) -> None:
        """A `NET/Plugin` line: NCCL loaded no external NET plugin, and why dlopen failed."""
        if not any(s in text for s in NO_PLUGIN):
            return
        self.no_plugin = True
        if self.plugin_dlerror is None and (m := DLERROR.search(text)):
            self.plugin_dlerror = (m[1] or m[2]).strip()[:MAX_TEXT]

    def _ofi(self, text: str) -> None:
        """Every rule that matches is read: one line can hold two facts (`Running on p4d.24xlarge
        platform, Setting NCCL_TOPO_FILE environment variable to ...`, aws-ofi-nccl 1.4-1.11)."""
        matched = False
        # No rule matches without its literal: where the text holds none (one C call; a storm of
        # distinct WARN lines holds none) no rule is tried, as the loop's own tests would decide.
        rules = () if _holds_any is not None and not _holds_any(text, OFI_LITERALS) else OFI_RULES
        for regex, kind, literal in rules:
            if literal not in text:
                continue
            m = regex.search(text)
            if m is None:
                continue
            matched = True
            if kind == "version":
                self.ofi_version = self.ofi_version or m[1]
            elif kind == "provider":
                self.provider, self.fabric = m[1], m[2] or self.fabric
                if m[3] is not None and (nics := ascii_int(m[3])) is not None:
                    self.ofi_nics = max(self.ofi_nics or 0, nics)
            elif kind == "protocol":
                self.protocol = m[1]
            elif kind == "env":
                if m[1] in self.env_added or len(self.env_added) < self.max_kept:
                    self.env_added[m[1]] = m[2].strip('"')[:MAX_TEXT]  # 1.11: `to "simple"`
            elif kind == "skip":
                if m[1] not in self.env_skipped and len(self.env_skipped) < self.max_kept:
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
        if not matched:
            if len(self.errors) < self.max_kept:
                self.fault("NET/OFI " + text, info=True)
            else:  # what fault does once MAX_KEPT errors are kept, without the call
                self.recognised += 1

    def warn(self, text: str, context: str | None = None) -> None:
        self.recognised += 1
        if len(self.warnings) < self.max_kept:
            self.warnings[text[:MAX_TEXT]] = None
        if text.startswith("NET/IB") and self.ib_warned is None:
            self.ib_warned = text[:MAX_TEXT]  # only NCCL's IB transport prints these
        if text.startswith("NET/OFI"):
            self.ofi_seen = True
            # 1.1x prints `GDR disabled on GDR-supported instance type` and its init failure as
            # WARN lines: the same facts as at INFO level.
            self._ofi(text[8:])
        self.fault(text, context=context)

    def warns(self, texts: list[str]) -> None:
        """warn(text[10:]) for each `NCCL WARN ...` text in turn: the same facts. Once MAX_KEPT
        warnings and errors are kept (a storm of distinct WARN lines) without that call a line:
        what warn then does is count the line (and its fault), keep the first NET/IB warning and
        try aws-ofi-nccl's rules."""
        max_kept, warnings, errors = self.max_kept, self.warnings, self.errors
        for text in texts:
            if len(warnings) < max_kept or len(errors) < max_kept:
                self.warn(text[10:])
                continue
            self.recognised += 2
            if text.startswith("NET/", 10):
                if text.startswith("IB", 14) and self.ib_warned is None:
                    self.ib_warned = text[10:10 + MAX_TEXT]
                elif text.startswith("OFI", 14):
                    self.ofi_seen = True
                    self._ofi(text[18:])

    def fault(self, text: str, info: bool = False, context: str | None = None) -> None:
        """Record `text` as an error when it (or its whole line, `context`) matches the
        known-failure catalogue (an INFO line only by an entry that is not `warn_only`). Once
        MAX_KEPT errors are kept no line can add one: the catalogue is not tried (a failure storm
        of distinct WARN lines, each naming its own request address, costs no regex a line)."""
        self.recognised += 1
        if len(self.errors) >= self.max_kept:
            return
        for index, (regex, failure) in enumerate(_FAILURE_RES):
            if info and failure.warn_only:
                continue
            if regex.search(context or text):
                key = (index, text[:MAX_TEXT])
                if key not in self.errors and len(self.errors) < self.max_kept:
                    self.errors[key] = FailureHit(text[:MAX_TEXT], failure.cause, failure.remedy)
                return

    def timeout(self, text: str, after: str | None = "") -> None:
        """A line holding `Watchdog caught collective operation timeout`; one record per rank and
        collective (torch repeats it in the `watchdog thread terminated` line). `after`: the next
        line, joined to a record hard-wrapped mid-line (it lacks WATCHDOG_END, the next line has
        it); None where the next line is in the next chunk (the record waits for it)."""
        self.recognised += 1
        if WATCHDOG_END not in text and "Watchdog caught" in text:
            if after is None:
                self.wrapped = text
                return
            if WATCHDOG_END in after and "Watchdog caught" not in after:
                text += after  # hard-wrapped at a column: `NumelIn=112, Numel` + `Out=112, ...`
        m = WATCHDOG.search(text)
        if m is None or len(self.timeouts) >= self.max_kept:
            return
        line = text[m.start():][:MAX_TEXT]
        seq, op, timeout_ms, ran = (f.search(line) for f in WATCHDOG_FIELDS)
        t = WatchdogTimeout(
            rank=ascii_int(m[1]), seq_num=ascii_int(seq[1]) if seq else None,
            op_type=op[1] if op else None,
            timeout_ms=ascii_int(timeout_ms[1]) if timeout_ms else None,
            ran_for_ms=ascii_int(ran[1]) if ran else None, line=line)
        key = line if t.seq_num is None else (t.rank, t.seq_num, t.op_type, t.ran_for_ms)
        self.timeouts.setdefault(key, t)

    def wrapped_tail(self, line: str | None) -> None:
        """The line after a record left `wrapped` (None: the input ended)."""
        text, self.wrapped = self.wrapped, None
        if text is not None:
            self.timeout(text, line or "")

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

    def collnet_channel(self, tail: str) -> None:
        """`SHARP/1/GDRDMA`, `SHARP/0`: the text after `via COLLNET/` of one distinct CollNet
        connection line (its GDR evidence; the NET channel counts and the network stay
        apart: CollNet goes through its own plugin)."""
        name, sep, rest = tail.partition("/")
        if not name or not sep or not "0" <= rest[:1] <= "9":  # a truncated last line
            return
        self.collnet_channels += 1
        if "/GDRDMA" in rest:
            self.collnet_gdr_channels += 1
