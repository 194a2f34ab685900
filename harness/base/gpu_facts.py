"""The facts the GPU checks judge, and the state of each on one GPU: read (a value, from the
inventory's source), not supported on this SKU (profiles.toml's per-SKU `not_supported` table,
each entry with its source), or unread (the sources tried, and why each gave no value). A check
passes only on facts that are read or not supported: unknown is never healthy.

Each fact names where every source holds it, for `preflight explain` and for the message that
says what was not read: NVML's call, `nvidia-smi -q`'s key path, `-q -x`'s element, the
`--query-gpu` field."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from harness.base.gpu_pcie import idle, pcie_link_gen_max
from harness.base.gpu_record import GpuInfo, GpuInventory, gpu_label

__all__ = ["FACTS", "NOT_SUPPORTED", "READ", "UNREAD", "FactState", "GpuFact", "explain_other",
           "explain_reads", "fact_state", "fact_states", "needed", "not_supported_means",
           "unread_facts", "unread_why"]

READ, NOT_SUPPORTED, UNREAD = "read", "not supported", "unread"


@dataclass(frozen=True, slots=True)
class GpuFact:
    """One fact a check judges on every GPU."""

    key: str
    title: str
    """What it is, in a message: `ECC mode`."""
    group: str
    """Its key in a SKU's `not_supported` table (facts of one feature share it: `ecc`)."""
    nvml: str
    """Where NVML has it."""
    smi: str
    """Where nvidia-smi prints it: `-q` key path; `-q -x` element; `--query-gpu` field."""
    value: Callable[[GpuInfo], object]
    """The GPU's value of it; None: not read."""
    markers: tuple[str, ...] = ()
    """Words of a source's error line about this fact (an NVML call, a -q key, an element)."""
    needed: Callable[[GpuInfo], bool] | None = None
    """When only some GPUs' states make it judged (a busy GPU's current PCIe link); None:
    always."""


def _field(name: str) -> Callable[[GpuInfo], object]:
    return lambda g: getattr(g, name)


def _reset_state(g: GpuInfo) -> object:
    """Read when the reset status or the driver's recovery action (which R575+ prints instead:
    `Reset Required` says `Requested functionality has been deprecated` there) was read."""
    return g.requires_reset if g.requires_reset is not None else g.recovery_action


_BUSY = lambda g: not idle(g)  # noqa: E731 - an idle GPU trains its link down: not judged
_ECC_ON = lambda g: g.ecc_enabled is not False  # noqa: E731 - counts are N/A with ECC off

