"""NVLink and the NVSwitch fabric: every link up with no error counter rising (PF-GPU-010),
every GPU registered with the fabric manager (PF-GPU-017)."""

from __future__ import annotations

from checks.gpu_common import ACTION_REMEDY, Found, judge_all, judge_gpus, judged
from harness.base.gpu import fabric_problems
from harness.base.gpu_actions import MONITOR, RESET
from harness.base.gpu_facts import FACTS, explain_reads, fact_state, unread_facts
from harness.base.gpu_record import GpuInventory, gpu_label
from harness.checking import check, measure, not_applicable
from harness.fixtures.gpu import require_gpus
from harness.probes.nvml_nvlink import CRC_COUNTERS, CRC_FAIL_PER_S, NvlinkCounters
from harness.profiles.model import Profile

#: What the NVLink counters are, for `explain` (they come from two NVML samples, not the
#: inventory: harness.probes.nvml_nvlink).
_COUNTERS = ("NVLink error counters: NVML nvmlDeviceGetNvLinkErrorCounter (before Blackwell), "
             "fields 161-163 (NVML_FI_DEV_NVLINK_ERROR_DL_*), 213-215 on compute capability 10+ "
             "(link recovery), read twice 2 s apart on every up link; none readable on a GPU "
             "with links up is an error naming the GPU and what each call answered")


@check(
    "PF-GPU-010",
    title="All NVLinks up, with no error counters rising",
    why="A GPU with links down or replay/recovery errors rising slows every all-reduce, and "
    "Xid 74 (NVLink error) usually follows. A link asleep (NVLink low-power idle) is up. "
    "Counters are judged as DCGM's health watch judges them: replay or recovery growth fails, "
    "CRC growth warns below 100/s. Link states or counters that cannot be read (every one "
    "NOT_SUPPORTED) are unknown, never \"no errors\": an error in every tier.",
    remedy="see the action named for each GPU",
    reads=(*explain_reads(("nvlink_state",)), _COUNTERS),
)
def test_nvlinks_up_without_errors(profile: Profile, gpu_inventory: GpuInventory,
                                   nvlink_growth: NvlinkCounters):
    require_gpus(profile)
    if not profile.nvlinks_per_gpu:
        not_applicable(profile.nvlink_na_reason)
    found: Found = []
    states = {}
    for g in judged(gpu_inventory):
        label = gpu_label(g)
        states[g.index] = [fact_state(FACTS["nvlink_state"], g, gpu_inventory,
                                      profile.not_supported)]
        if g.nvlinks_active is not None:
            asleep = f", {len(g.nvlinks_sleeping)} asleep" if g.nvlinks_sleeping else ""
            measure(f"GPU {g.index} NVLinks up{asleep}", len(g.nvlinks_active), "links",
                    op=">=", threshold=profile.nvlinks_per_gpu,
                    ok=len(g.nvlinks_active) >= profile.nvlinks_per_gpu, name="gpu_nvlinks_up")
            if len(g.nvlinks_active) < profile.nvlinks_per_gpu:
                down = ", ".join(str(n) for n in g.nvlinks_inactive) or "none reported"
                found.append((label, f"{len(g.nvlinks_active)} of {profile.nvlinks_per_gpu} "
                              f"NVLinks up (down: {down})", RESET, g.index))
        for link, grew in sorted(nvlink_growth.growth.get(g.index, {}).items()):
            counts = ", ".join(f"{name} +{n}" for name, n in sorted(grew.items()))
            found.append((label, f"NVLink {link} error counters rising ({counts} in "
                          f"{nvlink_growth.interval_s:g} s)",
                          _nvlink_growth_action(grew, nvlink_growth.interval_s), g.index))
    unknown = unread_facts(gpu_inventory, states)
    unknown += [f"{gpu_label(gpu_inventory.by_index(i), i)}: NVLink error counters not read "
                f"({why})" for i, why in sorted(nvlink_growth.unread.items())]
    judge_all("GPUs with NVLink problems", found, unknown)


def _nvlink_growth_action(grew: dict[str, int], interval_s: float) -> str:
    """DCGM's NVLink rules (DcgmHealthWatch.cpp, DcgmGPUHardwareLimits.h): replay or recovery
    growth >= 1 fails; CRC growth warns, and fails from 100 per second."""
    if any(name not in CRC_COUNTERS for name in grew):
        return RESET
    rate = max(grew.values()) / max(interval_s, 1e-9)
    return RESET if rate >= CRC_FAIL_PER_S else MONITOR


@check(
    "PF-GPU-017",
    title="Every GPU registered with the NVSwitch fabric (fabric manager running)",
    why="On NVSwitch and NVL systems (p5, p6, GB200/GB300) CUDA cannot start on a GPU the fabric "
    "manager (or IMEX / NMX on an NVL domain) has not registered: `cudaErrorSystemNotReady` / "
    "error 802, or NCCL falling back off NVLink. Not started, in progress, and completed with "
    "an error status are all \"not ready\"; a state no source could read is an error.",
    remedy=ACTION_REMEDY[RESET],
    reads=explain_reads(("fabric_state", "fabric_status")),
)
def test_nvswitch_fabric_registered(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    if not profile.nvswitch:
        not_applicable("the profile has no NVSwitch")
    judge_gpus("GPUs whose NVSwitch fabric is not ready", gpu_inventory, profile,
               ("fabric_state", "fabric_status"), fabric_problems)
