"""One judgement per fact: the network and bandwidth checks' decisions as functions of the
parsed facts and the profile. The checks (checks/test_network.py, checks/test_bandwidth.py)
apply them with `settle()`; `preflight inspect` (fi-info, nccl-log, nccl-tests) lists them as
`verdicts`, and `--fail-on problem` fails on the same ones the run would fail on. So a log
pasted into `inspect --profile p5.48xlarge` and the same log seen by the check give one verdict.

A Verdict is pass, fail, warn, unknown (the check's outcome is `error`: the fact is not proven)
or n/a (the profile does not ask for it). Its `message` is the check's own message body (the
check ID and the remedy are added by harness.checking); a measurement, when there is one, is
`what value op threshold`.

The facts are read through their attributes only (NcclLogSummary, FiInfo, the lib found on
disk): this module imports no parser, so the parsers can call it (tests/test_layers.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["Floor", "Verdict", "busbw_floor", "cpu_floor", "efa_not_applicable", "fabric_not_applicable",
           "fi_info_lists_efa", "intra_node_floor", "nccl_log_verdicts", "nccl_tests_verdicts",
           "net_floor", "net_gdr", "net_nic_count", "net_no_warnings", "net_not_socket",
           "net_provider", "ofi_plugin", "settle", "size_text"]

@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check concludes from the facts given (see the module's docstring)."""

    check_id: str
    status: str
    """pass, fail, warn, unknown, n/a."""
    message: str = ""
    remedy: str | None = None
    style: str = ""
    """How a check records it: `expect` (what value op threshold), `none` (offenders, none
    allowed), `measure` (a measurement, then the message), "" (the message alone)."""
    what: str | None = None
    value: Any = None
    op: str | None = None
    threshold: Any = None
    unit: str = ""
    detail: str | None = None
    size_bytes: int | None = None
    offenders: tuple[str, ...] = ()

    @property
    def problem(self) -> bool:
        """A check failing or erroring on it (unknown is never a pass)."""
        return self.status in ("fail", "unknown")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"check": self.check_id, "status": self.status,
                               "message": self.message}
        if self.what is not None:
            out.update(what=self.what, value=self.value, op=self.op, threshold=self.threshold,
                       unit=self.unit)
        return out


def _fmt(value: object, unit: str = "") -> str:
    from harness.checking import fmt  # the checks' own formatting of a value

    return fmt(value, unit)


def _expect(check_id: str, profile: Any, what: str, value: Any, op: str, threshold: Any,
            unit: str = "", *, remedy: str | None = None, detail: str | None = None,
            size_bytes: int | None = None) -> Verdict:
    """`value op threshold`, with harness.checking.expect's failure message."""
    from harness.checking import _OPS  # the checks' own operators and their negations

    compare, negated = _OPS[op]
    ok = bool(compare(value, threshold))
    message = "" if ok else (f"{what} {_fmt(value, unit)} {negated} {_fmt(threshold, unit)} "
                             f"required for {profile.name}" + (f" ({detail})" if detail else ""))
    return Verdict(check_id, "pass" if ok else "fail", message, remedy, "expect", what, value, op,
                   threshold, unit, detail, size_bytes)


def _none(check_id: str, profile: Any, what: str, offenders: list[str], *,
          remedy: str | None = None) -> Verdict:
    """No offenders allowed, with harness.checking.expect_none's failure message."""
    message = (f"{what}: {len(offenders)} found, none allowed for {profile.name}: "
               + "; ".join(offenders)) if offenders else ""
    return Verdict(check_id, "fail" if offenders else "pass", message, remedy, "none", what,
                   len(offenders), "==", 0, offenders=tuple(offenders))


def efa_not_applicable(profile: Any) -> str | None:
    """Why an EFA check does not apply to `profile` (None: it does)."""
    if not profile.has_efa:
        return f"the profile expects no EFA (fabric: {profile.fabric or 'none'})"
    return None


def fabric_not_applicable(profile: Any) -> str | None:
    """Why a check of the inter-node fabric (EFA or IB) does not apply (None: it does)."""
    if profile.fabric is None or not profile.has_gpus:
        return "the profile expects no GPUs with an inter-node fabric"
    return None


