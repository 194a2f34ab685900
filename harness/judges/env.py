"""Environment-variable rules as data: per fabric/profile and per aws-ofi-nccl / libfabric
version range, each with its reason and source (domain-facts.md, "Environment variables")."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.profiles.model import Profile

__all__ = [
    "FORMATS",
    "RULES",
    "EnvRule",
    "Finding",
    "Versions",
    "evaluate",
    "format_problems",
    "ifname_problem",
    "parse_version",
]

Kind = Literal["required", "recommended", "outdated", "harmful"]

_SRC_PLUGIN_DOC = "aws/aws-ofi-nccl doc/efa-env-var.md"
_SRC_DOMAIN = "domain-facts.md, Environment variables"


@dataclass(frozen=True, slots=True)
class Versions:
    """Library versions the rules depend on; None when not found on this node."""

    ofi_nccl: str | None = None
    libfabric: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class EnvRule:
    """One rule about one variable. `match` (a case-insensitive full-match regex) says which
    values trigger a harmful/outdated rule, or which values satisfy a required/recommended one."""

    name: str
    kind: Kind
    match: str
    reason: str
    remedy: str
    source: str
    fabric: tuple[str, ...] | None = None
    """Applies only on profiles with one of these fabrics (None: any profile)."""
    needs_gpus: bool = False
    needs_gdr: bool = False
    ofi_nccl: str | None = None
    """aws-ofi-nccl version range (PEP 440 specifiers, e.g. `<1.7.0`) the rule holds for."""
    libfabric: str | None = None
    if_version_unknown: bool = False
    """Whether a version-ranged rule applies when the version could not be found."""

    def applies(self, profile: Profile, versions: Versions) -> bool:
        if self.fabric is not None and profile.fabric not in self.fabric:
            return False
        if self.needs_gpus and not profile.has_gpus:
            return False
        if self.needs_gdr and not profile.gdr_required:
            return False
        for spec, found in ((self.ofi_nccl, versions.ofi_nccl), (self.libfabric, versions.libfabric)):
            if spec is None:
                continue
            version = parse_version(found)
            if version is None:
                if not self.if_version_unknown:
                    return False
            elif version not in SpecifierSet(spec):
                return False
        return True

    def matches(self, value: str) -> bool:
        return re.fullmatch(self.match, value.strip(), flags=re.IGNORECASE) is not None


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that fired: the variable, its (redaction-safe) value and what to say about it."""

    rule: EnvRule
    value: str | None

    def describe(self) -> str:
        shown = f"{self.rule.name} unset" if self.value is None else f"{self.rule.name}={self.value}"
        if self.value is not None and self.rule.kind in ("required", "recommended"):
            shown += " (not a value that does it)"
        return f"{shown}: {self.rule.reason} ({self.rule.source})"


_TRUE = r"1|true|yes|on"

