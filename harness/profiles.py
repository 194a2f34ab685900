"""Expectations per instance type: data, not code. One frozen dataclass, a base per GPU family,
each instance type derived from its base; users override or add profiles with a TOML file."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.jsontypes import JSONObject

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
    gpu_interconnect: str | None = None
    """How the node's GPUs reach each other: `nvswitch` (NVLink through NVSwitch), `pcie` (no
    NVLink: the intra-node floor is `pcie_busbw_gb_s_min`), `c2c` (one GPU per Grace CPU),
    `single` (one GPU: no intra-node collective); None: no GPUs."""
    nvlink_domain: str | None = None
    """`ultraserver`: the GPUs share one NVLink domain with other nodes (GB200/GB300 NVL72,
    p6e): fabric cliqueId/clusterUuid and IMEX are judged; None: the domain is this node."""
    nvls: bool = False
    """NVLink SHARP (NVLS) all_reduce expected: NVSwitches and compute capability >= 9.0
    (NVIDIA/nccl src/graph/search.cc builds NVLS graphs only then); judged by PF-NVL-006."""
    nvls_busbw_gb_s_min: float | None = None
    """NVLS all_reduce busbw floor at 1 GiB, GB/s (None: the NVLS figure is reported only)."""
    sku: str | None = None
    """The GPU SKU of profiles.toml [skus] whose thresholds this profile took."""
    gpus_from_machine: bool = False
    """No published GPU count for this type: `num_gpus` is taken from this machine's NVML."""
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
    """Message size the multi-node gate is read at, bytes: the size its source measured at."""
    intra_gate_size_bytes: int = 16 * GIB
    """Message size the single-node floor (NVLink or PCIe) is read at, bytes: the size its
    source measured at (Azure's 8xH100 460 GB/s floor is a 16 GiB figure)."""
    pcie_busbw_gb_s_min: float | None = None
    """Single-node all_reduce busbw floor on PCIe-only multi-GPU nodes, GB/s."""
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

    estimates: tuple[str, ...] = ()
    """Fields whose value has no public measured basis: below it is a warning, not a failure,
    until `scripts/device-check` measures the real figure."""
    origin: str = "built-in"
    """`built-in` (profiles.toml), `derived` (from this machine), or `profile file PATH`."""
    derived_from: dict[str, Any] = field(default_factory=dict)
    """What a derived profile was built from: GPU model, count, memory, PCI IDs, NVLink, NICs."""

    sources: dict[str, str] = field(default_factory=dict)
    """Free-text source per field name, shown by `preflight profiles`."""

    @property
    def has_gpus(self) -> bool:
        return self.num_gpus > 0 or self.gpus_from_machine

    @property
    def has_efa(self) -> bool:
        return self.fabric == "efa"

    def is_estimate(self, field_name: str) -> bool:
        return field_name in self.estimates

    @property
    def intra_node_floor(self) -> tuple[str, float] | None:
        """(field, GB/s) of the single-node all_reduce floor that applies, or None."""
        if self.num_gpus < 2:
            return None
        if self.gpu_interconnect == "pcie":
            return ("pcie_busbw_gb_s_min", self.pcie_busbw_gb_s_min) \
                if self.pcie_busbw_gb_s_min is not None else None
        if self.nvlink_busbw_gb_s_min is not None:
            return ("nvlink_busbw_gb_s_min", self.nvlink_busbw_gb_s_min)
        return None

    @property
    def intra_node_na_reason(self) -> str:
        """Why the single-node all_reduce gate does not apply (when intra_node_floor is None)."""
        if not self.has_gpus:
            return f"profile {self.name} has no GPUs"
        if self.num_gpus == 1:
            return ("1 GPU: an all_reduce over one rank moves no data between GPUs (busbw is 0 "
                    "by definition, factor 2(n-1)/n; nccl-tests prints 'Avg bus bandwidth 0')")
        return f"profile {self.name} has no single-node bandwidth floor for {self.gpu_interconnect}"

    @property
    def nvlink_na_reason(self) -> str:
        """Why the NVLink checks do not apply (when nvlinks_per_gpu is 0)."""
        if self.num_gpus == 1:
            return "1 GPU: no peer GPU on this node, NVLink state is not judged"
        if self.gpu_interconnect == "pcie":
            return ("PCIe-only GPUs: they reach each other over PCIe, not NVLink (the intra-node "
                    "bandwidth is judged against PCIe figures by PF-BW-001)")
        return "the profile expects no NVLinks"

    def derive(self, **changes: object) -> Profile:
        """A new profile from this one (`dataclasses.replace`), sources merged."""
        sources = {**self.sources, **changes.pop("sources", {})}
        return dataclasses.replace(self, sources=sources, **changes)

    def to_dict(self) -> JSONObject:
        """Every field (report.json records the whole resolved profile)."""
        data = dataclasses.asdict(self)
        data["estimates"] = list(self.estimates)
        return data


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