def _na(check_id: str, reason: str) -> Verdict:
    return Verdict(check_id, "n/a", reason)


# ---- network (checks/test_network.py) ----

def fi_info_lists_efa(profile: Any, info: Any) -> Verdict:
    """PF-NET-003: `fi_info -p efa` lists at least one efa provider entry."""
    if (why := efa_not_applicable(profile)) is not None:
        return _na("PF-NET-003", why)
    detail = (f"fi_info printed error {info.error_code}"
              + (" (FI_ENODATA: no EFA device usable)" if info.error_code == -61 else "")
              if info.error_code is not None
              else "providers: " + (", ".join(info.providers) or "none"))
    num = sum(1 for e in info.entries if e.provider.split(";")[0] == "efa")
    return _expect("PF-NET-003", profile, "efa provider entries listed by `fi_info -p efa`", num,
                   ">=", 1, detail=detail)


def _version_tuple(text: str) -> tuple[int, ...] | None:
    m = re.match(r"v?(\d+(?:\.\d+)*)", text)
    return tuple(int(x) for x in m[1].split(".")) if m else None


def ofi_plugin(profile: Any, s: Any, lib: Any = None, *, looked: bool = True) -> Verdict:
    """PF-NET-006: NCCL loaded aws-ofi-nccl, initialised it, and its version is the profile's
    minimum or newer. `lib`: the library found on disk (its path and version), `looked`: False
    when nobody looked for one (a log read on its own)."""
    cid = "PF-NET-006"
    if (why := efa_not_applicable(profile)) is not None:
        return _na(cid, why)
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


def net_provider(profile: Any, s: Any) -> Verdict:
    """PF-NET-007: the libfabric provider NCCL used is efa (ib on InfiniBand profiles)."""
    if (why := fabric_not_applicable(profile)) is not None:
        return _na("PF-NET-007", why)
    return _expect("PF-NET-007", profile, "provider NCCL used", s.provider or "none", "==",
                   "efa" if profile.has_efa else "ib", detail=s.describe())


def net_not_socket(profile: Any, s: Any) -> Verdict:
    """PF-NET-008: NCCL selected a network, and not TCP sockets."""
    cid = "PF-NET-008"
    if (why := fabric_not_applicable(profile)) is not None:
        return _na(cid, why)
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


def net_gdr(profile: Any, s: Any) -> Verdict:
    """PF-NET-009: every NET channel uses GPUDirect RDMA where the profile requires it; no NET
    channel line at all leaves it unproven (unknown)."""
    cid = "PF-NET-009"
    if (why := fabric_not_applicable(profile)) is not None:
        return _na(cid, why)
    if not profile.gdr_required:
        return _na(cid, "the profile does not require GPUDirect RDMA")
    if s.gdr_negative:
        line = next((e.line for e in s.errors if "GDR" in e.line), "GDR not available")
        return Verdict(cid, "fail", f"GPUDirect RDMA unavailable, required for {profile.name}: "
                       f"the plugin said {line!r}")
    if s.num_net_channels == 0:
        return Verdict(cid, "unknown", "the collective's NCCL log has no NET channel lines, so "
                       f"GPUDirect RDMA is unproven ({s.describe()}); a single node uses the "
                       "network only with PREFLIGHT_NCCL_FORCE_NET=1 (the default)")
    return _expect(cid, profile, "NET channels without GDRDMA",
                   s.num_net_channels - s.num_gdr_channels, "==", 0,
                   detail=f"{s.num_gdr_channels}/{s.num_net_channels} NET/{s.network} channel "
                   "lines end in /GDRDMA")


