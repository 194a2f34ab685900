"""One judgement per fact: the network and bandwidth checks' decisions as functions of the
parsed facts and the profile. The checks (checks/test_network.py, checks/test_bandwidth.py)
apply them with `settle()`; `preflight inspect` (fi-info, nccl-log, nccl-tests) lists them as
`verdicts`, and `--fail-on problem` fails on the same ones the run would fail on. So a log
pasted into `inspect --profile p5.48xlarge` and the same log seen by the check give one verdict.

Verdicts are harness.judges.judgement; the bandwidth judges are harness.judges.bandwidth.

The facts are read through their attributes only (NcclLogSummary, FiInfo, the lib found on
disk): this module imports no parser, so the parsers can call it (tests/test_layers.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from harness.judges.judgement import Verdict, efa_not_applicable, expect, fabric_not_applicable, na, none

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["GDR_MODULES", "efa_kernel_modules", "fi_info_lists_efa", "nccl_log_verdicts", "net_gdr",
           "net_nic_count", "net_no_warnings", "net_not_socket", "net_provider", "ofi_plugin"]


class _Failure(Protocol):
    @property
    def line(self) -> str: ...
    @property
    def remedy(self) -> str: ...
    @property
    def cause(self) -> str: ...


class _Timeout(Protocol):
    @property
    def line(self) -> str: ...


class OfiLib(Protocol):
    """The aws-ofi-nccl library found on disk (harness.probes.network.OfiNcclLib)."""

    @property
    def path(self) -> str: ...
    @property
    def version(self) -> str | None: ...


class NetSummary(Protocol):
    """What the network judges read of an NCCL log (harness.parsers.nccl_log_facts.NcclLogSummary)."""

    @property
    def plugin(self) -> str | None: ...
    @property
    def plugin_version(self) -> str | None: ...
    @property
    def plugin_failed(self) -> bool: ...
    @property
    def network(self) -> str | None: ...
    @property
    def provider(self) -> str | None: ...
    @property
    def num_nics(self) -> int | None: ...
    @property
    def gdr_negative(self) -> bool: ...
    @property
    def num_net_channels(self) -> int: ...
    @property
    def num_gdr_channels(self) -> int: ...
    @property
    def gdr_gpus(self) -> Sequence[str]: ...
    @property
    def gdr_gpus_enabled(self) -> Sequence[str]: ...
    @property
    def warnings(self) -> Sequence[str]: ...
    @property
    def errors(self) -> Sequence[_Failure]: ...
    @property
    def timeouts(self) -> Sequence[_Timeout]: ...
    @property
    def uses_socket(self) -> bool: ...
    @property
    def uses_libfabric(self) -> bool: ...
    def describe(self) -> str: ...


class _Entry(Protocol):
    @property
    def provider(self) -> str: ...


class FiInfoFacts(Protocol):
    """What PF-NET-003 reads of `fi_info -p efa` (harness.parsers.fi_info.FiInfo)."""

    @property
    def error_code(self) -> int | None: ...
    @property
    def providers(self) -> Sequence[str]: ...
    @property
    def entries(self) -> Sequence[_Entry]: ...
    @property
    def efa_devices(self) -> Sequence[str]: ...
    @property
    def omitted(self) -> int: ...

# ---- network (checks/test_network.py) ----

#: Peer-memory modules that give the NIC GPU memory: NVIDIA's, the EFA installer's own for EFAv3
#: (efa-nv-peermem package; openucx/ucx #10704), and Mellanox's older one.
GDR_MODULES = frozenset({"nvidia_peermem", "efa_nv_peermem", "nv_peer_mem"})


def efa_kernel_modules(profile: Profile, modules: frozenset[str]) -> list[Verdict]:
    """PF-NET-004: the efa kernel module is loaded (a failure without it); on a profile that
    requires GPUDirect RDMA, no peer-memory module is a warning (DMA-BUF may serve instead:
    PF-NET-009 shows whether GDR works)."""
    if (why := efa_not_applicable(profile)) is not None:
        return [na("PF-NET-004", why)]
    out = [none("PF-NET-004", profile, "kernel modules missing",
                [m for m in ("efa",) if m not in modules],
                remedy="install the EFA driver on the host (efa_installer.sh) and reboot or "
                "`modprobe efa`")]
    if profile.gdr_required and not GDR_MODULES & modules:
        out.append(Verdict("PF-NET-004", "warn", "kernel module nvidia_peermem is not loaded: "
                           "GPUDirect RDMA then relies on DMA-BUF (driver >= 515 with the open "
                           "kernel modules); PF-NET-009 shows whether GDR works",
                           remedy="`modprobe nvidia_peermem` if PF-NET-009 fails"))
    return out


def fi_info_lists_efa(profile: Profile, info: FiInfoFacts) -> Verdict:
    """PF-NET-003: `fi_info -p efa` lists the efa provider on as many EFA devices (distinct
    domains) as the profile's `num_efa_devices`. Entries without a domain leave the count
    unread (unknown), as does a listing cut short of the count (entries not kept)."""
    cid = "PF-NET-003"
    if (why := efa_not_applicable(profile)) is not None:
        return na(cid, why)
    what = "EFA devices listed by `fi_info -p efa`"
    if info.error_code is not None:
        return expect(cid, profile, what, 0, ">=", profile.num_efa_devices,
                      detail=f"fi_info printed error {info.error_code}"
                      + (" (FI_ENODATA: no EFA device usable)" if info.error_code == -61 else ""))
    entries = sum(1 for e in info.entries if e.provider.split(";")[0] == "efa")
    devices = info.efa_devices
    if entries and not devices:
        return Verdict(cid, "unknown", f"fi_info listed {entries} efa provider entries but no "
                       f"domain names: the EFA device count is unread; "
                       f"{profile.num_efa_devices} required for {profile.name}")
    if len(devices) < profile.num_efa_devices and info.omitted:
        return Verdict(cid, "unknown", f"fi_info listed {len(devices)} EFA devices in the "
                       f"entries kept, {info.omitted} more entries were not kept: the count is "
                       f"unread; {profile.num_efa_devices} required for {profile.name}")
    detail = (", ".join(devices[:4]) + (f" and {len(devices) - 4} more" if len(devices) > 4
                                         else "")) if devices else \
        "providers: " + (", ".join(info.providers) or "none")
    return expect(cid, profile, what, len(devices), ">=", profile.num_efa_devices, detail=detail)


def _version_tuple(text: str) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in m[1].split(".")) if m else None


def ofi_plugin(profile: Profile, s: NetSummary, lib: OfiLib | None = None, *,
               looked: bool = True) -> Verdict:
    """PF-NET-006: NCCL loaded aws-ofi-nccl, initialised it, and its version is the profile's
    minimum or newer. `lib`: the library found on disk (its path and version), `looked`: False
    when nobody looked for one (a log read on its own)."""
    cid = "PF-NET-006"
    if (why := efa_not_applicable(profile)) is not None:
        return na(cid, why)
    if s.plugin != "aws-ofi-nccl":
        found = ("" if not looked else f"; library found at {lib.path}" if lib
                 else "; no library found")
        return Verdict(cid, "fail", f"NCCL did not load aws-ofi-nccl ({s.describe()}{found}), "
                       f"required for {profile.name}")
    if s.plugin_failed:
        return Verdict(cid, "fail", f"aws-ofi-nccl loaded but failed to initialise "
                       f"({s.describe()}), required to work for {profile.name}",
                       remedy=s.errors[0].remedy if s.errors else None)
    version = s.plugin_version or (lib.version if lib else None)
    if profile.min_ofi_nccl_version is None:
        return Verdict(cid, "pass")
    have = _version_tuple(version) if version else None
    if have is None:
        return Verdict(cid, "warn", f"aws-ofi-nccl version unknown (the log and the library do "
                       f"not say); >= {profile.min_ofi_nccl_version} expected for {profile.name}")
    ok = have >= _version_tuple(profile.min_ofi_nccl_version)  # type: ignore[operator]
    return Verdict(cid, "pass" if ok else "fail",
                   "" if ok else f"aws-ofi-nccl version {version} < "
                   f"{profile.min_ofi_nccl_version} required for {profile.name}",
                   None if ok else "upgrade aws-ofi-nccl (a current EFA installer)", "measure",
                   "aws-ofi-nccl version", version, ">=", profile.min_ofi_nccl_version)


def net_provider(profile: Profile, s: NetSummary) -> Verdict:
    """PF-NET-007: the libfabric provider NCCL used is efa (ib on InfiniBand profiles)."""
    if (why := fabric_not_applicable(profile)) is not None:
        return na("PF-NET-007", why)
    return expect("PF-NET-007", profile, "provider NCCL used", s.provider or "none", "==",
                   "efa" if profile.has_efa else "ib", detail=s.describe())


def net_not_socket(profile: Profile, s: NetSummary) -> Verdict:
    """PF-NET-008: NCCL selected a network, and not TCP sockets."""
    cid = "PF-NET-008"
    if (why := fabric_not_applicable(profile)) is not None:
        return na(cid, why)
    ok = s.network is not None and not s.uses_socket
    message, remedy = "", None
    if s.network is None:
        message = (f"NCCL selected no network ({s.describe()}); {profile.fabric} required for "
                   f"{profile.name}")
    elif s.uses_socket:
        message = (f"network NCCL used is {s.describe()}; {profile.fabric} required for "
                   f"{profile.name}")
        remedy = s.errors[0].remedy if s.errors else None
    return Verdict(cid, "pass" if ok else "fail", message, remedy, "measure", "network NCCL used",
                   s.network or "none", "!=", "Socket")


def net_gdr(profile: Profile, s: NetSummary) -> Verdict:
    """PF-NET-009: every NET channel uses GPUDirect RDMA where the profile requires it. Without
    a NET channel (one node: its GPUs talk over NVLink) NCCL's init-time verdict per GPU and
    NIC decides: every GPU must have GDR enabled to at least one NIC; neither leaves it
    unproven (unknown)."""
    cid = "PF-NET-009"
    if (why := fabric_not_applicable(profile)) is not None:
        return na(cid, why)
    if not profile.gdr_required:
        return na(cid, "the profile does not require GPUDirect RDMA")
    if s.gdr_negative:
        line = next((e.line for e in s.errors if "GDR" in e.line), "GDR not available")
        return Verdict(cid, "fail", f"GPUDirect RDMA unavailable, required for {profile.name}: "
                       f"the plugin said {line!r}")
    if s.num_net_channels == 0 and s.gdr_gpus:
        without = [g for g in s.gdr_gpus if g not in s.gdr_gpus_enabled]
        return expect(cid, profile, "GPUs without GPUDirect RDMA to any NIC", len(without), "==",
                      0, detail=(f"NCCL's init lines enable GDR for {len(s.gdr_gpus_enabled)}/"
                                 f"{len(s.gdr_gpus)} GPUs (no NET channel: one node)"
                                 + (f"; none for GPU {', '.join(without[:8])}" if without
                                    else "")))
    if s.num_net_channels == 0:
        return Verdict(cid, "unknown", "the NCCL log has no NET channel line and no `GPU Direct "
                       f"RDMA Enabled for GPU` line, so GPUDirect RDMA is unproven "
                       f"({s.describe()})")
    return expect(cid, profile, "NET channels without GDRDMA",
                   s.num_net_channels - s.num_gdr_channels, "==", 0,
                   detail=f"{s.num_gdr_channels}/{s.num_net_channels} NET/{s.network} channel "
                   "lines end in /GDRDMA")


def net_nic_count(profile: Profile, s: NetSummary) -> Verdict:
    """PF-NET-010: aws-ofi-nccl found every EFA NIC of the instance."""
    cid = "PF-NET-010"
    if (why := efa_not_applicable(profile)) is not None:
        return na(cid, why)
    if not s.uses_libfabric:
        return Verdict(cid, "fail", f"no EFA NIC carried NCCL traffic ({s.describe()}); "
                       f"{profile.num_efa_devices} EFA NICs required for {profile.name}")
    if s.num_nics is None:
        return Verdict(cid, "fail", f"the NCCL log states no NIC count ({s.describe()}); "
                       f"{profile.num_efa_devices} EFA NICs required for {profile.name}")
    return expect(cid, profile, "NICs found by aws-ofi-nccl", s.num_nics, ">=",
                   profile.num_efa_devices)


def net_no_warnings(profile: Profile, s: NetSummary, run_problem: str | None = None) -> Verdict:
    """PF-NET-011: no NCCL WARN line, known failure or watchdog timeout (and the collective
    itself did not fail: `run_problem`)."""
    cid = "PF-NET-011"
    if (why := fabric_not_applicable(profile)) is not None:
        return na(cid, why)
    explained = {e.line for e in s.errors}
    offenders = [] if run_problem is None else [f"the collective failed: {run_problem}"]
    offenders += [f"{e.line} ({e.cause})" for e in s.errors]
    offenders += [w for w in s.warnings if w not in explained]
    offenders += [t.line for t in s.timeouts]
    return none(cid, profile, "NCCL WARN lines and known failures", offenders,
                 remedy=s.errors[0].remedy if s.errors else None)


def nccl_log_verdicts(profile: Profile | None, s: NetSummary) -> list[Verdict]:
    """Every network check's verdict on one NCCL log read on its own (`inspect nccl-log`);
    none without a profile (a library call: nothing to judge against)."""
    if profile is None:
        return []
    return [ofi_plugin(profile, s, looked=False), net_provider(profile, s),
            net_not_socket(profile, s), net_gdr(profile, s), net_nic_count(profile, s),
            net_no_warnings(profile, s)]