FACTS: dict[str, GpuFact] = {f.key: f for f in (
    GpuFact("model", "GPU model", "model", "nvmlDeviceGetName",
            "`Product Name`; <product_name>; name", _field("name"),
            ("nvmlDeviceGetName", "product name", "product_name")),
    GpuFact("memory", "memory size", "model", "nvmlDeviceGetMemoryInfo",
            "`FB Memory Usage > Total`; <fb_memory_usage><total>; memory.total",
            _field("memory_total_gib"), ("nvmlDeviceGetMemoryInfo", "fb memory usage", "total")),
    GpuFact("ecc_mode", "ECC mode", "ecc", "nvmlDeviceGetEccMode",
            "`ECC Mode > Current`; <ecc_mode><current_ecc>; ecc.mode.current",
            _field("ecc_enabled"), ("nvmlDeviceGetEccMode", "ecc mode", "current_ecc")),
    GpuFact("ecc_volatile", "uncorrected ECC errors since the driver loaded (volatile)", "ecc",
            "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE_ECC)",
            "`ECC Errors > Volatile > DRAM/SRAM Uncorrectable` (old: `Double Bit > Total`); "
            "<ecc_errors><volatile>; ecc.errors.uncorrected.volatile.total",
            _field("ecc_uncorrected_volatile"),
            ("nvmlDeviceGetTotalEccErrors", "ecc errors > volatile", "volatile"), _ECC_ON),
    GpuFact("ecc_aggregate", "uncorrected ECC errors in the GPU's lifetime (aggregate)", "ecc",
            "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE_ECC)",
            "`ECC Errors > Aggregate > DRAM/SRAM Uncorrectable` (old: `Double Bit > Total`); "
            "<ecc_errors><aggregate>; ecc.errors.uncorrected.aggregate.total",
            _field("ecc_uncorrected_aggregate"),
            ("nvmlDeviceGetTotalEccErrors", "ecc errors > aggregate", "aggregate"), _ECC_ON),
    GpuFact("remap_pending", "row remapping pending", "remap", "nvmlDeviceGetRemappedRows [2]",
            "`Remapped Rows > Pending`; <remapped_rows><remapped_row_pending>; "
            "remapped_rows.pending", _field("remapped_rows_pending"),
            ("nvmlDeviceGetRemappedRows", "remapped rows", "remapped_row")),
    GpuFact("remap_failure", "row remapping failure", "remap", "nvmlDeviceGetRemappedRows [3]",
            "`Remapped Rows > Remapping Failure Occurred`; <remapped_rows><remapped_row_failure>; "
            "remapped_rows.failure", _field("remapped_rows_failure"),
            ("nvmlDeviceGetRemappedRows", "remapped rows", "remapped_row")),
    GpuFact("retired_pending", "page retirement pending", "retired_pages",
            "nvmlDeviceGetRetiredPagesPendingStatus",
            "`Retired Pages > Pending Page Blacklist`; <retired_pages><pending_retirement>; "
            "retired_pages.pending", _field("retired_pages_pending"),
            ("nvmlDeviceGetRetiredPagesPendingStatus", "retired pages", "pending_")),
    GpuFact("retired_dbe", "pages retired for double-bit ECC errors", "retired_pages",
            "nvmlDeviceGetRetiredPages(DOUBLE_BIT_ECC_ERROR)",
            "`Retired Pages > Double Bit ECC`; <retired_pages><double_bit_retirement>; "
            "retired_pages.double_bit.count", _field("retired_pages_dbe"),
            ("nvmlDeviceGetRetiredPages", "retired pages", "double_bit_retirement")),
    GpuFact("temperature", "GPU temperature", "temperature", "nvmlDeviceGetTemperature(GPU)",
            "`Temperature > GPU Current Temp`; <temperature><gpu_temp>; temperature.gpu",
            _field("temperature_c"), ("nvmlDeviceGetTemperature", "gpu current temp", "gpu_temp")),
    GpuFact("clock_reasons", "clock event reasons", "clock_reasons",
            "nvmlDeviceGetCurrentClocksEventReasons (older: ...ThrottleReasons)",
            "`Clocks Event Reasons` (older: `Clocks Throttle Reasons`); <clocks_event_reasons>; "
            "clocks_event_reasons.* (older: clocks_throttle_reasons.*)",
            _field("throttle_reasons"), ("ClocksEventReasons", "ClocksThrottleReasons",
                                         "clocks event reasons", "clocks throttle reasons")),
    GpuFact("persistence", "persistence mode", "persistence", "nvmlDeviceGetPersistenceMode",
            "`Persistence Mode`; <persistence_mode>; persistence_mode",
            _field("persistence_mode"), ("nvmlDeviceGetPersistenceMode", "persistence")),
    GpuFact("pstate", "performance state", "pcie", "nvmlDeviceGetPerformanceState",
            "`Performance State`; <performance_state>; pstate", _field("performance_state"),
            ("nvmlDeviceGetPerformanceState", "performance state", "performance_state")),
    GpuFact("pcie_gen", "PCIe link generation", "pcie", "nvmlDeviceGetCurrPcieLinkGeneration",
            "`PCI > GPU Link Info > PCIe Generation > Current`; <current_link_gen>; "
            "pcie.link.gen.current", _field("pcie_gen_current"),
            ("nvmlDeviceGetCurrPcieLinkGeneration", "pcie generation", "link_gen"), _BUSY),
    GpuFact("pcie_gen_max", "PCIe link maximum generation", "pcie",
            "nvmlDeviceGetMaxPcieLinkGeneration, nvmlDeviceGetGpuMaxPcieLinkGeneration",
            "`PCIe Generation > Max / Device Max / Host Max`; <max_link_gen>; pcie.link.gen.max",
            pcie_link_gen_max, ("PcieLinkGeneration", "pcie generation", "link_gen")),
    GpuFact("pcie_width", "PCIe link width", "pcie", "nvmlDeviceGetCurrPcieLinkWidth",
            "`Link Width > Current`; <current_link_width>; pcie.link.width.current",
            _field("pcie_width_current"),
            ("nvmlDeviceGetCurrPcieLinkWidth", "link width", "link_width"), _BUSY),
    GpuFact("pcie_width_max", "PCIe link maximum width", "pcie", "nvmlDeviceGetMaxPcieLinkWidth",
            "`Link Width > Max`; <max_link_width>; pcie.link.width.max",
            _field("pcie_width_max"),
            ("nvmlDeviceGetMaxPcieLinkWidth", "link width", "link_width")),
    GpuFact("nvlink_state", "NVLink link states", "nvlink",
            "field NVML_FI_DEV_NVLINK_GET_STATE (165) per link, else nvmlDeviceGetNvLinkState",
            "not printed by `nvidia-smi -q` (NVML only)", _field("nvlinks_active"),
            ("NvLinkState", "NVLINK_GET_STATE")),
    GpuFact("reset_state", "reset state", "reset",
            "fields NVML_FI_DEV_RESET_STATUS (226) / DRAIN_AND_RESET_STATUS (227), "
            "GET_GPU_RECOVERY_ACTION (230); a GPU that answers GpuIsLost / ResetRequired",
            "`GPU Reset Status > Reset Required`, `GPU Recovery Action`; <gpu_reset_status>, "
            "<gpu_recovery_action>", _reset_state,
            ("reset", "recovery", "GpuIsLost")),
    GpuFact("fabric_state", "NVSwitch fabric state", "fabric",
            "nvmlDeviceGetGpuFabricInfo: state", "`Fabric > State`; <fabric><state>; "
            "fabric.state", _field("fabric_state"), ("FabricInfo", "fabric")),
    GpuFact("fabric_status", "NVSwitch fabric status", "fabric",
            "nvmlDeviceGetGpuFabricInfo: status (read only once the state is Completed)",
            "`Fabric > Status`; <fabric><status>; fabric.status", _field("fabric_status"),
            ("FabricInfo", "fabric"),
            lambda g: (g.fabric_state or "").lower() == "completed"),
)}

