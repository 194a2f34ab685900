"""`nvidia-smi -q` text (Linux and Windows drivers, old and new ECC layouts, R610's KMD keys),
and its sections pasted alone (a fragment), read into a GpuInventory."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.base.gpu_record import GpuInfo, GpuInventory, pci_key
from harness.parsers.nvidia_smi_common import (
    ERROR_VALUES,
    RESET_VALUES,
    Side,
    clean_fabric_status,
    clean_recovery,
    clean_serial,
    clean_value,
    clean_version,
    needs_reset,
    q_shown,
    smi_batches,
    to_float,
    to_int,
    with_lost,
    yes_no,
)
from harness.parsers.nvidia_smi_tree import Tree
from harness.parsers.reader import Input, as_input


class _Block:
    """One GPU section of `nvidia-smi -q` as {lower-case key path: value}."""

    def __init__(self, bus_id: str) -> None:
        self.bus_id = bus_id
        self.values: dict[tuple[str, ...], str] = {}

    def get(self, *path: str) -> str | None:
        return self.values.get(tuple(p.lower() for p in path))

    def first(self, *paths: tuple[str, ...]) -> str | None:
        for path in paths:
            value = self.get(*path)
            if value is not None:
                return value
        return None

    def children(self, *path: str) -> dict[str, str]:
        """Direct and nested values under a section, keyed by their last name."""
        prefix = tuple(p.lower() for p in path)
        return {k[-1]: v for k, v in self.values.items()
                if len(k) > len(prefix) and k[:len(prefix)] == prefix}

    def raw_values(self) -> list[str]:
        return [v.strip().lower() for v in self.values.values()]


@dataclass(frozen=True, slots=True)
class _Query:
    driver_version: str | None
    cuda_version: str | None
    attached_gpus: int | None
    blocks: list[_Block]


def _tree(batches: Iterable[list[str]], side: Side, *, fragment: bool = False) -> _Query:
    """Read the indented key : value tree (harness.parsers.nvidia_smi_tree); GPU sections start
    at `GPU 00000000:53:00.0`. A GPU seen again (a `nvidia-smi -q -l` loop) keeps its latest
    section, in its first place. A `fragment` (sections pasted without their GPU line) is read
    as one GPU of unknown bus."""
    tree = Tree(side, fragment=fragment)
    for batch in batches:
        tree.feed(batch)
    top, read = tree.finish()
    blocks = []
    for b in read:
        block = _Block(b.bus_id)
        block.values = b.values
        blocks.append(block)
    attached = to_int(top.get("attached gpus"))
    # R610 prints `KMD Version` / `CUDA UMD Version` next to the deprecated old keys.
    driver = clean_version(top.get("kmd version")) or clean_version(top.get("driver version"))
    cuda = clean_version(top.get("cuda umd version")) or clean_version(top.get("cuda version"))
    return _Query(driver, cuda, attached, blocks)


def _ecc_uncorrected(block: _Block, scope: str) -> int | None:
    """Uncorrected ECC count of one scope (`volatile` / `aggregate`) in either layout:
    new (`DRAM Uncorrectable`, `SRAM Uncorrectable[ Parity| SEC-DED]`) or old
    (`Double Bit` > `Total`, or its `Device Memory` where there is no total)."""
    values = {k: v for k, v in block.values.items() if k[:2] == ("ecc errors", scope)}
    new = [v for k, v in values.items()
           if len(k) == 3 and (k[2].startswith("dram uncorrectable") or
                               k[2].startswith("sram uncorrectable"))]
    if new:
        counts = [to_int(v) for v in new]
        known = [c for c in counts if c is not None]
        return sum(known) if known else None
    total = values.get(("ecc errors", scope, "double bit", "total"))
    if total is None:
        total = values.get(("ecc errors", scope, "double bit", "device memory"))
    return to_int(total)


def _throttle(block: _Block) -> tuple[str, ...] | None:
    """The active clock event reasons; None when no section says (or every value is N/A)."""
    for section in ("clocks event reasons", "clocks throttle reasons"):
        reasons = block.children(section)
        if any(yes_no(v) is not None for v in reasons.values()):
            names = {k.lower(): k for k in _REASON_NAMES}
            return tuple(names.get(k, k) for k, v in reasons.items() if yes_no(v))
    return None


_REASON_NAMES = ("Idle", "Applications Clocks Setting", "SW Power Cap", "HW Slowdown",
                 "HW Thermal Slowdown", "HW Power Brake Slowdown", "Sync Boost",
                 "SW Thermal Slowdown", "Display Clock Setting")


def _gpu_from_block(index: int, b: _Block, side: Side | None = None) -> GpuInfo:
    link = ("pci", "gpu link info")
    reset_flag = b.first(("gpu reset status", "reset required"))
    drain_flag = b.first(("gpu reset status", "drain and reset recommended"))
    remap_pending = yes_no(b.get("remapped rows", "pending"))
    requires_reset = needs_reset([yes_no(reset_flag), yes_no(drain_flag)],
                            any(v in RESET_VALUES for v in b.raw_values()))
    width_cur = to_int(b.get(*link, "link width", "current"))
    retired_pending = b.first(("retired pages", "pending page blacklist"),
                              ("retired pages", "pending page retirement"),
                              ("retired pages", "pending"))  # R410 and before
    dbe = b.first(("retired pages", "double bit ecc"), ("retired pages", "double bit ecc", "count"))
    power = b.first(("gpu power readings", "power draw"), ("power readings", "power draw"),
                    ("gpu power readings", "instantaneous power draw"),
                    ("gpu power readings", "average power draw"))
    memory_mib = to_float(b.get("fb memory usage", "total"))
    gpu = GpuInfo(
        index=index,
        name=clean_value(b.get("product name")),
        uuid=clean_value(b.get("gpu uuid")),
        serial=clean_serial(b.get("serial number")),
        bus_id=clean_value(b.get("pci", "bus id")) or b.bus_id or None,
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=yes_no(b.first(("ecc mode", "current"))),
        ecc_uncorrected_volatile=_ecc_uncorrected(b, "volatile"),
        ecc_uncorrected_aggregate=_ecc_uncorrected(b, "aggregate"),
        remapped_rows_pending=remap_pending,
        remapped_rows_failure=yes_no(b.get("remapped rows", "remapping failure occurred")),
        retired_pages_pending=yes_no(retired_pending),
        retired_pages_dbe=to_int(dbe),
        temperature_c=to_float(b.get("temperature", "gpu current temp")),
        throttle_reasons=_throttle(b),
        power_draw_w=to_float(power),
        persistence_mode=yes_no(b.get("persistence mode")),
        performance_state=clean_value(b.get("performance state")),
        pcie_gen_current=to_int(b.get(*link, "pcie generation", "current")),
        pcie_gen_max=to_int(b.get(*link, "pcie generation", "max")),
        pcie_gen_device_max=to_int(b.get(*link, "pcie generation", "device max")),
        pcie_gen_host_max=to_int(b.get(*link, "pcie generation", "host max")),
        pcie_width_current=width_cur,
        pcie_width_max=to_int(b.get(*link, "link width", "max")),
        fabric_state=clean_value(b.get("fabric", "state")),
        fabric_status=clean_fabric_status(b.get("fabric", "status")),
        recovery_action=clean_recovery(b.get("gpu recovery action")),
        requires_reset=requires_reset,
        query_errors=tuple(f"{' > '.join(k)}: {v}" for k, v in b.values.items()
                           if v.strip().lower() in ERROR_VALUES),
    )
    if side is not None:
        side.shown[gpu.bus_id or ""] = q_shown({path[0] for path in b.values})
    return gpu


def _indices(blocks: list[_Block], side: Side) -> list[int]:
    """Each section's GPU index: file order, or the `-i N` of the command line above each
    section when every section has one (and they differ)."""
    given = [side.bus_index.get(pci_key(b.bus_id) or b.bus_id) for b in blocks]
    if given and None not in given and len(set(given)) == len(given):
        return given  # type: ignore[return-value]
    return list(range(len(blocks)))


def parse_smi_query(text: str | Input) -> GpuInventory:
    """Parse `nvidia-smi -q`. Reads `Driver Version : 535.154.05` and per-GPU sections starting
    `GPU 00000000:53:00.0`; GPUs are indexed in file order (nvidia-smi prints them by index, but
    a `-q -i N` excerpt starts at 0). Raises ParseError when no GPU section is found."""
    return read_smi_query(as_input(text), Side())


def read_smi_query(source: Input, side: Side, *, fragment: bool = False) -> GpuInventory:
    q = _tree(smi_batches(source, side), side, fragment=fragment)
    if q.blocks and not q.blocks[0].bus_id:
        side.fragment = True
    if not q.blocks and not side.lost:
        if q.attached_gpus == 0:
            return GpuInventory("nvidia-smi -q", q.driver_version, q.cuda_version, (), 0)
        raise side.not_read("no `GPU 0000xxxx:BB:DD.F` section found: not `nvidia-smi -q` output")
    gpus = with_lost([_gpu_from_block(i, b, side) for i, b in zip(_indices(q.blocks, side),
                                                                      q.blocks, strict=True)],
                      side, renumber=True)
    return GpuInventory("nvidia-smi -q", q.driver_version, q.cuda_version, gpus, q.attached_gpus)
