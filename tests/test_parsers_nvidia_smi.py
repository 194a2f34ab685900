"""nvidia-smi parsers over recorded outputs (tests/data/nvidia_smi, see SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nvidia_smi import parse_nvidia_smi
from harness.parsers.nvidia_smi_csv import parse_smi_csv
from harness.parsers.nvidia_smi_query import parse_smi_query
from harness.parsers.nvidia_smi_table import parse_smi_table
from harness.parsers.nvidia_smi_xml import parse_smi_xml
from tests import expect_parsed

DATA = Path(__file__).parent / "data" / "nvidia_smi"


def _read(name: str) -> str:
    return (DATA / name).read_bytes().decode()


def _field(g, key: str):
    if key == "pcie":
        return [g.pcie_gen_current, g.pcie_gen_max, g.pcie_gen_device_max, g.pcie_width_current,
                g.pcie_width_max]
    return expect_parsed.as_json(getattr(g, key))


# Each file's GPUs as `inspect nvidia-smi` shows them, its driver, CUDA and problems are in its
# X.expect.json (tests/test_parsers_samples.py); `expect_parsed` holds what inspect does not show.
@pytest.mark.parametrize(("name", "want"), expect_parsed.cases(DATA))
def test_parsed_facts(name: str, want: dict):
    """`expect_parsed`: {source, num_samples (CSV), driver_version, gpus: {index: {GpuInfo
    field: value}}, gpus_by_bus_id: {bus id: {...}} (every GPU, in order)}; `pcie` is [gen
    current, gen max, gen device max, width current, width max]. `columns`: the header a
    `noheader` CSV was queried with, as its source gives it (inspect refuses such a file)."""
    columns = tuple(want["columns"]) if "columns" in want else None
    csv = parse_smi_csv(_read(name), columns) if "num_samples" in want else None
    inv = csv.inventory if csv and columns else parse_nvidia_smi(_read(name))
    assert inv.source == want["source"]
    if csv:
        assert csv.num_samples == want["num_samples"]
    if "driver_version" in want:
        assert inv.driver_version == want["driver_version"]
    for index, expected in want.get("gpus", {}).items():
        g = inv.by_index(int(index))
        assert {k: _field(g, k) for k in expected} == expected, index
    if "gpus_by_bus_id" in want:
        assert [g.bus_id for g in inv.gpus] == list(want["gpus_by_bus_id"])
        for g in inv.gpus:
            expected = want["gpus_by_bus_id"][g.bus_id]
            assert {k: _field(g, k) for k in expected} == expected, g.bus_id


def test_parsed_facts_are_read():
    assert len(expect_parsed.cases(DATA)) >= 30


def test_idle_l4_at_x8_is_not_a_pcie_problem():
    from harness.base.gpu import health_problems

    g = parse_smi_query(_read("l4-550-idle-x8.txt")).gpus[0]
    assert health_problems(g, max_temp_c=85.0, require_ecc=True) == []


ECC_OFF = "ECC is disabled (enable: nvidia-smi -e 1, then reboot)"


@pytest.mark.parametrize(("name", "problems"), [
    ("real_table-610-kmd-version-lost-gpu.txt", [
        (0, ECC_OFF), (0, "temperature 87 C > 85 C"), (1, "GPU is lost or requires a reset"),
        (2, ECC_OFF), (2, "temperature 86 C > 85 C"), (3, ECC_OFF)]),
    ("real_q-525-h800-ecc-off.txt", [(0, ECC_OFF)]),
])
def test_ecc_off_is_a_problem_on_a_gpu_profile(name: str, problems: list):
    """The samples' expectations are judged under the local-cpu profile (ECC not required)."""
    from harness.base.gpu import health_problems

    inv = parse_nvidia_smi(_read(name))
    found = [(p.gpu, p.what) for g in inv.gpus
             for p in health_problems(g, max_temp_c=85.0, require_ecc=True)]
    assert found == problems


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


def test_plain_table_without_gpu_rows():
    with pytest.raises(ParseError, match="no GPU rows"):
        parse_smi_table("| NVIDIA-SMI 550.127.05   Driver Version: 550.127.05 |\n")


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


# ---- real outputs from public material (SOURCES.md `real_*`) ----

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
    # A `-q -d TEMPERATURE` dump says nothing about a reset: not read (None), not "no".
    assert [(g.index, g.bus_id, g.requires_reset) for g in inv.gpus] == [
        (0, "00000000:01:00.0", None), (1, "0000:01:80.0", True), (2, "00000000:02:00.0", None)]


def test_lost_gpu_line_before_xml():
    text = ("Unable to determine the device handle for GPU0000:CB:00.0: Unknown Error\n"
            + _read("real_xml-575-rtx4070-laptop.xml"))
    inv = parse_smi_xml(text)
    # R575's `reset_required` says `Requested functionality has been deprecated`: not read.
    assert [(g.index, g.bus_id, g.requires_reset) for g in inv.gpus] == [
        (0, "00000000:01:00.0", None), (1, "0000:CB:00.0", True)]


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
    ("[N/A]", None),  # not read: no reason known, not "none active"
])
def test_csv_reasons_bitmask_alone(mask: str, reasons: tuple[str, ...] | None):
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
    from harness.base.gpu_pcie import pcie_link_gen_max, pcie_slot_limit

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


_TABLE_HEAD = (
    "| NVIDIA-SMI 525.125.06   Driver Version: 525.125.06   CUDA Version: 12.0     |\n"
    "|===============================+======================+======================|\n"
    "|   0  NVIDIA GeForce ...  Off  | 00000000:01:00.0 Off |                    0 |\n")


@pytest.mark.parametrize(("row2", "lost", "temp"), [
    # gpud's 525.125.06 fixture (tests/data/nvidia_smi/real_table-525-geforce-fan-err-only.txt)
    ("|ERR!   38C    P5    49W / 450W |   2021MiB / 23028MiB |      0%   E. Process |", None, 38.0),
    # a laptop GPU that reports no power cap (gpud's test of `N/A / ERR!`, driver 535.98)
    ("| N/A   61C    P0     N/A / ERR! |      5MiB /  4096MiB |      0%      Default |", None, 61.0),
    ("|ERR!   ERR!   P5    49W / 450W |   2021MiB / 23028MiB |      0%   E. Process |", True, None),
    ("| 30%   38C  ERR!    49W / 450W |   2021MiB / 23028MiB |   ERR!   E. Process |", True, 38.0),
    ("|ERR!   38C  ERR!   ERR! / ERR! |   2021MiB / 23028MiB |      0%   E. Process |", True, 38.0),
])
def test_err_in_the_fan_or_the_power_cap_alone_is_not_a_lost_gpu(row2: str, lost: bool | None,
                                                                  temp: float | None):
    """`ERR!` where a GPU reports no fan speed or no power cap leaves that reading unread; in
    any other reading of the row (or with it) the driver cannot read the GPU: lost."""
    gpu = parse_smi_table(_TABLE_HEAD + row2 + "\n").gpus[0]
    assert (gpu.requires_reset, gpu.temperature_c) == (lost, temp)


def test_a_memory_cell_without_used_and_total_keeps_the_rows_other_readings():
    """GB10's unified memory: `| Not Supported |` in the memory cell (no `used / total`); the
    row's temperature, pstate and power are read all the same (they were unread before)."""
    gpu = parse_smi_table(DATA.joinpath("real_table-580-gb10-memory-not-supported.txt").read_text()
                          ).gpus[0]
    assert (gpu.temperature_c, gpu.performance_state, gpu.power_draw_w, gpu.memory_total_gib) == (
        42.0, "P0", 11.0, None)
