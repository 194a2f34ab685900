"""What this node is, read now: the identity a certificate is bound to (harness.memory.certificate)
and the hardware the bad-hardware ledger names (harness.memory.ledger). Read by the run's own process
in well under a second on a healthy node (DMI, /proc, sysfs, NVML or nvidia-smi, the kernel
log); what cannot be read is said (`unread`), never guessed: an identity with an unread part
certifies nothing and matches nothing."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__
from harness.base import proc
from harness.base.fabric import FABRIC_ENV_PREFIXES
from harness.base.gpu_record import GpuInventory
from harness.base.jsontypes import JSONObject, JSONValue
from harness.base.redact import Redactor
from harness.base.settings import get_str
from harness.detect.instance import has_gpu
from harness.profiles.model import Profile

__all__ = ["NodeIdentity", "gather", "gpu_keys", "profile_sha256", "read_gpus", "read_nics"]

#: An EC2 instance id, as Nitro's DMI board_asset_tag holds it.
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")
#: The NCCL wheels torch installs (its bundled NCCL's version is theirs).
_NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")


@dataclass(slots=True)
class NodeIdentity:
    """`fields` must be equal for a certificate to apply; `events` (ECC, row remapping,
    retired pages, XID lines since boot) must not have grown since it was issued."""

    fields: JSONObject = field(default_factory=dict)
    events: JSONObject = field(default_factory=dict)
    unread: list[str] = field(default_factory=list)
    """What could not be read, and why: such an identity certifies and matches nothing."""
    gpus: list[JSONObject] = field(default_factory=list)
    """{index, uuid, serial} per GPU read."""
    nics: list[JSONObject] = field(default_factory=list)
    """{name, guid} per RDMA device (EFA, InfiniBand) in sysfs."""

    def to_dict(self) -> JSONObject:
        return {"fields": self.fields, "events": self.events, "unread": list(self.unread)}

    def differences(self, other: Mapping[str, JSONValue]) -> list[str]:
        """How `other` (a certificate's `fields`) differs from this identity: `driver
        550.54.15 (certificate) != 560.35.03 (now)`, one entry per field."""
        keys = sorted(set(self.fields) | set(other))
        return [f"{k} {_short(other.get(k))} (certificate) != {_short(self.fields.get(k))} (now)"
                for k in keys if other.get(k) != self.fields.get(k)]

    def grown(self, before: Mapping[str, JSONValue]) -> list[str]:
        """The event counters that differ from `before` (a certificate's `events`)."""
        out = []
        for key in sorted(set(self.events) | set(before)):
            was, now = before.get(key), self.events.get(key)
            if was != now:
                out.append(f"{key}: {_short(was)} at certification, {_short(now)} now")
        return out


def _short(value: JSONValue) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else value
    return text if len(text) <= 200 else text[:197] + "..."


def profile_sha256(profile: Profile) -> str:
    """The resolved profile's every threshold, hashed: a changed threshold is another profile."""
    return hashlib.sha256(json.dumps(profile.to_dict(), sort_keys=True, default=str)
                          .encode()).hexdigest()


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or None
    except OSError:
        return None


def read_nics(sysroot: Path) -> list[JSONObject]:
    """Every RDMA device in <sysroot>/sys/class/infiniband with its node GUID (None: unread)."""
    base = sysroot / "sys/class/infiniband"
    try:
        names = sorted(p.name for p in base.iterdir())
    except OSError:
        return []
    return [{"name": n, "guid": _read(base / n / "node_guid")} for n in names]


def _packages_sha256() -> str:
    """Every installed Python distribution and its version, hashed: the image, as far as the
    interpreter sees it (used when no image digest is given)."""
    import importlib.metadata  # ~0.05 s (email parsing): only when a node's identity is taken

    found = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                   if d.metadata["Name"])
    return hashlib.sha256("\n".join(found).encode()).hexdigest()


def _network_env(env: Mapping[str, str]) -> JSONObject:
    """The NCCL and libfabric variables (what the bandwidth and training figures were measured
    under: the cluster's own consistency set), redacted as every output is."""
    kept = {k: v for k, v in sorted(env.items()) if k.startswith(FABRIC_ENV_PREFIXES)}
    return dict(Redactor.of(env).env(kept))


def _dist_version(*names: str) -> str | None:
    import importlib.metadata

    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _versions(env: Mapping[str, str], sysroot: Path) -> JSONObject:
    from harness.probes import network

    lib = network.find_ofi_nccl(dict(env), sysroot=sysroot)
    return {"torch": _dist_version("torch"), "nccl": _dist_version(*_NCCL_WHEELS),
            "ofi_nccl": lib.version if lib else None, "libfabric": network.libfabric_version()}


def read_gpus(profile: Profile, sysroot: Path = Path("/")) -> tuple[GpuInventory | None, str]:
    """The GPUs (NVML, else nvidia-smi) and why they were not read (""): not looked for on a
    node without GPUs whose profile has none."""
    if not (profile.has_gpus or has_gpu(sysroot) or proc.which("nvidia-smi")):
        return None, ""
    from harness.probes.gpu import inventory

    try:
        return inventory(), ""
    except Exception as exc:  # GpusUnreadableError, or a broken NVML binding
        return None, str(exc)


def _gpus(ident: NodeIdentity, profile: Profile, sysroot: Path) -> None:
    """GPU UUIDs, serials, driver, CUDA and the counters that must not grow."""
    inv, problem = read_gpus(profile, sysroot)
    if inv is None:
        if problem and profile.has_gpus:
            ident.unread.append(f"GPUs: {problem}")
        ident.fields.update(gpus=[], driver=None, cuda=None)
        return
    ident.gpus = gpu_keys(inv)
    ident.fields.update(gpus=[{"uuid": g.uuid, "serial": g.serial} for g in inv.gpus],
                        driver=inv.driver_version, cuda=inv.cuda_version)
    if profile.has_gpus and any(g.uuid is None for g in inv.gpus):
        ident.unread.append(f"GPUs: a UUID not reported by {inv.source}")
    for g in inv.gpus:
        ident.events[f"GPU {g.uuid} ECC"] = {
            "uncorrected_aggregate": g.ecc_uncorrected_aggregate,
            "remapped_rows_pending": g.remapped_rows_pending,
            "remapped_rows_failure": g.remapped_rows_failure,
            "retired_pages_dbe": g.retired_pages_dbe}


def gpu_keys(inv: GpuInventory) -> list[JSONObject]:
    """{index, uuid, serial} per GPU."""
    return [{"index": g.index, "uuid": g.uuid, "serial": g.serial} for g in inv.gpus]


def _xids(ident: NodeIdentity, env: Mapping[str, str]) -> None:
    """How many Xid and SXid lines the kernel log holds since boot (the boot id is a field)."""
    from harness.probes.kernel_log import read_kernel_log

    try:
        log = read_kernel_log(env=dict(env), timeout_s=15.0)
    except Exception as exc:  # ProbeError naming every source tried
        ident.unread.append(f"kernel log: {exc}")
        return
    ident.events["xid_lines_since_boot"] = len(log.events) + len(log.sxid_events) + log.omitted


def gather(profile: Profile, host: str, env: Mapping[str, str], sysroot: Path = Path("/"),
           ) -> NodeIdentity:
    """This node's identity now (docs/certification.md lists every field and its source)."""
    ident = NodeIdentity()
    asset = _read(sysroot / "sys/devices/virtual/dmi/id/board_asset_tag")
    boot_id = _read(sysroot / "proc/sys/kernel/random/boot_id")
    if boot_id is None:
        ident.unread.append(f"boot id: {sysroot / 'proc/sys/kernel/random/boot_id'} unreadable")
    ident.fields.update(
        host=host, instance_id=asset if asset and _INSTANCE_ID.fullmatch(asset) else None,
        boot_id=boot_id, profile=profile.name, profile_sha256=profile_sha256(profile),
        harness_version=__version__, image=get_str("PREFLIGHT_IMAGE_DIGEST", env),
        python_packages_sha256=_packages_sha256(),
        nics=read_nics(sysroot), env=_network_env(env), **_versions(env, sysroot))
    _gpus(ident, profile, sysroot)
    ident.nics = list(ident.fields["nics"])  # type: ignore[arg-type]
    if ident.gpus or profile.has_gpus:
        _xids(ident, env)
    return ident
