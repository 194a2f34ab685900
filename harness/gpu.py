"""GPU health vocabulary shared by the NVML probe, the nvidia-smi / DCGM / kernel-log parsers and
the checks: one per-GPU record, the problems a record shows, and the action each needs (the
actions and the XID catalogue live in harness.gpu_actions, re-exported here)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.gpu_actions import (  # re-exported: harness.gpu is the GPU vocabulary's face
    ACTIONS,
    BAD_THROTTLE_REASONS,
    MONITOR,
    REBOOT,
    REPLACE,
    RESET,
    XID_ACTIONS,
    plural,
    worst_action,
    xid_action,
)
from harness.jsontypes import JSONObject

__all__ = [
    "ACTIONS",
    "BAD_THROTTLE_REASONS",
    "MONITOR",
    "REBOOT",
    "RECOVERY_ACTIONS",
    "REPLACE",
    "RESET",
    "XID_ACTIONS",
    "GpuInfo",
    "GpuInventory",
    "Problem",
    "ecc_problems",
    "gpu_label",
    "health_problems",
    "pci_key",
    "pcie_host_note",
    "pcie_link_gen_max",
    "pcie_problems",
    "pcie_slot_limit",
    "pcie_slot_outliers",
    "plural",
    "remap_problems",
    "reset_problems",
    "retirement_problems",
    "thermal_problems",
    "worst_action",
    "xid_action",
]

_PCI = re.compile(
    r"^(?:PCI:)?(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-9a-fA-F]))?$"
)


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of the spellings NVML, nvidia-smi and the
    kernel use: `00000000:53:00.0`, `0000:53:00`, `PCI:0000:53:00`, `53:00.0`."""
    if not bus_id:
        return None
    m = _PCI.match(bus_id.strip())
    if not m:
        return None
    return int(m["domain"] or "0", 16), int(m["bus"], 16), int(m["dev"], 16)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What one GPU reports about itself. None: the source did not report the fact (not
    supported on this GPU, N/A in nvidia-smi, or the query failed: see `query_errors`)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    bus_id: str | None = None
    memory_total_gib: float | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    retired_pages_pending: bool | None = None
    retired_pages_dbe: int | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] = ()
    """Active clock event reasons, in nvidia-smi's words (`HW Thermal Slowdown`)."""
    power_draw_w: float | None = None
    persistence_mode: bool | None = None
    performance_state: str | None = None
    """`P0` (busy) ... `P8` (idle): PCIe links train down to gen 1 when idle."""
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    """The link's maximum (the lower of what the GPU and the slot support: NVML's
    nvmlDeviceGetMaxPcieLinkGeneration, nvidia-smi's `pcie.link.gen.max`)."""
    pcie_gen_device_max: int | None = None
    """What the GPU itself supports (nvmlDeviceGetGpuMaxPcieLinkGeneration, `Device Max`,
    `pcie.link.gen.gpumax`); above the link's maximum means the slot limits it."""
    pcie_gen_host_max: int | None = None
    """What the slot's root port supports (nvidia-smi's `Host Max`, `pcie.link.gen.hostmax`;
    NVML has no call for it). 0 or None: not reported."""
    pcie_width_current: int | None = None
    pcie_width_max: int | None = None
    nvlinks_active: tuple[int, ...] | None = None
    """Link numbers that are up: active, or asleep (NVLink low-power idle, woken by traffic);
    None when NVLink is not reported."""
    nvlinks_sleeping: tuple[int, ...] = ()
    """The up links in state SLEEP (NVML_NVLINK_STATE_SLEEP): up, not down."""
    nvlinks_inactive: tuple[int, ...] = ()
    """Links down: inactive, or active with traffic disabled."""
    nvlink_errors: dict[int, dict[str, int]] = field(default_factory=dict)
    """link -> {counter: value}: `replay`, `recovery`, `crc_flit`, `crc_data` (before
    Blackwell), `recovery_successful`, `recovery_failed`, `recovery_events` (NVLink5)."""
    fabric_state: str | None = None
    """NVSwitch fabric registration (fabric manager): `Completed`, `In Progress`, `Not Started`;
    None where the GPU does not report it (pre-Hopper, PCIe GPUs)."""
    fabric_status: str | None = None
    """`Success`, or the error the fabric manager returned."""
    recovery_action: str | None = None
    """What the driver says the GPU needs (R575+: `GPU Reset`, `Node Reboot`, `Drain P2P`,
    `Drain and Reset` ...); None when it needs nothing or does not say."""
    requires_reset: bool = False
    """The GPU is lost or says it needs a reset (`[GPU requires reset]`, Reset Required: Yes)."""
    query_errors: tuple[str, ...] = ()

    @property
    def unreadable(self) -> bool:
        """The source could not read this GPU at all: no name, UUID or bus id, and errors saying
        why. Its facts are unknown, never healthy (a lost GPU is `requires_reset` instead)."""
        return (bool(self.query_errors) and not self.requires_reset and self.name is None
                and self.uuid is None and self.bus_id is None)

    def to_dict(self) -> JSONObject:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True, slots=True)
