"""What the GPU checks share: the action each problem needs, and the judges that fail naming
every GPU with its problem and action, and error naming every fact no source could read
(checks/test_gpu*.py; the fact model is harness.base.gpu_facts)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from harness.base.errors import ProbeError
from harness.base.gpu_actions import MONITOR, REBOOT, REPLACE, RESET, Problem, worst_action
from harness.base.gpu_facts import NOT_SUPPORTED, fact_states, unread_facts
from harness.base.gpu_record import GpuInfo, GpuInventory, gpu_label
from harness.checking import expect_none, measure, not_applicable, warn
from harness.profiles.model import Profile
from harness.results import measurement_name

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
UNREADABLE_LOG = ("a kernel log that cannot be read (no journal, dmesg_restrict without "
                  "CAP_SYSLOG, an empty answer, output that is not a kernel log, a saved file "
                  "older than the boot) is a warning in the preflight tier and an error in "
                  "certify and diagnose. A log read but cut (its last line without a newline, "
                  "output over the cap) is an error in every tier.")


def remedy_for(actions: list[str]) -> str:
    """The remedy of the worst of `actions` ("" when there is none)."""
    worst = worst_action(actions)
    return ACTION_REMEDY[worst] if worst else ""


Found = list[tuple[str, str, str] | tuple[str, str, str, int]]
"""(GPU label, problem, action) per problem found, and the GPU's index when it is known (it
goes into the report as the failed measurement's `gpu_index`)."""


def judge(what: str, found: Found) -> None:
    """Fail naming every GPU, its problem and action, with the remedy of the worst action;
    monitor-class problems are warnings."""
    fatal = [f for f in found if f[2] != MONITOR]
    for label, problem, action, *_ in found:
        if action == MONITOR:
            warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
    # Named by the judged problem (the callers' literal `what`: one per check).
    expect_none(what, [f"{label}: {p} -> {a}" for label, p, a, *_ in fatal],
                remedy=remedy_for([f[2] for f in fatal]), gpus=[f[3] for f in fatal if len(f) > 3],
                name=measurement_name(what))


def found_on(inventory: GpuInventory, problems: Callable[[GpuInfo], list[Problem]]) -> Found:
    """(label, problem, action) of every problem `problems` finds on every GPU."""
    return [(gpu_label(g), p.what, p.action, g.index)
            for g in judged(inventory) for p in problems(g)]


def reader(inventory: GpuInventory) -> str:
    """What read the inventory, for messages: `NVML`, `nvidia-smi -q` ..."""
    return "NVML" if inventory.source == "nvml" else inventory.source


def judged(inventory: GpuInventory) -> tuple[GpuInfo, ...]:
    """The GPUs a per-GPU check judges; ProbeError when the source listed none (an empty answer
    proves no GPU healthy: PF-GPU-001 compares the count with the profile)."""
    if not inventory.gpus:
        raise ProbeError(f"{inventory.source} lists no GPU, so there is nothing to judge "
                         "(PF-GPU-001 names the count)")
    return inventory.gpus


def judge_gpus(what: str, inventory: GpuInventory, profile: Profile, facts: Sequence[str],
               problems: Callable[[GpuInfo], list[Problem]], extra: Found = (), *,
               actions: bool = True) -> None:
    """Judge `facts` (harness.base.gpu_facts keys) on every GPU with `problems`. Not applicable when
    the profile's SKU has none of them (its sourced `not_supported` table); each fact the SKU
    lacks is recorded; a problem fails as `judge` fails (`actions=False`: the offenders without
    an action, the check's own remedy); a fact no source could read on some GPU is an error
    naming the fact, the GPU and the sources tried, unless a problem already fails the check
    (the unread facts are then a warning beside it). Unknown is never healthy."""
    gpus = judged(inventory)
    states = fact_states(inventory, facts, lambda _gpu: profile.not_supported)
    lacking = {s.fact.title: s.detail for ss in states.values() for s in ss
               if s.state == NOT_SUPPORTED}
    if lacking and all(s.state == NOT_SUPPORTED for ss in states.values() for s in ss):
        not_applicable(f"{profile.sku or profile.name} has no {', '.join(lacking)}: "
                       f"{next(iter(lacking.values()))}")
    for title, why in lacking.items():
        measure(f"{title}: not supported on {profile.sku or profile.name}", why,
                name="not_supported_on")
    found: Found = [*((gpu_label(g), p.what, p.action, g.index) for g in gpus
                      for p in problems(g)), *extra]
    judge_all(what, found, unread_facts(inventory, states), actions=actions)


def judge_all(what: str, found: Found, unknown: list[str], *, actions: bool = True) -> None:
    """`judge` (or, without `actions`, the offenders alone), then an error naming every unread
    fact (`unknown`) when nothing failed; when something failed, they are a warning beside the
    failure. Never a pass while a fact is unknown."""
    fatal = [f for f in found if f[2] != MONITOR]
    if unknown and fatal:
        warn(f"{what}: also not known: {'; '.join(unknown)[:1500]}",
             remedy=ACTION_REMEDY[MONITOR])
    if unknown and not fatal:
        for label, problem, action, *_ in found:
            warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
        raise ProbeError(f"{what}: not known (unknown is never healthy): "
                         f"{'; '.join(unknown)[:2000]}")
    if actions:
        judge(what, found)
    else:
        expect_none(what, [f"{label}: {p}" for label, p, *_ in found],
                    gpus=[f[3] for f in found if len(f) > 3], name=measurement_name(what))