#: What "not supported on this SKU" means for each group of facts (`explain` shows it).
_NOT_SUPPORTED_MEANS = {
    "retired_pages": "page retirement is the pre-Ampere mechanism, replaced by row remapping "
                     "from the NVIDIA Ampere architecture on (every built-in SKU lists it as not "
                     "supported, so PF-GPU-005 is not applicable there)",
    "fabric": "NVML reports fabric registration on Hopper and newer NVSwitch GPUs only (A100 "
              "prints `State : N/A`); on those SKUs the fabric manager is covered by DCGM's "
              "software test",
    "remap": "row remapping exists from the NVIDIA Ampere architecture on",
    "ecc": "a GPU without ECC memory (consumer parts) has no ECC mode or counts",
}


@dataclass(frozen=True, slots=True)
class FactState:
    """One fact on one GPU: read, not supported (`detail`: the SKU table's note and source) or
    unread (`detail`: what the source said about it, "" when it printed no value at `where`)."""

    fact: GpuFact
    state: str
    detail: str = ""
    where: str = ""
    """Where the source that answered holds the fact (an NVML call, nvidia-smi's key)."""


def fact_state(fact: GpuFact, gpu: GpuInfo, inventory: GpuInventory,
               not_supported: Mapping[str, str]) -> FactState:
    """The state of `fact` on `gpu`, read from `inventory`; `not_supported`: the profile's SKU
    table (group -> note and source)."""
    if fact.value(gpu) is not None:
        return FactState(fact, READ)
    if fact.group in not_supported:
        return FactState(fact, NOT_SUPPORTED, not_supported[fact.group])
    where = fact.nvml if inventory.source == "nvml" else fact.smi
    return FactState(fact, UNREAD, _said(fact, gpu), where)


def needed(fact: GpuFact, gpu: GpuInfo) -> bool:
    """Whether the check judges `fact` on this GPU (see GpuFact.needed)."""
    return fact.needed is None or fact.needed(gpu)


def fact_states(inventory: GpuInventory, keys: Sequence[str],
                not_supported: Callable[[GpuInfo], Mapping[str, str]],
                shown: Callable[[GpuInfo], Collection[str]] | None = None,
                ) -> dict[int, list[FactState]]:
    """Each GPU's state of each fact of `keys` it needs (`needed`); `not_supported`: the SKU
    table that applies to a GPU. The GPU checks judge every such fact. `shown` is for an
    excerpt (`preflight inspect`): the facts the input printed a place for on a GPU (their
    section, element or column, even with no value in it); a fact it left out is not judged
    there, unless the source printed an error about it. Unknown is never healthy: a fact the
    input showed without a value is unread, in inspect as in the check."""
    states: dict[int, list[FactState]] = {}
    for gpu in inventory.gpus:
        placed = None if shown is None else shown(gpu)
        facts = [FACTS[k] for k in keys if needed(FACTS[k], gpu)
                 and (placed is None or k in placed or _errors_about(FACTS[k], gpu))]
        # (the SKU table only where a fact has no value: inspect may have to look it up)
        table = not_supported(gpu) if any(f.value(gpu) is None for f in facts) else {}
        states[gpu.index] = [fact_state(f, gpu, inventory, table) for f in facts]
    return states