class GpuInventory:
    """Every GPU of the node, from one source (`nvml`, `nvidia-smi -q`, `nvidia-smi csv`)."""

    source: str
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuInfo, ...]
    num_attached: int | None = None
    """How many GPUs the source says the node has (nvidia-smi's `Attached GPUs`), when it says."""

    def by_pci(self, bus_id: str | None) -> GpuInfo | None:
        """The GPU at a PCI address, in any spelling (see `pci_key`)."""
        key = pci_key(bus_id)
        if key is None:
            return None
        for gpu in self.gpus:
            gkey = pci_key(gpu.bus_id)
            # The kernel prints a 4-digit domain, NVML an 8-digit one: compare bus and device,
            # and the domain only where both sides give one that is not zero.
            if gkey and gkey[1:] == key[1:] and (not gkey[0] or not key[0] or gkey[0] == key[0]):
                return gpu
        return None

    def by_index(self, index: int | None) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    def by_uuid(self, uuid: str | None) -> GpuInfo | None:
        """The GPU with this UUID (`GPU-5b3e...`; the `GPU-` prefix is optional)."""
        if not uuid:
            return None
        want = uuid.lower().removeprefix("gpu-")
        return next((g for g in self.gpus
                     if g.uuid and g.uuid.lower().removeprefix("gpu-") == want), None)