def _field_types() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(Profile)}


#: The built-in data: sources, GPU SKUs and instance types (see the comments at its top).
DATA_FILE = Path(__file__).with_name("profiles.toml")
#: Keys of a [skus] table that are not Profile fields: how a derived profile finds its SKU.
SKU_MATCH_KEYS = ("nvml_names", "pci_device_ids", "nvlink_busbw_gpus")
_META_KEYS = ("base", "sku", "src")


def _cite(note: str, sources: Mapping[str, str]) -> str:
    """`key: note` -> `note [key: full citation]` where key is in [sources]; else the note."""
    key, _, rest = note.partition(":")
    keys = [k.strip() for k in key.split(",")]
    if keys and all(k in sources for k in keys):
        cited = "; ".join(f"{k}: {sources[k]}" for k in keys)
        return f"{rest.strip()} [{cited}]" if rest.strip() else f"[{cited}]"
    return note


def _fields_of(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Profile fields of one data table (TOML types made Profile types; "" fabric: None)."""
    fields = _field_types()
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in _META_KEYS or key in SKU_MATCH_KEYS:
            continue
        if key not in fields:
            raise ProfileError(f"{where}: unknown field {key!r}")
        if key == "estimates":
            value = tuple(value)
        elif key == "fabric" and value == "":
            value = None
        out[key] = value
    return out


def _sources_of(table: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, str]:
    return {k: _cite(str(v), sources) for k, v in (table.get("src") or {}).items()}


def load_data(path: Path = DATA_FILE) -> tuple[dict[str, Profile], dict[str, JSONObject]]:
    """(instance profiles by name, SKU tables by name) from the data file. SKU tables keep their
    matching keys and gain `profile`: the SKU's thresholds as a Profile (for derive)."""
    data = tomllib.loads(path.read_text())
    sources: dict[str, str] = data.get("sources", {})
    skus: dict[str, dict[str, Any]] = {}
    for name, table in data.get("skus", {}).items():
        where = f"{path.name}: [skus.{name!r}]"
        skus[name] = {**table, "profile": Profile(
            name=f"_sku-{name}", sku=name, **_fields_of(table, where),
            sources=_sources_of(table, sources))}
    tables: dict[str, dict[str, Any]] = data.get("profiles", {})
    built: dict[str, Profile] = {}

    def build(name: str, chain: tuple[str, ...] = ()) -> Profile:
        if name in built:
            return built[name]
        where = f"{path.name}: [profiles.{name!r}]"
        if name in chain or name not in tables:
            raise ProfileError(f"{where}: base chain {' -> '.join((*chain, name))} is broken")
        table = tables[name]
        base = build(table["base"], (*chain, name)) if "base" in table else Profile(name="_root")
        own = _fields_of(table, where)
        estimates = set(base.estimates) | set(own.pop("estimates", ()))
        srcs = _sources_of(table, sources)
        if "sku" in table:
            if table["sku"] not in skus:
                raise ProfileError(f"{where}: unknown sku {table['sku']!r}")
            sku = skus[table["sku"]]["profile"]
            sku_fields = {f.name: getattr(sku, f.name) for f in dataclasses.fields(Profile)
                          if f.name in skus[table["sku"]] and f.name not in ("name", "sources")}
            estimates |= set(sku.estimates)
            base = base.derive(**{k: v for k, v in sku_fields.items() if k != "estimates"},
                               sku=table["sku"], sources=sku.sources)
        built[name] = base.derive(name=name, estimates=tuple(sorted(estimates)),
                                  origin="built-in", sources=srcs, **own)
        return built[name]

    for name in tables:
        build(name)
    public = {n: p for n, p in built.items() if not n.startswith("_")}
    return {LOCAL_CPU.name: LOCAL_CPU, **public}, skus


_BUILTIN, SKUS = load_data()
BUILTIN_PROFILES: Mapping[str, Profile] = _BUILTIN


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
            if key == "estimates" and isinstance(value, list):
                value = tuple(value)
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
        changes["origin"] = f"profile file {path}"
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
        shown = "-" if value is None else str(value)
        if profile.is_estimate(f.name):
            shown += " (estimate: a warning until measured)"
        rows.append((f.name, shown, profile.sources.get(f.name, "")))
    return rows