RULES: tuple[EnvRule, ...] = (
    # --- harmful: fail ---
    EnvRule(
        name="NCCL_NET", kind="harmful", fabric=("efa",),
        match=r"(?!(aws )?libfabric$).*",
        # NCCL compares NCCL_NET with each network's name (strcasecmp in NVIDIA/nccl ncclNetInit):
        # `ofi` is the plugin's file suffix, not a network, and fails init with "not found".
        reason="NCCL is told to use a network other than aws-ofi-nccl's (Libfabric): EFA goes "
        "unused, or init fails with 'network not found'",
        remedy="unset NCCL_NET (NCCL picks the Libfabric plugin itself)", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="NCCL_NET", kind="harmful", fabric=("efa",), ofi_nccl="<1.13.0", match=r"libfabric",
        reason="aws-ofi-nccl < 1.13.0 names its network `AWS Libfabric`: NCCL_NET=Libfabric "
        "finds no network and NCCL init fails",
        remedy="unset NCCL_NET (or set NCCL_NET='AWS Libfabric' for this plugin)",
        source=_SRC_DOMAIN + " (network name by version)",
    ),
    EnvRule(
        name="NCCL_NET", kind="harmful", fabric=("ib",), match=r"socket",
        reason="forces NCCL's TCP sockets: InfiniBand goes unused",
        remedy="unset NCCL_NET", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="NCCL_IB_DISABLE", kind="harmful", fabric=("ib",), match=_TRUE,
        reason="disables NCCL's InfiniBand transport: NCCL falls back to TCP sockets",
        remedy="unset NCCL_IB_DISABLE", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="NCCL_NET_GDR_LEVEL", kind="harmful", needs_gdr=True, match=r"loc|0",
        reason="disables GPUDirect RDMA, which this instance type requires",
        remedy="unset NCCL_NET_GDR_LEVEL", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="FI_PROVIDER", kind="harmful", fabric=("efa",), match=r"(?!efa$).*",
        reason="selects a libfabric provider other than efa: NCCL traffic leaves EFA",
        remedy="unset FI_PROVIDER or set FI_PROVIDER=efa", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="FI_EFA_USE_DEVICE_RDMA", kind="harmful", fabric=("efa",), needs_gdr=True,
        match=r"0|false|no|off",
        reason="turns off the EFA device's RDMA, which GPUDirect RDMA on this instance needs",
        remedy="unset FI_EFA_USE_DEVICE_RDMA", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="RDMAV_FORK_SAFE", kind="harmful", fabric=("efa",), match=_TRUE,
        reason="the plugin documentation says not to use it (fork-safety costs registration "
        "performance; libfabric handles fork itself)",
        remedy="unset RDMAV_FORK_SAFE", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_P2P_DISABLE", kind="harmful", needs_gpus=True, match=_TRUE,
        reason="disables NVLink/PCIe peer-to-peer between the node's GPUs",
        remedy="unset NCCL_P2P_DISABLE", source="NVIDIA NCCL environment variables",
    ),
    EnvRule(
        name="TORCH_NCCL_ASYNC_ERROR_HANDLING", kind="harmful", needs_gpus=True, match=r"0",
        reason="a failed rank then hangs the job instead of raising, so bad nodes are never "
        "replaced",
        remedy="unset TORCH_NCCL_ASYNC_ERROR_HANDLING", source="seed-facts.md (the code must error)",
    ),
    EnvRule(
        name="NCCL_ASYNC_ERROR_HANDLING", kind="harmful", needs_gpus=True, match=r"0",
        reason="(older torch name) a failed rank hangs the job instead of raising",
        remedy="unset NCCL_ASYNC_ERROR_HANDLING", source="seed-facts.md (the code must error)",
    ),
    # --- required: fail when missing or different ---
    EnvRule(
        name="NCCL_PROTO", kind="required", fabric=("efa",), ofi_nccl="<=1.5.0", match=r"simple",
        reason="aws-ofi-nccl <= 1.5.0 does not support NCCL's LL/LL128 protocols over EFA "
        "(data corruption)",
        remedy="set NCCL_PROTO=simple, or better upgrade aws-ofi-nccl", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="FI_EFA_USE_DEVICE_RDMA", kind="required", fabric=("efa",), needs_gdr=True,
        ofi_nccl="<1.7.0", match=_TRUE,
        reason="aws-ofi-nccl < 1.7.0 needs it to use the device's RDMA (GPUDirect)",
        remedy="set FI_EFA_USE_DEVICE_RDMA=1, or better upgrade aws-ofi-nccl",
        source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="FI_EFA_USE_DEVICE_RDMA", kind="required", fabric=("efa",), needs_gdr=True,
        libfabric="<1.18.0", match=_TRUE,
        reason="libfabric < 1.18.0 needs it to use the device's RDMA (GPUDirect)",
        remedy="set FI_EFA_USE_DEVICE_RDMA=1, or better upgrade the EFA installer",
        source=_SRC_PLUGIN_DOC,
    ),
    # --- recommended: warn when missing ---
    EnvRule(
        name="NCCL_DEBUG", kind="recommended", needs_gpus=True, match=r"warn|info|version|trace",
        reason="without it a failing collective prints only a timeout, not NCCL's reason",
        remedy="set NCCL_DEBUG=WARN in the job (INFO while debugging)",
        source="NVIDIA NCCL troubleshooting",
    ),
    # --- outdated: warn when present ---
    EnvRule(
        name="NCCL_PROTO", kind="outdated", fabric=("efa",), ofi_nccl=">1.5.0",
        if_version_unknown=True, match=r".+",
        reason="needed only for aws-ofi-nccl <= 1.5.0; the plugin forces Simple itself when "
        "needed, P5 with RDMA must keep LL/LL128, and since 1.17.0 any NCCL_PROTO makes the "
        "AWS tuner fall back to NCCL's (slower)",
        remedy="unset NCCL_PROTO (SageMaker's toolkit sets it for torch_distributed)",
        source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_ALGO", kind="outdated", fabric=("efa",), ofi_nccl=">=1.17.0",
        if_version_unknown=True, match=r".+",
        reason="since aws-ofi-nccl 1.17.0 an explicit NCCL_ALGO makes the AWS tuner fall back "
        "to NCCL's tuner (slower); NCCL >= 2.12 selects algorithms for EFA itself",
        remedy="unset NCCL_ALGO", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="FI_EFA_USE_DEVICE_RDMA", kind="outdated", fabric=("efa",), ofi_nccl=">=1.7.0",
        libfabric=">=1.18.0", if_version_unknown=True, match=_TRUE,
        reason="do not set for libfabric >= 1.18.0 and aws-ofi-nccl >= 1.7.0 (the default is "
        "right)",
        remedy="unset FI_EFA_USE_DEVICE_RDMA", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_LAUNCH_MODE", kind="outdated", match=r"parallel",
        reason="PARALLEL is already NCCL's default", remedy="unset NCCL_LAUNCH_MODE",
        source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="NCCL_NET_SHARED_COMMS", kind="outdated", fabric=("efa",), match=r"0",
        reason="2023-era advice; the default (1) is right for current aws-ofi-nccl",
        remedy="unset NCCL_NET_SHARED_COMMS", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="NCCL_DEBUG", kind="outdated", match=r"trace",
        reason="TRACE logging is far too verbose for production jobs",
        remedy="use NCCL_DEBUG=WARN (INFO while debugging)", source=_SRC_DOMAIN,
    ),
    EnvRule(
        name="FI_EFA_FORK_SAFE", kind="outdated", fabric=("efa",), match=_TRUE,
        reason="not needed anymore: aws-ofi-nccl (since at least 1.2) sets it itself where "
        "libfabric needs it",
        remedy="unset FI_EFA_FORK_SAFE", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="FI_EFA_ENABLE_SHM_TRANSFER", kind="outdated", fabric=("efa",), match=_TRUE,
        reason="not needed: libfabric disables SHM transfer itself because aws-ofi-nccl sets "
        "FI_OPT_CUDA_API_PERMITTED to false",
        remedy="unset FI_EFA_ENABLE_SHM_TRANSFER", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_SOCKET_NTHREADS", kind="outdated", fabric=("efa",), match=r".+",
        reason="tunes NCCL's TCP socket transport only: not applicable for EFA",
        remedy="unset NCCL_SOCKET_NTHREADS", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_NSOCKS_PERTHREAD", kind="outdated", fabric=("efa",), match=r".+",
        reason="tunes NCCL's TCP socket transport only: not applicable for EFA",
        remedy="unset NCCL_NSOCKS_PERTHREAD", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_MIN_NCHANNELS", kind="outdated", fabric=("efa",), match=r".+",
        reason="more channels than the platform needs split messages smaller and starve EFA; "
        "the default is right (8 on the 4-NIC p4d/p4de)",
        remedy="unset NCCL_MIN_NCHANNELS", source=_SRC_PLUGIN_DOC,
    ),
    EnvRule(
        name="NCCL_ASYNC_ERROR_HANDLING", kind="outdated", needs_gpus=True, match=r"[1-9]\d*",
        reason="deprecated name: torch >= 2.2 warns and reads TORCH_NCCL_ASYNC_ERROR_HANDLING",
        remedy="rename it to TORCH_NCCL_ASYNC_ERROR_HANDLING",
        source="torch warning 'NCCL_ASYNC_ERROR_HANDLING is deprecated'",
    ),
    EnvRule(
        name="NCCL_BLOCKING_WAIT", kind="outdated", needs_gpus=True, match=r".+",
        reason="deprecated name: torch >= 2.2 reads TORCH_NCCL_BLOCKING_WAIT",
        remedy="rename it to TORCH_NCCL_BLOCKING_WAIT",
        source="torch ProcessGroupNCCL (TORCH_NCCL_BLOCKING_WAIT, old name NCCL_BLOCKING_WAIT)",
    ),
    EnvRule(
        name="NCCL_SHM_DISABLE", kind="outdated", needs_gpus=True, match=_TRUE,
        reason="disables shared-memory transport between processes on the node (slower)",
        remedy="unset NCCL_SHM_DISABLE", source="NVIDIA NCCL environment variables",
    ),
)


