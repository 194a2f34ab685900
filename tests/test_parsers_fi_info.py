"""fi_info parser: a table over recorded output (tests/data/fi_info, sources in SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.parsers import ParseError
from harness.parsers.fi_info import parse_fi_info

DATA = Path(__file__).parent / "data" / "fi_info"
P5_DEVICES = [f"rdmap{n}s27" for n in (79, 80, 81, 82, 96, 97, 98, 99, 113, 114, 115, 116, 130,
                                       131, 132, 133, 147, 148, 149, 150, 164, 165, 166, 167,
                                       181, 182, 183, 184, 198, 199, 200, 201)]

EXPECTED = {
    "real_efa_2020_efa0.txt": dict(efa=True, efa_devices=["efa_0"],
                                   providers=["efa", "efa;ofi_rxd"],
                                   endpoint_types=["FI_EP_RDM", "FI_EP_DGRAM"], error_code=None),
    "composed_p5_efa_direct_32.txt": dict(efa=True, efa_devices=P5_DEVICES, providers=["efa"],
                                          endpoint_types=["FI_EP_RDM", "FI_EP_DGRAM"],
                                          error_code=None),
    "composed_plain_no_efa.txt": dict(
        efa=False, efa_devices=[], providers=["tcp;ofi_rxm", "tcp", "udp;ofi_rxd", "udp", "shm",
                                              "sockets"],
        endpoint_types=["FI_EP_RDM", "FI_EP_MSG", "FI_EP_DGRAM"], error_code=None),
    "real_error_61.txt": dict(efa=False, efa_devices=[], providers=[], endpoint_types=[],
                              error_code=-61),
    "composed_fi_getinfo_61.txt": dict(efa=False, efa_devices=[], providers=[],
                                       endpoint_types=[], error_code=-61),
    "real_verbose_efa_libfabric_2.0.txt": dict(efa=True, efa_devices=["rdmap70s0"],
                                               providers=["efa"],
                                               endpoint_types=["FI_EP_RDM", "FI_EP_DGRAM"],
                                               error_code=None),
    "real_eks_efa_direct_201_prompt.txt": dict(efa=True, efa_devices=["rdmap49s0"],
                                               providers=["efa"],
                                               endpoint_types=["FI_EP_RDM", "FI_EP_DGRAM"],
                                               error_code=None),
    "real_p4d_libfabric_1.11_gid_fabrics.txt": dict(
        efa=True, efa_devices=["rdmap16s27", "rdmap32s27", "rdmap144s27", "rdmap160s27"],
        providers=["efa"], endpoint_types=["FI_EP_RDM"], error_code=None),
    "real_cxi_slingshot_cscs.txt": dict(efa=False, efa_devices=[], providers=["cxi"],
                                        endpoint_types=["FI_EP_RDM"], error_code=None),
    "real_cxi_61_strerror_cscs.txt": dict(efa=False, efa_devices=[], providers=[],
                                          endpoint_types=[], error_code=-61),
    "real_verbs_tcp_udp_rxm_rxd.txt": dict(
        efa=False, efa_devices=[], providers=["verbs;ofi_rxm", "tcp;ofi_rxm", "verbs;ofi_rxd",
                                              "UDP;ofi_rxd"],
        endpoint_types=["FI_EP_RDM"], error_code=None),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_output_parses(name: str):
    out = parse_fi_info((DATA / name).read_text()).to_json()
    assert {key: out[key] for key in EXPECTED[name]} == EXPECTED[name]


@pytest.mark.parametrize(("name", "fabrics"), [
    ("real_verbose_efa_libfabric_2.0.txt", ["efa"]),
    ("real_eks_efa_direct_201_prompt.txt", ["efa-direct", "efa"]),
    ("real_verbs_tcp_udp_rxm_rxd.txt", ["IB-0xfe80000000000000", "TCP-IP", "UDP-IP"]),
])
def test_recorded_fabrics(name: str, fabrics: list[str]):
    assert parse_fi_info((DATA / name).read_text()).fabrics == fabrics


def test_verbose_entries_keep_domain_version_and_protocol():
    info = parse_fi_info((DATA / "real_verbose_efa_libfabric_2.0.txt").read_text())
    assert [(e.domain, e.version, e.type, e.protocol) for e in info.entries] == [
        ("rdmap70s0-rdm", "200.0", "FI_EP_RDM", "FI_PROTO_EFA"),
        ("rdmap70s0-dgrm", "200.0", "FI_EP_DGRAM", "FI_PROTO_EFA")]


def test_fabrics_are_kept():
    info = parse_fi_info((DATA / "composed_p5_efa_direct_32.txt").read_text())
    assert info.fabrics == ["efa-direct", "efa"]
    assert len(info.entries) == 96


@pytest.mark.parametrize("text", ["", "usage: fi_info [OPTIONS]\n", "-61abc\n", "\x00\x01"])
def test_garbage_raises(text: str):
    with pytest.raises(ParseError, match="nothing recognised as fi_info output"):
        parse_fi_info(text)


def test_error_code_with_strerror_text():
    assert parse_fi_info("fi_getinfo: -61 (No data available)\n").error_code == -61


def test_inspect_cli(capsys: pytest.CaptureFixture[str]):
    assert main(["inspect", "fi-info", str(DATA / "real_error_61.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {key: out[key] for key in EXPECTED["real_error_61.txt"]} == EXPECTED["real_error_61.txt"]
    assert out["notes"] == [] and out["commands_seen"] == []
    assert main(["inspect", "fi-info", str(DATA / "garbage.txt"), "--json"]) == 2
    assert "nothing recognised" in json.loads(capsys.readouterr().out)["error"]
