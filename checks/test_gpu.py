"""GPU health from the inventory (NVML, else nvidia-smi): count and model, memory errors, heat,
persistence, PCIe, driver and CUDA versions, lost GPUs. Every bad GPU is named by index, bus id
and serial with the action it needs: replace node, reboot, reset GPU, or monitor.

The other GPU checks: the kernel log (test_gpu_kernel_log.py: XIDs, SXids), NVLink and the
NVSwitch fabric (test_gpu_nvlink.py), DCGM and compute sanity (test_gpu_diag.py), XIDs in the
recent window (test_xid.py); what they share is in gpu_common.py."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from checks.gpu_common import ACTION_REMEDY, judge_gpus, reader
from harness.base.errors import ProbeError
from harness.base.gpu import (
    ecc_problems,
    remap_problems,
    reset_problems,
    retirement_problems,
    thermal_problems,
)
from harness.base.gpu_actions import MONITOR, RESET, Problem
from harness.base.gpu_facts import explain_other, explain_reads
from harness.base.gpu_pcie import (
    pcie_host_note,
    pcie_link_gen_max,
    pcie_problems,
    pcie_slot_limit,
    pcie_slot_outliers,
)
from harness.base.gpu_record import GpuInfo, GpuInventory, gpu_label
from harness.checking import check, expect, measure, warn
from harness.fixtures.gpu import require_gpus
from harness.profiles.model import Profile

#: The facts each inventory check judges (harness.base.gpu_facts): `explain` lists them, the judge
#: reads them, the generated test removes each in turn (tests/test_gpu_facts_generated.py).
READS = {
    "PF-GPU-002": ("model", "memory"),
    "PF-GPU-003": ("ecc_mode", "ecc_volatile", "ecc_aggregate"),
    "PF-GPU-004": ("remap_pending", "remap_failure"),
    "PF-GPU-005": ("retired_pending", "retired_dbe"),
    "PF-GPU-007": ("temperature", "clock_reasons"),
    "PF-GPU-008": ("persistence",),
    "PF-GPU-009": ("pstate", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max"),
    "PF-GPU-016": ("reset_state",),
}


@check(
    "PF-GPU-001",
    title="All the profile's GPUs are visible",
    why="A GPU that fell off the bus, failed to initialise or is hidden from the container "
    "leaves the job with fewer ranks than planned, or hangs it.",
    remedy="check --gpus / NVIDIA_VISIBLE_DEVICES, then the kernel log for Xid 79; reboot, "
    "replace the node if the GPU stays missing",
    reads=explain_other(
        ["the GPU list: NVML nvmlDeviceGetCount and a handle per GPU; else nvidia-smi `-q -x`, "
         "`-q` (one section per GPU, `Attached GPUs`) or the `--query-gpu` CSV (one row per "
         "GPU)"],
        "no source answering is an error naming each source and why; a source that shows "
        "fewer GPUs than its own `Attached GPUs` is not read (the next one is tried)",
        "nothing: every GPU profile has GPUs (local-cpu: not applicable)"),
)
def test_gpu_count_matches_profile(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    expect("GPUs visible", len(gpu_inventory.gpus), ">=", profile.num_gpus, "GPUs",
           detail=f"from {gpu_inventory.source}", name="gpus_visible")


@check(
    "PF-GPU-002",
    title="GPU model and memory size are the profile's",
    why="A node of another type (or a GPU with part of its memory gone) runs the wrong code "
    "paths and runs out of memory where the plan assumed more.",
    remedy="run with the --profile of this instance type, or replace the node",
    reads=explain_reads(READS["PF-GPU-002"]),
)
def test_gpu_model_matches_profile(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    model, floor = profile.gpu_model, profile.gpu_memory_gib_min
    facts = (("model",) if model else ()) + (("memory",) if floor is not None else ())

    def wrong(g: GpuInfo) -> list[Problem]:
        out = []
        if model and g.name is not None and model.lower() not in g.name.lower():
            out.append(Problem(g.index, f"{g.name}, not {model}", RESET))
        mem = g.memory_total_gib
        if floor is not None and mem is not None and mem < floor:
            out.append(Problem(g.index, f"{mem:g} GiB < {floor:g} GiB of memory", RESET))
        return out

    judge_gpus("GPUs of the wrong model or memory size", gpu_inventory, profile, facts, wrong,
               actions=False)


@check(
    "PF-GPU-003",
    title="No uncorrected ECC errors; ECC enabled",
    why="An uncorrected (double-bit) ECC error corrupted data or killed a process since the "
    "driver loaded; with ECC off, memory errors go unnoticed.",
    remedy="see the action named for each GPU",
    reads=explain_reads(READS["PF-GPU-003"]),
)
def test_no_uncorrected_ecc(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    for g in gpu_inventory.gpus:
        measure(f"GPU {g.index} uncorrected ECC (volatile)", g.ecc_uncorrected_volatile, "errors",
                gpu_index=g.index, name="gpu_uncorrected_ecc_volatile")
    judge_gpus("GPUs with uncorrected ECC errors", gpu_inventory, profile, READS["PF-GPU-003"],
               lambda g: ecc_problems(g, require_ecc=True))


@check(
    "PF-GPU-004",
    title="No pending or failed HBM row remapping",
    why="A pending remap means a bad memory row is still in use until the GPU is reset; a "
    "failed remap means the GPU has no spare rows left (A100 and later).",
    remedy="see the action named for each GPU",
    reads=explain_reads(READS["PF-GPU-004"]),
)
def test_no_row_remap_pending_or_failed(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    judge_gpus("GPUs with pending or failed row remapping", gpu_inventory, profile,
               READS["PF-GPU-004"], remap_problems)


@check(
    "PF-GPU-005",
    title="No pending page retirement",
    why="A page marked for retirement stays in use until the driver reloads (pre-A100 GPUs).",
    remedy="see the action named for each GPU",
    reads=explain_reads(READS["PF-GPU-005"]),
)
def test_no_pending_page_retirement(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    judge_gpus("GPUs with pending page retirement", gpu_inventory, profile,
               READS["PF-GPU-005"], retirement_problems)


@check(
    "PF-GPU-007",
    title="GPU temperature and clock slowdowns",
    why="A GPU that is already hot, or whose clocks are cut by a thermal or power-brake "
    "slowdown, runs a fraction of its speed and drags every collective with it.",
    remedy="see the action named for each GPU",
    reads=explain_reads(READS["PF-GPU-007"]),
)
def test_gpu_not_hot_or_throttled(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    for g in gpu_inventory.gpus:
        if g.temperature_c is not None:
            measure(f"GPU {g.index} temperature", g.temperature_c, "C", op="<=",
                    threshold=profile.max_gpu_temp_c, ok=g.temperature_c <= profile.max_gpu_temp_c,
                    gpu_index=g.index, name="gpu_temperature")
    judge_gpus("GPUs too hot or slowed down", gpu_inventory, profile, READS["PF-GPU-007"],
               lambda g: thermal_problems(g, profile.max_gpu_temp_c))


@check(
    "PF-GPU-008",
    title="Persistence mode is on",
    why="Without persistence mode the driver tears GPU state down between processes: slow "
    "start-up, and DCGM reports it as a deployment failure.",
    remedy="run `nvidia-smi -pm 1` as root (or start nvidia-persistenced) on the host",
    reads=explain_reads(READS["PF-GPU-008"]),
)
def test_persistence_mode_on(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    judge_gpus("GPUs without persistence mode", gpu_inventory, profile, READS["PF-GPU-008"],
               lambda g: [Problem(g.index, "persistence mode off", RESET)]
               if g.persistence_mode is False else [], actions=False)


@check(
    "PF-GPU-009",
    title="PCIe links at their maximum width and generation",
    why="A link trained down (x8 instead of x16, gen 4 in a gen 5 slot) halves host-device and "
    "GPUDirect RDMA bandwidth; it usually means a bad riser, cable or seat. The generation is "
    "judged against the lower of the GPU's and the slot's maximum: a slot older than the GPU "
    "(a PCIe Gen6 B200 in a Gen5 host) is the host's design, recorded, not a fault.",
    remedy="see the action named for each GPU",
    reads=explain_reads(READS["PF-GPU-009"]),
)
def test_pcie_link_at_max(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    for g in gpu_inventory.gpus:
        link_max = pcie_link_gen_max(g)
        if link_max is not None:
            notes = [n for n in (pcie_slot_limit(g), pcie_host_note(g)) if n]
            measure(f"GPU {g.index} PCIe link max gen" + (f" ({'; '.join(notes)})" if notes
                                                          else ""), link_max,
                    name="gpu_pcie_link_max_gen")
    outliers = [(gpu_label(gpu_inventory.by_index(p.gpu)), p.what, p.action)
                for p in pcie_slot_outliers(gpu_inventory)]
    judge_gpus("GPUs with a degraded PCIe link", gpu_inventory, profile, READS["PF-GPU-009"],
               pcie_problems, outliers)


@check(
    "PF-GPU-011",
    title="NVIDIA driver and CUDA versions are the profile's minimum or newer",
    why="Old drivers lack fixes and features the profile's libraries need (CUDA 12 wheels, "
    "EFA GPUDirect RDMA, Blackwell support).",
    remedy="use an AMI / host with a newer NVIDIA driver (the container cannot change it)",
    reads=explain_other(
        ["driver version: NVML nvmlSystemGetDriverVersion; nvidia-smi `Driver Version` (R610: "
         "`KMD Version`); <driver_version>; driver_version",
         "CUDA version: NVML nvmlSystemGetCudaDriverVersion; nvidia-smi `CUDA Version` (R610: "
         "`CUDA UMD Version`); <cuda_version>; the CSV has none"],
        "a version the source did not report, or one that does not parse, is an error",
        "nothing; a version is not judged where the profile sets no minimum"),
)
def test_driver_and_cuda_versions(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    for name, what, found, wanted in (("nvidia_driver", "NVIDIA driver",
                                       gpu_inventory.driver_version, profile.min_driver_version),
                                      ("cuda_version", "CUDA version supported by the driver",
                                       gpu_inventory.cuda_version, profile.min_cuda_version)):
        if wanted is None:
            continue
        if found is None:
            raise ProbeError(f"{gpu_inventory.source} did not report the {what}")
        try:
            expect(what, _Version(found), ">=", _Version(wanted), name=name)
        except InvalidVersion:
            raise ProbeError(f"cannot compare {what} {found!r} with {wanted!r}") from None


class _Version(Version):
    """A version compared as packaging does, shown as written (`535.54.03`, not `535.54.3`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@check(
    "PF-GPU-016",
    title="No GPU is lost or waiting for a reset",
    why="A GPU that answers `[GPU requires reset]` or `GPU is lost` cannot run work at all; "
    "anything scheduled on it fails or hangs.",
    remedy=ACTION_REMEDY[RESET],
    reads=explain_reads(READS["PF-GPU-016"]),
)
def test_no_gpu_requires_reset(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    unreadable = []
    for g in gpu_inventory.gpus:
        if g.unreadable:
            unreadable.append((gpu_label(g), f"{gpu_inventory.source} could not read it at all "
                               f"({'; '.join(g.query_errors)[:200]})", RESET, g.index))
        elif g.query_errors and not g.requires_reset:
            warn(f"{gpu_label(g)}: {reader(gpu_inventory)} could not read: "
                 f"{'; '.join(g.query_errors)[:300]} -> {MONITOR}", remedy=ACTION_REMEDY[MONITOR])
    judge_gpus("GPUs lost or requiring a reset", gpu_inventory, profile, READS["PF-GPU-016"],
               reset_problems, unreadable)
