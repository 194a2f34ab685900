"""NVLink and the NVSwitch fabric: every link up with no error counter rising (PF-GPU-010),
every GPU registered with the fabric manager (PF-GPU-017)."""

from __future__ import annotations

from checks.gpu_common import ACTION_REMEDY, Found, judge, judge_all, judged
from harness.checking import ProbeError, check, measure, not_applicable, warn
from harness.fixtures.gpu import require_gpus
from harness.gpu import MONITOR, REBOOT, RESET, GpuInventory, gpu_label
from harness.probes.nvml_nvlink import CRC_COUNTERS, CRC_FAIL_PER_S, NvlinkCounters
from harness.profiles import Profile


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
                                   nvlink_growth: NvlinkCounters):
    require_gpus(profile)
    if not profile.nvlinks_per_gpu:
        not_applicable(profile.nvlink_na_reason)
    found: Found = []
    for g in judged(gpu_inventory):
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
    judge("GPUs with NVLink problems", found)


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
    why="On NVSwitch systems (p4d, p5, p6) CUDA cannot start on a GPU the fabric manager has not "
    "registered: `cudaErrorSystemNotReady` / error 802, or NCCL falling back off NVLink.",
    remedy=ACTION_REMEDY[REBOOT],
)
def test_nvswitch_fabric_registered(profile: Profile, gpu_inventory: GpuInventory):
    require_gpus(profile)
    if not profile.nvswitch:
        not_applicable("the profile has no NVSwitch")
    found: Found = []
    for g in judged(gpu_inventory):
        if g.fabric_state is None:
            continue  # not reported before Hopper: DCGM's software test covers fabric manager
        if g.fabric_state != "Completed" or g.fabric_status not in (None, "Success"):
            found.append((gpu_label(g), f"fabric state {g.fabric_state}, status "
                          f"{g.fabric_status or 'unknown'} (is nvidia-fabricmanager running?)",
                          REBOOT))
    judge_all("GPUs not registered with the NVSwitch fabric", gpu_inventory, found)