def net_nic_count(profile: Any, s: Any) -> Verdict:
    """PF-NET-010: aws-ofi-nccl found every EFA NIC of the instance."""
    cid = "PF-NET-010"
    if (why := efa_not_applicable(profile)) is not None:
        return _na(cid, why)
    if not s.uses_libfabric:
        return Verdict(cid, "fail", f"no EFA NIC carried NCCL traffic ({s.describe()}); "
                       f"{profile.num_efa_devices} EFA NICs required for {profile.name}")
    if s.num_nics is None:
        return Verdict(cid, "fail", f"the NCCL log states no NIC count ({s.describe()}); "
                       f"{profile.num_efa_devices} EFA NICs required for {profile.name}")
    return _expect(cid, profile, "NICs found by aws-ofi-nccl", s.num_nics, ">=",
                   profile.num_efa_devices)


def net_no_warnings(profile: Any, s: Any, run_problem: str | None = None) -> Verdict:
    """PF-NET-011: no NCCL WARN line, known failure or watchdog timeout (and the collective
    itself did not fail: `run_problem`)."""
    cid = "PF-NET-011"
    if (why := fabric_not_applicable(profile)) is not None:
        return _na(cid, why)
    explained = {e.line for e in s.errors}
    offenders = [] if run_problem is None else [f"the collective failed: {run_problem}"]
    offenders += [f"{e.line} ({e.cause})" for e in s.errors]
    offenders += [w for w in s.warnings if w not in explained]
    offenders += [t.line for t in s.timeouts]
    return _none(cid, profile, "NCCL WARN lines and known failures", offenders,
                 remedy=s.errors[0].remedy if s.errors else None)


def nccl_log_verdicts(profile: Any, s: Any) -> list[Verdict]:
    """Every network check's verdict on one NCCL log read on its own (`inspect nccl-log`)."""
    return [ofi_plugin(profile, s, looked=False), net_provider(profile, s),
            net_not_socket(profile, s), net_gdr(profile, s), net_nic_count(profile, s),
            net_no_warnings(profile, s)]


# ---- bandwidth (checks/test_bandwidth.py) ----

def size_text(n: int) -> str:
    """`16 GiB`, `512 MiB`, `4096 B`: a message size in a check's words."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def _estimate(profile: Any, field: str) -> str | None:
    return profile.sources.get(field, "estimate") if profile.is_estimate(field) else None


@dataclass(frozen=True, slots=True)
class Floor:
    """The all_reduce busbw floor a bandwidth gate judges against."""

    check_id: str
    field: str
    """The profile field it comes from (`nvlink_busbw_gb_s_min`, `net_busbw_gb_s_min`, ...)."""
    threshold: float
    size_bytes: int
    estimate: str | None
    """The floor's source when it is an estimate (then a value below it only warns)."""


def intra_node_floor(profile: Any) -> Floor | str:
    """PF-BW-001's floor (NVLink, or PCIe on PCIe-only GPUs), or why it does not apply."""
    floor = profile.intra_node_floor
    if floor is None:
        return str(profile.intra_node_na_reason)
    field, threshold = floor
    return Floor("PF-BW-001", field, threshold, profile.intra_gate_size_bytes,
                 _estimate(profile, field))


def net_floor(profile: Any, num_nodes: int | None, source: str = "") -> Floor | str:
    """PF-BW-002's floor across nodes, or why it does not apply (`source`: where the node count
    came from)."""
    if profile.net_busbw_gb_s_min is None:
        return f"profile {profile.name} has no multi-node bandwidth floor"
    if num_nodes is not None and num_nodes < 2:
        return f"single-node job (1 node, from {source}): no network gate"
    return Floor("PF-BW-002", "net_busbw_gb_s_min", profile.net_busbw_gb_s_min,
                 profile.bw_gate_size_bytes, _estimate(profile, "net_busbw_gb_s_min"))


def cpu_floor(profile: Any, size_bytes: int) -> Floor | str:
    """PF-BW-006's gloo floor on CPU-only profiles (at `size_bytes`), or why it does not apply.
    (It has never been an estimate: a value below it fails.)"""
    if profile.has_gpus or profile.cpu_busbw_gb_s_min is None:
        return f"profile {profile.name} has GPUs or no CPU bandwidth floor"
    return Floor("PF-BW-006", "cpu_busbw_gb_s_min", profile.cpu_busbw_gb_s_min, size_bytes, None)


