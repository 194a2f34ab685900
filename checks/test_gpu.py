"""GPU health: count and model, memory errors, XIDs, heat, persistence, PCIe, NVLink, driver,
DCGM diagnostics, and a compute sanity test. Every bad GPU is named by index, bus id and serial
with the action it needs: replace node, reboot, reset GPU, or monitor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from packaging.version import InvalidVersion, Version

from harness.checking import (
    ProbeError,
    check,
    expect,
    expect_none,
    fail,
    measure,
    not_applicable,
    warn,
)
from harness.gpu import (
    MONITOR,
    REBOOT,
    REPLACE,
    RESET,
    GpuInfo,
    GpuInventory,
    Problem,
    ecc_problems,
    gpu_label,
    pcie_link_gen_max,
    pcie_problems,
    pcie_slot_limit,
    pcie_slot_outliers,
    remap_problems,
    reset_problems,
    retirement_problems,
    thermal_problems,
    worst_action,
)
from harness.profiles import Profile

#: What each action means for the operator (the remedy of a failed check names the worst one).
ACTION_REMEDY = {
    REPLACE: "replace node: drain it and take it out of service (Slurm `scontrol update "
    "node=X state=drain`, HyperPod `Action:Replace`; on EC2 a stop/start moves the instance "
    "to another host)",
    REBOOT: "reboot the node (what a GPU reset cannot fix); replace it if the problem returns",
    RESET: "reset GPU: stop its processes and run `nvidia-smi -r -i N` (or reboot); replace "
    "the node if it recurs",
    MONITOR: "monitor: no action now; replace the node if it recurs",
}


#: What PF-GPU-006 and PF-GPU-018 do when the kernel log cannot be read (`explain` shows it).
_UNREADABLE = ("a kernel log that cannot be read (no journal, dmesg_restrict without "
               "CAP_SYSLOG, an empty answer, output that is not a kernel log, a saved file older "
               "than the boot) is a warning in the preflight tier and an error in certify and "
               "diagnose.")


def _remedy(actions: list[str]) -> str:
    worst = worst_action(actions)
    return ACTION_REMEDY[worst] if worst else ""


Found = list[tuple[str, str, str] | tuple[str, str, str, int]]
"""(GPU label, problem, action) per problem found, and the GPU's index when it is known (it
goes into the report as the failed measurement's `gpu_index`)."""


def _judge(what: str, found: Found) -> None:
    """Fail naming every GPU, its problem and action, with the remedy of the worst action;
    monitor-class problems are warnings."""
    fatal = [f for f in found if f[2] != MONITOR]
    for label, problem, action, *_ in found:
        if action == MONITOR:
            warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
    expect_none(what, [f"{label}: {p} -> {a}" for label, p, a, *_ in fatal],
                remedy=_remedy([f[2] for f in fatal]), gpus=[f[3] for f in fatal if len(f) > 3])


def _found(inventory: GpuInventory, problems: Callable[[GpuInfo], list[Problem]]) -> Found:
    """(label, problem, action) of every problem `problems` finds on every GPU."""
    return [(gpu_label(g), p.what, p.action, g.index)
            for g in _judged(inventory) for p in problems(g)]


def _reader(inventory: GpuInventory) -> str:
    """What read the inventory, for messages: `NVML`, `nvidia-smi -q` ..."""
    return "NVML" if inventory.source == "nvml" else inventory.source


def _judged(inventory: GpuInventory) -> tuple[GpuInfo, ...]:
    """The GPUs a per-GPU check judges; ProbeError when the source listed none (an empty answer
    proves no GPU healthy: PF-GPU-001 compares the count with the profile)."""
    if not inventory.gpus:
        raise ProbeError(f"{inventory.source} lists no GPU, so there is nothing to judge "
                         "(PF-GPU-001 names the count)")
    return inventory.gpus


def _unread(inventory: GpuInventory) -> list[str]:
    """GPUs the source could not read at all (their facts are unknown, not healthy)."""
    return [f"{gpu_label(g)} ({'; '.join(g.query_errors)[:200]})"
            for g in inventory.gpus if g.unreadable]


