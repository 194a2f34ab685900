"""`preflight inspect nvidia-smi` names every GPU fact it did not read (issue 32): unknown is
never healthy, in inspect as in the checks. A real sample is read clean; then each fact the GPU
checks judge is taken out of it (its value printed as `N/A`, as nvidia-smi prints a value it
cannot read, or its line cut from a section that stays), and `inspect` must name that fact in
`unread`, in the checks' own words (harness.base.gpu_facts), and `--fail-on problem` exit 1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.base.gpu_facts import FACTS
from harness.cli import main
from harness.parsers import inspect_kinds
from harness.profiles.table import get_profile
from tests.test_samples_wrapped import MORE_WRAPPERS, WRAPPERS

DATA = Path(__file__).parent / "data"
H100_Q = DATA / "nvidia_smi/real_q-565-h100-sxm.txt"
H100_XML = DATA / "nvidia_smi/real_xml-580-h100x8-k8s-test-infra.xml"
V100_Q = DATA / "nvidia_smi/real_q-410-v100-retired-pages-pending.txt"


def _inspect(text: str, profile: str = "local-cpu") -> dict:
    return inspect_kinds()["nvidia-smi"](text, profile=get_profile(profile))


def _gate(tmp_path: Path, text: str, *args: str) -> int:
    path = tmp_path / "smi.txt"
    path.write_text(text, encoding="utf-8")
    return main(["inspect", "nvidia-smi", str(path), "--json", *args, "--fail-on", "problem"])


def _blank(text: str, path: tuple[str, ...], key: str, *, cut: bool = False) -> str:
    """`text` (an `nvidia-smi -q` dump) with every value of a key matching `key` in a section
    at `path` (section names from a GPU's block down; () for the block's own keys) printed
    `N/A`, or (`cut`) its line removed. Fails when nothing matched: the mutation must bite."""
    out, stack, hits = [], [], 0
    for line in text.splitlines(keepends=True):
        indent = len(line) - len(line.lstrip(" "))
        name, colon, value = line.strip().partition(":")
        name = name.strip()
        if line.strip().startswith("GPU 0000"):
            stack = [(indent, "")]
            out.append(line)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        here = tuple(n for _, n in stack[1:])
        if stack and here == path and colon and value.strip() and re.fullmatch(key, name):
            hits += 1
            if not cut:
                out.append(line[:line.index(":") + 1] + " N/A\n")
            continue
        if name and (not colon or not value.strip()):
            stack.append((indent, name))
        out.append(line)
    assert hits, f"no {key!r} under {path!r}"
    return "".join(out)


#: fact -> (section path, key) of where `nvidia-smi -q` prints it (harness.base.gpu_facts);
#: the reset state is read from either of two places (R565+ prints both).
Q_KEYS = {
    "model": ((), "Product Name"),
    "memory": (("FB Memory Usage",), "Total"),
    "ecc_mode": (("ECC Mode",), "Current"),
    "ecc_volatile": (("ECC Errors", "Volatile"), ".*Uncorrectable.*"),
    "ecc_aggregate": (("ECC Errors", "Aggregate"), ".*Uncorrectable.*"),
    "remap_pending": (("Remapped Rows",), "Pending"),
    "remap_failure": (("Remapped Rows",), "Remapping Failure Occurred"),
    "temperature": (("Temperature",), "GPU Current Temp"),
    "clock_reasons": (("Clocks Event Reasons",), ".*"),
    "persistence": ((), "Persistence Mode"),
    "pstate": ((), "Performance State"),
    "pcie_gen_max": (("PCI", "GPU Link Info", "PCIe Generation"), "(Device |Host )?Max"),
    "pcie_width_max": (("PCI", "GPU Link Info", "Link Width"), "Max"),
    "reset_state": (("GPU Reset Status",), ".*", (), "GPU Recovery Action"),
    "fabric_state": (("Fabric",), "State"),
    "fabric_status": (("Fabric",), "Status"),
}
#: Facts the H100 sample does not judge, and why (the sweep covers them elsewhere).
NOT_ON_H100 = {
    "retired_pending": "the H100 SKU has no page retirement (profiles.toml): V100 case below",
    "retired_dbe": "the H100 SKU has no page retirement (profiles.toml): V100 case below",
    "pcie_gen": "the sample's GPU is idle (`Idle : Active`): its current link is not judged",
    "pcie_width": "the sample's GPU is idle (`Idle : Active`): its current link is not judged",
    "nvlink_state": "NVML's alone: nvidia-smi -q does not print link states",
}


def test_every_judged_fact_is_in_the_sweep():
    assert set(Q_KEYS) | set(NOT_ON_H100) == set(FACTS)


@pytest.mark.parametrize("profile", ["local-cpu", "p5.48xlarge"])
def test_the_real_samples_read_clean(tmp_path: Path, profile: str):
    for sample in (H100_Q, H100_XML):
        out = _inspect(sample.read_text(encoding="utf-8"), profile)
        assert (out["problems"], out["unread"]) == ([], []), sample.name
    assert _gate(tmp_path, H100_Q.read_text(encoding="utf-8"), "--profile", "p5.48xlarge") == 0


@pytest.mark.parametrize("cut", [False, True], ids=["na", "cut"])
@pytest.mark.parametrize("fact", sorted(Q_KEYS))
def test_a_fact_taken_out_of_a_real_dump_is_named(tmp_path: Path, capsys, fact: str, cut: bool):
    places = Q_KEYS[fact]
    if cut and any(not path or key == ".*" for path, key in zip(places[::2], places[1::2], strict=True)):
        pytest.skip("a section cut whole is an excerpt without it: not judged (the N/A case is)")
    text = H100_Q.read_text(encoding="utf-8")
    for path, key in zip(places[::2], places[1::2], strict=True):
        text = _blank(text, path, key, cut=cut)
    unread = _inspect(text, "p5.48xlarge")["unread"]
    assert len(unread) == 1 and f" {FACTS[fact].title} not read" in unread[0].replace(",", " ")
    capsys.readouterr()
    assert _gate(tmp_path, text, "--profile", "p5.48xlarge") == 1
    assert "not known: GPU 0 (bus 00000000:18:00.0" in capsys.readouterr().err


def test_the_retired_pages_of_a_gpu_that_has_them_are_named():
    text = V100_Q.read_text(encoding="utf-8")
    assert not any("page" in u for u in _inspect(text)["unread"])
    for key in ("Pending.*", "Double Bit ECC"):
        unread = _inspect(_blank(text, ("Retired Pages",), key))["unread"]
        assert any("page" in u and "not read" in u for u in unread), key


@pytest.mark.parametrize(("tag", "title"), [
    ("status", "NVSwitch fabric status"), ("state", "NVSwitch fabric state"),
    ("gpu_temp", "GPU temperature"), ("current_ecc", "ECC mode"),
    ("persistence_mode", "persistence mode"), ("product_name", "GPU model"),
])
def test_a_fact_taken_out_of_a_real_xml_dump_is_named(tag: str, title: str):
    text = H100_XML.read_text(encoding="utf-8")
    text, n = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>N/A</{tag}>", text)
    assert n
    unread = _inspect(text, "p5.48xlarge")["unread"]
    assert unread and unread[0].startswith("GPUs 0, 1, 2, 3, 4, 5, 6, 7: ") and title in unread[0]


def test_a_csv_names_a_queried_column_without_a_value_and_not_a_column_not_queried():
    csv = ("name, temperature.gpu, fabric.state, fabric.status\n"
           "NVIDIA H100 80GB HBM3, 31, Completed, [N/A]\n")
    unread = _inspect(csv, "p5.48xlarge")["unread"]
    assert len(unread) == 1 and "NVSwitch fabric status not read" in unread[0]
    assert "ECC" not in unread[0]  # not queried: not judged


def test_the_table_names_a_column_it_prints_without_a_value():
    text = (DATA / "nvidia_smi/table-550-a40-new-layout.txt").read_text(encoding="utf-8")
    assert _inspect(text)["unread"] == []
    cut, n = re.subn(r"(\|\s+\d+%\s+)\d+C", r"\1N/A", text, count=1)
    assert n and "GPU temperature not read" in _inspect(cut)["unread"][0]


# ---- the Fabric section with `State : Completed` and no status (the case found in round 3) ----

FABRIC = "    Fabric\n        State                             : Completed\n"
STATUS_NA = "        Status                            : N/A\n"


@pytest.mark.parametrize("text", [
    FABRIC + STATUS_NA, FABRIC, FABRIC.split("\n", 1)[1] + STATUS_NA, FABRIC.split("\n", 1)[1],
], ids=["header-status-na", "header-no-status", "no-header-status-na", "no-header-no-status"])
def test_a_completed_fabric_without_its_status_is_named_as_the_check_names_it(
        tmp_path: Path, capsys, text: str):
    """PF-GPU-017 errors on a Completed state with no status (NVML: the status is read once the
    state is Completed); inspect names the same fact in the same words (one judgement:
    harness.base.gpu_facts), and the gate exits 1, never `problems: []` and 0."""
    import checks.test_gpu_nvlink as nvlink_checks
    from harness.checking import run_check
    from harness.parsers.nvidia_smi import parse_nvidia_smi

    out = _inspect(text)
    assert out["problems"] == []
    unread, = out["unread"]
    assert unread.startswith("GPU 0 (bus ?, serial unknown): NVSwitch fabric status not read")
    profile = get_profile("p5.48xlarge")
    result = run_check(nvlink_checks.test_nvswitch_fabric_registered, profile,
                       parse_nvidia_smi(text), profile=profile.name)
    assert result.outcome == "error" and unread in result.message
    capsys.readouterr()
    assert _gate(tmp_path, text) == 1
    assert "not known: GPU 0 (bus ?, serial unknown): NVSwitch fabric status" in (
        capsys.readouterr().err)


def test_a_completed_fabric_with_its_status_is_read_clean(tmp_path: Path):
    text = FABRIC + "        Status                            : Success\n"
    assert _inspect(text)["unread"] == []
    assert _gate(tmp_path, text) == 0


@pytest.mark.parametrize("wrapper", [*WRAPPERS, *MORE_WRAPPERS])
def test_a_completed_fabric_without_its_status_is_named_under_every_wrapper(wrapper: str):
    """Issue 32's done-when for this kind: the same reading under each wrapper the shared
    reader knows (tests/test_samples_wrapped.py's), with and without the `Fabric` header."""
    wrap = {**WRAPPERS, **MORE_WRAPPERS}[wrapper]
    for text in (FABRIC + STATUS_NA, FABRIC.split("\n", 1)[1]):
        wrapped = "".join(wrap(line) + "\n" for line in text.splitlines())
        unread, = _inspect(wrapped)["unread"]
        assert "NVSwitch fabric status not read" in unread, wrapper
