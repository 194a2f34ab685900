"""The Profile record: what a healthy node of one instance type looks like (thresholds, counts,
budgets, each with its source), and the error a bad profile gives. harness.profiles.table holds the
data (the built-in profiles, a user's TOML file)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONObject

__all__ = ["CONFIRM_FAMILIES", "GIB", "Profile", "ProfileError"]

GIB = 1024**3
#: The measured families a failure of which is run once more before it is condemned (issue
#: 30): a figure against a floor, which noise on a healthy node can miss once. `isolation` is
#: the cluster's pairwise rounds (a node fails only against `confirmations` good partners).
#: A fact a second reading cannot change (a count, a version, wrong data) is in none.
CONFIRM_FAMILIES = ("bandwidth", "compute", "links", "training", "isolation")


#: The source of a field's default, shown by `preflight profiles NAME` where the profile's own
#: data (profiles.toml `src`) gives none.
DEFAULT_SOURCES = {
    "xid_window_h": "Azure/azurehpc-health-checks azure_gpu_xid.nhc: time_threshold default 2 h",
    "straggler_z_max": "Iglewicz & Hoaglin (1993) modified z-score cut-off 3.5, NIST/SEMATECH "
                       "e-Handbook 1.3.5.17",
    "straggler_min_nodes": "this project: a median of fewer than 4 figures cannot single one out",
    "straggler_min_rel_dev": "AMD CVS: 5 % tolerance against the expected value",
}


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
    not_supported: dict[str, str] = field(default_factory=dict)
    """Facts the SKU does not have, by harness.base.gpu_facts group (`retired_pages`, `fabric`) ->
    why, with its source (profiles.toml [skus] `not_supported`). A check records them and
    judges the rest; any other fact it cannot read is an error, never a pass."""
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
    num_ib_devices: int = 0
    """InfiniBand/RoCE HCAs per node (PF-IB-001 fails with fewer in /sys/class/infiniband); 0:
    at least one, the count is not known (no built-in profile has an IB fabric: a profile file
    states its site's count)."""
    efa_gbps: int = 0
    """EFA bandwidth per node, Gbit/s. Source: domain-facts.md, Instances."""
    gdr_required: bool = False
    """GPUDirect RDMA must be used on every inter-node channel (PF-NET-004 warns without a
    peer-memory module, PF-NET-009 judges it). Source: domain-facts.md
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
    """PF-BW-002: multi-node (2+ nodes) all_reduce busbw floor at `bw_gate_size_bytes`, GB/s: 85% of the
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

    # --- Recent XIDs (PF-GPU-019) ---
    xid_window_h: float = 2.0
    """Hours of kernel log judged for recent XIDs, h; PREFLIGHT_XID_WINDOW_H replaces it for one
    run. Source: Azure AzHC azure_gpu_xid.nhc (time_threshold default 2 h)."""

    # --- Stragglers (PF-CLUSTER-006, harness.judges.cluster) ---
    straggler_z_max: float = 3.5
    """|modified z-score| above which a node's figure is an outlier (Iglewicz & Hoaglin 1993,
    NIST/SEMATECH e-Handbook 1.3.5.17)."""
    straggler_min_nodes: int = 4
    """Fewest per-node figures the straggler check judges (a median of 2 or 3 says little)."""
    straggler_min_rel_dev: float = 0.05
    """Smallest relative distance from the cluster median that can flag a node (AMD CVS's 5 %
    tolerance)."""

    # --- Training step ---
    te_required: bool = False
    """TransformerEngine must be importable and used in the training-step check."""
    te_recipe: str | None = None
    """Precision recipe for the TE step: `fp8-delayed`, `fp8-current`, `mxfp8`, `bf16`."""
    train_step_budget_s: float = 30.0
    """Wall-time budget of the whole tiny training-step check in the preflight tier, s."""

    # --- Confirm before condemn ---
    confirm_families: tuple[str, ...] = CONFIRM_FAMILIES
    """Families (CONFIRM_FAMILIES) whose failed check is run once more, within the run's
    budget, before the verdict: failed twice is a confirmed failure, failed then passed a
    `flaky` warning with both figures (never a drain). () condemns on the first failure."""

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
    weakened_because: str | None = None
    """Why a profile file turns off hardware facts of the profile it derives from (a half node
    on purpose): without it such a file is refused (harness.profiles.check)."""
    weakened: tuple[str, ...] = ()
    """What the profile file turned off, one line each (`num_gpus 8 -> 4`): worked out by the
    loader, shown in the run header, `preflight profiles` and report.json."""
    derived_from: dict[str, object] = field(default_factory=dict)
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
        data["weakened"] = list(self.weakened)
        return data