def _judge_all(what: str, inventory: GpuInventory, found: Found) -> None:
    """`_judge`, then an error when nothing failed but some GPU could not be read at all."""
    fatal = [f for f in found if f[2] != MONITOR]
    unread = _unread(inventory)
    if unread and not fatal:
        for label, problem, action, *_ in found:
            warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
        raise ProbeError(f"{what}: not known for {len(unread)} GPU(s) {inventory.source} could "
                         f"not read: {'; '.join(unread)}")
    _judge(what, found)


def _inventory_or_none(request: pytest.FixtureRequest) -> GpuInventory | None:
    """The GPU inventory to name GPUs with, when it can be had (a check whose own fact came
    from another tool still runs when NVML is broken)."""
    try:
        return request.getfixturevalue("gpu_inventory")
    except Exception:
        return None


def _require_gpus(profile: Profile) -> None:
    if not profile.has_gpus:
        not_applicable("the profile expects no GPUs")


@check(
    "PF-GPU-001",
    title="All the profile's GPUs are visible",
    why="A GPU that fell off the bus, failed to initialise or is hidden from the container "
    "leaves the job with fewer ranks than planned, or hangs it.",
    remedy="check --gpus / NVIDIA_VISIBLE_DEVICES, then the kernel log for Xid 79; reboot, "
    "replace the node if the GPU stays missing",
)
def test_gpu_count_matches_profile(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    expect("GPUs visible", len(gpu_inventory.gpus), ">=", profile.num_gpus, "GPUs",
           detail=f"from {gpu_inventory.source}")


@check(
    "PF-GPU-002",
    title="GPU model and memory size are the profile's",
    why="A node of another type (or a GPU with part of its memory gone) runs the wrong code "
    "paths and runs out of memory where the plan assumed more.",
    remedy="run with the --profile of this instance type, or replace the node",
)
def test_gpu_model_matches_profile(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    wrong = []
    for g in _judged(gpu_inventory):
        if g.name is None and g.requires_reset:
            continue  # a lost GPU answers nothing: PF-GPU-016 reports it
        if profile.gpu_model and profile.gpu_model.lower() not in (g.name or "").lower():
            wrong.append(f"{gpu_label(g)}: {g.name or 'unknown model'}, not {profile.gpu_model}")
        mem, floor = g.memory_total_gib, profile.gpu_memory_gib_min
        if floor is not None and mem is not None and mem < floor:
            wrong.append(f"{gpu_label(g)}: {mem:g} GiB < {floor:g} GiB of memory")
    expect_none("GPUs of the wrong model or memory size", wrong)


@check(
    "PF-GPU-003",
    title="No uncorrected ECC errors; ECC enabled",
    why="An uncorrected (double-bit) ECC error corrupted data or killed a process since the "
    "driver loaded; with ECC off, memory errors go unnoticed.",
    remedy="see the action named for each GPU",
)
def test_no_uncorrected_ecc(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    for g in gpu_inventory.gpus:
        measure(f"GPU {g.index} uncorrected ECC (volatile)", g.ecc_uncorrected_volatile, "errors",
                gpu_index=g.index)
    _judge_all("GPUs with uncorrected ECC errors", gpu_inventory,
               _found(gpu_inventory, lambda g: ecc_problems(g, require_ecc=True)))


@check(
    "PF-GPU-004",
    title="No pending or failed HBM row remapping",
    why="A pending remap means a bad memory row is still in use until the GPU is reset; a "
    "failed remap means the GPU has no spare rows left (A100 and later).",
    remedy="see the action named for each GPU",
)
def test_no_row_remap_pending_or_failed(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    _judge_all("GPUs with pending or failed row remapping", gpu_inventory,
               _found(gpu_inventory, remap_problems))


@check(
    "PF-GPU-005",
    title="No pending page retirement",
    why="A page marked for retirement stays in use until the driver reloads (pre-A100 GPUs).",
    remedy="see the action named for each GPU",
)
def test_no_pending_page_retirement(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    _judge_all("GPUs with pending page retirement", gpu_inventory,
               _found(gpu_inventory, retirement_problems))


@check(
    "PF-GPU-006",
    title="No XID error that needs a reset, reboot or replacement since boot",
    why="XIDs are the driver's record of GPU faults: 79 (fallen off the bus), 48 (double-bit "
    "ECC), 74 (NVLink), 54 ... each needs its action before the GPU can be trusted again. "
    + "No Xid line counts as no XID only in text that is positively a kernel log; " + _UNREADABLE,
    remedy="see the action named for each GPU (XID catalogue: harness/gpu.py)",
)
def test_no_serious_xid(profile: Profile, tier: str, request: pytest.FixtureRequest):
    _require_gpus(profile)
    log = _kernel_log(request, tier, "XIDs")
    if log is None:
        return
    xid_events = log.events
    inventory = _inventory_or_none(request)
    grouped: dict[tuple[str, int], list[Any]] = {}
    for event in xid_events:
        grouped.setdefault((event.pci, event.xid), []).append(event)
    found: Found = []
    for (pci, xid), events in grouped.items():
        gpu = inventory.by_pci(pci) if inventory else None
        times = f" x{len(events)}" if len(events) > 1 else ""
        # One code can need different actions by its text (a Fatal and a Nonfatal NVLink5 Xid,
        # 94 with RST: Yes or No): the GPU needs the worst of them; show that event's text.
        action = worst_action([e.action for e in events]) or events[-1].action
        text = next(e for e in reversed(events) if e.action == action).message[:100]
        found.append((gpu_label(gpu, bus_id=pci),
                      f"Xid {xid}{times}" + (f" ({text})" if text else ""), action))
    _measure_log(log, "XID events", len(xid_events))
    _judge(f"XID errors (kernel log: {log.source or 'given'}, {log.window})", found)


def _kernel_log(request: pytest.FixtureRequest, tier: str, what: str) -> Any | None:
    """The kernel log (a KernelLog); None when it cannot be read in the preflight tier. Many
    training containers may read neither the journal nor dmesg (dmesg_restrict, no
    CAP_SYSLOG): failing every job for that would make the preflight unusable there, so the
    preflight tier warns; certify and diagnose, run where the log is readable, error."""
    try:
        return request.getfixturevalue("kernel_log")
    except ProbeError as exc:
        if tier != "preflight":
            raise
        warn(f"{what} not judged: {exc}", remedy="mount the host journal or set "
             "PREFLIGHT_KERNEL_LOG to a copy of the kernel log; `--tier certify` treats this as "
             "an error")
        return None


def _measure_log(log: Any, what: str, count: int) -> None:
    """Record what the judged events came from (the tool or the PREFLIGHT_KERNEL_LOG file) and
    the window it covers, then the event count."""
    measure("kernel log", log.source or "given", "")
    measure("kernel log window", log.window, "")
    measure(f"{what} in the kernel log", count, "events")


@check(
    "PF-GPU-007",
    title="GPU temperature and clock slowdowns",
    why="A GPU that is already hot, or whose clocks are cut by a thermal or power-brake "
    "slowdown, runs a fraction of its speed and drags every collective with it.",
    remedy="see the action named for each GPU",
)
def test_gpu_not_hot_or_throttled(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    for g in gpu_inventory.gpus:
        if g.temperature_c is not None:
            measure(f"GPU {g.index} temperature", g.temperature_c, "C", op="<=",
                    threshold=profile.max_gpu_temp_c, ok=g.temperature_c <= profile.max_gpu_temp_c,
                    gpu_index=g.index)
    _judge_all("GPUs too hot or slowed down", gpu_inventory,
               _found(gpu_inventory, lambda g: thermal_problems(g, profile.max_gpu_temp_c)))


@check(
    "PF-GPU-008",
    title="Persistence mode is on",
    why="Without persistence mode the driver tears GPU state down between processes: slow "
    "start-up, and DCGM reports it as a deployment failure.",
    remedy="run `nvidia-smi -pm 1` as root (or start nvidia-persistenced) on the host",
)
def test_persistence_mode_on(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    off = [f"{gpu_label(g)}: persistence mode "
           f"{'off' if g.persistence_mode is False else 'not reported'}"
           for g in _judged(gpu_inventory)
           if not g.persistence_mode and not (g.persistence_mode is None and g.requires_reset)]
    expect_none("GPUs without persistence mode", off)


@check(
    "PF-GPU-009",
    title="PCIe links at their maximum width and generation",
    why="A link trained down (x8 instead of x16, gen 4 in a gen 5 slot) halves host-device and "
    "GPUDirect RDMA bandwidth; it usually means a bad riser, cable or seat. The generation is "
    "judged against the lower of the GPU's and the slot's maximum: a slot older than the GPU "
    "(a PCIe Gen6 B200 in a Gen5 host) is the host's design, recorded, not a fault.",
    remedy="see the action named for each GPU",
)
def test_pcie_link_at_max(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    for g in gpu_inventory.gpus:
        link_max = pcie_link_gen_max(g)
        if link_max is not None:
            slot = pcie_slot_limit(g)
            measure(f"GPU {g.index} PCIe link max gen" + (f" ({slot})" if slot else ""),
                    link_max)
    found = _found(gpu_inventory, pcie_problems)
    found += [(gpu_label(gpu_inventory.by_index(p.gpu)), p.what, p.action)
              for p in pcie_slot_outliers(gpu_inventory)]
    _judge_all("GPUs with a degraded PCIe link", gpu_inventory, found)


@check(
    "PF-GPU-010",
    title="All NVLinks up, with no error counters rising",
    why="A GPU with links down or replay/recovery errors rising slows every all-reduce, and "
    "Xid 74 (NVLink error) usually follows. A link asleep (NVLink low-power idle) is up. "
    "Counters are judged as DCGM's health watch judges them: replay or recovery growth fails, "
    "CRC growth warns below 100/s. Counters that cannot be read (every one NOT_SUPPORTED) are "
    "unknown, never \"no errors\": a warning in the preflight tier, an error in certify and "
    "diagnose.",
    remedy="see the action named for each GPU",
)
def test_nvlinks_up_without_errors(profile: Profile, tier: str, gpu_inventory: GpuInventory,
                                   nvlink_growth: Any):
    _require_gpus(profile)
    if not profile.nvlinks_per_gpu:
        not_applicable(profile.nvlink_na_reason)
    found: Found = []
    for g in _judged(gpu_inventory):
        label = gpu_label(g)
        if g.nvlinks_active is None:
            found.append((label, "NVLink state not reported", RESET))
            continue
        asleep = f", {len(g.nvlinks_sleeping)} asleep" if g.nvlinks_sleeping else ""
        measure(f"GPU {g.index} NVLinks up{asleep}", len(g.nvlinks_active), "links", op=">=",
                threshold=profile.nvlinks_per_gpu,
                ok=len(g.nvlinks_active) >= profile.nvlinks_per_gpu)
        if len(g.nvlinks_active) < profile.nvlinks_per_gpu:
            down = ", ".join(str(n) for n in g.nvlinks_inactive) or "none reported"
            found.append((label, f"{len(g.nvlinks_active)} of {profile.nvlinks_per_gpu} NVLinks "
                          f"up (down: {down})", RESET))
        for link, grew in sorted(nvlink_growth.growth.get(g.index, {}).items()):
            counts = ", ".join(f"{name} +{n}" for name, n in sorted(grew.items()))
            found.append((label, f"NVLink {link} error counters rising ({counts} in "
                          f"{nvlink_growth.interval_s:g} s)",
                          _nvlink_growth_action(grew, nvlink_growth.interval_s)))
    if not [f for f in found if f[2] != MONITOR]:
        unread = [f"{gpu_label(gpu_inventory.by_index(i), i)}: {why}"
                  for i, why in sorted(nvlink_growth.unread.items())]
        if unread:
            for label, problem, action in found:
                warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
            what = f"NVLink error counters not known: {'; '.join(unread)[:1500]}"
            if tier != "preflight":
                raise ProbeError(what)
            warn(what, remedy="run `nvidia-smi nvlink -e` (or `dcgmi diag -r 2`) on the node "
                 "to read them; `--tier certify` treats this as an error")
            return
    _judge("GPUs with NVLink problems", found)


def _nvlink_growth_action(grew: dict[str, int], interval_s: float) -> str:
    """DCGM's NVLink rules (DcgmHealthWatch.cpp, DcgmGPUHardwareLimits.h): replay or recovery
    growth >= 1 fails; CRC growth warns, and fails from 100 per second."""
    from harness.probes.nvml_nvlink import CRC_COUNTERS, CRC_FAIL_PER_S

    if any(name not in CRC_COUNTERS for name in grew):
        return RESET
    rate = max(grew.values()) / max(interval_s, 1e-9)
    return RESET if rate >= CRC_FAIL_PER_S else MONITOR


@check(
    "PF-GPU-011",
    title="NVIDIA driver and CUDA versions are the profile's minimum or newer",
    why="Old drivers lack fixes and features the profile's libraries need (CUDA 12 wheels, "
    "EFA GPUDirect RDMA, Blackwell support).",
    remedy="use an AMI / host with a newer NVIDIA driver (the container cannot change it)",
)
def test_driver_and_cuda_versions(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    for what, found, wanted in (("NVIDIA driver", gpu_inventory.driver_version,
                                 profile.min_driver_version),
                                ("CUDA version supported by the driver",
                                 gpu_inventory.cuda_version, profile.min_cuda_version)):
        if wanted is None:
            continue
        if found is None:
            raise ProbeError(f"{gpu_inventory.source} did not report the {what}")
        try:
            expect(what, _Version(found), ">=", _Version(wanted))
        except InvalidVersion:
            raise ProbeError(f"cannot compare {what} {found!r} with {wanted!r}") from None


class _Version(Version):
    """A version compared as packaging does, shown as written (`535.54.03`, not `535.54.3`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


#: DCGM tests whose failure is a setting of the node, not a fault of the GPU.
_DCGM_SOFTWARE = {"software", "denylist", "nvml library", "cuda main library",
                  "permissions and os blocks", "persistence mode", "environment variables",
                  "graphics processes", "inforom", "deployment", "dcgmi"}


@check(
    "PF-GPU-012",
    title="DCGM diagnostics pass at the tier's level",
    why="`dcgmi diag` exercises memory, PCIe, NVLink, compute and power with NVIDIA's own "
    "pass/fail thresholds (r1 in preflight, r2/r3 in certify and diagnose).",
    remedy="see the action named for each GPU; DCGM's message says what it measured",
    exclusive=True,
)
def test_dcgm_diag_passes(profile: Profile, tier: str, request: pytest.FixtureRequest):
    _require_gpus(profile)
    level = profile.dcgm_level.get(tier, 1)
    if level <= 0:
        not_applicable(f"the profile sets dcgm_level {level} for tier {tier} (DCGM not run)")
    # DCGM's result first: it is what is judged. The inventory only names the GPUs, with what
    # time is left (a hung nvidia-smi must not use up dcgmi's time: issue 12).
    dcgm_diag: Any = request.getfixturevalue("dcgm_diag")
    inventory = _inventory_or_none(request)
    found = []
    for r in dcgm_diag.failed:
        gpu = inventory.by_index(r.gpu) if inventory and r.gpu is not None else None
        action = "fix the setting DCGM names" if r.test.lower() in _DCGM_SOFTWARE else RESET
        who = gpu_label(gpu, r.gpu) if r.gpu is not None else "node"
        found.append((f"{who}: {r.test}: {r.message or 'failed'} -> {action}", action))
    found += [(f"node: dcgmi: {e}", RESET) for e in dcgm_diag.errors]
    for w in dcgm_diag.warnings:
        warn(f"dcgmi diag -r {level}: {w}")
    version = f"DCGM {dcgm_diag.dcgm_version}" if dcgm_diag.dcgm_version else "DCGM"
    expect_none(f"{version} diag -r {level} failures", [f for f, _ in found],
                remedy=_remedy([a for _, a in found]) or "fix the settings DCGM names")
    if dcgm_diag.passed is None:
        fail(f"dcgmi diag -r {level} ran no GPU test (every test past the deployment checks "
             "was skipped)",
             remedy="run `dcgmi diag -r 1 -v` on the node to see why (MIG mode, permissions)")
    # Results per GPU for some GPUs but none for another: that GPU was not tested at all.
    tested = {r.gpu for r in dcgm_diag.results if r.gpu is not None}
    untested = [gpu_label(g) for g in (inventory.gpus if inventory else ())
                if tested and g.index not in tested and not g.requires_reset]
    if untested:
        raise ProbeError(f"dcgmi diag -r {level} has results for GPUs "
                         f"{', '.join(str(i) for i in sorted(tested))} but none for "
                         f"{'; '.join(untested)}: it did not test them (not in DCGM's group, or "
                         "not visible to nv-hostengine); run `dcgmi discovery -l`")


def _cuda_gpu(result: Any, device: int, inventory: GpuInventory | None) -> GpuInfo | None:
    """The NVML GPU a CUDA device is (by UUID: CUDA's numbering can differ from NVML's)."""
    if inventory is None:
        return None
    uuid = result.uuids.get(device)
    return inventory.by_uuid(uuid) if uuid else inventory.by_index(device)


def _cuda_label(result: Any, device: int, inventory: GpuInventory | None, *,
                short: bool = False) -> str:
    gpu = _cuda_gpu(result, device, inventory)
    if gpu is None:
        return f"CUDA device {device}"
    return f"GPU {gpu.index}" if short else gpu_label(gpu)


def _compute_offenders(result: Any, values: dict[int, float], floor: float, unit: str,
                       inventory: GpuInventory | None, action: str) -> list[str]:
    from harness.probes.gpu_compute import below_floor

    return [f"{_cuda_label(result, device, inventory)}: {value:.1f} {unit} < {floor:g} {unit} "
            f"-> {action}" for device, value in below_floor(values, floor).items()]


def _judge_floor(result: Any, values: dict[int, float], floor: float, what: str, unit: str,
                 inventory: Any) -> None:
    """Record each GPU's figure against `floor`; fail naming every GPU below it (reset)."""
    for device, value in sorted(values.items()):
        measure(f"{_cuda_label(result, device, inventory, short=True)} {what}", round(value, 1),
                unit, op=">=", threshold=floor, ok=value >= floor)
    expect_none(f"GPUs below the {what} floor",
                _compute_offenders(result, values, floor, unit, inventory, RESET))


@check(
    "PF-GPU-013",
    title="bf16 matmul throughput on every GPU at the profile's floor",
    why="A GPU far below its peak (clocks capped, a bad part) makes every data-parallel step "
    "wait for it.",
    remedy=ACTION_REMEDY[RESET],
    exclusive=True,
)
@pytest.mark.gpu
def test_matmul_tflops_at_floor(profile: Profile, compute_sanity: Any,
                                request: pytest.FixtureRequest):
    _require_gpus(profile)
    if profile.min_bf16_tflops is None:
        not_applicable("the profile sets no bf16 TFLOP/s floor")
    _judge_floor(compute_sanity, compute_sanity.tflops, profile.min_bf16_tflops,
                 "bf16 matmul", "TFLOP/s", _inventory_or_none(request))


@check(
    "PF-GPU-014",
    title="The same matmul gives bit-identical results on every GPU",
    why="Silent data corruption: a GPU that computes wrong results without any error "
    "(1.4% of Llama 3's interruptions) poisons training until someone notices the loss.",
    remedy=ACTION_REMEDY[REPLACE],
    exclusive=True,
)
@pytest.mark.gpu
def test_matmul_results_identical(profile: Profile, compute_sanity: Any,
                                  request: pytest.FixtureRequest):
    _require_gpus(profile)
    from harness.probes.gpu_compute import sdc_suspects

    inventory = _inventory_or_none(request)
    suspects = sdc_suspects(compute_sanity.digests)
    expect_none("GPUs whose matmul result differs from the others'",
                [f"{_cuda_label(compute_sanity, i, inventory)}: result digest {d[:12]} differs "
                 f"-> {REPLACE}" for i, d in suspects.items()])


@check(
    "PF-GPU-015",
    title="HBM copy bandwidth on every GPU at the profile's floor",
    why="Low device memory bandwidth (a degraded HBM stack, clocks capped) slows every "
    "memory-bound kernel: attention, optimizers, activations.",
    remedy=ACTION_REMEDY[RESET],
    exclusive=True,
)
@pytest.mark.gpu
def test_hbm_copy_bandwidth_at_floor(profile: Profile, compute_sanity: Any,
                                     request: pytest.FixtureRequest):
    _require_gpus(profile)
    if profile.min_hbm_copy_gb_s is None:
        not_applicable("the profile sets no HBM copy floor")
    _judge_floor(compute_sanity, compute_sanity.copy_gb_s, profile.min_hbm_copy_gb_s,
                 "HBM copy", "GB/s", _inventory_or_none(request))


@check(
    "PF-GPU-016",
    title="No GPU is lost or waiting for a reset",
    why="A GPU that answers `[GPU requires reset]` or `GPU is lost` cannot run work at all; "
    "anything scheduled on it fails or hangs.",
    remedy=ACTION_REMEDY[RESET],
)
def test_no_gpu_requires_reset(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    found = _found(gpu_inventory, reset_problems)
    for g in gpu_inventory.gpus:
        if g.unreadable:
            found.append((gpu_label(g), f"{gpu_inventory.source} could not read it at all "
                          f"({'; '.join(g.query_errors)[:200]})", RESET))
        elif g.query_errors and not g.requires_reset:
            warn(f"{gpu_label(g)}: {_reader(gpu_inventory)} could not read: "
                 f"{'; '.join(g.query_errors)[:300]} -> {MONITOR}", remedy=ACTION_REMEDY[MONITOR])
    _judge("GPUs lost or requiring a reset", found)


@check(
    "PF-GPU-017",
    title="Every GPU registered with the NVSwitch fabric (fabric manager running)",
    why="On NVSwitch systems (p4d, p5, p6) CUDA cannot start on a GPU the fabric manager has not "
    "registered: `cudaErrorSystemNotReady` / error 802, or NCCL falling back off NVLink.",
    remedy=ACTION_REMEDY[REBOOT],
)
def test_nvswitch_fabric_registered(profile: Profile, gpu_inventory: GpuInventory):
    _require_gpus(profile)
    if not profile.nvswitch:
        not_applicable("the profile has no NVSwitch")
    found: Found = []
    for g in _judged(gpu_inventory):
        if g.fabric_state is None:
            continue  # not reported before Hopper: DCGM's software test covers fabric manager
        if g.fabric_state != "Completed" or g.fabric_status not in (None, "Success"):
            found.append((gpu_label(g), f"fabric state {g.fabric_state}, status "
                          f"{g.fabric_status or 'unknown'} (is nvidia-fabricmanager running?)",
                          REBOOT))
    _judge_all("GPUs not registered with the NVSwitch fabric", gpu_inventory, found)


@check(
    "PF-GPU-018",
    title="No fatal NVSwitch SXid error since boot",
    why="A fatal SXid is an NVSwitch (or one of its NVLinks) failing: NVLink traffic through it "
    "stops, NCCL hangs or errors, and the switch and its GPUs must be reset together (Fabric "
    "Manager user guide, error handling). As for PF-GPU-006, " + _UNREADABLE,
    remedy=ACTION_REMEDY[REBOOT],
)
def test_no_fatal_sxid(profile: Profile, tier: str, request: pytest.FixtureRequest):
    _require_gpus(profile)
    if not profile.nvswitch:
        not_applicable("the profile has no NVSwitch")
    log = _kernel_log(request, tier, "NVSwitch SXids")
    if log is None:
        return
    sxid_events = log.sxid_events
    grouped: dict[tuple[int, str, int], list[Any]] = {}
    for event in sxid_events:
        grouped.setdefault((event.switch, event.pci, event.sxid), []).append(event)
    found: Found = []
    for (switch, pci, sxid), events in grouped.items():
        fatal = [e for e in events if e.fatal]
        shown = (fatal or events)[-1]
        times = f" x{len(events)}" if len(events) > 1 else ""
        found.append((f"NVSwitch {switch} (bus {pci})",
                      f"SXid {sxid}{times} ({'Fatal' if fatal else 'Non-fatal'}, "
                      f"{shown.message[:100]})", REBOOT if fatal else MONITOR))
    _measure_log(log, "NVSwitch SXid events", len(sxid_events))
    _judge(f"fatal NVSwitch SXid errors (kernel log: {log.source or 'given'}, {log.window})",
           found)
