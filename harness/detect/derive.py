"""A profile for a machine with NVIDIA GPUs and no known instance type (on-prem, another cloud,
a workstation), built from what the machine reports: GPUs from NVML (nvidia-smi when NVML is
missing), PCI device IDs and NVSwitches from sysfs, NICs from /sys/class/infiniband. Thresholds
come from the GPU SKU table in profiles.toml ([skus]), each with its source; a derived profile
fails a node for what the SKU table says is wrong, never for not being an instance type. Every
path is read under a sysroot (PREFLIGHT_SYSROOT), so a fake machine is testable end to end."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.detect.instance import Detection
    from harness.probes import fabric

from harness.base.gpu_record import GpuInventory
from harness.base.jsontypes import JSONObject
from harness.base.settings import get_path
from harness.profiles.model import Profile
from harness.profiles.table import BUILTIN_PROFILES, SKUS, get_profile

__all__ = ["DERIVED", "MachineFacts", "derive_profile", "machine_facts", "match_sku",
           "resolve_detected", "resolve_profile", "sysroot_from"]

#: The profile name a derived profile gets (and `--profile derived` asks for).
DERIVED = "derived"
_EXPLICIT = ("--profile", "PREFLIGHT_PROFILE")


@dataclasses.dataclass(frozen=True, slots=True)
class MachineFacts:
    """What the machine says about its GPUs and NICs (None: could not be read)."""

    gpu_names: tuple[str, ...]
    gpu_memory_gib: tuple[float, ...]
    nvlinks_active: tuple[int, ...]
    pci_device_ids: tuple[str, ...]
    nvswitches: int
    gpu_source: str
    gpu_error: str | None
    nics: tuple[fabric.RdmaDevice, ...]
    driver_version: str | None = None

    @property
    def num_gpus(self) -> int:
        return max(len(self.gpu_names), len(self.pci_device_ids))


def machine_facts(sysroot: Path = Path("/"), nvml: object | None = None,
                  inventory: GpuInventory | None = None) -> MachineFacts:
    """Read the machine. `inventory`: an already-read GPU inventory (a test passes a parsed
    recorded output); else NVML, then nvidia-smi (harness.probes.gpu.inventory)."""
    # the machine's sysfs is read here alone: a run with a named profile never imports the
    # fabric probe (start-up, issue 28 item 6)
    from harness.probes import fabric

    error = None
    if inventory is None:
        from harness.base.errors import ProbeError
        from harness.probes import gpu

        try:
            inventory = gpu.inventory(nvml)
        except ProbeError as exc:
            error = str(exc)
    pci, switches = fabric.pci_gpus(sysroot)
    gpus = inventory.gpus if inventory else ()
    return MachineFacts(
        gpu_names=tuple(g.name or "?" for g in gpus),
        gpu_memory_gib=tuple(g.memory_total_gib or 0.0 for g in gpus),
        nvlinks_active=tuple(len(g.nvlinks_active or ()) for g in gpus),
        pci_device_ids=tuple(p.device_id for p in pci), nvswitches=switches,
        gpu_source=inventory.source if inventory else "none", gpu_error=error,
        nics=tuple(fabric.rdma_devices(sysroot)),
        driver_version=inventory.driver_version if inventory else None)


def match_sku(facts: MachineFacts) -> tuple[str | None, str]:
    """(SKU name, how it was matched): by PCI device ID first (stable across names), then by the
    exact NVML name. Substrings are never used: "GH200" contains "H200", "H100 NVL" "H100"."""
    by_id = {i.lower(): n for n, t in SKUS.items() for i in t.get("pci_device_ids", ())}
    by_name = {x: n for n, t in SKUS.items() for x in t.get("nvml_names", ())}
    ids = Counter(by_id[i] for i in facts.pci_device_ids if i in by_id)
    if ids:
        sku, _ = ids.most_common(1)[0]
        return sku, f"PCI device ID {', '.join(sorted(set(facts.pci_device_ids)))}"
    names = Counter(by_name[x] for x in facts.gpu_names if x in by_name)
    if names:
        sku, _ = names.most_common(1)[0]
        return sku, f"NVML name {facts.gpu_names[0]!r}"
    return None, "no SKU of the table matches " + (
        f"{sorted(set(facts.gpu_names))} / PCI {sorted(set(facts.pci_device_ids))}")


def _nic_summary(nics: tuple[fabric.RdmaDevice, ...]) -> JSONObject:
    kinds = Counter(d.kind for d in nics)
    return {"efa": kinds.get("efa", 0), "ib": kinds.get("ib", 0), "roce": kinds.get("roce", 0),
            "devices": [{"name": d.name, "kind": d.kind, "hca_type": d.hca_type,
                         "ports": [{"port": p.number, "state": p.state, "phys_state": p.phys_state,
                                    "rate": p.rate, "link_layer": p.link_layer}
                                   for p in d.ports]} for d in nics]}


def derive_profile(facts: MachineFacts) -> Profile:
    """The derived profile of a machine: its GPU count, the SKU's thresholds, its fabric."""
    sku, matched = match_sku(facts)
    base = SKUS[sku]["profile"] if sku else Profile(name="_no-sku")
    n = facts.num_gpus
    estimates = set(base.estimates)
    sources = dict(base.sources)
    nics = _nic_summary(facts.nics)
    changes: dict[str, object] = {}
    measured_with = SKUS[sku].get("nvlink_busbw_gpus") if sku else None
    if base.nvlink_busbw_gb_s_min is not None and measured_with and n != measured_with:
        estimates.add("nvlink_busbw_gb_s_min")
        sources["nvlink_busbw_gb_s_min"] = (f"estimate: the SKU's {measured_with}-GPU floor on "
                                            f"{n} GPUs. " + sources.get("nvlink_busbw_gb_s_min", ""))
    if n == 1:
        changes.update(gpu_interconnect="single", nvlinks_per_gpu=0, nvswitch=False)
    if nics["efa"]:
        changes.update(fabric="efa", num_efa_devices=nics["efa"], min_memlock_kib=16 * 1024**2,
                       min_ofi_nccl_version="1.7.3")
        sources["num_efa_devices"] = "derived: the EFA devices found in sysfs (count not judged)"
    elif nics["ib"] or nics["roce"]:
        rate = sum(d.rate_gbps for d in facts.nics if d.kind in ("ib", "roce"))
        changes.update(fabric="ib", min_memlock_kib=16 * 1024**2)
        if rate:
            changes["net_busbw_gb_s_min"] = round(0.5 * rate / 8, 1)
            estimates.add("net_busbw_gb_s_min")
            sources["net_busbw_gb_s_min"] = (
                f"estimate: half the active HCA line rate ({rate:g} Gb/s in sysfs); NVIDIA's rule "
                "of thumb is ~12 GB/s busbw per 100 Gb/s NIC (NVIDIA/nccl-tests#119)")
    gpu = facts.gpu_names[0] if facts.gpu_names else "unreadable GPUs"
    description = (f"derived from this machine: {n}x {gpu} (SKU {sku or 'none'}, {matched}); "
                   f"NICs: {nics['efa']} EFA, {nics['ib']} IB, {nics['roce']} RoCE")
    derived_from = {
        "gpu_source": facts.gpu_source, "gpu_error": facts.gpu_error,
        "gpu_names": list(facts.gpu_names), "gpu_count": n,
        "gpu_memory_gib": list(facts.gpu_memory_gib), "pci_device_ids": list(facts.pci_device_ids),
        "nvlinks_active": list(facts.nvlinks_active), "nvswitches": facts.nvswitches,
        "sku": sku, "sku_matched_by": matched, "nics": nics,
        "driver_version": facts.driver_version,
    }
    return base.derive(name=DERIVED, description=description, num_gpus=n, sku=sku,
                       gpu_model=(gpu if sku and not facts.gpu_error else base.gpu_model),
                       origin="derived", derived_from=derived_from,
                       estimates=tuple(sorted(estimates)), sources=sources, **changes)


