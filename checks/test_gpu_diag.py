"""GPU diagnostics that exercise the GPUs: DCGM's `dcgmi diag` at the tier's level (PF-GPU-012),
and the compute sanity test on every GPU: bf16 matmul throughput, bit-identical results, HBM copy
bandwidth (PF-GPU-013..015). Every bad GPU is named by index, bus id and serial."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from checks.gpu_common import ACTION_REMEDY, remedy_for
from harness.base.errors import ProbeError
from harness.base.gpu_actions import REPLACE, RESET
from harness.base.gpu_facts import explain_other
from harness.base.gpu_record import GpuInfo, GpuInventory, gpu_label
from harness.checking import check, expect_none, fail, measure, not_applicable, warn
from harness.fixtures.gpu import require_gpus
from harness.probes.gpu_compute import ComputeResult, below_floor, sdc_suspects

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.fixtures.reading import Reading
    from harness.parsers.dcgm_records import DcgmDiag
    from harness.profiles.model import Profile

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
    reads=explain_other(
        ["`dcgmi diag -r N -j` (N: the profile's dcgm_level for the tier), DCGM 3 or 4 JSON: "
         "every test's result per GPU"],
        "output without a result (empty, truncated, garbled), or results for some GPUs but "
        "none for another, is an error; every GPU test skipped fails",
        "the profile's level 0 for a tier makes the check not applicable there"),
)
def test_dcgm_diag_passes(profile: Profile, tier: str, dcgm_diag: DcgmDiag,
                          gpu_inventory_reading: Reading[GpuInventory]):
    # DCGM's result first (its fixture is the first fact parameter; it is not applicable, and
    # dcgmi not run, where the profile sets level 0 for the tier): it is what is judged. The
    # inventory only names the GPUs, with what time is left (a hung nvidia-smi must not use up
    # dcgmi's time: issue 12).
    require_gpus(profile)
    level = profile.dcgm_level.get(tier, 1)
    inventory = gpu_inventory_reading.or_none()
    found: list[tuple[str, str]] = []
    for r in dcgm_diag.failed:
        gpu = inventory.by_index(r.gpu) if inventory and r.gpu is not None else None
        action = "fix the setting DCGM names" if r.test.lower() in _DCGM_SOFTWARE else RESET
        who = gpu_label(gpu, r.gpu) if r.gpu is not None else "node"
        found.append((f"{who}: {r.test}: {r.reason} -> {action}", action))
    found += [(f"node: dcgmi: {e}", RESET) for e in dcgm_diag.errors]
    for w in dcgm_diag.warnings:
        warn(f"dcgmi diag -r {level}: {w}")
    version = f"DCGM {dcgm_diag.dcgm_version}" if dcgm_diag.dcgm_version else "DCGM"
    expect_none(f"{version} diag -r {level} failures", [f for f, _ in found],
                remedy=remedy_for([a for _, a in found]) or "fix the settings DCGM names",
                name="diag_r_failures")
    if dcgm_diag.passed is None:
        fail(f"dcgmi diag -r {level} ran no GPU test (every test past the deployment checks "
             "was skipped)",
             remedy="run `dcgmi diag -r 1 -v` on the node to see why (MIG mode, permissions)")
    # Results per GPU for some GPUs but none for another: that GPU was not tested at all.
    gpus = [g for g in (inventory.gpus if inventory else ()) if not g.requires_reset]
    missing = set(dcgm_diag.untested(g.index for g in gpus))
    untested = [gpu_label(g) for g in gpus if g.index in missing]
    if untested:
        tested = {r.gpu for r in dcgm_diag.results if r.gpu is not None}
        raise ProbeError(f"dcgmi diag -r {level} has results for GPUs "
                         f"{', '.join(str(i) for i in sorted(tested))} but none for "
                         f"{'; '.join(untested)}: it did not test them (not in DCGM's group, or "
                         "not visible to nv-hostengine); run `dcgmi discovery -l`")


def _cuda_gpu(result: ComputeResult, device: int, inventory: GpuInventory | None) -> GpuInfo | None:
    """The NVML GPU a CUDA device is (by UUID: CUDA's numbering can differ from NVML's)."""
    if inventory is None:
        return None
    uuid = result.uuids.get(device)
    return inventory.by_uuid(uuid) if uuid else inventory.by_index(device)


def _cuda_label(result: ComputeResult, device: int, inventory: GpuInventory | None, *,
                short: bool = False) -> str:
    gpu = _cuda_gpu(result, device, inventory)
    if gpu is None:
        return f"CUDA device {device}"
    return f"GPU {gpu.index}" if short else gpu_label(gpu)


def _compute_offenders(result: ComputeResult, values: dict[int, float], floor: float, unit: str,
                       inventory: GpuInventory | None, action: str) -> list[str]:
    return [f"{_cuda_label(result, device, inventory)}: {value:.1f} {unit} < {floor:g} {unit} "
            f"-> {action}" for device, value in below_floor(values, floor).items()]


def _unmeasured(values: dict[int, object], what: str, profile: Profile,
                inventory: GpuInventory | None) -> None:
    """ProbeError naming the CUDA devices without a figure: the inventory's GPUs (else the
    profile's) are devices 0..n-1, and a device the worker gave nothing for was not measured."""
    expected = len(inventory.gpus) if inventory and inventory.gpus else profile.num_gpus
    missing = [d for d in range(expected) if d not in values]
    if missing:
        raise ProbeError(f"{what}: no figure for CUDA device(s) {', '.join(map(str, missing))} "
                         f"of {expected} (measured: {', '.join(map(str, sorted(values))) or 'none'}"
                         "): not measured, never a pass")