def parse_version(text: str | None) -> Version | None:
    """`1.16.3`, `v1.13.2-aws`, `1.22.0amzn1.0` -> Version; None when there is none."""
    if not text:
        return None
    m = re.search(r"(\d+(?:\.\d+)+)", text)
    if not m:
        return None
    try:
        return Version(m.group(1))
    except InvalidVersion:
        return None


def evaluate(
    env: Mapping[str, str], profile: Profile, versions: Versions, kinds: Iterable[Kind]
) -> list[Finding]:
    """The findings of every applicable rule of the given kinds."""
    wanted = set(kinds)
    findings = []
    for rule in RULES:
        if rule.kind not in wanted or not rule.applies(profile, versions):
            continue
        value = env.get(rule.name)
        if rule.kind in ("harmful", "outdated"):
            fired = value is not None and rule.matches(value)
        else:
            fired = value is None or not rule.matches(value)
        if fired:
            findings.append(Finding(rule, value))
    return findings


# --- Values that must parse ---------------------------------------------------------------

_SUBSYS = {"INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
           "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL"}
_INT = r"\d+"
_BOOL01 = r"0|1"

#: Variable -> (full-match regex, description of what is allowed).
FORMATS: dict[str, tuple[str, str]] = {
    "NCCL_DEBUG": (r"(?i)version|warn|info|abort|trace", "VERSION, WARN, INFO, ABORT or TRACE"),
    "NCCL_DEBUG_SUBSYS": (
        r"(?i)\^?(" + "|".join(sorted(_SUBSYS)) + r")(,\^?(" + "|".join(sorted(_SUBSYS)) + r"))*",
        "a comma list of " + ", ".join(sorted(_SUBSYS)),
    ),
    "NCCL_PROTO": (r"(?i)\^?(ll|ll128|simple)(,(ll|ll128|simple))*", "a comma list of LL, LL128, Simple"),
    "NCCL_NET_GDR_LEVEL": (r"(?i)loc|pix|pxb|phb|sys|\d+", "LOC, PIX, PXB, PHB, SYS or a number"),
    "NCCL_BUFFSIZE": (_INT, "a positive integer (bytes)"),
    "NCCL_P2P_NET_CHUNKSIZE": (_INT, "a positive integer (bytes)"),
    "NCCL_NSOCKS_PERTHREAD": (_INT, "an integer"),
    "NCCL_SOCKET_NTHREADS": (_INT, "an integer"),
    "NCCL_MIN_NCHANNELS": (_INT, "an integer"),
    "NCCL_MAX_NCHANNELS": (_INT, "an integer"),
    "NCCL_IB_TIMEOUT": (_INT, "an integer"),
    "NCCL_IB_RETRY_CNT": (_INT, "an integer"),
    "NCCL_IB_DISABLE": (_BOOL01, "0 or 1"),
    "NCCL_P2P_DISABLE": (_BOOL01, "0 or 1"),
    "NCCL_SHM_DISABLE": (_BOOL01, "0 or 1"),
    "NCCL_NVLS_ENABLE": (_BOOL01, "0 or 1"),
    "NCCL_CUMEM_ENABLE": (_BOOL01, "0 or 1"),
    "FI_EFA_USE_DEVICE_RDMA": (r"(?i)0|1|true|false|yes|no|on|off", "0 or 1"),
    "FI_EFA_FORK_SAFE": (r"(?i)0|1|true|false|yes|no|on|off", "0 or 1"),
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": (r"[0-3]", "0, 1, 2 or 3"),
    "NCCL_SOCKET_IFNAME": (r"\^?=?[\w.:@-]+(,\^?=?[\w.:@-]+)*", "a comma list of interface names"),
}


