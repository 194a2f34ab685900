"""InfiniBand/RoCE and NVLink-domain checks (checks/test_fabric.py) with canned facts, and the
sysfs/NCCL readers they rest on, on recorded values."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks.test_fabric import REMEDY_PORT
from harness.parsers.nccl_mnnvl import health_faults
from harness.probes.fabric import gdr_support, pci_gpus, rdma_devices
from tests.conftest import facts_conftest, run_check_file

ROOT = Path(__file__).resolve().parent.parent
FACTS = ["rdma_devices", "gdr_peermem", "gpu_fabric", "imex_channels"]
IB_PROFILE = ('[profiles."hgx-ib"]\nbase = "p5.48xlarge"\nfabric = "ib"\nnum_efa_devices = 0\n'
              'num_ib_devices = 8\nweakened_because = "an HGX H100 on InfiniBand, not a p5: no EFA"\n')


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def run(pytester: pytest.Pytester, scenario: str, profile: str) -> dict[str, tuple[str, str]]:
    pytester.makeconftest(facts_conftest("tests.fabric_facts", scenario, FACTS))
    (pytester.path / "ib.toml").write_text(IB_PROFILE)
    results = run_check_file(pytester, "test_fabric.py", profile,
                             f"--preflight-profile-file={pytester.path / 'ib.toml'}")
    return {k: (v["outcome"], v.get("message") or "") for k, v in results.items()}


def test_healthy_ib_node_passes_and_the_domain_checks_say_why_not(pytester):
    got = run(pytester, "healthy_ib", "hgx-ib")
    assert {k: v[0] for k, v in got.items()} == {
        "PF-IB-001": "pass", "PF-IB-002": "pass", "PF-IB-003": "pass",
        "PF-NVL-001": "skip", "PF-NVL-002": "skip", "PF-NVL-003": "skip"}
    assert "zero cluster UUID" in got["PF-NVL-001"][1]  # an HGX box is not a domain


def test_polling_port_and_slow_rail_fail_naming_the_hca(pytester):
    got = run(pytester, "port_polling", "hgx-ib")
    assert got["PF-IB-001"][0] == "fail"
    assert "mlx5_7 port 1: state DOWN, physical state Polling" in got["PF-IB-001"][1]
    assert got["PF-IB-003"][0] == "warn"  # no peermem: DMA-BUF only


def test_half_the_hcas_fail_on_the_profiles_count(pytester):
    """4 of the profile's 8 HCAs, every port up: the count fails (issue 25 item 4)."""
    got = run(pytester, "half_the_hcas", "hgx-ib")
    assert got["PF-IB-001"] == ("fail", "[PF-IB-001] HCAs missing or ports not ACTIVE/LinkUp: "
                                "1 found, none allowed for hgx-ib: 4 HCAs (mlx5_0, mlx5_1, "
                                "mlx5_2, mlx5_3), 8 required for hgx-ib; " + REMEDY_PORT)


def test_slow_rail_fails(pytester):
    got = run(pytester, "slow_rail", "hgx-ib")
    assert got["PF-IB-002"][0] == "fail"
    assert "ports slower than 400 Gb/s: 1 found" in got["PF-IB-002"][1]
    assert "mlx5_7 port 1: 200 Gb/sec (2X NDR)" in got["PF-IB-002"][1]


def test_ib_checks_do_not_apply_to_efa_profiles(pytester):
    got = run(pytester, "healthy_ib", "p5.48xlarge")
    assert got["PF-IB-001"][0] == "skip" and "fabric: efa" in got["PF-IB-001"][1]


def test_gb200_domain_healthy(pytester):
    got = run(pytester, "gb200_healthy", "p6e-gb200.36xlarge")
    assert [got[f"PF-NVL-00{i}"][0] for i in (1, 2, 3)] == ["pass", "pass", "pass"]


def test_gb200_unregistered_gpu_fails_and_missing_imex_warns(pytester):
    got = run(pytester, "gb200_gpu_unregistered", "p6e-gb200.36xlarge")
    assert got["PF-NVL-001"][0] == "fail"
    assert "GPU 3: fabric state in progress" in got["PF-NVL-001"][1]
    assert got["PF-NVL-003"][0] == "warn"


def test_gb200_degraded_bandwidth_fails_the_health_check(pytester):
    got = run(pytester, "gb200_degraded", "p6e-gb200.36xlarge")
    assert got["PF-NVL-002"][0] == "fail"
    assert "GPU 3: degraded bandwidth (healthMask 0xa9)" in got["PF-NVL-002"][1]


def test_one_gpu_without_a_health_mask_is_an_error_not_a_pass(pytester):
    got = run(pytester, "gb200_health_unread", "p6e-gb200.36xlarge")
    assert got["PF-NVL-002"] == ("error", "[PF-NVL-002] fabric health mask not read on GPU 2 "
                                 "(nvmlDeviceGetGpuFabricInfoV: NotSupported, or the query "
                                 "failed)")


def test_health_mask_fields():
    """Masks no recorded line shows (the recorded 0xaa and 0x0: real_mnnvl_h200_gb200.txt.expect.json)."""
    assert health_faults(0x1AA) == []  # INCORRECT_CONFIGURATION 1: none
    assert health_faults(0x2AA) == ["incorrect configuration (code 2)"]
    assert health_faults(0xA6) == ["route recovery"]


def _write(root: Path, rel: str, value: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value + "\n")


def test_sysfs_readers_classify_ib_roce_and_efa(tmp_path):
    ib = "sys/class/infiniband/mlx5_0"
    _write(tmp_path, f"{ib}/ports/1/state", "4: ACTIVE")  # real values: tests/data/ib
    _write(tmp_path, f"{ib}/ports/1/phys_state", "5: LinkUp")
    _write(tmp_path, f"{ib}/ports/1/rate", "400 Gb/sec (4X NDR)")
    _write(tmp_path, f"{ib}/ports/1/link_layer", "InfiniBand")
    _write(tmp_path, "sys/class/infiniband/mlx5_bond_0/ports/1/link_layer", "Ethernet")
    _write(tmp_path, "sys/class/infiniband/mlx5_bond_0/ports/1/state", "4: ACTIVE")
    _write(tmp_path, "sys/class/infiniband/efa_0/ports/1/link_layer", "Unknown")
    devices = {d.name: d for d in rdma_devices(tmp_path)}
    assert {n: d.kind for n, d in devices.items()} == {
        "efa_0": "efa", "mlx5_0": "ib", "mlx5_bond_0": "roce"}
    assert devices["mlx5_0"].rate_gbps == 400.0
    assert devices["mlx5_0"].ports[0].phys_state == "LinkUp"
    assert gdr_support(tmp_path) is None
    _write(tmp_path, "sys/module/nvidia_peermem/version", "580.105.08")
    assert gdr_support(tmp_path) == "peermem (/sys/module/nvidia_peermem/version)"
    for i, cls in enumerate(("0x030200", "0x068000", "0x020000")):
        fn = f"sys/bus/pci/devices/0000:0{i}:00.0"
        _write(tmp_path, f"{fn}/vendor", "0x10de")
        _write(tmp_path, f"{fn}/class", cls)
        _write(tmp_path, f"{fn}/device", "0x2330")
    gpus, switches = pci_gpus(tmp_path)
    assert [g.device_id for g in gpus] == ["2330"] and switches == 1
