"""fi_info parser: what the inspect result does not show (the recorded output under
tests/data/fi_info is checked against its X.expect.json by tests/test_parsers_samples.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.parsers import ParseError
from harness.parsers.fi_info import parse_fi_info

DATA = Path(__file__).parent / "data" / "fi_info"


def test_verbose_entries_keep_domain_version_and_protocol():
    info = parse_fi_info((DATA / "real_verbose_efa_libfabric_2.0.txt").read_text())
    assert [(e.domain, e.version, e.type, e.protocol) for e in info.entries] == [
        ("rdmap70s0-rdm", "200.0", "FI_EP_RDM", "FI_PROTO_EFA"),
        ("rdmap70s0-dgrm", "200.0", "FI_EP_DGRAM", "FI_PROTO_EFA")]


def test_a_verbose_record_whose_head_was_cut_is_read():
    """ofiwg/libfabric issue #9158: a `fi_info -v` paste that starts mid-record (its `fi_info:`
    line lost) was refused as no fi_info output; a record section opens the record."""
    text = (DATA / "real_verbose_fragment_tcp_rxm_libfabric_1.18.txt").read_text()
    info = parse_fi_info(text)
    assert [(e.provider, e.fabric, e.domain, e.version, e.type) for e in info.entries] == [
        ("tcp;ofi_rxm", "172.31.32.0/20", "eth0", "118.10", "FI_EP_RDM")]
    whole = parse_fi_info("fi_info:\n    fi_tx_attr:\n        size: 2048\n" + text)
    assert whole.entries == info.entries


def test_every_entry_is_kept():
    """Three entries per p5 device (efa-direct RDM, efa RDM, efa DGRAM), not one per device."""
    assert len(parse_fi_info((DATA / "composed_p5_efa_direct_32.txt").read_text()).entries) == 96


def test_a_domain_cut_after_its_dash_is_its_device_not_one_more():
    """PF-NET-003 counts devices: the listing cut mid-domain (`rdmap164s27-`) still names 32."""
    text = (DATA / "composed_p5_efa_direct_32.txt").read_text()
    cut = text[: text.index("rdmap164s27-dgrm") + len("rdmap164s27-")]
    assert len(parse_fi_info(cut).efa_devices) == 32


@pytest.mark.parametrize("text", ["", "usage: fi_info [OPTIONS]\n", "-61abc\n", "\x00\x01"])
def test_garbage_raises(text: str):
    with pytest.raises(ParseError, match="nothing recognised as fi_info output"):
        parse_fi_info(text)


def test_inspect_cli(capsys: pytest.CaptureFixture[str]):
    assert main(["inspect", "fi-info", str(DATA / "real_error_61.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["error_code"] == -61 and out["efa"] is False
    assert out["notes"] == [] and out["commands_seen"] == []
    assert main(["inspect", "fi-info", str(DATA / "garbage.txt"), "--json"]) == 2
    assert "nothing recognised" in json.loads(capsys.readouterr().out)["error"]


@pytest.mark.parametrize(("text", "code"), [
    ("fi_getinfo: -61 (No data available)\n", -61),
    ("provider: efa\n    domain: rdmap16s27-rdm\n  -61\n", -61),  # `-` and digit elsewhere too
    ("provider: tcp\n    domain: eth-0\n    fabric: 10-1\n", None),  # no error line
    ("x -2\n  fi_getinfo: -2\n -61\n", -2),  # the first error line wins
    ("-61abc\n-22\n", -22),
])
def test_error_line_is_found_among_other_lines(text: str, code: int | None):
    """The first error line (found per batch, around each `-digit`) gives the error code."""
    if code is None:
        assert parse_fi_info(text).error_code is None
        return
    blank = "\n" * 70_000  # (the error line in a later batch of the reader too)
    for variant in (text, blank + text):
        assert parse_fi_info(variant).error_code == code
