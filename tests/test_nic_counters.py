"""harness.probes.nic_counters: the delta rules and link states on fake sysfs trees built from a
recorded EFA hw_counters listing (tests/data/host; what the probe reads of that listing, and of an
iWARP `N/A (no PMA)` one, is in their X.expect.json)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.probes import nic_counters as nc
from tests.sample_trees import efa_hw_counters

DATA = Path(__file__).parent / "data" / "host"


def _efa_tree(root: Path, bump: dict[str, int] | None = None) -> Path:
    """efa_0 from the perftest#113 client listing: every counter under ports/1/hw_counters
    (the listing mixes device and port level; the judged ones are port level)."""
    client = efa_hw_counters((DATA / "real_efa_hw_counters_perftest_113.txt").read_text())["client"]
    port = root / "sys/class/infiniband/efa_0/ports/1"
    (port / "hw_counters").mkdir(parents=True, exist_ok=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    for name, value in client.items():
        (port / "hw_counters" / name).write_text(f"{int(value) + (bump or {}).get(name, 0)}\n")
    return root


def test_delta_fail_warn_and_old_driver_without_network_counters(tmp_path: Path):
    before = nc.snapshot(_efa_tree(tmp_path / "a"))
    after = nc.snapshot(_efa_tree(tmp_path / "b", {"rdma_read_wr_err": 2, "rx_drops": 7,
                                                   "tx_pkts": 1000}))
    result = nc.judge(before, after)
    assert result.failures == ["efa_0/1 rdma_read_wr_err +2 (now 2)"]
    assert result.warnings == ["efa_0/1 rx_drops +7 (now 7)"]


def test_reset_is_not_negative_and_vanished_port_is_unknown(tmp_path: Path):
    before = nc.snapshot(_efa_tree(tmp_path / "a", {"rx_drops": 50}))
    after = nc.snapshot(_efa_tree(tmp_path / "b"))
    assert nc.judge(before, after).resets == ["efa_0/1 rx_drops: 50 -> 0"]
    gone = dataclasses.replace(after, ports={})
    assert nc.judge(before, gone).unknown == ["efa_0/1: gone after the run"]


def test_link_down_and_polling(tmp_path: Path):
    root = _efa_tree(tmp_path)
    port = root / "sys/class/infiniband/efa_0/ports/1"
    (port / "phys_state").write_text("2: Polling\n")
    assert nc.link_problems(nc.snapshot(root)) == ["efa_0/1: physical state 2: Polling"]
    (port / "state").write_text("1: DOWN\n")
    assert nc.link_problems(nc.snapshot(root)) == ["efa_0/1: state 1: DOWN"]


def test_window_records_and_survives_missing_sysfs(tmp_path: Path):
    nc.WINDOWS.clear()
    with nc.window(tmp_path, "multi-node"):
        pass
    before, after = nc.WINDOWS.pop("multi-node")
    assert before.problem and after.problem and "does not exist" in before.problem


def _port(root: Path, dev: str, state: str, counters: dict[str, str]) -> None:
    port = root / "sys/class/infiniband" / dev / "ports/1"
    (port / "hw_counters").mkdir(parents=True, exist_ok=True)
    (port / "state").write_text(state + "\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    for name, value in counters.items():
        (port / "hw_counters" / name).write_text(value + "\n")


def test_checks_pf_net_012_013_end_to_end(pytester, monkeypatch, tmp_path: Path):
    from tests.conftest import facts_conftest, run_check_file

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    root = tmp_path / "root"
    _port(root, "rdmap0s27", "4: ACTIVE", {"rx_drops": "0", "rdma_read_wr_err": "0"})
    _port(root, "rdmap1s27", "1: DOWN", {"rx_drops": "0", "rdma_read_wr_err": "0"})
    _port(root, "ibp1s0", "1: DOWN", {})  # not an EFA device: not judged on an EFA profile
    conftest = facts_conftest("tests.host_facts", "two_efa",
                              ["efa_devices_if_expected", "bandwidth_runs"])
    # a window in which rdmap0s27 lost RDMA reads: what the bandwidth fixtures record
    conftest += f'''

import pytest
from pathlib import Path
from harness.probes import nic_counters


@pytest.fixture(scope="session", autouse=True)
def _window():
    root = Path({str(root)!r})
    counter = root / "sys/class/infiniband/rdmap0s27/ports/1/hw_counters/rdma_read_wr_err"
    with nic_counters.window(root, "multi-node"):
        counter.write_text("3\\n")
'''
    pytester.makeconftest(conftest)
    got = run_check_file(pytester, "test_nic.py", "p5.48xlarge", f"--preflight-sysroot={root}")
    assert got["PF-NET-012"]["outcome"] == "fail"
    assert "rdmap1s27/1: state 1: DOWN" in got["PF-NET-012"]["message"]
    assert "ibp1s0" not in got["PF-NET-012"]["message"]
    assert got["PF-NET-013"]["outcome"] == "fail"
    assert "multi-node: rdmap0s27/1 rdma_read_wr_err +3 (now 3)" in got["PF-NET-013"]["message"]
