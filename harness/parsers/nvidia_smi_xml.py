"""`nvidia-smi -q -x` XML (its DTD never fetched; log lines before the document read for lost
GPUs), read into a GpuInventory."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from harness.base.gpu_record import GpuInfo, GpuInventory
from harness.parsers import ParseError
from harness.parsers.nvidia_smi_common import (
    CSV_REASONS,
    ERROR_VALUES,
    MAX_GPUS,
    RESET_VALUES,
    Side,
    clean_fabric_status,
    clean_recovery,
    clean_serial,
    clean_value,
    clean_version,
    needs_reset,
    q_shown,
    smi_lines,
    to_float,
    to_int,
    with_lost,
    yes_no,
)
from harness.parsers.reader import MAX_DOCUMENT_CHARS, Input, as_input

if TYPE_CHECKING:  # the XML reader is imported where a document is parsed
    from xml.etree.ElementTree import Element


def _xml_text(node: Element, path: str) -> str | None:
    found = node.find(path)
    return None if found is None or found.text is None else found.text.strip()


def _xml_ecc(gpu: Element, scope: str) -> int | None:
    """Uncorrected count of a scope in the new (`dram_uncorrectable`, `sram_uncorrectable*`)
    or old (`double_bit/total`) XML layout."""
    node = gpu.find(f"ecc_errors/{scope}")
    if node is None:
        return None
    new = [to_int(c.text) for c in node
           if c.tag.startswith(("dram_uncorrectable", "sram_uncorrectable"))]
    if new:
        known = [n for n in new if n is not None]
        return sum(known) if known else None
    return to_int(_xml_text(node, "double_bit/total") or _xml_text(node, "double_bit/device_memory"))


def _xml_gpu(index: int, g: Element) -> GpuInfo:
    t = lambda path: _xml_text(g, path)  # noqa: E731
    link = "pci/pci_gpu_link_info"
    reasons: list[str] | None = None  # None: no reason element says yes or no
    for section, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                            ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        for child in g.findall(f"{section}/*"):
            name = CSV_REASONS.get(child.tag.removeprefix(prefix))
            if name and yes_no(child.text) is not None:
                reasons = reasons or []
                if yes_no(child.text):
                    reasons.append(name)
    texts = [(e.text or "").strip().lower() for e in g.iter()]
    memory_mib = to_float(t("fb_memory_usage/total"))
    return GpuInfo(
        index=index,
        name=clean_value(t("product_name")),
        uuid=clean_value(t("uuid")),
        serial=clean_serial(t("serial")),
        bus_id=clean_value(t("pci/pci_bus_id")) or g.get("id"),
        memory_total_gib=None if memory_mib is None else round(memory_mib / 1024, 2),
        ecc_enabled=yes_no(t("ecc_mode/current_ecc")),
        ecc_uncorrected_volatile=_xml_ecc(g, "volatile"),
        ecc_uncorrected_aggregate=_xml_ecc(g, "aggregate"),
        remapped_rows_pending=yes_no(t("remapped_rows/remapped_row_pending")),
        remapped_rows_failure=yes_no(t("remapped_rows/remapped_row_failure")),
        retired_pages_pending=yes_no(t("retired_pages/pending_retirement")
                                   or t("retired_pages/pending_blacklist")),
        retired_pages_dbe=to_int(t("retired_pages/double_bit_retirement/retired_count")),
        temperature_c=to_float(t("temperature/gpu_temp")),
        throttle_reasons=None if reasons is None else tuple(dict.fromkeys(reasons)),
        power_draw_w=to_float(t("gpu_power_readings/power_draw") or t("power_readings/power_draw")
                          or t("gpu_power_readings/instant_power_draw")),
        persistence_mode=yes_no(t("persistence_mode")),
        performance_state=clean_value(t("performance_state")),
        pcie_gen_current=to_int(t(f"{link}/pcie_gen/current_link_gen")),
        pcie_gen_max=to_int(t(f"{link}/pcie_gen/max_link_gen")),
        pcie_gen_device_max=to_int(t(f"{link}/pcie_gen/max_device_link_gen")),
        pcie_gen_host_max=to_int(t(f"{link}/pcie_gen/max_host_link_gen")),
        pcie_width_current=to_int(t(f"{link}/link_widths/current_link_width")),
        pcie_width_max=to_int(t(f"{link}/link_widths/max_link_width")),
        fabric_state=clean_value(t("fabric/state")),
        fabric_status=clean_fabric_status(t("fabric/status")),
        recovery_action=clean_recovery(t("gpu_recovery_action")),
        requires_reset=needs_reset([yes_no(t("gpu_reset_status/reset_required")),
                               yes_no(t("gpu_reset_status/drain_and_reset_recommended"))],
                              any(v in RESET_VALUES for v in texts)),
        query_errors=tuple(f"{e.tag}: {(e.text or '').strip()}" for e in g.iter()
                           if (e.text or "").strip().lower() in ERROR_VALUES),
    )


def parse_smi_xml(text: str | Input) -> GpuInventory:
    """Parse `nvidia-smi -q -x`. Reads `<nvidia_smi_log><driver_version>555.42.06</...>` and
    `<gpu id="00000000:01:00.0">` elements (their DTD is never fetched). A document larger
    than MAX_DOCUMENT_CHARS (16 MiB; 8 GPUs print ~150 KB) is a ParseError."""
    return read_smi_xml(as_input(text), Side())


def read_smi_xml(source: Input, side: Side) -> GpuInventory:
    import xml.etree.ElementTree as ET

    # Log lines (a lost GPU's `Unable to determine the device handle ...`) may precede it.
    body: list[str] = []
    size = 0
    for line in smi_lines(source):
        if not body and "<?xml" not in line and "<nvidia_smi_log" not in line:
            side.see(line)
            continue
        size += len(line) + 1
        if size > MAX_DOCUMENT_CHARS:
            raise ParseError(f"nvidia-smi XML larger than {MAX_DOCUMENT_CHARS >> 20} MiB: not "
                             "one `nvidia-smi -q -x` document")
        body.append(line)
    text = "\n".join(body)
    start = min((i for i in (text.find("<?xml"), text.find("<nvidia_smi_log")) if i >= 0),
                default=0)
    text = re.sub(r"<!DOCTYPE[^>]*>", "", text[start:], count=1)
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML does not parse: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    side.attached = to_int(_xml_text(root, "attached_gpus"))
    elements = root.findall("gpu")
    side.omitted += max(len(elements) - MAX_GPUS, 0)
    read = [_xml_gpu(i, g) for i, g in enumerate(elements[:MAX_GPUS])]
    for gpu, element in zip(read, elements, strict=False):
        side.shown[gpu.bus_id or ""] = q_shown(child.tag for child in element)
    gpus = with_lost(read, side, renumber=True)
    if not gpus and side.attached != 0:
        raise ParseError("<nvidia_smi_log> without <gpu> elements")
    return GpuInventory("nvidia-smi -q -x", clean_version(_xml_text(root, "driver_version")),
                        clean_version(_xml_text(root, "cuda_version")), gpus, side.attached)
