"""The built-in profile data (harness/profiles/profiles.toml): every SageMaker GPU training type has a
profile, every number a source, floors their message size; derived profiles per GPU SKU."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.detect.derive import MachineFacts, derive_profile, machine_facts, resolve_profile
from harness.parsers.nvidia_smi import parse_nvidia_smi
from harness.probes.fabric import RdmaDevice, RdmaPort
from harness.profiles.model import GIB
from harness.profiles.table import BUILTIN_PROFILES, SKUS, get_profile, threshold_rows

ROOT = Path(__file__).resolve().parent.parent
SMI = ROOT / "tests" / "data" / "nvidia_smi"
#: SageMaker GPU types with no built-in profile: they get a derived one at run time. g7 (not
#: g7e) has no public GPU/EFA table in the sources used; p2/p3 are K80/V100 (out of scope).
DERIVED_AT_RUN_TIME = re.compile(r"^(g7|p2|p3|p3dn)\.")
THRESHOLDS = ("nvlink_busbw_gb_s_min", "pcie_busbw_gb_s_min", "net_busbw_gb_s_min",
              "min_bf16_tflops", "min_hbm_copy_gb_s", "gpu_memory_gib_min", "nvlinks_per_gpu")


def _sagemaker_gpu_types() -> set[str]:
    loader = pytest.importorskip("botocore.loaders")
    shapes = loader.Loader().load_service_model("sagemaker", "service-2")["shapes"]
    names = set()
    for shape in ("TrainingInstanceType", "ClusterInstanceType"):
        names |= {v.removeprefix("ml.") for v in shapes[shape]["enum"]
                  if re.match(r"ml\.(p[0-9]|g[5-9])", v)}
    return names


def test_every_sagemaker_gpu_training_type_has_a_profile():
    missing = {t for t in _sagemaker_gpu_types()
               if t not in BUILTIN_PROFILES and not DERIVED_AT_RUN_TIME.match(t)}
    assert not missing


def test_ultraserver_types_beyond_the_sagemaker_enums_are_profiles():
    # AWS PCS names them (docs.aws.amazon.com/pcs/.../capacity-blocks-nvidia-imex.html).
    for name in ("p6e-gb200.72xlarge", "p6e-gb300.36xlarge", "p6e-gb300.72xlarge"):
        p = get_profile(name)
        assert p.gpus_from_machine and p.nvlink_domain == "ultraserver" and p.has_gpus


def test_every_set_threshold_has_a_source_and_unknown_keys_do_not_hide():
    for p in BUILTIN_PROFILES.values():
        if not p.has_gpus:
            continue
        for field in (*THRESHOLDS, "num_gpus", "num_efa_devices", "gdr_required"):
            value = getattr(p, field)
            if value not in (None, 0, False) or field in ("num_gpus", "gdr_required"):
                assert p.sources.get(field), f"{p.name}.{field} = {value} has no source"
        for field in p.estimates:
            assert "estimate" in p.sources.get(field, ""), f"{p.name}.{field}: not said"
        if p.intra_node_floor:  # every floor states the message size it was measured at
            assert p.sources.get("intra_gate_size_bytes"), f"{p.name}: floor size unsourced"
        if p.net_busbw_gb_s_min is not None:
            assert p.sources.get("bw_gate_size_bytes"), f"{p.name}: net floor size unsourced"


@pytest.mark.parametrize(("name", "floor", "size"), [
    ("p5.48xlarge", 460.0, 16 * GIB), ("p5e.48xlarge", 431.0, 16 * GIB),
    ("p5en.48xlarge", 431.0, 16 * GIB), ("p4d.24xlarge", 228.0, 8 * GIB),
    ("p4de.24xlarge", 228.0, 16 * GIB)])
def test_nvlink_floors_gate_at_the_size_their_source_measured(name, floor, size):
    p = get_profile(name)
    assert (p.nvlink_busbw_gb_s_min, p.intra_gate_size_bytes) == (floor, size)
    assert not p.is_estimate("nvlink_busbw_gb_s_min")
    assert "16 GiB" in p.sources["nvlink_busbw_gb_s_min"] or "8 GiB" in p.sources[
        "nvlink_busbw_gb_s_min"]


@pytest.mark.parametrize("name", ["p6-b200.48xlarge", "p6-b300.48xlarge",
                                  "p6e-gb200.36xlarge"])
def test_floors_with_no_public_figure_are_estimates(name):
    assert get_profile(name).is_estimate("nvlink_busbw_gb_s_min")
    rows = {r[0]: r[1] for r in threshold_rows(get_profile(name))}
    assert "estimate" in rows["nvlink_busbw_gb_s_min"]


@pytest.mark.parametrize("name", ["g5.xlarge", "g6e.16xlarge", "p5.4xlarge", "g7e.8xlarge"])
def test_single_gpu_types_say_why_the_intra_node_all_reduce_does_not_apply(name):
    p = get_profile(name)
    assert p.num_gpus == 1 and p.intra_node_floor is None
    assert "busbw is 0 by definition" in p.intra_node_na_reason


@pytest.mark.parametrize("name", ["g5.48xlarge", "g6.12xlarge", "g6e.48xlarge", "g7e.24xlarge"])
def test_pcie_only_types_judge_pcie_and_say_why_nvlink_does_not_apply(name):
    p = get_profile(name)
    assert p.intra_node_floor == ("pcie_busbw_gb_s_min", p.pcie_busbw_gb_s_min)
    assert p.is_estimate("pcie_busbw_gb_s_min") and p.nvlinks_per_gpu == 0
    assert "PCIe-only" in p.nvlink_na_reason


@pytest.mark.parametrize(("name", "gpus", "efa", "gdr"), [
    ("g5.48xlarge", 8, 1, False), ("g6e.48xlarge", 8, 4, False), ("g7e.48xlarge", 8, 4, True),
    ("g6.xlarge", 1, 0, False), ("p5.4xlarge", 1, 1, False), ("p6-b300.48xlarge", 8, 16, True),
    ("p6e-gb200.36xlarge", 4, 1, True)])
def test_instance_facts_match_the_ec2_data(name, gpus, efa, gdr):
    p = get_profile(name)
    assert (p.num_gpus, p.num_efa_devices, p.gdr_required) == (gpus, efa, gdr)
    assert (p.fabric == "efa") == bool(efa)


def test_p6e_gb200_efa_count_is_said_to_be_unresolved():
    assert "unresolved" in get_profile("p6e-gb200.36xlarge").sources["num_efa_devices"]


# --- Derived profiles --------------------------------------------------------------------------

def _facts(names: tuple[str, ...], ids: tuple[str, ...] = (), nics=()) -> MachineFacts:
    return MachineFacts(gpu_names=names, gpu_memory_gib=(80.0,) * len(names),
                        nvlinks_active=(0,) * len(names), pci_device_ids=ids, nvswitches=0,
                        gpu_source="test", gpu_error=None, nics=tuple(nics))


@pytest.mark.parametrize("sku", sorted(SKUS))
def test_every_sku_is_found_by_its_nvml_name_and_by_its_pci_id(sku):
    table = SKUS[sku]
    for name in table["nvml_names"]:  # names as NVIDIA's driver README lists them
        assert derive_profile(_facts((name,) * 2)).sku == sku
    for pci in table.get("pci_device_ids", ()):
        assert derive_profile(_facts(("?",) * 2, (pci,) * 2)).sku == sku


@pytest.mark.parametrize(("sample", "sku"), [
    ("real_q-565-h100-sxm.txt", "H100-SXM5-80GB"), ("real_q-550-h200-passthrough.txt",
                                                     "H200-SXM-141GB"),
    ("real_q-550-gh200-aggregate-uncorrected.txt", "GH200"),
    ("real_q-510-a100-remap-pending-elided.txt", "A100-SXM4-80GB"),
    ("l4-555-query-xml.xml", "L4")])
def test_recorded_nvidia_smi_outputs_derive_their_sku(sample, sku):
    inventory = parse_nvidia_smi((SMI / sample).read_text(errors="replace"))
    p = derive_profile(machine_facts(Path("/nonexistent"), inventory=inventory))
    assert (p.name, p.origin, p.sku) == ("derived", "derived", sku)
    assert p.gpu_model == inventory.gpus[0].name  # judged by the exact name, never a substring
    assert p.derived_from["gpu_names"][0] == inventory.gpus[0].name


def test_gh200_is_not_taken_for_h200_nor_h100_nvl_for_h100():
    assert derive_profile(_facts(("NVIDIA GH200 480GB",))).sku == "GH200"
    assert derive_profile(_facts(("NVIDIA H100 NVL",) * 2)).sku == "H100-NVL"


def test_unknown_gpu_derives_a_profile_without_sku_thresholds():
    p = derive_profile(_facts(("NVIDIA GeForce RTX 5080",)))
    assert p.sku is None and p.nvlink_busbw_gb_s_min is None and p.num_gpus == 1
    assert "no SKU of the table matches" in p.derived_from["sku_matched_by"]


def test_derived_nvlink_floor_on_another_gpu_count_is_an_estimate():
    four = derive_profile(_facts(("NVIDIA H100 80GB HBM3",) * 4))
    eight = derive_profile(_facts(("NVIDIA H100 80GB HBM3",) * 8))
    assert four.is_estimate("nvlink_busbw_gb_s_min")
    assert not eight.is_estimate("nvlink_busbw_gb_s_min")


def _ib(name: str, rate: float, layer: str = "InfiniBand", state: str = "ACTIVE") -> RdmaDevice:
    port = RdmaPort(1, state, "LinkUp", rate, f"{rate:g} Gb/sec (4X NDR)", layer)
    return RdmaDevice(name, "ib" if layer == "InfiniBand" else "roce", "MT4129", None, (port,))


def test_derived_fabric_follows_the_nics_found():
    ib = derive_profile(_facts(("NVIDIA H100 80GB HBM3",) * 8,
                               nics=[_ib(f"mlx5_{i}", 400.0) for i in range(8)]))
    assert ib.fabric == "ib" and ib.is_estimate("net_busbw_gb_s_min")
    assert ib.net_busbw_gb_s_min == 0.5 * 3200 / 8
    none = derive_profile(_facts(("NVIDIA H100 80GB HBM3",) * 8))
    assert none.fabric is None and none.net_busbw_gb_s_min is None


def test_resolution_derives_for_unknown_detected_types_but_not_for_typos(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    facts = _facts(("NVIDIA L40S",))
    p, source = resolve_profile("p9.48xlarge", "DMI product_name (EC2 Nitro)",
                                sysroot=tmp_path, facts=facts)
    assert p.name == "derived" and "p9.48xlarge" in source
    from harness.profiles.model import ProfileError

    with pytest.raises(ProfileError, match=r"unknown profile 'p9\.48xlarge'"):
        resolve_profile("p9.48xlarge", "--profile", sysroot=tmp_path, facts=facts)
    p, _ = resolve_profile("p6e-gb300.36xlarge", "SM", facts=_facts(("NVIDIA GB300",) * 4))
    assert p.num_gpus == 4 and p.derived_from["gpu_count"] == 4


def test_to_dict_records_the_whole_resolved_profile():
    data = json.loads(json.dumps(get_profile("p5.48xlarge").to_dict()))
    assert {f.name for f in dataclasses.fields(type(get_profile("p5.48xlarge")))} <= set(data)
    assert data["origin"] == "built-in" and data["intra_gate_size_bytes"] == 16 * GIB


# --- End to end: a fake machine under PREFLIGHT_SYSROOT ----------------------------------------

def fake_machine(root: Path, *, gpus: int = 1, device: str = "0x2330") -> dict[str, str]:
    """Device nodes, PCI functions, two IB HCAs under `root`; `nvidia-smi` on PATH printing the
    recorded H100 `-q` output (NVML cannot start here: no driver). Returns the environment."""
    (root / "dev").mkdir(parents=True)
    (root / "dev" / "nvidia0").write_text("")
    for i in range(gpus):
        fn = root / "sys/bus/pci/devices" / f"0000:{0x18 + i:02x}:00.0"
        fn.mkdir(parents=True)
        for key, value in (("vendor", "0x10de"), ("device", device), ("class", "0x030200")):
            (fn / key).write_text(value + "\n")
    for name in ("mlx5_0", "mlx5_1"):  # values as in tests/data/ib (leptonai/gpud, real H100)
        port = root / "sys/class/infiniband" / name / "ports" / "1"
        port.mkdir(parents=True)
        for key, value in (("state", "4: ACTIVE"), ("phys_state", "5: LinkUp"),
                           ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
            (port / key).write_text(value + "\n")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    # The recording is the first of 8 GPU blocks: it says so (`Attached GPUs : 8`), which makes
    # it incomplete; the fake machine has `gpus` GPUs and says that instead.
    smi.write_text(f"#!/bin/sh\n[ \"$2\" = \"-x\" ] && exit 9\nsed 's/^Attached GPUs .*/"
                   f"Attached GPUs : {gpus}/' '{SMI / 'real_q-565-h100-sxm.txt'}'\n")
    smi.chmod(0o755)
    return {**os.environ, "PREFLIGHT_SYSROOT": str(root), "AWS_EC2_METADATA_DISABLED": "true",
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PREFLIGHT_PROFILE": ""}


def test_profiles_derive_on_a_fake_machine_end_to_end(tmp_path):
    env = fake_machine(tmp_path / "root", gpus=8)
    out = subprocess.run([sys.executable, "-m", "harness", "profiles", "--derive", "--json"],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    p = json.loads(out.stdout)["derived"]
    assert (p["origin"], p["sku"], p["num_gpus"], p["fabric"]) == (
        "derived", "H100-SXM5-80GB", 8, "ib")
    assert p["derived_from"]["nics"]["ib"] == 2
    assert p["nvlink_busbw_gb_s_min"] == 460.0 and p["intra_gate_size_bytes"] == 16 * GIB


def test_a_derived_run_on_a_fake_machine_judges_by_the_sku_table(tmp_path):
    # One H100 on the PCI bus, nvidia-smi printing its recorded `-q`: `preflight run` derives the
    # profile (no provider names a type), says so in the header, judges GPU count and model,
    # and report.json records the resolved profile with what it was derived from.
    env = fake_machine(tmp_path / "root", gpus=1)
    env.pop("PREFLIGHT_PROFILE")
    env["PREFLIGHT_OPT_ML"] = str(tmp_path / "no-opt-ml")
    out = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--report-dir", str(tmp_path / "r"),
         "-k", "PF-GPU-001 or PF-GPU-002", "--workers", "0"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert "derived from this machine: 1x NVIDIA H100 80GB HBM3 (SKU H100-SXM5-80GB" in out.stdout
    (report,) = (tmp_path / "r").glob("*/report.json")
    doc = json.loads(report.read_text())
    assert doc["profile"]["name"] == "derived"
    assert doc["profile"]["source"].startswith("derived from this machine (no provider")
    resolved = doc["profile"]["resolved"]
    assert (resolved["origin"], resolved["sku"]) == ("derived", "H100-SXM5-80GB")
    assert resolved["derived_from"]["pci_device_ids"] == ["2330"]
    outcomes = {c["id"]: c["outcome"] for c in doc["checks"]}
    assert outcomes == {"PF-GPU-001": "pass", "PF-GPU-002": "pass"}, out.stdout[-3000:]
