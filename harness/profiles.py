"""Expectations per instance type: data, not code. One frozen dataclass, a base per GPU family,
each instance type derived from its base; users override or add profiles with a TOML file."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "BUILTIN_PROFILES",
    "Profile",
    "ProfileError",
    "get_profile",
    "load_profile_file",
    "threshold_rows",
]

GIB = 1024**3


class ProfileError(ValueError):
    """A profile that does not exist or a profile file that does not parse; str() is the message."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    """What a healthy node of one instance type looks like. Units are in the field names."""

    name: str
    """Exact instance type without the `ml.` prefix (`p5.48xlarge`), or `local-cpu`."""
    description: str = ""

    # --- GPUs ---
    num_gpus: int = 0
    """GPUs per node. Source: AWS instance type specifications (domain-facts.md, Instances)."""
    gpu_model: str | None = None
    """Substring the NVML/nvidia-smi product name must contain (`H100`); None: any model."""
    gpu_memory_gib_min: float | None = None
    """Smallest acceptable per-GPU memory, GiB (as NVML reports it, a little under the label)."""
    nvlinks_per_gpu: int = 0
    """Active NVLinks expected per GPU. Source: domain-facts.md, Instances."""
    nvswitch: bool = False
    """NVSwitch system: fabric manager must be running."""
    min_driver_version: str | None = None
    """Oldest acceptable NVIDIA driver (`535.104.05`); None: not judged."""
    min_cuda_version: str | None = None
    """Oldest CUDA version the driver must support (`12.2`); None: not judged."""
    max_gpu_temp_c: float = 85.0
    """GPU core temperature above which the node is unfit at start, degrees C (idle GPUs run
    30-50 C; NVIDIA slowdown thresholds are ~87-90 C on A100/H100)."""
    dcgm_level: dict[str, int] = field(
        default_factory=lambda: {"preflight": 1, "certify": 2, "diagnose": 3}
    )
    """`dcgmi diag -r N` level per tier. Source: domain-facts.md (r1 seconds, r2 ~2 min, r3 ~15 min)."""
    min_bf16_tflops: float | None = None
    """Per-GPU dense bf16 matmul floor, TFLOP/s (about 60% of the datasheet peak)."""
    min_hbm_copy_gb_s: float | None = None
    """Per-GPU device-to-device copy floor, GB/s (about 60% of the datasheet HBM bandwidth)."""

    # --- Network ---
    fabric: str | None = None
    """`efa`, `ib`, or None (no inter-node fabric expected)."""
    num_efa_devices: int = 0
    """EFA devices per node. Source: domain-facts.md, Instances (p5: 32, p5en: 16, p6-b200: 8)."""
    efa_gbps: int = 0
    """EFA bandwidth per node, Gbit/s. Source: domain-facts.md, Instances."""
    gdr_required: bool = False
    """GPUDirect RDMA must be used on every inter-node channel. Source: domain-facts.md
    ("GDR is required by the plugin on p4d, p4de, p5*, p6*")."""
    min_ofi_nccl_version: str | None = None
    """Oldest acceptable aws-ofi-nccl. 1.7.3 is the first release whose notes cover P5 with RDMA."""
    min_memlock_kib: int | None = None
    """`ulimit -l` floor in KiB; None: must be unlimited. EFA registers GPU/host memory."""

    # --- Host readiness (every profile, local-cpu included) ---
    min_shm_free_gib: float = 1.0
    """Free /dev/shm floor, GiB (NCCL's SHM transport and proxy, DataLoader workers). Docker's
    default is 64 MB (moby/moby#29492); NGC's documented run line uses --shm-size=1g."""
    min_output_free_gib: float = 1.0
    """Free-space floor of each checkpoint/output path and required mount, GiB."""
    max_output_used_pct: float = 80.0
    """Usage above which a path is warned about, percent (Meta GCM check_storage warning)."""
    mount_timeout_s: float = 10.0
    """Bound of one path's statvfs + write test, s: past it the mount counts as hung."""
    min_nofile: int = 1024
    """Hard open-files limit floor (NCCL raises its soft limit to the hard one: src/os/linux.cc
    ncclOsSetFilesLimit); below it the soft limit is warned about too."""
    max_dstate_s: float = 300.0
    """A process in D state this long counts as stuck, s (Meta GCM check_dstate --elapsed)."""
    max_clock_offset_s: float = 1.0
    """|offset| from NTP (chronyc) above which the clock is warned about, s."""

    # --- Bandwidth (all_reduce, float sum, busbw) ---
    nvlink_busbw_gb_s_min: float | None = None
    """Single-node all_reduce busbw floor at `bw_gate_size_bytes`, GB/s. Sources: Azure AzHC
    (8xH100 >= 460, 8xA100 >= 228), domain-facts.md."""
    net_busbw_gb_s_min: float | None = None
    """Multi-node (2+ nodes) all_reduce busbw floor at `bw_gate_size_bytes`, GB/s: 85% of the
    2-node reference run (aws-samples awsome-distributed-training, domain-facts.md)."""
    bw_gate_size_bytes: int = GIB
    """Message size the bandwidth gate is read at, bytes (the references quote 1 GiB)."""
    cpu_busbw_gb_s_min: float | None = None
    """gloo all_reduce busbw floor on CPU-only profiles, GB/s (a sanity floor, not a benchmark)."""

    # --- Training step ---
    te_required: bool = False
    """TransformerEngine must be importable and used in the training-step check."""
    te_recipe: str | None = None
    """Precision recipe for the TE step: `fp8-delayed`, `fp8-current`, `mxfp8`, `bf16`."""
    train_step_budget_s: float = 30.0
    """Wall-time budget of the whole tiny training-step check in the preflight tier, s."""

    # --- Tier budgets ---
    check_timeout_s: dict[str, float] = field(
        default_factory=lambda: {"preflight": 120.0, "certify": 1800.0, "diagnose": 3600.0}
    )
    """Per-check timeout by tier, s (pytest-timeout), the net under each probe's own timeout."""
    run_budget_s: dict[str, float] = field(
        default_factory=lambda: {"preflight": 300.0, "certify": 7200.0, "diagnose": 14400.0}
    )
    """Hard upper bound of a whole `preflight run` by tier, s: past it the harness stops the
    checks, writes the report and fails."""

    sources: dict[str, str] = field(default_factory=dict)
    """Free-text source per field name, shown by `preflight profiles`."""

    @property
    def has_gpus(self) -> bool:
        return self.num_gpus > 0

    @property
    def has_efa(self) -> bool:
        return self.fabric == "efa"

    def derive(self, **changes: Any) -> Profile:
        """A new profile from this one (`dataclasses.replace`), sources merged."""
        sources = {**self.sources, **changes.pop("sources", {})}
        return dataclasses.replace(self, sources=sources, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SRC_INSTANCES = "AWS instance specifications (domain-facts.md, Instances)"
_SRC_AWSOME = "aws-samples/awsome-distributed-training 2-node all_reduce_perf (domain-facts.md)"

LOCAL_CPU = Profile(
    name="local-cpu",
    description="A machine without GPUs or EFA (a laptop, CI): env and CPU checks only.",
    cpu_busbw_gb_s_min=0.05,
    train_step_budget_s=60.0,
    sources={
        "cpu_busbw_gb_s_min": "sanity floor; 2-core VM measured ~1.1 GB/s at 256 MB, gloo",
        "train_step_budget_s": "2 gloo ranks on a 2-core VM: ~6 s idle, 27 s at load average 11",
    },
)

_GPU_BASE = Profile(
    name="_gpu-base",
    num_gpus=8,
    fabric="efa",
    gdr_required=True,
    min_ofi_nccl_version="1.7.3",
    min_memlock_kib=16 * 1024 * 1024,
    min_driver_version="535.54.03",
    min_cuda_version="12.2",
    min_output_free_gib=20.0,
    min_nofile=65536,
    sources={
        "min_output_free_gib": "project floor: room for a sharded checkpoint of one node",
        "min_nofile": "NCCL at 4+ nodes exhausts 1024 fds (goodfire-ai/spd PR #957, "
        "NVIDIA/nccl#550); 65536 is the common portable value",
        "num_gpus": _SRC_INSTANCES,
        "gdr_required": "aws-ofi-nccl requires GDR on p4d/p4de/p5*/p6* (domain-facts.md)",
        "min_ofi_nccl_version": "aws-ofi-nccl v1.7.3 release notes (P5 + RDMA)",
        "min_memlock_kib": "16 GiB floor (issue 3); EFA docs run containers with memlock=-1",
        "min_driver_version": "first R535 production driver (CUDA 12.2)",
    },
)

_A100 = _GPU_BASE.derive(
    name="_a100",
    gpu_model="A100",
    nvlinks_per_gpu=12,
    nvswitch=True,
    num_efa_devices=4,
    efa_gbps=400,
    nvlink_busbw_gb_s_min=228.0,
    net_busbw_gb_s_min=65.0,
    min_bf16_tflops=180.0,
    min_hbm_copy_gb_s=900.0,
    te_recipe="bf16",
    sources={
        "nvlink_busbw_gb_s_min": "Azure AzHC 8xA100 threshold (domain-facts.md)",
        "net_busbw_gb_s_min": f"85% of p4de 76.8 GB/s @1 GiB, {_SRC_AWSOME}",
        "min_bf16_tflops": "~58% of A100 dense bf16 peak 312 TFLOP/s",
        "min_hbm_copy_gb_s": "~60% of A100 40GB HBM2 1555 GB/s",
        "te_recipe": "FP8 is not supported on A100 (seed-facts.md)",
    },
)

_H100 = _GPU_BASE.derive(
    name="_h100",
    gpu_model="H100",
    gpu_memory_gib_min=79.0,
    nvlinks_per_gpu=18,
    nvswitch=True,
    num_efa_devices=32,
    efa_gbps=3200,
    nvlink_busbw_gb_s_min=460.0,
    net_busbw_gb_s_min=370.0,
    min_bf16_tflops=550.0,
    min_hbm_copy_gb_s=2000.0,
    te_recipe="fp8-delayed",
    sources={
        "nvlink_busbw_gb_s_min": "Azure AzHC 8xH100 NVLink threshold (domain-facts.md)",
        "net_busbw_gb_s_min": f"85% of p5 437 GB/s @1 GiB, {_SRC_AWSOME}",
        "min_bf16_tflops": "~56% of H100 SXM dense bf16 peak 989 TFLOP/s",
        "min_hbm_copy_gb_s": "~60% of H100 SXM HBM3 3.35 TB/s",
    },
)

_BUILTIN = [
    LOCAL_CPU,
    _A100.derive(
        name="p4d.24xlarge", description="8x A100 40 GB, 4 EFA (400 Gbps), NVSwitch",
        gpu_memory_gib_min=39.0,
    ),
    _A100.derive(
        name="p4de.24xlarge", description="8x A100 80 GB, 4 EFA (400 Gbps), NVSwitch",
        gpu_memory_gib_min=79.0, min_hbm_copy_gb_s=1200.0,
        sources={"min_hbm_copy_gb_s": "~60% of A100 80GB HBM2e 2039 GB/s"},
    ),
    _H100.derive(name="p5.48xlarge", description="8x H100 80 GB, 32 EFA (3200 Gbps), NVSwitch"),
    _H100.derive(
        name="p5e.48xlarge", description="8x H200 141 GB, 32 EFA (3200 Gbps), NVSwitch",
        gpu_model="H200", gpu_memory_gib_min=139.0, min_hbm_copy_gb_s=2900.0,
        sources={"min_hbm_copy_gb_s": "~60% of H200 HBM3e 4.8 TB/s"},
    ),
    _H100.derive(
        name="p5en.48xlarge", description="8x H200 141 GB, 16 EFA (3200 Gbps), NVSwitch",
        gpu_model="H200", gpu_memory_gib_min=139.0, num_efa_devices=16,
        min_hbm_copy_gb_s=2900.0,
        sources={
            "min_hbm_copy_gb_s": "~60% of H200 HBM3e 4.8 TB/s",
            "net_busbw_gb_s_min": "same 3200 Gbps EFA as p5: p5's floor (no published p5en run)",
        },
    ),
    _GPU_BASE.derive(
        name="p6-b200.48xlarge", description="8x B200 180 GB, 8 EFA (3200 Gbps), NVLink 5",
        gpu_model="B200", gpu_memory_gib_min=170.0, nvlinks_per_gpu=18, nvswitch=True,
        num_efa_devices=8, efa_gbps=3200,
        min_driver_version="570.86.10", min_cuda_version="12.8", min_ofi_nccl_version="1.14.0",
        nvlink_busbw_gb_s_min=600.0, net_busbw_gb_s_min=370.0,
        min_bf16_tflops=1100.0, min_hbm_copy_gb_s=4800.0, te_recipe="mxfp8",
        sources={
            "min_driver_version": "first R570 driver with Blackwell data-centre support",
            "min_ofi_nccl_version": "efa-direct / P6 support (aws-ofi-nccl 1.14 release notes)",
            "nvlink_busbw_gb_s_min": "estimate: NVLink 5 doubles NVLink 4 per GPU; conservative"
            " floor, replace with a measured reference",
            "net_busbw_gb_s_min": "same 3200 Gbps EFA as p5: p5's floor (no published p6 run)",
            "min_bf16_tflops": "~50% of B200 dense bf16 peak ~2250 TFLOP/s",
            "min_hbm_copy_gb_s": "~60% of B200 HBM3e 8 TB/s",
            "te_recipe": "Blackwell tensor cores accelerate MXFP8 (seed-facts.md)",
        },
    ),
]

BUILTIN_PROFILES: Mapping[str, Profile] = {p.name: p for p in _BUILTIN}


def _field_types() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(Profile)}


def load_profile_file(
    path: str | Path, base: Mapping[str, Profile] = BUILTIN_PROFILES
) -> dict[str, Profile]:
    """Profiles from a TOML file, merged over `base`.

    Each `[profiles."NAME"]` table overrides an existing profile field by field, or adds a new
    one; `base = "p5.48xlarge"` derives it from another profile (default: the same name, else
    `local-cpu`)::

        [profiles."p5.48xlarge"]
        net_busbw_gb_s_min = 400.0

        [profiles."p5-half"]
        base = "p5.48xlarge"
        num_gpus = 4
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ProfileError(f"cannot read profile file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile file {path} is not valid TOML: {exc}") from exc
    tables = data.get("profiles")
    if not isinstance(tables, dict) or not tables:
        raise ProfileError(f'profile file {path} has no [profiles."NAME"] tables')
    fields = _field_types()
    result = dict(base)
    for name, table in tables.items():
        where = f'{path}: [profiles."{name}"]'
        if not isinstance(table, dict):
            raise ProfileError(f"{where} must be a table")
        table = dict(table)
        base_name = table.pop("base", name if name in result else "local-cpu")
        if base_name not in result:
            raise ProfileError(f"{where}: base {base_name!r} is not a known profile")
        changes: dict[str, Any] = {"name": name}
        for key, value in table.items():
            if key not in fields or key == "name":
                known = ", ".join(sorted(k for k in fields if k != "name"))
                raise ProfileError(f"{where}: unknown field {key!r} (known: {known})")
            current = getattr(result[base_name], key)
            if isinstance(current, dict) and isinstance(value, dict):
                value = {**current, **value}
            elif current is not None and not _same_kind(current, value):
                raise ProfileError(
                    f"{where}: {key} = {value!r} should be {type(current).__name__}"
                )
            changes[key] = value
        changes.setdefault("sources", {})
        changes["sources"] = {
            **changes["sources"], **{k: f"profile file {path}" for k in table if k != "sources"}
        }
        result[name] = result[base_name].derive(**changes)
    return result


def _same_kind(current: object, value: object) -> bool:
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(current, bool) and isinstance(value, bool)
    if isinstance(current, float | int) and isinstance(value, float | int):
        return True
    return isinstance(value, type(current))


def get_profile(name: str, profiles: Mapping[str, Profile] = BUILTIN_PROFILES) -> Profile:
    """The profile named exactly `name` (an `ml.` prefix is ignored); ProfileError lists the rest."""
    key = name.removeprefix("ml.")
    try:
        return profiles[key]
    except KeyError:
        known = ", ".join(sorted(profiles))
        raise ProfileError(f"unknown profile {name!r}; known profiles: {known}") from None


def threshold_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """(field, value, source) rows for `preflight profiles`."""
    rows = []
    for f in dataclasses.fields(Profile):
        if f.name in ("name", "description", "sources"):
            continue
        value = getattr(profile, f.name)
        rows.append((f.name, "-" if value is None else str(value), profile.sources.get(f.name, "")))
    return rows
