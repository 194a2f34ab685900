"""PCIe links of the GPUs: the generation a link can train to (NVML's maximum for the device in
this system; the host's maximum is information), a slot older than its GPU (the host's design,
recorded), a slot below its siblings (a warning), and a busy GPU's link below its maximum."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.base.gpu_actions import MONITOR, REBOOT, Problem

if TYPE_CHECKING:
    from harness.base.gpu_record import GpuInfo, GpuInventory

__all__ = ["idle", "pcie_host_note", "pcie_link_gen_max", "pcie_problems", "pcie_slot_limit",
           "pcie_slot_outliers"]


def idle(gpu: GpuInfo) -> bool:
    """P5..P15: the GPU is idling (nvidia-smi shows P8 for an idle GPU without work). A garbled
    state (`P` and 5,000 digits: int() refuses more than 4,300) is not idle."""
    ps = gpu.performance_state or ""
    digits = ps[1:]
    return (ps.startswith("P") and len(digits) <= 2 and digits.isascii() and digits.isdigit()
            and int(digits) >= 5)


def pcie_link_gen_max(gpu: GpuInfo) -> int | None:
    """The highest generation this GPU's link can train to: NVML's maximum, "possible with this
    device and system" (nvmlDeviceGetMaxPcieLinkGeneration, nvidia-smi's `Max`), where it is
    read: the host's maximum is information only (a real GB300 `-q -x` reports Host Max 4 with
    the link running gen 6). Without it, the lower of the GPU's and the slot's (those reported;
    0 is "not reported", as nvidia-smi prints an unread Host Max). None: none reported."""
    if gpu.pcie_gen_max:
        return gpu.pcie_gen_max
    known = [g for g in (gpu.pcie_gen_device_max, gpu.pcie_gen_host_max) if g]
    return min(known) if known else None


def pcie_host_note(gpu: GpuInfo) -> str | None:
    """`host reports max gen 4 (information)` where nvidia-smi's Host Max differs from the
    maximum judged (pcie_link_gen_max); None otherwise."""
    host, judged = gpu.pcie_gen_host_max, pcie_link_gen_max(gpu)
    if host and judged and host != judged:
        return f"host reports max gen {host} (information; NVML's maximum is judged)"
    return None


def pcie_slot_limit(gpu: GpuInfo) -> str | None:
    """`the slot caps the link at gen 5 (the GPU supports gen 6)` when the slot (or the host's
    root port) supports a lower generation than the GPU; None otherwise. This is the host's
    design (a PCIe Gen6 B200 in a Gen5 server), not a fault: no reset or reboot raises it."""
    link, device = pcie_link_gen_max(gpu), gpu.pcie_gen_device_max
    if link and device and link < device:
        return f"the slot caps the link at gen {link} (the GPU supports gen {device})"
    return None


def pcie_slot_outliers(inventory: GpuInventory) -> list[Problem]:
    """GPUs of one model whose slot gives a lower generation than the slots of the others on
    the node (a riser or a BIOS setting of one slot): a warning, since no reset or reboot of
    the GPU changes it; the host's firmware settings or hardware do."""
    best: dict[str | None, int] = {}
    for g in inventory.gpus:
        link = pcie_link_gen_max(g)
        if link:
            best[g.name] = max(best.get(g.name, 0), link)
    out = []
    for g in inventory.gpus:
        link = pcie_link_gen_max(g)
        if link and link < best[g.name]:
            out.append(Problem(g.index, f"its slot allows PCIe gen {link}, the other slots of "
                                        f"this node gen {best[g.name]} (a riser or the slot's "
                                        "firmware setting: check the host, not the GPU)",
                               MONITOR, fatal=False))
    return out


def pcie_problems(gpu: GpuInfo) -> list[Problem]:
    """A busy GPU's link below its maximum width or generation. The generation is judged
    against the lowest of the GPU's, the slot's and the link's maximum (pcie_link_gen_max): a
    slot older than the GPU is the host's design, reported by pcie_slot_limit, never a problem
    here (no reset or reboot raises a slot). An idle GPU trains its link down to save power
    (gen 1, and on some boards a narrower width: a real L4 at P8 shows x8 of x16), so an idle
    GPU's current link is not judged, nor the current generation of a GPU whose P-state is
    unknown."""
    p: list[Problem] = []
    i = gpu.index
    if idle(gpu):
        return p
    state = f" ({gpu.performance_state})" if gpu.performance_state else ""
    width, width_max = gpu.pcie_width_current, gpu.pcie_width_max
    if width and width_max and width < width_max:
        p.append(Problem(i, f"PCIe link x{width} < x{width_max}{state}", REBOOT))
    gen, gen_max = gpu.pcie_gen_current, pcie_link_gen_max(gpu)
    # Every GPU drops its link to gen 1 when idle: without a P-state (a `--query-gpu` CSV that
    # did not ask for pstate) a low generation is no evidence of a fault.
    if gen and gen_max and gen < gen_max and not p and gpu.performance_state:
        p.append(Problem(i, f"PCIe link at gen {gen} < gen {gen_max}{state}", REBOOT))
    return p