def _judge_floor(result: ComputeResult, values: dict[int, float], floor: float, what: str, unit: str,
                 inventory: GpuInventory | None, name: str, estimate: str | None = None) -> None:
    """Record each GPU's figure against `floor`; fail naming every GPU below it (reset). A
    floor that is an estimate (the profile's `estimates`: no measured or vendor basis) makes a
    GPU below it a warning that names it and the floor's source, never a failure, until the
    floor is measured (docs/gpu.md, "HBM and GEMM floors")."""
    for device, value in sorted(values.items()):
        ok = value >= floor
        measure(f"{_cuda_label(result, device, inventory, short=True)} {what}", round(value, 1),
                unit, op=">=", threshold=floor, ok=ok if ok or estimate is None else None,
                name=name)
    offenders = _compute_offenders(result, values, floor, unit, inventory, RESET)
    if estimate is not None:
        measure(f"GPUs below the estimated {what} floor", len(offenders), "found",
                name=f"gpus_below_the_estimated_{name}_floor")
        if offenders:
            warn(f"GPUs below the estimated {what} floor (an estimate, not a failure until "
                 f"measured; source: {estimate}): {'; '.join(offenders)}",
                 remedy="record this node's figures with scripts/device-check and set the floor "
                 "in a profile file; a GPU far below its peers: reset it")
        return
    expect_none(f"GPUs below the {what} floor", offenders, name=f"gpus_below_the_{name}_floor")


def _estimate(profile: Profile, field: str) -> str | None:
    """The floor's source when the profile marks it as an estimate, else None."""
    return profile.sources.get(field, "estimate") if profile.is_estimate(field) else None


