"""nvidia-smi parsers over recorded outputs (tests/data/nvidia_smi, see SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nvidia_smi import (
    parse_nvidia_smi,
    parse_smi_csv,
    parse_smi_query,
    parse_smi_table,
    parse_smi_xml,
)

DATA = Path(__file__).parent / "data" / "nvidia_smi"


def _read(name: str) -> str:
    return (DATA / name).read_bytes().decode()


@pytest.mark.parametrize(("name", "expected"), [
    ("v100-470-linux-old-ecc.txt", dict(
        driver="470.129.06", cuda="11.4", n=1, index=0, gpu_name="Tesla V100-PCIE-32GB",
        bus_id="00000000:1C:00.0", serial="1560221003078", ecc_enabled=True,
        ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0, remapped_rows_pending=None,
        retired_pages_pending=False, retired_pages_dbe=0, temperature_c=29.0,
        throttle_reasons=("Idle",), persistence_mode=True, pcie=(3, 3, None, 16, 16),
        power_draw_w=25.13, requires_reset=False)),
    ("rtx4090-535-linux-new-ecc.txt", dict(
        driver="535.154.05", cuda="12.2", n=2, index=0, gpu_name="NVIDIA GeForce RTX 4090",
        bus_id="00000000:01:00.0", serial=None, ecc_enabled=False,
        ecc_uncorrected_volatile=None, ecc_uncorrected_aggregate=None,
        remapped_rows_pending=False, retired_pages_pending=None, retired_pages_dbe=None,
        temperature_c=30.0, throttle_reasons=("Idle",), persistence_mode=True,
        pcie=(1, 4, 4, 16, 16), power_draw_w=18.9, requires_reset=False)),
    ("a6000-537-windows-wddm.txt", dict(
        driver="537.99", cuda="12.2", n=1, index=0, gpu_name="NVIDIA RTX A6000",
        bus_id="00000000:01:00.0", serial="1651022017098", ecc_enabled=False,
        ecc_uncorrected_volatile=None, ecc_uncorrected_aggregate=None,
        remapped_rows_pending=False, retired_pages_pending=None, retired_pages_dbe=None,
        temperature_c=55.0, throttle_reasons=("Idle",), persistence_mode=None,
        pcie=(4, 4, 4, 16, 16), power_draw_w=7.82, requires_reset=False)),
    ("h100-550-constructed-faults.txt", dict(
        driver="550.90.07", cuda="12.4", n=2, index=0, gpu_name="NVIDIA H100 80GB HBM3",
        bus_id="00000000:53:00.0", serial="1654922010387", ecc_enabled=True,
        ecc_uncorrected_volatile=2, ecc_uncorrected_aggregate=5, remapped_rows_pending=True,
        retired_pages_pending=None, retired_pages_dbe=None, temperature_c=91.0,
        throttle_reasons=("HW Slowdown", "HW Thermal Slowdown"), persistence_mode=True,
        pcie=(5, 5, 5, 8, 16), power_draw_w=690.25, requires_reset=False)),
])
def test_query_first_gpu(name: str, expected: dict):
    inv = parse_smi_query(_read(name))
    g = inv.gpus[0]
    assert (inv.driver_version, inv.cuda_version, len(inv.gpus)) == (
        expected["driver"], expected["cuda"], expected["n"])
    got = dict(
        index=g.index, gpu_name=g.name, bus_id=g.bus_id, serial=g.serial,
        ecc_enabled=g.ecc_enabled, ecc_uncorrected_volatile=g.ecc_uncorrected_volatile,
        ecc_uncorrected_aggregate=g.ecc_uncorrected_aggregate,
        remapped_rows_pending=g.remapped_rows_pending,
        retired_pages_pending=g.retired_pages_pending, retired_pages_dbe=g.retired_pages_dbe,
        temperature_c=g.temperature_c, throttle_reasons=g.throttle_reasons,
        persistence_mode=g.persistence_mode,
        pcie=(g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_device_max,
              g.pcie_width_current, g.pcie_width_max),
        power_draw_w=g.power_draw_w, requires_reset=g.requires_reset,
        driver=inv.driver_version, cuda=inv.cuda_version, n=len(inv.gpus))
    assert got == expected


def test_idle_l4_at_x8_is_not_a_pcie_problem():
    from harness.gpu import health_problems

    g = parse_smi_query(_read("l4-550-idle-x8.txt")).gpus[0]
    assert (g.performance_state, g.pcie_gen_current, g.pcie_width_current) == ("P8", 1, 8)
    assert (g.ecc_enabled, g.ecc_uncorrected_volatile, g.ecc_uncorrected_aggregate) == (
        True, 0, 0)
    assert (g.fabric_state, g.power_draw_w) == (None, 16.47)
    assert health_problems(g, max_temp_c=85.0, require_ecc=True) == []


def test_old_layout_aggregate_single_bit_errors_are_not_uncorrected():
    # The V100 sample has 3 aggregate *single-bit* (corrected) errors and no double-bit ones.
    g = parse_smi_query(_read("v100-470-linux-old-ecc.txt")).gpus[0]
    assert g.ecc_uncorrected_aggregate == 0


def test_second_gpu_of_an_elided_dump():
    g = parse_smi_query(_read("rtx4090-535-linux-new-ecc.txt")).gpus[1]
    assert (g.index, g.bus_id, g.temperature_c, g.performance_state) == (
        1, "00000000:23:00.0", 72.0, "P2")
    assert g.throttle_reasons == ("SW Power Cap",)
    assert g.ecc_uncorrected_volatile is None  # the block's ECC counters were trimmed away


def test_fabric_state():
    h100 = parse_smi_query(_read("h100-550-constructed-faults.txt")).gpus[0]
    assert (h100.fabric_state, h100.fabric_status) == ("Completed", "Success")
    ada = parse_smi_query(_read("rtx4090-535-linux-new-ecc.txt")).gpus[0]
    assert (ada.fabric_state, ada.fabric_status) == (None, None)  # N/A


def test_gpu_requires_reset_values():
    g = parse_smi_query(_read("h100-550-constructed-faults.txt")).gpus[1]
    assert g.requires_reset is True
    assert (g.temperature_c, g.ecc_enabled, g.remapped_rows_pending, g.pcie_gen_max,
            g.power_draw_w) == (None, None, None, None, None)
    assert g.serial == "1654922011204"


def test_markdown_indented_dump_still_parses():
    text = "\n".join("    " + line for line in _read("v100-470-linux-old-ecc.txt").splitlines())
    assert parse_smi_query(text).gpus[0].serial == "1560221003078"


def test_zero_gpus_attached():
    text = "==============NVSMI LOG==============\nDriver Version : 550.90.07\n" \
           "Attached GPUs : 0\n"
    assert parse_smi_query(text).gpus == ()


@pytest.mark.parametrize("text", ["", "hello\nworld\n",
                                  "NVIDIA-SMI has failed because it couldn't communicate "
                                  "with the NVIDIA driver."])
def test_query_garbage(text: str):
    with pytest.raises(ParseError, match=r"no `GPU 0000xxxx:BB:DD\.F` section"):
        parse_smi_query(text)


# ---- plain table ----

@pytest.mark.parametrize(("name", "driver", "cuda", "rows"), [
    ("table-470-v100-old-layout.txt", "470.129.06", "11.4", [
        (0, "Tesla V100-PCIE...", "00000000:1B:00.0", 0, 30.0, "P0", 25.0, True, False),
        (1, "Tesla V100-PCIE...", "00000000:1C:00.0", 0, 29.0, "P0", 25.0, True, False),
        (2, "Tesla V100-PCIE...", "00000000:1D:00.0", 0, 31.0, "P0", 35.0, True, False),
        (3, "Tesla V100-PCIE...", "00000000:1E:00.0", 0, 29.0, "P0", 23.0, True, False)]),
    ("table-550-a40-new-layout.txt", "550.127.05", "12.4", [
        (0, "NVIDIA A40", "00000000:4F:00.0", 0, 29.0, "P8", 23.0, True, False),
        (1, "NVIDIA A40", "00000000:52:00.0", 0, 30.0, "P8", 24.0, True, False),
        (2, "NVIDIA A40", "00000000:53:00.0", 0, 27.0, "P8", 15.0, True, False)]),
    ("table-faulted-gpu-err.txt", "550.127.05", "12.4", [
        (0, "NVIDIA H100 80GB HBM3", "00000000:53:00.0", 0, 34.0, "P0", 71.0, True, False),
        (1, "NVIDIA H100 80GB HBM3", "00000000:64:00.0", 2, None, None, None, True, True)]),
])
def test_plain_table(name, driver, cuda, rows):
    inv = parse_nvidia_smi(_read(name))
    assert (inv.source, inv.driver_version, inv.cuda_version) == ("nvidia-smi", driver, cuda)
    assert [(g.index, g.name, g.bus_id, g.ecc_uncorrected_volatile, g.temperature_c,
             g.performance_state, g.power_draw_w, g.persistence_mode, g.requires_reset)
            for g in inv.gpus] == rows


def test_plain_table_without_gpu_rows():
    with pytest.raises(ParseError, match="no GPU rows"):
        parse_smi_table("| NVIDIA-SMI 550.127.05   Driver Version: 550.127.05 |\n")


# ---- XML ----

def test_xml_query():
    inv = parse_nvidia_smi(_read("l4-555-query-xml.xml"))
    assert (inv.source, inv.driver_version, inv.cuda_version) == (
        "nvidia-smi -q -x", "555.42.06", "12.5")
    (g,) = inv.gpus
    assert (g.index, g.name, g.bus_id, g.serial) == (
        0, "NVIDIA L4", "00000000:01:00.0", "1654523003308")
    assert (g.ecc_enabled, g.ecc_uncorrected_volatile, g.ecc_uncorrected_aggregate) == (
        True, 0, 0)
    assert (g.remapped_rows_pending, g.remapped_rows_failure, g.retired_pages_pending) == (
        False, False, None)
    assert (g.temperature_c, g.power_draw_w, g.persistence_mode, g.performance_state) == (
        45.0, 27.22, False, "P0")
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_device_max, g.pcie_width_current,
            g.pcie_width_max) == (4, 4, 4, 16, 16)
    assert g.throttle_reasons == () and not g.requires_reset
    assert g.memory_total_gib == 22.49


def test_xml_faults():
    xml = _read("l4-555-query-xml.xml")
    xml = xml.replace("<dram_uncorrectable>0</dram_uncorrectable>",
                      "<dram_uncorrectable>3</dram_uncorrectable>", 1)
    xml = xml.replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")
    xml = xml.replace("<clocks_event_reason_hw_slowdown>Not Active<",
                      "<clocks_event_reason_hw_slowdown>Active<")
    xml = xml.replace("<gpu_temp>45 C</gpu_temp>", "<gpu_temp>[GPU requires reset]</gpu_temp>")
    xml = xml.replace("<gsp_firmware_version>", "<gpu_recovery_action>Drain and Reset"
                      "</gpu_recovery_action><gsp_firmware_version>")
    g = parse_smi_xml(xml).gpus[0]
    assert (g.ecc_uncorrected_volatile, g.remapped_rows_pending) == (3, True)
    assert g.throttle_reasons == ("HW Slowdown",)
    assert (g.temperature_c, g.requires_reset, g.recovery_action) == (
        None, True, "Drain and Reset")


@pytest.mark.parametrize(("text", "message"), [
    ("<nvidia_smi_log><gpu>", "does not parse"),
    ("<?xml version='1.0'?><other/>", "not <nvidia_smi_log>"),
    ("<nvidia_smi_log><attached_gpus>2</attached_gpus></nvidia_smi_log>", "without <gpu>"),
])
def test_xml_garbage(text: str, message: str):
    with pytest.raises(ParseError, match=message):
        parse_smi_xml(text)


# ---- CSV ----

def test_csv_with_units():
    csv = parse_smi_csv(_read("query-gpu-units.csv"))
    assert csv.num_samples == 2
    inv = csv.inventory
    assert inv.driver_version == "550.90.07"
    g0, g1 = inv.gpus
    assert (g0.temperature_c, g0.power_draw_w, g0.memory_total_gib) == (34.0, 71.52, 79.65)
    assert (g0.persistence_mode, g0.ecc_enabled, g0.retired_pages_pending) == (True, True, False)
    assert (g1.ecc_uncorrected_volatile, g1.retired_pages_pending) == (3, True)
    assert g1.throttle_reasons == ("HW Thermal Slowdown",)
    assert (g1.pcie_gen_current, g1.pcie_width_max) == (5, 16)


def test_csv_nounits_and_na():
    g0, g1 = parse_smi_csv(_read("query-gpu-nounits.csv")).inventory.gpus
    assert (g0.power_draw_w, g0.memory_total_gib, g0.ecc_uncorrected_volatile) == (
        61.17, 80.0, 0)
    assert g1.ecc_uncorrected_volatile is None


def test_csv_time_series_groups_samples_by_gpu():
    csv = parse_smi_csv(_read("query-gpu-timeseries.csv"))
    assert csv.num_samples == 6
    assert [g.index for g in csv.inventory.gpus] == [0, 1]
    # Each GPU keeps its last sample.
    assert [g.temperature_c for g in csv.inventory.gpus] == [41.0, 43.0]
    assert csv.inventory.gpus[1].ecc_uncorrected_volatile == 1


def test_csv_requires_reset():
    g = parse_smi_csv(_read("query-gpu-requires-reset.csv")).inventory.gpus[0]
    assert g.requires_reset and g.temperature_c is None


def test_csv_noheader_with_columns():
    text = "0, NVIDIA H100 80GB HBM3, 00000000:53:00.0, 35\n"
    inv = parse_smi_csv(text, columns=("index", "name", "pci.bus_id", "temperature.gpu")).inventory
    assert (inv.gpus[0].bus_id, inv.gpus[0].temperature_c) == ("00000000:53:00.0", 35.0)


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty input"),
    ("foo, bar\n1, 2\n", "no known --query-gpu column"),
    ("index, temperature.gpu\n", "has a header but no rows"),
    ("index, temperature.gpu\n0, 31, 7\n", "CSV row has 3 values for 2 columns"),
])
def test_csv_garbage(text: str, message: str):
    with pytest.raises(ParseError, match=message):
        parse_smi_csv(text)


@pytest.mark.parametrize(("name", "source"), [
    ("v100-470-linux-old-ecc.txt", "nvidia-smi -q"),
    ("query-gpu-units.csv", "nvidia-smi csv"),
])
def test_either_format_detected(name: str, source: str):
    assert parse_nvidia_smi(_read(name)).source == source


# ---- real outputs from public material (SOURCES.md `real_*`), expected values read by hand ----

GPU_PROFILE = dict(max_temp_c=85.0, require_ecc=True)
RESET = "GPU is lost or requires a reset"
ECC_OFF = "ECC is disabled (enable: nvidia-smi -e 1, then reboot)"

#: file -> (source, driver, cuda, number of GPUs, {index: expected facts}, [(gpu, problem)]).
#: `pcie` is (gen current, gen max, gen device max, width current, width max).
REAL = {
    "real_table-525-a40-gsp-timeout-err.txt": ("nvidia-smi", "525.60.13", "12.0", 8, {
        0: dict(name="NVIDIA A40", bus_id="00000000:03:00.0", ecc_enabled=True,
                ecc_uncorrected_volatile=0, temperature_c=24.0, performance_state="P8",
                power_draw_w=14.0, persistence_mode=True, requires_reset=False),
        4: dict(name=None, bus_id="00000000:83:00.0", ecc_enabled=None,
                ecc_uncorrected_volatile=None, temperature_c=None, performance_state=None,
                power_draw_w=None, persistence_mode=True, requires_reset=True),
    }, [(4, RESET)]),
    "real_table-610-kmd-version-lost-gpu.txt": ("nvidia-smi", "610.57.04", "13.3", 4, {
        0: dict(name="NVIDIA RTX PRO 6000 Blac...", bus_id="00000000:16:00.0", ecc_enabled=False,
                ecc_uncorrected_volatile=None, temperature_c=87.0, performance_state="P1",
                power_draw_w=299.0, requires_reset=False),
        1: dict(name=None, bus_id="0000:34:00.0", requires_reset=True, query_errors=(
            "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error",)),
        3: dict(bus_id="00000000:CA:00.0", temperature_c=33.0, performance_state="P8"),
    }, [(0, ECC_OFF), (0, "temperature 87 C > 85 C"), (1, RESET), (2, ECC_OFF),
        (2, "temperature 86 C > 85 C"), (3, ECC_OFF)]),
    "real_table-576-windows-wddm-in-training-log.txt": ("nvidia-smi", "576.65", "12.9", 1, {
        0: dict(name="NVIDIA GeForce RTX 5080 ...", bus_id="00000000:01:00.0", ecc_enabled=None,
                persistence_mode=None, temperature_c=46.0, performance_state="P0",
                power_draw_w=20.0, memory_total_gib=15.92),
    }, []),
    "real_table-550-a100-azure-log-timestamps.txt": ("nvidia-smi", "550.54.15", "12.5", 1, {
        0: dict(name="NVIDIA A100 80GB PCIe", bus_id="00000001:00:00.0", ecc_enabled=True,
                ecc_uncorrected_volatile=0, temperature_c=29.0, performance_state="P0",
                power_draw_w=40.0, persistence_mode=True, memory_total_gib=80.0),
    }, []),
    "real_table-580-a100-p4d-mig.txt": ("nvidia-smi", "580.126.09", "13.0", 1, {
        0: dict(name="NVIDIA A100-SXM4-40GB", bus_id="00000000:10:1C.0", ecc_enabled=True,
                ecc_uncorrected_volatile=None, temperature_c=40.0, performance_state="P0",
                power_draw_w=43.0, persistence_mode=True, memory_total_gib=40.0),
    }, []),
    "real_table-rtx-pro-6000-volatile-dbe-excerpt.txt": ("nvidia-smi", None, None, 2, {
        0: dict(bus_id="00000000:54:00.0", ecc_enabled=True, ecc_uncorrected_volatile=0,
                temperature_c=27.0, performance_state="P8", power_draw_w=34.0),
        1: dict(bus_id="00000000:55:00.0", ecc_enabled=True, ecc_uncorrected_volatile=2,
                requires_reset=False),
    }, [(1, "2 uncorrected ECC errors since the driver loaded")]),
    # `nvidia-smi -i 1 -q -d ROW_REMAPPER` on the prompt above it: the GPU is index 1.
    "real_q-rtx-pro-6000-row-remapper-pending.txt": ("nvidia-smi -q", None, None, 1, {
        1: dict(bus_id="00000000:55:00.0", remapped_rows_pending=True,
                remapped_rows_failure=False, ecc_enabled=None),
    }, [(1, "row remapping pending (applied at the next GPU reset)")]),
    "real_q-410-v100-retired-pages-pending.txt": ("nvidia-smi -q", "410.48", None, 1, {
        0: dict(name="Tesla V100-PCIE-32GB", bus_id="00000000:18:00.0", ecc_enabled=True,
                ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0,
                retired_pages_pending=False, retired_pages_dbe=0, remapped_rows_pending=None,
                temperature_c=40.0, throttle_reasons=(), power_draw_w=58.81,
                persistence_mode=False, pcie=(3, 3, None, 16, 16), memory_total_gib=31.72),
    }, []),
    "real_q-580-rtx5080-laptop-wide-keys.txt": ("nvidia-smi -q", "580.173.02", "13.0", 1, {
        0: dict(name="NVIDIA GeForce RTX 5080 Laptop GPU", serial=None,
                uuid="GPU-49db0f63-042c-20f9-5de2-99d6a91a9d34", ecc_enabled=None,
                remapped_rows_pending=None, temperature_c=49.0, throttle_reasons=(),
                power_draw_w=14.47, persistence_mode=False, performance_state="P8",
                pcie=(1, 5, 5, 8, 16), recovery_action=None, memory_total_gib=15.92),
    }, []),
    "real_q-565-h100-sxm.txt": ("nvidia-smi -q", "565.57.01", "12.7", 1, {
        0: dict(name="NVIDIA H100 80GB HBM3", bus_id="00000000:18:00.0", serial="1654423001593",
                uuid="GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1", ecc_enabled=True,
                ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0,
                remapped_rows_pending=False, remapped_rows_failure=False,
                retired_pages_pending=None, temperature_c=30.0, throttle_reasons=("Idle",),
                power_draw_w=100.89, persistence_mode=True, pcie=(5, 5, 5, 16, 16),
                fabric_state="Completed", fabric_status="Success", recovery_action=None,
                memory_total_gib=79.65, requires_reset=False),
    }, []),
    "real_q-550-h200-passthrough.txt": ("nvidia-smi -q", "550.90.12", "12.4", 1, {
        0: dict(name="NVIDIA H200", bus_id="00000000:03:00.0", serial="1753724031847",
                memory_total_gib=140.4, ecc_enabled=True, ecc_uncorrected_volatile=0,
                ecc_uncorrected_aggregate=0, remapped_rows_pending=False,
                remapped_rows_failure=False, temperature_c=28.0, throttle_reasons=("Idle",),
                power_draw_w=74.58, pcie=(5, 5, 5, 16, 16), fabric_state="Completed",
                fabric_status="Success", requires_reset=False),
    }, []),
    "real_q-550-gh200-aggregate-uncorrected.txt": ("nvidia-smi -q", "550.127.05", "12.4", 1, {
        0: dict(name="NVIDIA GH200 480GB", bus_id="00000000:DD:00.0", memory_total_gib=95.58,
                ecc_enabled=True, ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=1,
                remapped_rows_pending=False, remapped_rows_failure=False, temperature_c=31.0,
                power_draw_w=87.88, pcie=(4, 4, 4, 1, 1), fabric_state=None,
                requires_reset=False),
    }, [(0, "1 uncorrected ECC error in its lifetime, none since the driver loaded")]),
    "real_q-550-a10-hw-power-brake.txt": ("nvidia-smi -q", "550.127.05", "12.4", 1, {
        0: dict(name="NVIDIA A10", ecc_enabled=True, ecc_uncorrected_volatile=0,
                throttle_reasons=("Idle", "HW Slowdown", "HW Power Brake Slowdown"),
                performance_state="P8", pcie=(1, 4, 4, 16, 16), temperature_c=33.0,
                power_draw_w=21.3),
    }, [(0, "clocks slowed by HW Power Brake Slowdown, HW Slowdown")]),
    "real_q-525-h800-ecc-off.txt": ("nvidia-smi -q", "525.105.17", "12.0", 1, {
        0: dict(name="NVIDIA H800", serial="1651323018291", ecc_enabled=False,
                ecc_uncorrected_volatile=None, remapped_rows_pending=False,
                temperature_c=35.0, throttle_reasons=("Idle",), power_draw_w=74.71,
                pcie=(5, 5, 5, 16, 16), fabric_state="Completed", requires_reset=False),
    }, [(0, ECC_OFF)]),
    "real_q-510-a100-remap-pending-elided.txt": ("nvidia-smi -q", "510.73.08", "11.6", 1, {
        0: dict(name="NVIDIA A100-SXM4-80GB", bus_id="00000000:10:1C.0", ecc_enabled=None,
                ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0,
                remapped_rows_pending=True, remapped_rows_failure=False,
                retired_pages_pending=None),
    }, [(0, "row remapping pending (applied at the next GPU reset)")]),
    "real_q-595-ecc-only-rtx-pro-6000.txt": ("nvidia-smi -q", "595.58.03", "13.2", 1, {
        0: dict(name=None, bus_id="00000000:54:00.0", ecc_enabled=True,
                ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=0, temperature_c=None),
    }, []),
    "real_q-610-temperature-deprecated-versions.txt": ("nvidia-smi -q", "610.57.04", "13.3", 2, {
        0: dict(bus_id="00000000:01:00.0", temperature_c=79.0),
        1: dict(bus_id="00000000:02:00.0", temperature_c=29.0),
    }, []),
    "real_xml-575-rtx4070-laptop.xml": ("nvidia-smi -q -x", "575.51.02", "12.9", 1, {
        0: dict(name="NVIDIA GeForce RTX 4070 Laptop GPU", serial=None, ecc_enabled=None,
                ecc_uncorrected_volatile=None, remapped_rows_pending=False,
                temperature_c=41.0, throttle_reasons=(), power_draw_w=11.26,
                persistence_mode=True, performance_state="P5", pcie=(2, 4, 4, 8, 8),
                recovery_action=None, requires_reset=False),
    }, []),
    "real_xml-530-gtx1070-cuda-not-found.xml": ("nvidia-smi -q -x", "530.30.02", None, 1, {
        0: dict(name="NVIDIA GeForce GTX 1070", bus_id="00000000:09:00.0", ecc_enabled=None,
                remapped_rows_pending=None, temperature_c=60.0, power_draw_w=39.1,
                persistence_mode=False, performance_state="P2", pcie=(3, 3, 3, 16, 16)),
    }, []),
    "real_table-lost-gpu-only.txt": ("nvidia-smi csv", None, None, 1, {
        0: dict(bus_id="0000:89:00.0", requires_reset=True, query_errors=(
            "Unable to determine the device handle for GPU 0000:89:00.0: Unknown Error",)),
    }, [(0, RESET)]),
    "real_csv-570-rtx-pro-6000-ecc-power.csv": ("nvidia-smi csv", None, None, 2, {
        0: dict(name="NVIDIA RTX PRO 6000 Blackwell Server Edition", temperature_c=25.0,
                power_draw_w=30.39, ecc_uncorrected_volatile=0),
        1: dict(power_draw_w=28.54, ecc_uncorrected_volatile=0),
    }, []),
    "real_csv-570-rtx-pro-6000-event-reasons.csv": ("nvidia-smi csv", None, None, 2, {
        0: dict(throttle_reasons=("SW Power Cap",)),
        1: dict(throttle_reasons=("SW Power Cap",)),
    }, []),
    "real_csv-l40s-pcie-idle.csv": ("nvidia-smi csv", None, None, 8, {
        0: dict(pcie=(1, 4, None, 16, 16), performance_state=None),
        7: dict(pcie=(1, 4, None, 16, 16)),
    }, []),
}


def _facts(g, keys) -> dict:
    pcie = (g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_device_max, g.pcie_width_current,
            g.pcie_width_max)
    return {k: pcie if k == "pcie" else getattr(g, k) for k in keys}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_sample(name: str):
    from harness.gpu import health_problems

    source, driver, cuda, n, gpus, problems = REAL[name]
    inv = parse_nvidia_smi(_read(name))
    assert (inv.source, inv.driver_version, inv.cuda_version, len(inv.gpus)) == (
        source, driver, cuda, n)
    assert [g.index for g in inv.gpus] == (sorted(gpus) if len(gpus) == n else list(range(n)))
    for index, expected in gpus.items():
        assert _facts(inv.by_index(index), expected) == expected, index
    found = [(p.gpu, p.what) for g in inv.gpus for p in health_problems(g, **GPU_PROFILE)]
    assert found == problems


def test_real_csv_time_series_without_header():
    # The header the job omitted, as its README gives it (units included).
    columns = ("timestamp, name, pci.bus_id, driver_version, pstate, pcie.link.gen.max, "
               "pcie.link.gen.current, temperature.gpu, utilization.gpu [%], "
               "utilization.memory [%], memory.total [MiB], memory.free [MiB], memory.used [MiB]")
    csv = parse_smi_csv(_read("real_csv-545-a100-timeseries-noheader.csv"),
                        columns=tuple(columns.split(", ")))
    assert (csv.num_samples, csv.inventory.driver_version) == (8, "545.23.08")
    assert [(g.bus_id, g.temperature_c, g.memory_total_gib, g.performance_state, g.pcie_gen_max)
            for g in csv.inventory.gpus] == [
        ("00000000:3B:00.0", 44.0, 40.0, "P0", 4),
        ("00000000:8B:00.0", 43.0, 40.0, "P0", 4),
        ("00000000:0B:00.0", 43.0, 40.0, "P0", 4)]


@pytest.mark.parametrize(("line", "index", "bus_id"), [
    # Spellings seen in public logs and tests of GPU tools (R610 and before).
    ("Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error", 1,
     "0000:34:00.0"),
    ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error", 0,
     "0000:CB:00.0"),
    ("Unable to determine the device handle for GPU0000:01:00.0: GPU has fallen off the bus.", 0,
     "0000:01:00.0"),
    ("Unable to determine the device handle for GPU 0: Unknown Error", 0, None),
    ("Unable to determine the device handle for GPU 0000:02:00.0: Unable to communicate with GPU "
     "because it is insufficiently powered.", 0, "0000:02:00.0"),
    ("Unable to determine the device handle for gpu 0000:01:00.0:", 0, "0000:01:00.0"),
])
def test_only_a_lost_gpu(line: str, index: int, bus_id: str | None):
    (g,) = parse_nvidia_smi(line + "\nNo devices were found\n").gpus
    assert (g.index, g.bus_id, g.requires_reset, g.query_errors) == (index, bus_id, True, (line,))


def test_lost_gpu_in_a_query_dump_is_numbered_in_bus_order():
    text = _read("real_q-610-temperature-deprecated-versions.txt").replace(
        "Attached GPUs", "Unable to determine the device handle for gpu 0000:01:80.0: GPU is lost."
        "  Reboot the system to recover this GPU\nAttached GPUs")
    inv = parse_smi_query(text)
    assert [(g.index, g.bus_id, g.requires_reset) for g in inv.gpus] == [
        (0, "00000000:01:00.0", False), (1, "0000:01:80.0", True), (2, "00000000:02:00.0", False)]


def test_lost_gpu_line_before_xml():
    text = ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error\n"
            + _read("real_xml-575-rtx4070-laptop.xml"))
    inv = parse_smi_xml(text)
    assert [(g.index, g.bus_id, g.requires_reset) for g in inv.gpus] == [
        (0, "00000000:01:00.0", False), (1, "0000:CB:00.0", True)]


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "0: ", "2024-06-25T18:45:27.095437505Z ",
                                    "2024-06-25T18:45:27Z [1,3]<stdout>:"])
def test_launcher_prefixes(prefix: str):
    for name in ("real_q-565-h100-sxm.txt", "real_table-525-a40-gsp-timeout-err.txt",
                 "real_xml-575-rtx4070-laptop.xml", "query-gpu-units.csv"):
        plain = parse_nvidia_smi(_read(name))
        wrapped = "\n".join(prefix + line for line in _read(name).splitlines())
        assert parse_nvidia_smi(wrapped) == plain, name


@pytest.mark.parametrize(("mask", "reasons"), [
    ("0x0000000000000004", ("SW Power Cap",)),  # the real sample's value
    ("0x0000000000000001", ("Idle",)),
    # NVML's bits: 0x8 HW slowdown, 0x40 HW thermal, 0x80 power brake (not seen in a sample).
    ("0x0000000000000048", ("HW Slowdown", "HW Thermal Slowdown")),
    ("0x0000000000000088", ("HW Slowdown", "HW Power Brake Slowdown")),
    ("[N/A]", ()),
])
def test_csv_reasons_bitmask_alone(mask: str, reasons: tuple[str, ...]):
    # The real sample's header, with only the bitmask column kept.
    lines = _read("real_csv-570-rtx-pro-6000-event-reasons.csv").splitlines()
    text = "\n".join(", ".join(line.split(", ")[:3]) for line in lines[:2])
    text = text.replace("0x0000000000000004", mask)
    assert parse_smi_csv(text).inventory.gpus[0].throttle_reasons == reasons


@pytest.mark.parametrize(("text", "message"), [
    (_read("real_nvml-unknown-error-in-container.txt"),
     "^nvidia-smi could not read the GPUs: Failed to initialize NVML: Unknown Error$"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
     "the latest NVIDIA driver is installed and running.\n",
     "^nvidia-smi could not read the GPUs: NVIDIA-SMI has failed because it couldn't"),
    ("No devices were found\n", "^nvidia-smi could not read the GPUs: No devices were found$"),
])
def test_nvidia_smi_failure_is_named(text: str, message: str):
    with pytest.raises(ParseError, match=message):
        parse_nvidia_smi(text)
    with pytest.raises(ParseError, match="nvidia-smi says: "):
        parse_smi_query(text)


@pytest.mark.parametrize(("name", "host_max", "link_max"), [
    ("a6000-537-windows-wddm.txt", 5, 4),  # a Gen4 GPU in a Gen5 slot: the GPU's gen 4
    ("l4-555-query-xml.xml", 5, 4),
    ("real_q-550-a10-hw-power-brake.txt", None, 4),  # Host Max : N/A
    ("real_q-565-h100-sxm.txt", 5, 5),
])
def test_the_slots_pcie_generation_is_read(name: str, host_max: int | None, link_max: int):
    from harness.gpu import pcie_link_gen_max, pcie_slot_limit

    g = parse_nvidia_smi(_read(name)).gpus[0]
    assert g.pcie_gen_host_max == host_max
    assert pcie_link_gen_max(g) == link_max
    assert pcie_slot_limit(g) is None


def test_the_csv_query_reads_the_hosts_pcie_generation():
    csv = ("index, pci.bus_id, pcie.link.gen.max, pcie.link.gen.gpumax, pcie.link.gen.hostmax\n"
           "0, 00000000:53:00.0, 5, 6, 5\n")
    g = parse_smi_csv(csv).inventory.gpus[0]
    assert (g.pcie_gen_max, g.pcie_gen_device_max, g.pcie_gen_host_max) == (5, 6, 5)


def _section(bus: str) -> str:
    return f"GPU {bus}\n    Product Name : NVIDIA H100 80GB HBM3\n"


def test_a_command_line_selecting_a_gpu_gives_its_index():
    # Each `nvidia-smi -i N -q` pasted above its output: N is that GPU's index.
    text = ("$ nvidia-smi -i 3 -q\n" + _section("00000000:61:00.0")
            + "$ nvidia-smi --id=5 -q\n" + _section("00000000:A1:00.0"))
    assert [g.index for g in parse_nvidia_smi(text).gpus] == [3, 5]
    # One section without its command line: file order, as without any.
    text = "$ nvidia-smi -i 3 -q\n" + _section("00000000:61:00.0") + _section("00000000:A1:00.0")
    assert [g.index for g in parse_nvidia_smi(text).gpus] == [0, 1]


def test_noheader_rows_take_the_columns_of_the_command_above():
    text = ("$ nvidia-smi --query-gpu=index,temperature.gpu --format=csv,noheader,nounits\n"
            "0, 41\n1, 97\n")
    assert [(g.index, g.temperature_c) for g in parse_nvidia_smi(text).gpus] == [
        (0, 41.0), (1, 97.0)]
    with pytest.raises(ParseError, match="no known --query-gpu column"):
        parse_nvidia_smi("0, 41\n1, 97\n")  # no command, no header: not read as anything