def busbw_floor(floor: Floor, profile: Any, busbw: float | None, *, remedy: str = "",
                detail: str = "", missing: str = "") -> Verdict:
    """all_reduce busbw at the floor's message size against it. No row at that size is unknown
    (`missing` says why). A floor that is an estimate (no measured basis) makes a value below
    it a warning that says so, never a failure."""
    what = f"all_reduce busbw at {size_text(floor.size_bytes)}"
    cid, threshold, size = floor.check_id, floor.threshold, floor.size_bytes
    if busbw is None:
        return Verdict(cid, "unknown", missing or f"no row at {size_text(size)}")
    if floor.estimate is not None:
        ok = busbw >= threshold
        return Verdict(
            cid, "pass" if ok else "warn",
            "" if ok else f"{what} {busbw:g} GB/s is below the estimated floor {threshold:g} "
            f"GB/s ({detail}); the floor is an estimate, not a failure until measured (source: "
            f"{floor.estimate})",
            None if ok else "record this node's figure with scripts/device-check and set the "
            f"floor in a profile file; {remedy}",
            "measure", what, busbw, ">=", threshold, "GB/s", size_bytes=size)
    return _expect(cid, profile, what, busbw, ">=", threshold, "GB/s", remedy=remedy,
                   detail=detail, size_bytes=size)


def nccl_tests_verdicts(profile: Any, result: Any) -> list[Verdict]:
    """The bandwidth gates' verdicts on one nccl-tests output read on its own (`inspect
    nccl-tests`): the single-node floor when its rank lines name one host, the network floor
    when they name several; unknown when they name none (which floor applies is not known)."""
    intra, net = intra_node_floor(profile), net_floor(profile, result.num_nodes, "its rank lines")
    floors = [f for f in (intra, net) if isinstance(f, Floor)]
    if not floors:
        return [_na("PF-BW-001", str(intra)), _na("PF-BW-002", str(net))]
    if result.collective not in (None, "all_reduce"):
        why = f"the floors are all_reduce's; this is {result.collective}"
        return [_na("PF-BW-001", why), _na("PF-BW-002", why)]
    nodes = result.num_nodes
    if nodes is None:
        return [Verdict(f.check_id, "unknown", "the output names no host (no `#  Rank N ... on "
                        "HOST` lines): single- or multi-node, which floor applies is unknown")
                for f in floors]
    chosen, other = (intra, "PF-BW-002") if nodes == 1 else (net, "PF-BW-001")
    if not isinstance(chosen, Floor):
        return [_na("PF-BW-001" if nodes == 1 else "PF-BW-002", chosen),
                _na(other, f"a {nodes}-node run")]
    row = result.at_size(chosen.size_bytes)
    where = f"{result.nranks or '?'} ranks on {nodes} node{'s' if nodes > 1 else ''}"
    verdict = busbw_floor(chosen, profile, None if row is None else row.busbw_gb_s, detail=where,
                          missing=f"no row at {size_text(chosen.size_bytes)}")
    return [verdict, _na(other, f"a {nodes}-node run")]


def settle(v: Verdict) -> None:
    """Apply a verdict inside a running check: record its measurement, then pass, warn, fail,
    error (unknown) or skip (n/a) with its message."""
    from harness.checking import (
        ProbeError,
        expect,
        expect_none,
        fail,
        measure,
        not_applicable,
        warn,
    )

    if v.status == "n/a":
        not_applicable(v.message)
    if v.status == "unknown":
        raise ProbeError(v.message)
    if v.style == "expect":
        expect(v.what or "", v.value, v.op or "==", v.threshold, v.unit, remedy=v.remedy,
               detail=v.detail, size_bytes=v.size_bytes)
    elif v.style == "none":
        expect_none(v.what or "", v.offenders, remedy=v.remedy)
    elif v.style == "measure":
        measure(v.what or "", v.value, v.unit, op=v.op, threshold=v.threshold,
                ok=v.status == "pass", size_bytes=v.size_bytes)
    if v.status == "fail":
        fail(v.message, remedy=v.remedy)
    if v.status == "warn":
        warn(v.message, remedy=v.remedy)