def unread_facts(inventory: GpuInventory, states: Mapping[int, Sequence[FactState]]) -> list[str]:
    """`GPU 3 (bus ..., serial ...): ECC mode, temperature not read (sources tried: ...)` for
    every GPU with an unread fact; GPUs with the same facts and reasons are one entry (`GPUs 0,
    1, 2: ...`). What the GPU checks' error and `inspect nvidia-smi`'s `unread` say."""
    groups: dict[tuple[tuple[str, ...], str], list[int]] = {}
    for index, ss in states.items():
        unread = [s for s in ss if s.state == UNREAD]
        if unread:
            why = unread_why(inventory, unread)
            groups.setdefault((tuple(s.fact.title for s in unread), why), []).append(index)
    return [f"{_gpus(inventory, indices)}: {', '.join(titles)} not read (sources tried: {why})"
            for (titles, why), indices in groups.items()]


def _gpus(inventory: GpuInventory, indices: list[int]) -> str:
    if len(indices) == 1:
        return gpu_label(inventory.by_index(indices[0]), indices[0])
    return f"GPUs {', '.join(map(str, indices))}"


def _said(fact: GpuFact, gpu: GpuInfo) -> str:
    """What the source said about this fact on this GPU: its errors naming the fact (all of them
    for a GPU it could not read at all), that the GPU is lost; "" when it just printed nothing."""
    said = _errors_about(fact, gpu)
    if gpu.requires_reset:
        said.append("the GPU is lost or requires a reset")
    return "; ".join(dict.fromkeys(said))[:300]


def _errors_about(fact: GpuFact, gpu: GpuInfo) -> list[str]:
    """The source's error lines naming this fact (all of them for a GPU it could not read)."""
    return [e for e in gpu.query_errors
            if gpu.unreadable or any(m.lower() in e.lower() for m in fact.markers)]


def unread_why(inventory: GpuInventory, unread: Sequence[FactState]) -> str:
    """The sources tried for `unread` facts of one GPU and what each said: the inventory's
    earlier sources (why they gave nothing), then the one that answered."""
    reader = "NVML" if inventory.source == "nvml" else f"`{inventory.source}`"
    said = list(dict.fromkeys(s.detail for s in unread if s.detail))
    blank = list(dict.fromkeys(s.where for s in unread if not s.detail))
    parts = [*inventory.tried, *(f"{reader}: {d}" for d in said)]
    if blank:
        parts.append(f"{reader}: no value (absent, N/A or NotSupported) at {'; '.join(blank)}")
    return "; ".join(parts)


def explain_reads(keys: Sequence[str]) -> tuple[str, ...]:
    """What `preflight explain` says a check reads: every fact with where NVML and nvidia-smi
    hold it, what an unread fact does, and what "not supported" means for its facts."""
    lines = [f"{FACTS[k].title}: NVML {FACTS[k].nvml}; nvidia-smi {FACTS[k].smi}" for k in keys]
    lines.append("a fact no source could read (N/A, [Unknown Error], absent, NotSupported on a "
                 "SKU that has it) is an error naming the fact, the GPU and the sources tried: "
                 "never a pass")
    groups = dict.fromkeys(FACTS[k].group for k in keys)
    lines.append("not supported: only an entry of the profile's SKU table (profiles.toml "
                 f"[skus.NAME] not_supported.{'|'.join(groups)}, each with its source) makes a "
                 "fact not supported, never a missing value; the check records it and judges "
                 "the rest (not applicable when none of its facts exists on the SKU)")
    lines += [f"not supported ({g}): {not_supported_means(g)}" for g in groups
              if not_supported_means(g)]
    return tuple(lines)


def explain_other(reads: Sequence[str], unread: str, not_supported: str) -> tuple[str, ...]:
    """`explain_reads` for a check whose facts are not inventory fields (the kernel log, DCGM,
    the compute worker): what it reads, what an unread one does, what "not supported" means."""
    return (*reads, unread, f"not supported: {not_supported}")


def not_supported_means(group: str) -> str:
    """Why a SKU may lack the facts of `group` ("" when no SKU is known to)."""
    return _NOT_SUPPORTED_MEANS.get(group, "")
