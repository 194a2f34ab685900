"""Generated over every GPU-side check and every fact it reads, from every source that reports
the fact (issue 25, item 2): a healthy p5.48xlarge answer passes the check; the same answer
with that one fact taken away on GPU 3 (NVML answers NotSupported; `nvidia-smi -q -x` / `-q`
print `N/A`; the `--query-gpu` CSV prints `[N/A]`) makes the check error or fail, never pass.

The inventory is read by the real probe (harness.probes.gpu.inventory) from a fake NVML
(tests/fake_nvml.py) or, with NVML absent, from an emulated `nvidia-smi` on PATH printing the
healthy answers of tests/e2e/fakes/fake_tool.py (`-q`, the CSV) or a real 8x H100 `-q -x`
capture; each check runs in process (harness.checking.run_check).

Facts the SKU does not have are not generated: p5's H100 lists `retired_pages` as not supported
(profiles.toml, sourced), so PF-GPU-005 is generated on the NVML fake against the same profile
without that entry, and checked separately to be not applicable on p5 itself. The table of
checks and facts is this module's own (so that it runs against any version of the checks);
test_the_table_is_the_checks_own keeps it equal to the checks' READS."""

from __future__ import annotations

import dataclasses
import inspect
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml
import pytest

import checks.test_gpu as gpu_checks
import checks.test_gpu_nvlink as nvlink_checks
from harness.checking import run_check, spec_of
from harness.probes import gpu
from harness.probes.nvidia_smi import SMI_CSV_FIELDS
from harness.profiles.table import get_profile
from tests.e2e.fakes import fake_tool
from tests.fake_nvml import FakeNvml, h100_node
from tests.fake_tools import make_tool

DATA = Path(__file__).parent / "data" / "nvidia_smi"
#: A real 8x H100 `nvidia-smi -q -x` (driver 580.105.08): the `-q -x` baseline.
XML = DATA / "real_xml-580-h100x8-k8s-test-infra.xml"
GPU = 3  # the GPU a fact is taken from

