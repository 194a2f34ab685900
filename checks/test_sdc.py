"""The SDC cross-check inside the node (PF-GPU-020): the same deterministic GEMMs and
reductions on every GPU (on a CPU profile, every gloo rank) must give bit-identical digests.
Its measurements are what the node publishes for the cross-node comparison (PF-CLUSTER-007,
harness/cluster/sdc.py): the workload, each device's digest and the node's majority outputs."""

from __future__ import annotations

import pytest

from checks.gpu_common import ACTION_REMEDY
from harness.base.errors import ProbeError
from harness.base.gpu_actions import REPLACE
from harness.base.gpu_facts import explain_other
from harness.base.gpu_record import GpuInventory, gpu_label
from harness.checking import check, expect_none, measure
from harness.fixtures.reading import Reading
from harness.fixtures.sdc import SdcRun
from harness.probes import sdc
from harness.profiles.model import Profile


def _label(rank: dict, inventory: GpuInventory | None) -> tuple[str, int | None]:
    """(how the check names the device, its nvidia-smi index when known)."""
    device, uuid = rank.get("device"), rank.get("uuid")
    if device is None:
        return f"rank {rank.get('rank')} (CPU)", None
    gpu = None
    if inventory is not None:
        gpu = inventory.by_uuid(uuid) if uuid else inventory.by_index(int(device))
    if gpu is None:
        return f"CUDA device {device}" + (f" ({uuid})" if uuid else ""), None
    return gpu_label(gpu), gpu.index


@check(
    "PF-GPU-020",
    title="SDC cross-check: the same deterministic GEMMs and reductions are bit-identical on "
    "every GPU of the node",
    why="Silent data corruption (a GPU that computes wrong numbers without an error) poisons a "
    "run for days before a loss spike shows it (Meta, 'Detecting silent data corruptions in "
    "the wild'; Google, 'Cores that don't count'). GPUs of one SKU, driver and library stack "
    "run the same cuBLAS kernel on the same inputs and must agree bit for bit "
    "(harness/probes/sdc.py says why and what it cannot prove); the minority is named.",
    remedy=ACTION_REMEDY[REPLACE],
    exclusive=True,
    reads=explain_other(
        ["every rank's digests of chained bf16/fp16/fp32 GEMMs and their fp32 row sums, from "
         "the `sdc` part of the session's torch worker (short work in preflight, long in "
         "certify and diagnose; the gloo ranks on a CPU profile)"],
        "a rank of the launch without a digest is an error naming it: not measured, never a "
        "pass",
        "nothing: one device alone is compared across nodes only (PF-CLUSTER-007)"),
)
def test_sdc_cross_check_in_node(sdc_run: SdcRun, profile: Profile,
                                 request: pytest.FixtureRequest):
    inventory: GpuInventory | None = None
    if profile.has_gpus:  # names the GPUs (NVML index, bus id, serial) when it can be read
        reading: Reading[GpuInventory] = request.getfixturevalue("gpu_inventory_reading")
        inventory = reading.or_none()
    ranks = sorted(sdc_run.ranks, key=lambda r: int(r.get("rank", 0)))
    seen = {int(r.get("rank", -1)) for r in ranks}
    missing = [r for r in range(sdc_run.nproc) if r not in seen]
    if missing or not ranks:
        raise ProbeError(f"SDC cross-check: no digest from rank(s) "
                         f"{', '.join(map(str, missing)) or 'any'} of {sdc_run.nproc}: not "
                         "measured, never a pass")
    specs = {str(r.get("spec")) for r in ranks}
    if len(specs) != 1:
        raise ProbeError(f"SDC cross-check: the ranks ran different workloads {sorted(specs)}")
    labels = {str(r["rank"]): _label(r, inventory) for r in ranks}
    digests = {str(r["rank"]): str(r.get("digest")) for r in ranks}
    good, odd = sdc.majority(digests)
    measure("SDC workload", specs.pop(), name="sdc_workload")
    for r in ranks:
        key = str(r["rank"])
        label, index = labels[key]
        measure(f"{label} SDC digest", digests[key], "sha256", gpu_index=index,
                ok=key not in odd, name="sdc_digest")
    majority_rank = next((r for r in ranks if r.get("digest") == good), ranks[0])
    for name, value in sorted((majority_rank.get("outputs") or {}).items()):
        measure(f"SDC node majority {name}", value, "sha256", name=f"sdc_majority_{name}")
    for name, value in sorted((majority_rank.get("totals") or {}).items()):
        measure(f"SDC node majority {name} fp32 total", value,
                name=f"sdc_majority_{name}_fp32_total")
    if majority_rank.get("sm_count") is not None:
        measure("SDC device SM count", majority_rank["sm_count"], name="sdc_sm_count")
    found = []
    for key in odd:
        rank = next(r for r in ranks if str(r["rank"]) == key)
        label = labels[key][0]
        if good is None:
            found.append(f"{label}: digest {sdc.short(digests[key])} (no strict majority among "
                         f"{len(digests)} devices: the good result cannot be told apart) "
                         f"-> {REPLACE}")
            continue
        diff = sdc.differing_outputs(rank.get("outputs") or {}, majority_rank.get("outputs") or {})
        totals = rank.get("totals") or {}
        ref = majority_rank.get("totals") or {}
        figures = ", ".join(f"{n} total {totals.get(n)!r} vs {ref.get(n)!r}" for n in sorted(ref)
                            if totals.get(n) != ref.get(n))
        found.append(f"{label}: silent data corruption suspected: digest {sdc.short(digests[key])}"
                     f" vs {sdc.short(good)} on {len(digests) - len(odd)} of {len(digests)} "
                     f"devices; differs in {', '.join(diff) or 'the combined digest'}"
                     + (f" ({figures})" if figures else "") + f" -> {REPLACE}")
    expect_none("devices whose deterministic results differ from the node's majority", found,
                name="sdc_devices_differing")
