"""`nvidia-smi -q` text (Linux and Windows drivers, old and new ECC layouts), `nvidia-smi -q -x`
XML, the plain `nvidia-smi` table, and `nvidia-smi --query-gpu=... --format=csv[,noheader]
[,nounits]` (one row per GPU, or rows that are samples of a `-l` time series), read into the
GpuInventory NVML also produces.

The formats' readers are modules of their own (nvidia_smi_query, _table, _xml, _csv, sharing
nvidia_smi_common); this module picks the form, and judges for `preflight inspect`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

from harness.base.gpu import health_problems
from harness.base.gpu_facts import FACTS, fact_states, unread_facts
from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.nvidia_smi_common import (
    ANY_GPU_HEADER,
    FRAGMENT_KEYS,
    FRAGMENT_SECTIONS,
    Q_PLACES,
    STATE_KEY,
    Side,
    smi_lines,
)
from harness.parsers.nvidia_smi_csv import read_smi_csv
from harness.parsers.nvidia_smi_query import read_smi_query
from harness.parsers.nvidia_smi_table import TABLE_ROW1, read_smi_table
from harness.parsers.nvidia_smi_xml import read_smi_xml
from harness.parsers.reader import Input, as_input

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = [
    "INSPECT",
    "inspect_nvidia_smi",
    "parse_nvidia_smi",
]


def parse_nvidia_smi(text: str | Input) -> GpuInventory:
    """`nvidia-smi -q` text, `-q -x` XML, the plain `nvidia-smi` table or a `--query-gpu` CSV,
    whichever the text is, also with a launcher's prefix on every line (`[1,0]<stdout>:`, srun
    `0: `, ISO timestamps)."""
    return _parse(as_input(text), Side())


def _form(source: Input, side: Side | None = None) -> str:
    """Which form the input is (one pass, stopped at the first `-q` section). A fragment whose
    fabric `State` came without its `Fabric` header marks `side.headerless_fabric`; bare `State`
    / `Status` lines that are not that are form "state" (refused: see _parse)."""
    head: list[str] = []
    size = 0
    for line in smi_lines(source):
        head.append(line)
        size += len(line) + 1
        if size >= 2000:
            break
    if "<nvidia_smi_log" in "\n".join(head)[:2000]:
        return "xml"
    banner = bus = row = fragment = fabric_header = fabric_state = state_key = False
    for line in smi_lines(source):
        if "NVSMI LOG" in line or (line.lstrip()[:3] == "GPU" and ANY_GPU_HEADER.match(line)):
            return "query"
        banner = banner or "NVIDIA-SMI" in line
        bus = bus or "Bus-Id" in line
        stripped = line.strip()
        row = row or (stripped[:1] == "|" and bool(TABLE_ROW1.match(stripped)))
        if FRAGMENT_KEYS.match(line) is not None:
            fragment = True
            fabric_header = fabric_header or stripped == "Fabric"
            fabric_state = fabric_state or stripped.startswith("State")
        elif "tat" in line and STATE_KEY.match(line):
            state_key = True
    # The banner may be cut from a pasted excerpt: a GPU row is enough.
    if (banner and bus) or row:
        return "table"
    if fabric_state and not fabric_header and side is not None:
        side.headerless_fabric = True
    if not fragment and state_key:
        return "state"
    return "fragment" if fragment else "csv"


def _refuse_state(source: Input) -> ParseError:
    """Bare `State :` / `Status :` lines that are not a fabric state: say what they are and what
    is missing."""
    lines = [m for line in smi_lines(source) if (m := STATE_KEY.match(line)) is not None][:4]
    said = " / ".join(f"`{m['key']} : {m['value'].strip()}`" for m in lines)
    state = next((m["value"].strip() for m in lines if m["key"] == "State"), None)
    why = (f"`{state}` is not a fabric state (Not Supported, Not Started, In Progress, Completed)"
           if state is not None else "there is no `State` line")
    return ParseError(
        f"{said} without the `nvidia-smi -q` section they belong to: not read as the Fabric "
        f"section's, since {why}; the `Fabric` header line (or the GPU's `GPU 0000xxxx:BB:DD.F` "
        "section around it) is missing")


def _parse(source: Input, side: Side) -> GpuInventory:
    form = _form(source, side)
    if form == "state":
        raise _refuse_state(source)
    if form == "xml":
        return read_smi_xml(source, side)
    if form in ("query", "fragment"):
        return read_smi_query(source, side, fragment=form == "fragment")
    if form == "table":
        return read_smi_table(source, side)
    try:
        return read_smi_csv(source, side).inventory
    except ParseError:
        if side.failure:
            raise ParseError(f"nvidia-smi could not read the GPUs: {side.failure}") from None
        raise


def inspect_nvidia_smi(stream: TextIO | Input, *, profile: Profile) -> JSONObject:
    """`preflight inspect nvidia-smi FILE`: keys num_gpus, driver_version, cuda_version, gpus
    [{index, name, bus_id, uuid, serial, ecc_enabled, ecc_uncorrected_volatile,
    ecc_uncorrected_aggregate, remapped_rows_pending, remapped_rows_failure,
    retired_pages_pending, temperature_c, requires_reset}], problems [{gpu, what, action}]
    (temperature judged against the profile's max_gpu_temp_c; ECC off only for GPU profiles),
    unread: the facts the GPU checks judge that the input showed a place for (a section, an
    element, a column) but no value, in the checks' words (harness.base.gpu_facts; a fact the
    GPU's SKU does not have is not unread: the profile's SKU, or the one its name matches)."""
    side = Side()
    inventory = _parse(as_input(stream), side)
    attached = side.attached
    keys = ("index", "name", "bus_id", "uuid", "serial", "ecc_enabled",
            "ecc_uncorrected_volatile", "ecc_uncorrected_aggregate", "remapped_rows_pending",
            "remapped_rows_failure", "retired_pages_pending", "temperature_c", "requires_reset")
    problems = []
    for gpu in inventory.gpus:
        for p in health_problems(gpu, max_temp_c=profile.max_gpu_temp_c,
                                 require_ecc=profile.has_gpus):
            problems.append({"gpu": p.gpu, "what": p.what, "action": p.action})
    gpus = [{k: getattr(g, k) for k in keys} for g in inventory.gpus]
    judged = [k for k in FACTS if k in Q_PLACES]  # all but NVLink (NVML's alone)
    states = fact_states(inventory, judged, lambda g: _not_supported(profile, g), side.shown_on)
    for gpu, record in zip(inventory.gpus, gpus, strict=True):
        # Nothing printed about a reset (a `-q -d ECC` excerpt, the plain table, a CSV, a 570
        # driver on Volta saying `deprecated`) is null: unknown, not "no reset needed". A
        # pending row remap is applied at the next GPU reset (NVIDIA's "GPU Memory Error
        # Management" guide, Row Remapping): the GPU needs one.
        if gpu.remapped_rows_pending:
            record["requires_reset"] = True
    out = {
        "num_gpus": attached if attached is not None else len(inventory.gpus),
        "driver_version": inventory.driver_version,
        "cuda_version": inventory.cuda_version,
        "gpus": gpus,
        "problems": problems,
        "unread": unread_facts(inventory, states),
        "fragment": side.fragment,
        "sections_present": [name for name in FRAGMENT_SECTIONS if name in side.sections],
        "sections_absent": [name for name in FRAGMENT_SECTIONS if name not in side.sections]
        if side.fragment else [],
        "commands_seen": list(side.commands),
    }
    if side.notes():
        out["notes"] = side.notes()
    return out


def _not_supported(profile: Profile, gpu: GpuInfo) -> Mapping[str, str]:
    """The facts `gpu` does not have: the profile's SKU table, or, for a profile without a SKU
    (inspect's default), the table of the SKU whose NVML name is the GPU's."""
    if profile.sku is not None or gpu.name is None:
        return profile.not_supported
    from harness.profiles.table import SKUS  # (the TOML: only for a fact without a value)

    return next((sku["profile"].not_supported for sku in SKUS.values()
                 if gpu.name in sku.get("nvml_names", ())), profile.not_supported)


INSPECT = {"nvidia-smi": inspect_nvidia_smi}