@check(
    "PF-GPU-013",
    family="compute",
    title="bf16 matmul throughput on every GPU at the profile's floor",
    why="A GPU far below its peak (clocks capped, a bad part) makes every data-parallel step "
    "wait for it.",
    remedy=ACTION_REMEDY[RESET],
    exclusive=True,
    reads=explain_other(
        ["bf16 matmul TFLOP/s per CUDA device, from the compute part of the session's torch "
         "worker (a fixed-seed matmul on every GPU at once)"],
        "a GPU of the inventory (else of the profile) without a figure is an error naming "
        "it: not measured, never a pass",
        "the profile sets no min_bf16_tflops: not applicable; a floor the profile marks as an "
        "estimate makes a GPU below it a warning, not a failure, until measured"),
)
@pytest.mark.gpu
def test_matmul_tflops_at_floor(profile: Profile, compute_sanity: ComputeResult,
                                gpu_inventory_reading: Reading[GpuInventory]):
    require_gpus(profile)
    if profile.min_bf16_tflops is None:
        not_applicable("the profile sets no bf16 TFLOP/s floor")
    inventory = gpu_inventory_reading.or_none()
    _judge_floor(compute_sanity, compute_sanity.tflops, profile.min_bf16_tflops,
                 "bf16 matmul", "TFLOP/s", inventory, name="bf16_matmul_tflops",
                 estimate=_estimate(profile, "min_bf16_tflops"))
    _unmeasured(compute_sanity.tflops, "bf16 matmul", profile, inventory)


@check(
    "PF-GPU-014",
    title="The same matmul gives bit-identical results on every GPU",
    why="Silent data corruption: a GPU that computes wrong results without any error "
    "(1.4% of Llama 3's interruptions) poisons training until someone notices the loss.",
    remedy=ACTION_REMEDY[REPLACE],
    exclusive=True,
    reads=explain_other(
        ["the sha256 of every CUDA device's matmul result (same inputs and kernel on each)"],
        "a GPU of the inventory (else of the profile) without a figure is an error naming "
        "it: not measured, never a pass",
        "nothing: one GPU alone cannot be compared (then nothing is judged)"),
)
@pytest.mark.gpu
def test_matmul_results_identical(profile: Profile, compute_sanity: ComputeResult,
                                  gpu_inventory_reading: Reading[GpuInventory]):
    require_gpus(profile)
    inventory = gpu_inventory_reading.or_none()
    suspects = sdc_suspects(compute_sanity.digests)
    if not suspects:
        _unmeasured(compute_sanity.digests, "matmul result digests", profile, inventory)
    expect_none("GPUs whose matmul result differs from the others'",
                [f"{_cuda_label(compute_sanity, i, inventory)}: result digest {d[:12]} differs "
                 f"-> {REPLACE}" for i, d in suspects.items()],
                name="gpus_whose_matmul_result_differs_from_the_others")


@check(
    "PF-GPU-015",
    family="compute",
    title="HBM copy bandwidth on every GPU at the profile's floor",
    why="Low device memory bandwidth (a degraded HBM stack, clocks capped) slows every "
    "memory-bound kernel: attention, optimizers, activations.",
    remedy=ACTION_REMEDY[RESET],
    exclusive=True,
    reads=explain_other(
        ["device-to-device copy GB/s per CUDA device (read and write counted), from the same "
         "worker"],
        "a GPU of the inventory (else of the profile) without a figure is an error naming "
        "it: not measured, never a pass",
        "the profile sets no min_hbm_copy_gb_s: not applicable; an estimated floor (marked in "
        "the profile) warns until measured; DCGM per-SKU floors fail"),
)
@pytest.mark.gpu
def test_hbm_copy_bandwidth_at_floor(profile: Profile, compute_sanity: ComputeResult,
                                     gpu_inventory_reading: Reading[GpuInventory]):
    require_gpus(profile)
    if profile.min_hbm_copy_gb_s is None:
        not_applicable("the profile sets no HBM copy floor")
    inventory = gpu_inventory_reading.or_none()
    _judge_floor(compute_sanity, compute_sanity.copy_gb_s, profile.min_hbm_copy_gb_s,
                 "HBM copy", "GB/s", inventory, name="hbm_copy_gb_s",
                 estimate=_estimate(profile, "min_hbm_copy_gb_s"))
    _unmeasured(compute_sanity.copy_gb_s, "HBM copy", profile, inventory)