def _gpus_visible(sysroot: Path) -> bool:
    from harness.detect.instance import has_gpu

    return has_gpu(sysroot)


def resolve_profile(found_name: str | None, found_source: str,
                    profiles: Mapping[str, Profile] = BUILTIN_PROFILES, *,
                    sysroot: Path = Path("/"), nvml: object | None = None,
                    facts: MachineFacts | None = None) -> tuple[Profile, str]:
    """(profile, where it came from) for what detection found. A derived profile when asked
    for (`derived`), when no provider named a type on a GPU machine (`found_name` None), or when
    a detected (not user-given) type has no profile and GPUs are visible; a built-in type whose
    GPU count AWS does not publish takes it from the machine. ProfileError otherwise."""
    unknown = found_name is not None and found_name.removeprefix("ml.") not in profiles
    if (found_name in (DERIVED, None) or
            (unknown and found_source not in _EXPLICIT and _gpus_visible(sysroot))):
        facts = facts or machine_facts(sysroot, nvml)
        why = ("asked for" if found_name == DERIVED else "no provider named an instance type"
               if found_name is None else f"{found_name} (from {found_source}) has no built-in "
               "profile")
        return derive_profile(facts), f"derived from this machine ({why})"
    profile = get_profile(found_name, profiles)
    if profile.gpus_from_machine:
        facts = facts or machine_facts(sysroot, nvml)
        profile = profile.derive(num_gpus=facts.num_gpus, derived_from={
            "gpu_count": facts.num_gpus, "gpu_source": facts.gpu_source,
            "gpu_error": facts.gpu_error})
    return profile, found_source


def resolve_detected(found: Detection | None,
                     profiles: Mapping[str, Profile] = BUILTIN_PROFILES, *,
                     sysroot: Path = Path("/"),
                     nvml: object | None = None) -> tuple[Profile, str]:
    """resolve_profile for a harness.detect.instance.Detection (None: GPUs and no type named)."""
    if found is None:
        return resolve_profile(None, "", profiles, sysroot=sysroot, nvml=nvml)
    return resolve_profile(found.name, found.source, profiles, sysroot=sysroot, nvml=nvml)


def sysroot_from(env: Mapping[str, str] | None = None) -> Path:
    return get_path("PREFLIGHT_SYSROOT", env) or Path("/")
