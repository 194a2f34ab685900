"""What the GPU checks share: the action each problem needs, and the judges that fail naming
every GPU with its problem and action (checks/test_gpu*.py)."""

from __future__ import annotations

from collections.abc import Callable

from harness.checking import ProbeError, expect_none, warn
from harness.gpu import (
    MONITOR,
    REBOOT,
    REPLACE,
    RESET,
    GpuInfo,
    GpuInventory,
    Problem,
    gpu_label,
    worst_action,
)

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
    expect_none(what, [f"{label}: {p} -> {a}" for label, p, a, *_ in fatal],
                remedy=remedy_for([f[2] for f in fatal]), gpus=[f[3] for f in fatal if len(f) > 3])


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


def unread(inventory: GpuInventory) -> list[str]:
    """GPUs the source could not read at all (their facts are unknown, not healthy)."""
    return [f"{gpu_label(g)} ({'; '.join(g.query_errors)[:200]})"
            for g in inventory.gpus if g.unreadable]


def judge_all(what: str, inventory: GpuInventory, found: Found) -> None:
    """`judge`, then an error when nothing failed but some GPU could not be read at all."""
    fatal = [f for f in found if f[2] != MONITOR]
    unknown = unread(inventory)
    if unknown and not fatal:
        for label, problem, action, *_ in found:
            warn(f"{label}: {problem} -> {action}", remedy=ACTION_REMEDY[MONITOR])
        raise ProbeError(f"{what}: not known for {len(unknown)} GPU(s) {inventory.source} could "
                         f"not read: {'; '.join(unknown)}")
    judge(what, found)