def format_problems(env: Mapping[str, str]) -> list[str]:
    """`NAME='value' is not <allowed>` for every set variable whose value does not parse."""
    problems = []
    for name, (pattern, allowed) in FORMATS.items():
        value = env.get(name)
        if value is not None and re.fullmatch(pattern, value.strip()) is None:
            problems.append(f"{name}={value!r} is not {allowed}")
    return problems


def ifname_problem(spec: str, interfaces: Iterable[str]) -> str | None:
    """None when NCCL_SOCKET_IFNAME selects at least one existing interface, else why not.

    NCCL's syntax: comma list of prefixes; `=` means an exact name; a leading `^` excludes.
    """
    names = sorted(set(interfaces))
    spec = spec.strip()
    exclude = spec.startswith("^")
    parts = [p for p in spec.lstrip("^").split(",") if p]
    exact = [p[1:] for p in parts if p.startswith("=")]
    prefixes = [p for p in parts if not p.startswith("=")]

    def selected(name: str) -> bool:
        return name in exact or any(name.startswith(p) for p in prefixes)

    chosen = [n for n in names if (not selected(n)) == exclude]
    if exclude:
        chosen = [n for n in chosen if n != "lo" and not n.startswith("docker")]
    if chosen:
        return None
    return (f"NCCL_SOCKET_IFNAME={spec} selects no interface on this node "
            f"(interfaces: {', '.join(names) or 'none'})")