#: check ID -> the facts it judges (harness.base.gpu_facts keys; `count`, `driver`, `cuda` and
#: `nvlink_counters` are node facts or the second NVML sample, not inventory fields).
CHECKS: dict[str, tuple[str, ...]] = {
    "PF-GPU-001": ("count",),
    "PF-GPU-002": ("model", "memory"),
    "PF-GPU-003": ("ecc_mode", "ecc_volatile", "ecc_aggregate"),
    "PF-GPU-004": ("remap_pending", "remap_failure"),
    "PF-GPU-005": ("retired_pending", "retired_dbe"),
    "PF-GPU-007": ("temperature", "clock_reasons"),
    "PF-GPU-008": ("persistence",),
    "PF-GPU-009": ("pstate", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max"),
    "PF-GPU-010": ("nvlink_state", "nvlink_counters"),
    "PF-GPU-011": ("driver", "cuda"),
    "PF-GPU-016": ("reset_state",),
    "PF-GPU-017": ("fabric_state", "fabric_status"),
}

_PCIE = ("pci", "gpu link info")
_LINK = "pci/pci_gpu_link_info"
#: How each source loses a fact on GPU 3: NVML (FakeGpu changes, or `nvml` for the node),
#: `-q -x` (element paths under <gpu>, or `/root` ones), `-q` (key paths of GPU 3's section, a
#: prefix taking its whole subsection; `top` for the header), CSV (columns of GPU 3's row).
#: A source without an entry does not report the fact (NVLink: NVML only; the CSV query asks
#: no remapping, reset or fabric field): those (check, source) cells are not generated.
REMOVE: dict[str, dict[str, Any]] = {
    "count": {"nvml": "drop", "xml": "drop", "q": "drop", "csv": "drop"},
    "model": {"nvml": {"unsupported": {"nvmlDeviceGetName"}}, "xml": ["product_name"],
              "q": [("product name",)], "csv": ["name"]},
    "memory": {"nvml": {"unsupported": {"nvmlDeviceGetMemoryInfo"}},
               "xml": ["fb_memory_usage/total"], "q": [("fb memory usage", "total")],
               "csv": ["memory.total"]},
    "ecc_mode": {"nvml": {"unsupported": {"nvmlDeviceGetEccMode"}},
                 "xml": ["ecc_mode/current_ecc"], "q": [("ecc mode", "current")],
                 "csv": ["ecc.mode.current"]},
    "ecc_volatile": {"nvml": {"ecc_volatile": None}, "xml": ["ecc_errors/volatile"],
                     "q": [("ecc errors", "volatile")],
                     "csv": ["ecc.errors.uncorrected.volatile.total"]},
    "ecc_aggregate": {"nvml": {"ecc_aggregate": None}, "xml": ["ecc_errors/aggregate"],
                      "q": [("ecc errors", "aggregate")],
                      "csv": ["ecc.errors.uncorrected.aggregate.total"]},
    # NVML reads the four remap numbers in one call: taking it away takes both facts.
    "remap_pending": {"nvml": {"unsupported": {"nvmlDeviceGetRemappedRows"}},
                      "xml": ["remapped_rows/remapped_row_pending"],
                      "q": [("remapped rows", "pending")]},
    "remap_failure": {"nvml": {"unsupported": {"nvmlDeviceGetRemappedRows"}},
                      "xml": ["remapped_rows/remapped_row_failure"],
                      "q": [("remapped rows", "remapping failure occurred")]},
    "retired_pending": {"nvml": {"unsupported": {"nvmlDeviceGetRetiredPagesPendingStatus"}}},
    "retired_dbe": {"nvml": {"unsupported": {"nvmlDeviceGetRetiredPages"}}},
    "temperature": {"nvml": {"unsupported": {"nvmlDeviceGetTemperature"}},
                    "xml": ["temperature/gpu_temp"], "q": [("temperature", "gpu current temp")],
                    "csv": ["temperature.gpu"]},
    "clock_reasons": {"nvml": {"unsupported": {"nvmlDeviceGetCurrentClocksEventReasons",
                                               "nvmlDeviceGetCurrentClocksThrottleReasons"}},
                      "xml": ["clocks_event_reasons"], "q": [("clocks event reasons",)],
                      "csv": [c for c in SMI_CSV_FIELDS if c.startswith("clocks_")]},
    "persistence": {"nvml": {"unsupported": {"nvmlDeviceGetPersistenceMode"}},
                    "xml": ["persistence_mode"], "q": [("persistence mode",)],
                    "csv": ["persistence_mode"]},
    "pstate": {"nvml": {"unsupported": {"nvmlDeviceGetPerformanceState"}},
               "xml": ["performance_state"], "q": [("performance state",)], "csv": ["pstate"]},
    "pcie_gen": {"nvml": {"unsupported": {"nvmlDeviceGetCurrPcieLinkGeneration"}},
                 "xml": [f"{_LINK}/pcie_gen/current_link_gen"],
                 "q": [(*_PCIE, "pcie generation", "current")],
                 "csv": ["pcie.link.gen.current"]},
    "pcie_gen_max": {"nvml": {"unsupported": {"nvmlDeviceGetMaxPcieLinkGeneration",
                                              "nvmlDeviceGetGpuMaxPcieLinkGeneration"}},
                     "xml": [f"{_LINK}/pcie_gen/max_link_gen",
                             f"{_LINK}/pcie_gen/max_device_link_gen",
                             f"{_LINK}/pcie_gen/max_host_link_gen"],
                     "q": [(*_PCIE, "pcie generation", k) for k in ("max", "device max",
                                                                    "host max")],
                     "csv": ["pcie.link.gen.max"]},
    "pcie_width": {"nvml": {"unsupported": {"nvmlDeviceGetCurrPcieLinkWidth"}},
                   "xml": [f"{_LINK}/link_widths/current_link_width"],
                   "q": [(*_PCIE, "link width", "current")], "csv": ["pcie.link.width.current"]},
    "pcie_width_max": {"nvml": {"unsupported": {"nvmlDeviceGetMaxPcieLinkWidth"}},
                       "xml": [f"{_LINK}/link_widths/max_link_width"],
                       "q": [(*_PCIE, "link width", "max")], "csv": ["pcie.link.width.max"]},
    "nvlink_state": {"nvml": {"unsupported": {"nvmlDeviceGetNvLinkState"},
                              "unsupported_fields": {91, 165}}},
    "nvlink_counters": {"nvml": {"unsupported": {"nvmlDeviceGetNvLinkErrorCounter"},
                                 "unsupported_fields": {161, 162, 163, 213, 214, 215}}},
    "driver": {"nvml": {"driver": None}, "xml": ["/driver_version"],
               "q": [("top", "driver version")]},
    "cuda": {"nvml": {"cuda": None}, "xml": ["/cuda_version"], "q": [("top", "cuda version")]},
    # The reset status and the driver's recovery action (R575+ prints only the latter): one
    # fact, read from either; both go.
    "reset_state": {"nvml": {"unsupported_fields": {226, 227, 230}},
                    "xml": ["gpu_reset_status", "gpu_recovery_action"],
                    "q": [("gpu reset status",), ("gpu recovery action",)]},
    # NVML gives state and status in one struct: only the state can be taken away there.
    "fabric_state": {"nvml": {"unsupported": {"nvmlDeviceGetGpuFabricInfo"}},
                     "xml": ["fabric/state"], "q": [("fabric", "state")]},
    "fabric_status": {"xml": ["fabric/status"], "q": [("fabric", "status")]},
}


def _profile(check_id: str) -> Any:
    """p5.48xlarge; for PF-GPU-005 without its SKU's sourced `retired_pages` entry (an H100 has
    no page retirement: the generated case is the mechanism on a SKU that has it)."""
    p5 = get_profile("p5.48xlarge")
    if check_id == "PF-GPU-005" and getattr(p5, "not_supported", None):
        return dataclasses.replace(p5, not_supported={
            k: v for k, v in p5.not_supported.items() if k != "retired_pages"})
    return p5


# ------------------------------------------------------------------------------ the sources

def _nvml(removal: Any, edits: dict[int, dict[str, Any]] | None = None) -> FakeNvml:
    """Eight healthy H100s; `removal`: "drop" GPU 3, or FakeGpu / node changes on it; `edits`:
    {gpu: FakeGpu changes}."""
    node = {"driver": "565.57.01", "cuda": 12070}
    gpus = [dataclasses.replace(g, **(edits or {}).get(g.index, {})) for g in h100_node()]
    if removal == "drop":
        gpus = [g for g in gpus if g.index != GPU]
    elif removal is not None:
        changes = {k: v for k, v in removal.items() if k not in node}
        node.update({k: v for k, v in removal.items() if k in node})
        gpus[GPU] = dataclasses.replace(gpus[GPU], **changes)
    return FakeNvml(gpus, **node)


def _xml(removal: Any, edits: dict[int, dict[str, str]] | None = None) -> str:
    """The `-q -x` capture; `removal`: "drop" GPU 3, or element paths set to N/A on it (a path
    starting `/` is under the root); `edits`: {gpu: {element path: value}}."""
    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", XML.read_text()))
    gpus = root.findall("gpu")
    if removal == "drop":
        root.remove(gpus[GPU])
    changes = {**(edits or {})}
    if isinstance(removal, list):
        changes[GPU] = {**changes.get(GPU, {}), **dict.fromkeys(removal, "N/A")}
    for index, paths in changes.items():
        for path, value in paths.items():
            found = root.find(path[1:]) if path.startswith("/") else gpus[index].find(path)
            for element in () if found is None else found.iter():
                if len(element) == 0:
                    element.text = value
    return ET.tostring(root, encoding="unicode")


def _q(removal: Any, edits: dict[int, dict[tuple[str, ...], str]] | None = None) -> str:
    """The healthy 8-GPU `-q`; `removal`: "drop" GPU 3, or key paths set to N/A on it (`top`:
    the header's); `edits`: {gpu: {key path: value}}."""
    text = fake_tool.nvidia_smi_q()
    head, *blocks = re.split(r"(?m)^(?=GPU 00000000:)", text)
    if removal == "drop":
        return head + "".join(b for i, b in enumerate(blocks) if i != GPU)
    changes = {i: dict(paths) for i, paths in (edits or {}).items()}
    for path in removal if isinstance(removal, list) else ():
        if path[0] == "top":
            head = _set(head, {path[1:]: "N/A"}, top=True)
        else:
            changes.setdefault(GPU, {})[path] = "N/A"
    for index, paths in changes.items():
        blocks[index] = _set(blocks[index], paths)
    return head + "".join(blocks)


def _set(text: str, values: dict[tuple[str, ...], str], *, top: bool = False) -> str:
    """`text` with every `key : value` line at or under one of the key paths set to its value."""
    out, stack = [], []
    for line in text.splitlines(keepends=True):
        body = line.strip()
        indent = len(line) - len(line.lstrip())
        if not body or (not top and re.match(r"GPU [0-9A-F]{8}:", body)):
            out.append(line)
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, sep, value = body.partition(" : ") if " : " in body else (body.rstrip(" :"), "", "")
        path = (*(k for _, k in stack), key.strip().lower())
        new = next((v for p, v in values.items() if path[:len(p)] == p), None)
        out.append(f"{line[:indent]}{key.rstrip()} : {new}\n" if new is not None and sep
                   else line)
        if not value.strip():
            stack.append((indent, key.strip().lower()))
    return "".join(out)


def _csv(removal: Any, edits: dict[int, dict[str, str]] | None = None) -> str:
    """The healthy 8-GPU CSV; `removal`: "drop" GPU 3's row, or its columns set to `[N/A]`;
    `edits`: {gpu: {column: value}}."""
    rows = fake_tool.nvidia_smi_csv(list(SMI_CSV_FIELDS)).splitlines()
    changes = {i: dict(columns) for i, columns in (edits or {}).items()}
    if removal == "drop":
        del rows[GPU]
    elif removal:
        changes[GPU] = {**changes.get(GPU, {}), **dict.fromkeys(removal, "[N/A]")}
    for index, columns in changes.items():
        cells = rows[index].split(", ")
        for column, value in columns.items():
            cells[SMI_CSV_FIELDS.index(column)] = value
        rows[index] = ", ".join(cells)
    return "\n".join(rows) + "\n"


_SMI = {"xml": ("-q -x", _xml), "q": ("-q", _q), "csv": ("--query-gpu", _csv)}


def _read(source: str, removal: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
          edits: Any = None) -> dict:
    """The facts the checks take: the inventory through the real probe, and on NVML the NVLink
    counters' growth (interval 0). `edits`: per-GPU values (see each source's builder)."""
    if source == "nvml":
        nvml = _nvml(removal, edits)
        return {"gpu_inventory": gpu.inventory(nvml),
                "nvlink_growth": gpu.nvlink_error_growth(nvml, interval_s=0.0)}
    args, build = _SMI[source]
    answer = tmp_path / "answer"
    answer.write_text(build(removal, edits))
    make_tool(tmp_path / "bin", "nvidia-smi", (
        f'case "$*" in "{args}"*) exec cat "{answer}";; esac\n'
        "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
        "exit 9"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    nvml = FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound)
    return {"gpu_inventory": gpu.inventory(nvml, smi_timeout_s=30.0)}


_FUNCTIONS: dict[str, Callable[..., object]] = {
    spec_of(fn).id: fn for module in (gpu_checks, nvlink_checks) for fn in vars(module).values()
    if callable(fn) and hasattr(fn, "__preflight_check__")}


def judge(check_id: str, source: str, removal: Any, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch, edits: Any = None) -> tuple[str, str, tuple]:
    """(outcome, message, warnings) of the check on the source's answer with `removal` applied
    (None: the healthy answer). A fact source that cannot be read at all errors the check, as
    its fixture would."""
    profile = _profile(check_id)
    fn = _FUNCTIONS[check_id]
    try:
        facts = {"profile": profile, "tier": "preflight",
                 **_read(source, removal, tmp_path, monkeypatch, edits)}
    except Exception as exc:  # the fixture's ProbeError: the check errors
        return "error", str(exc), ()
    args = [facts[name] for name in inspect.signature(fn).parameters]
    result = run_check(fn, *args, profile=profile.name)
    return result.outcome, result.message, result.warnings


def _cells() -> list[Any]:
    """(check, fact, source) for every fact a check judges and every source that reports it,
    where the source's healthy answer holds every fact of that check."""
    out = []
    for check_id, facts in CHECKS.items():
        for source in ("nvml", "xml", "q", "csv"):
            if check_id == "PF-GPU-005" and source != "nvml":
                continue  # the H100 captures print N/A: not supported on the SKU (sourced)
            if any(source not in REMOVE[f] for f in facts if f != "fabric_status"):
                continue
            out += [pytest.param(check_id, f, source, id=f"{check_id}-{f}-{source}")
                    for f in facts if source in REMOVE[f]]
    return out


CELLS = _cells()
BASELINES = sorted({(c.values[0], c.values[2]) for c in CELLS})


@pytest.mark.parametrize(("check_id", "source"), BASELINES,
                         ids=[f"{c}-{s}" for c, s in BASELINES])
def test_the_healthy_answer_passes(check_id: str, source: str, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch):
    outcome, message, _ = judge(check_id, source, None, tmp_path, monkeypatch)
    assert outcome == "pass", message


@pytest.mark.parametrize(("check_id", "fact", "source"), CELLS)
def test_a_removed_fact_never_passes(check_id: str, fact: str, source: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch):
    outcome, message, _ = judge(check_id, source, REMOVE[fact][source], tmp_path, monkeypatch)
    assert outcome in ("error", "fail"), (outcome, message)


def test_the_matrix_covers_every_check_and_fact():
    pairs = {(c.values[0], c.values[1]) for c in CELLS}
    assert pairs == {(c, f) for c, facts in CHECKS.items() for f in facts}
    assert (len(pairs), len(CELLS)) == (25, 80)


def test_the_table_is_the_checks_own():
    assert {k: v for k, v in CHECKS.items() if k in gpu_checks.READS} == gpu_checks.READS


def test_retired_pages_on_p5_are_a_sourced_not_supported(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    """What the SKU lacks is recorded with its source; a check with nothing else to judge is
    not applicable (the H100's `-q` prints every retired-pages value N/A), never a pass."""
    profile = get_profile("p5.48xlarge")
    inventory = _read("q", None, tmp_path, monkeypatch)["gpu_inventory"]
    result = run_check(gpu_checks.test_no_pending_page_retirement, profile, inventory,
                       profile="p5.48xlarge")
    assert result.outcome == "skip"
    assert result.message.startswith(
        "not applicable to p5.48xlarge: H100-SXM5-80GB has no page retirement pending, pages "
        "retired for double-bit ECC errors: an NVIDIA Ampere or later GPU remaps rows instead "
        "of retiring pages [nvidia-rowremap: NVIDIA A100 GPU Memory Error Management")
    inventory = gpu.inventory(_nvml({"unsupported": {"nvmlDeviceGetRetiredPages"}}))
    result = run_check(gpu_checks.test_no_pending_page_retirement, profile, inventory,
                       profile="p5.48xlarge")
    assert result.outcome == "pass"
    (noted,) = [m for m in result.measurements if m.what.startswith("pages retired")]
    assert noted.what == ("pages retired for double-bit ECC errors: not supported on "
                          "H100-SXM5-80GB")
    assert "nvidia-rowremap" in str(noted.value)


# -------------------------------------------------- values that tell the facts apart (item 2)

#: Per source: GPU 3 has 2 uncorrected ECC errors since the driver loaded and 7 in its lifetime;
#: GPU 1 4 in its lifetime only; GPU 2 rows remapped (3 correctable, 5 uncorrectable), none
#: pending; GPU 4 a remap pending; GPU 6 a remap failure. Read at a wrong index, or volatile as
#: aggregate, some GPU is named wrongly.
_DRAM = "dram uncorrectable"
DISTINCT: dict[str, Any] = {
    "nvml": {3: {"ecc_volatile": 2, "ecc_aggregate": 7}, 1: {"ecc_aggregate": 4},
             2: {"remapped_rows": (3, 5, 0, 0)}, 4: {"remapped_rows": (0, 0, 1, 0)},
             6: {"remapped_rows": (0, 0, 0, 1)}},
    "q": {3: {("ecc errors", "volatile", _DRAM): "2", ("ecc errors", "aggregate", _DRAM): "7"},
          1: {("ecc errors", "aggregate", _DRAM): "4"},
          2: {("remapped rows", "correctable error"): "3",
              ("remapped rows", "uncorrectable error"): "5"},
          4: {("remapped rows", "pending"): "Yes"},
          6: {("remapped rows", "remapping failure occurred"): "Yes"}},
    "xml": {3: {"ecc_errors/volatile/dram_uncorrectable": "2",
                "ecc_errors/aggregate/dram_uncorrectable": "7"},
            1: {"ecc_errors/aggregate/dram_uncorrectable": "4"},
            2: {"remapped_rows/remapped_row_corr": "3", "remapped_rows/remapped_row_unc": "5"},
            4: {"remapped_rows/remapped_row_pending": "Yes"},
            6: {"remapped_rows/remapped_row_failure": "Yes"}},
    "csv": {3: {"ecc.errors.uncorrected.volatile.total": "2",
                "ecc.errors.uncorrected.aggregate.total": "7"},
            1: {"ecc.errors.uncorrected.aggregate.total": "4"}},
}


@pytest.mark.parametrize("source", list(DISTINCT))
def test_volatile_and_aggregate_ecc_are_told_apart(source: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch):
    outcome, message, warnings = judge("PF-GPU-003", source, None, tmp_path, monkeypatch,
                                       DISTINCT[source])
    assert outcome == "fail", message
    assert re.search(r": 1 found, .*: GPU 3 \(bus 00000000:86:00\.0, serial \d+\): 2 "
                     r"uncorrected ECC errors since the driver loaded -> reset GPU; ", message)
    (warned,) = warnings
    assert re.search(r"GPU 1 \(.*\): 4 uncorrected ECC errors in its lifetime, none since the "
                     r"driver loaded -> monitor", warned)


@pytest.mark.parametrize("source", ["nvml", "q", "xml"])
def test_each_remap_field_is_read_as_itself(source: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch):
    outcome, message, _ = judge("PF-GPU-004", source, None, tmp_path, monkeypatch,
                                DISTINCT[source])
    assert outcome == "fail", message
    assert re.search(r": 2 found, .*: GPU 4 \(bus 00000000:97:00\.0, .*\): row remapping "
                     r"pending \(applied at the next GPU reset\) -> reset GPU; GPU 6 \(bus "
                     r"00000000:B9:00\.0, .*\): row remapping failed \(no spare rows left\) -> "
                     r"replace node; ", message), message


@pytest.mark.parametrize(("up", "outcome"), [(17, "fail"), (18, "pass")])
def test_17_of_18_nvlinks_up_is_not_all_up(up: int, outcome: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch):
    states = (1,) * up + (0,) * (18 - up)
    got, message, _ = judge("PF-GPU-010", "nvml", None, tmp_path, monkeypatch,
                            {5: {"nvlink_states": states}})
    assert got == outcome, message
    if outcome == "fail":
        assert "GPU 5 (bus 00000000:A8:00.0, serial 1654922000005): 17 of 18 NVLinks up (down: " \
               "17) -> reset GPU" in message