def gpu_label(gpu: GpuInfo | None, index: int | None = None, bus_id: str | None = None) -> str:
    """`GPU 3 (bus 00000000:53:00.0, serial 1654922010387)`: how every message names a GPU."""
    if gpu is None:
        if index is None:
            return f"GPU at bus {bus_id}" if bus_id else "GPU (unknown)"
        return f"GPU {index} (bus {bus_id})" if bus_id else f"GPU {index}"
    return f"GPU {gpu.index} (bus {gpu.bus_id or '?'}, serial {gpu.serial or 'unknown'})"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one GPU and the action it needs."""

    gpu: int
    what: str
    action: str
    fatal: bool = True
    """False: worth a warning, not a failure (historic counts, monitor-class signals)."""


def health_problems(gpu: GpuInfo, *, max_temp_c: float | None = None,
                    require_ecc: bool = False) -> list[Problem]:
    """Every problem one GPU record shows (what `inspect nvidia-smi` lists); the checks judge
    the same facts, one check per kind."""
    return [*reset_problems(gpu), *ecc_problems(gpu, require_ecc=require_ecc),
            *remap_problems(gpu), *retirement_problems(gpu),
            *thermal_problems(gpu, max_temp_c), *pcie_problems(gpu)]


#: The driver's GPU recovery actions (nvmlGpuRecoveryAction_t, `GPU Recovery Action` in
#: nvidia-smi) -> our action.
RECOVERY_ACTIONS = {"gpu reset": RESET, "drain p2p": RESET, "drain and reset": RESET,
                    "bus reset": RESET, "node reboot": REBOOT, "system reboot": REBOOT,
                    "recover imex domain": REBOOT}


def reset_problems(gpu: GpuInfo) -> list[Problem]:
    """A GPU that is lost, says it needs a reset, or names a recovery action."""
    p: list[Problem] = []
    if gpu.requires_reset:
        p.append(Problem(gpu.index, "GPU is lost or requires a reset", RESET))
    if gpu.recovery_action:
        action = RECOVERY_ACTIONS.get(gpu.recovery_action.lower(), RESET)
        p.append(Problem(gpu.index, f"the driver asks for recovery: {gpu.recovery_action}",
                         action))
    return p


def ecc_problems(gpu: GpuInfo, *, require_ecc: bool = False) -> list[Problem]:
    """Uncorrected ECC errors since the driver loaded (reset), or only in the GPU's lifetime
    (monitor); ECC turned off where the profile's GPUs have it (`require_ecc`)."""
    p: list[Problem] = []
    if require_ecc and gpu.ecc_enabled is False:
        p.append(Problem(gpu.index, "ECC is disabled (enable: nvidia-smi -e 1, then reboot)",
                         REBOOT))
    errors = "uncorrected ECC error"
    if gpu.ecc_uncorrected_volatile:
        p.append(Problem(gpu.index, f"{plural(gpu.ecc_uncorrected_volatile, errors)} since the "
                                    "driver loaded", RESET))
    elif gpu.ecc_uncorrected_aggregate:
        p.append(Problem(gpu.index, f"{plural(gpu.ecc_uncorrected_aggregate, errors)} in its "
                                    "lifetime, none since the driver loaded", MONITOR,
                         fatal=False))
    return p


def remap_problems(gpu: GpuInfo) -> list[Problem]:
    """HBM row remapping (A100 and later): failed (no spare rows) or pending a reset."""
    p: list[Problem] = []
    if gpu.remapped_rows_failure:
        p.append(Problem(gpu.index, "row remapping failed (no spare rows left)", REPLACE))
    if gpu.remapped_rows_pending:
        p.append(Problem(gpu.index, "row remapping pending (applied at the next GPU reset)",
                         RESET))
    return p


def retirement_problems(gpu: GpuInfo) -> list[Problem]:
    """Page retirement (before A100): pending a reset, or pages already retired for DBEs."""
    p: list[Problem] = []
    if gpu.retired_pages_pending:
        p.append(Problem(gpu.index, "page retirement pending (applied at the next GPU reset)",
                         RESET))
    if gpu.retired_pages_dbe:
        p.append(Problem(gpu.index, f"{plural(gpu.retired_pages_dbe, 'page')} retired for "
                                    "double-bit ECC errors", MONITOR, fatal=False))
    return p


def thermal_problems(gpu: GpuInfo, max_temp_c: float | None) -> list[Problem]:
    """Too hot, or clocks slowed by heat or a power brake. Neither is fixed by a reset: the
    host's cooling or power delivery is at fault, so the node is replaced (on a cloud instance,
    a stop/start moves it to another host)."""
    p: list[Problem] = []
    t = gpu.temperature_c
    if max_temp_c is not None and t is not None and t > max_temp_c:
        p.append(Problem(gpu.index, f"temperature {t:g} C > {max_temp_c:g} C", REPLACE))
    bad = sorted(BAD_THROTTLE_REASONS.intersection(gpu.throttle_reasons))
    if bad:
        p.append(Problem(gpu.index, "clocks slowed by " + ", ".join(bad), REPLACE))
    return p


def _idle(gpu: GpuInfo) -> bool:
    """P5..P15: the GPU is idling (nvidia-smi shows P8 for an idle GPU without work)."""
    ps = gpu.performance_state or ""
    return ps.startswith("P") and ps[1:].isascii() and ps[1:].isdigit() and int(ps[1:]) >= 5


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
    if _idle(gpu):
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
