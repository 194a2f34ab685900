"""The shared GPU record: PCI addresses in every spelling, and the problems one GPU shows."""

from __future__ import annotations

import dataclasses

import pytest

from harness.base.gpu_actions import MONITOR, REBOOT, worst_action
from harness.base.gpu_pcie import pcie_problems, pcie_slot_limit, pcie_slot_outliers
from harness.base.gpu_record import GpuInfo, GpuInventory, gpu_label, pci_key


@pytest.mark.parametrize(("text", "key"), [
    ("00000000:53:00.0", (0, 0x53, 0)),
    ("0000:53:00", (0, 0x53, 0)),
    ("PCI:0000:10:1c", (0, 0x10, 0x1C)),
    ("53:00.0", (0, 0x53, 0)),
    ("00000001:B9:00.0", (1, 0xB9, 0)),
    ("not a bus id", None),
    (None, None),
])
def test_pci_key(text, key):
    assert pci_key(text) == key


def test_inventory_by_pci_matches_kernel_spelling():
    inv = GpuInventory("nvml", None, None, (GpuInfo(0, bus_id="00000000:53:00.0"),
                                            GpuInfo(1, bus_id="00000000:64:00.0")))
    assert inv.by_pci("0000:64:00").index == 1
    assert inv.by_pci("0000:75:00") is None


def test_inventory_by_uuid():
    inv = GpuInventory("nvml", None, None, (GpuInfo(0, uuid="GPU-5b3e2a41"),
                                            GpuInfo(1, uuid="GPU-0c2f5e77")))
    assert inv.by_uuid("GPU-0c2f5e77").index == 1
    assert inv.by_uuid("0C2F5E77").index == 1  # torch prints it without the prefix
    assert inv.by_uuid("GPU-ffff") is None and inv.by_uuid(None) is None


def test_labels():
    g = GpuInfo(3, bus_id="00000000:86:00.0", serial="1654922000003")
    assert gpu_label(g) == "GPU 3 (bus 00000000:86:00.0, serial 1654922000003)"
    assert gpu_label(GpuInfo(3)) == "GPU 3 (bus ?, serial unknown)"
    assert gpu_label(None, bus_id="0000:ee:00") == "GPU at bus 0000:ee:00"
    assert gpu_label(None, 5) == "GPU 5"


def test_worst_action():
    assert worst_action(["monitor", "reset GPU", "reboot"]) == "reboot"
    assert worst_action([]) is None


BASE = GpuInfo(0, performance_state="P0", pcie_gen_current=5, pcie_gen_max=5,
               pcie_gen_device_max=5, pcie_width_current=16, pcie_width_max=16)


@pytest.mark.parametrize(("changes", "problems"), [
    ({}, []),
    ({"performance_state": "P8", "pcie_gen_current": 1}, []),  # idle links train down
    ({"performance_state": "P8", "pcie_width_current": 8}, []),
    ({"pcie_gen_current": 4}, ["PCIe link at gen 4 < gen 5 (P0)"]),
    # A Gen6 GPU in a Gen5 slot at gen 5: the host's design, no problem (a reboot cannot
    # raise a slot); at gen 4 it is below what the slot gives.
    ({"pcie_gen_device_max": 6}, []),
    ({"pcie_gen_device_max": 6, "pcie_gen_current": 4}, ["PCIe link at gen 4 < gen 5 (P0)"]),
    ({"pcie_gen_max": 4, "pcie_gen_current": 4}, []),
    # NVML's maximum for the device in this system wins over nvidia-smi's Host Max: a real
    # GB300 reports Host Max 4 with the link at gen 6; a link at 5 there is below its maximum
    ({"pcie_gen_max": 6, "pcie_gen_device_max": 6, "pcie_gen_host_max": 4,
      "pcie_gen_current": 6}, []),
    ({"pcie_gen_max": 6, "pcie_gen_device_max": 6, "pcie_gen_host_max": 4,
      "pcie_gen_current": 5}, ["PCIe link at gen 5 < gen 6 (P0)"]),
    # nvidia-smi's Host Max below the GPU's: the lower one is the link's maximum.
    ({"pcie_gen_max": None, "pcie_gen_host_max": 4, "pcie_gen_current": 4}, []),
    ({"pcie_gen_max": None, "pcie_gen_host_max": 5, "pcie_gen_current": 4},
     ["PCIe link at gen 4 < gen 5 (P0)"]),
    ({"pcie_gen_host_max": 0, "pcie_gen_current": 4}, ["PCIe link at gen 4 < gen 5 (P0)"]),
    ({"pcie_width_current": 8}, ["PCIe link x8 < x16 (P0)"]),
    ({"pcie_width_current": 8, "performance_state": None}, ["PCIe link x8 < x16"]),
    ({"pcie_width_current": None, "pcie_gen_current": None}, []),
])
def test_pcie_problems(changes, problems):
    found = pcie_problems(dataclasses.replace(BASE, **changes))
    assert [p.what for p in found] == problems
    assert all(p.action == REBOOT for p in found)


@pytest.mark.parametrize(("changes", "limit"), [
    ({}, None),
    ({"pcie_gen_device_max": 6}, "the slot caps the link at gen 5 (the GPU supports gen 6)"),
    ({"pcie_gen_max": None, "pcie_gen_host_max": 4},
     "the slot caps the link at gen 4 (the GPU supports gen 5)"),
    ({"pcie_gen_host_max": 6}, None),  # a newer slot than the GPU: the GPU's gen is the max
    # a host max below NVML's is information, not a cap (GB300: host 4, link 6)
    ({"pcie_gen_max": 6, "pcie_gen_device_max": 6, "pcie_gen_host_max": 4,
      "pcie_gen_current": 6}, None),
])
def test_a_slot_older_than_the_gpu_is_recorded_not_judged(changes, limit):
    g = dataclasses.replace(BASE, **changes)
    assert pcie_slot_limit(g) == limit
    assert pcie_problems(g) == []


def test_one_slot_below_the_others_is_a_warning_not_a_reboot():
    gpus = tuple(dataclasses.replace(BASE, index=i, name="NVIDIA B200", pcie_gen_device_max=6,
                                     pcie_gen_max=4 if i == 3 else 5) for i in range(8))
    (p,) = pcie_slot_outliers(GpuInventory("nvml", None, None, gpus))
    assert (p.gpu, p.action, p.fatal) == (3, MONITOR, False)
    assert p.what.startswith("its slot allows PCIe gen 4, the other slots of this node gen 5")


def test_a_host_max_below_nvmls_is_shown_as_information():
    from harness.base.gpu_pcie import pcie_host_note, pcie_link_gen_max

    gb300 = dataclasses.replace(BASE, pcie_gen_max=6, pcie_gen_device_max=6, pcie_gen_host_max=4,
                                pcie_gen_current=6)
    assert pcie_link_gen_max(gb300) == 6
    assert pcie_host_note(gb300) == "host reports max gen 4 (information; NVML's maximum is judged)"
    assert pcie_host_note(BASE) is None


@pytest.mark.parametrize(("state", "idle"), [("P8", True), ("P15", True), ("P0", False),
                                              ("P" + "9" * 5000, False), ("P٨", False), ("", False)])
def test_a_garbled_performance_state_is_not_idle_and_does_not_crash(state: str, idle: bool):
    """`P` and 5,000 digits (a mutated dump, tests/test_fuzz_parsers.py) made int() raise: more
    than 4,300 digits are refused."""
    from harness.base.gpu_pcie import idle as is_idle
    assert is_idle(GpuInfo(0, performance_state=state)) is idle
