"""A healthy fake p5.48xlarge for whole-suite runs: loaded as a plugin in the check sessions
(`-p tests.fake_gpu_node`, e.g. through PYTEST_ADDOPTS), it puts eight H100s behind a fake NVML
(tests/fake_nvml.py) and makes the compute-sanity probe answer like eight healthy GPUs. The
tools (dcgmi, the kernel log) are faked on PATH / by PREFLIGHT_KERNEL_LOG (make_tools). Importing
this module changes nothing: only a session that registers it as a plugin is faked."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from tests.fake_nvml import FakeNvml, h100_node

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
#: A clean recorded kernel log (no Xid, no SXid).
CLEAN_KERNEL_LOG = DATA / "kernel_log" / "real_dev-kmsg-clean-nvswitch.txt"
#: A real 8x H100 `nvidia-smi -q -x` (k8s-test-infra capture, driver 580.105.08).
H100_XML = DATA / "nvidia_smi" / "real_xml-580-h100x8-k8s-test-infra.xml"
#: The recorded DCGM 4 diagnostic (2 GPUs) whose shape the fake's 8-GPU answer follows.
PASSING_DCGM = DATA / "dcgm" / "dcgm4-r3-diagnostic-pass-excerpt.json"


def passing_dcgm_json(num_gpus: int = 8) -> str:
    """A passing `dcgmi diag -j` answer for every GPU of the node, in the recorded DCGM 4
    shape: a diagnostic that names only some GPUs is an error (PF-GPU-012), not a pass."""
    data = json.loads(PASSING_DCGM.read_text())
    test = data["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["results"] = [{"entity_group": "GPU", "entity_group_id": 1, "entity_id": i,
                        "status": "Pass"} for i in range(num_gpus)]
    return json.dumps(data)


def _healthy_compute() -> object:
    from harness.probes.gpu_compute import ComputeResult

    return ComputeResult({i: 700.0 for i in range(8)}, {i: "ab" * 32 for i in range(8)},
                         {i: 2900.0 for i in range(8)})


def _healthy_sdc() -> object:
    """Eight GPUs whose deterministic work agrees bit for bit (PF-GPU-020)."""
    from harness.fixtures.sdc import SdcRun

    record = {"digest": "cd" * 32, "spec": "sdc/v1 short", "outputs": {"bf16 gemm": "ef" * 32},
              "totals": {"bf16 gemm": 1.0}, "seconds": 0.1, "sm_count": 132}
    return SdcRun("short", [{"rank": i, "device": i, "uuid": None, **record} for i in range(8)],
                  8)


def pytest_configure(config: object) -> None:
    """Every later `import pynvml` gets the fake; compute sanity and the SDC cross-check
    answer healthy."""
    import harness.fixtures.sdc as fixtures_sdc
    import harness.worker.compute as worker_compute

    sys.modules["pynvml"] = FakeNvml(h100_node())  # type: ignore[assignment]
    worker_compute.from_worker = lambda *a, **k: _healthy_compute()  # type: ignore[assignment]
    fixtures_sdc.sdc_from_worker = lambda *a, **k: _healthy_sdc()  # type: ignore[assignment]


def make_tools(bin_dir: Path) -> dict[str, str]:
    """Fake `dcgmi` (a passing diagnostic) in `bin_dir`; the environment that points the
    kernel-log reader at a clean recorded log."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    answer = bin_dir / "dcgm-diag.json"
    answer.write_text(passing_dcgm_json())
    dcgmi = bin_dir / "dcgmi"
    dcgmi.write_text(f"#!/bin/sh\ncat '{answer}'\n")
    dcgmi.chmod(dcgmi.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PREFLIGHT_KERNEL_LOG": str(CLEAN_KERNEL_LOG)}


def sparse_smi_xml() -> str:
    """`nvidia-smi -q -x` of eight H100s that says only their name, UUID, bus id and memory
    (the recorded capture with every other element of each <gpu> taken out): issue 25's node,
    whose unknown ECC, remapping, temperature, PCIe, reset and fabric state passed."""
    import re
    import xml.etree.ElementTree as ET

    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", H100_XML.read_text()))
    for gpu in root.findall("gpu"):
        for child in list(gpu):
            if child.tag not in ("product_name", "uuid", "pci", "fb_memory_usage"):
                gpu.remove(child)
        for section, keep in (("pci", "pci_bus_id"), ("fb_memory_usage", "total")):
            node = gpu.find(section)
            for child in list(node if node is not None else ()):
                if child.tag != keep:
                    node.remove(child)
    return ET.tostring(root, encoding="unicode")


def use_fake_gpu_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                      plugins: str = "-p tests.fake_gpu_node") -> Path:
    """A `preflight run` in this process on the fake node: the job's NCCL/FI/PREFLIGHT/SM
    variables cleared, the fake tools and kernel log, the check sessions' plugins, no EC2 or
    SageMaker lookups, no exec. Returns the fake tools' folder."""
    from harness.base import handoff

    for name in list(os.environ):
        if name.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_")):
            monkeypatch.delenv(name)
    bin_dir = tmp_path / "bin"
    for name, value in make_tools(bin_dir).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PYTEST_ADDOPTS", plugins)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "gpu-node")
    monkeypatch.setenv("PREFLIGHT_OPT_ML", str(tmp_path / "opt_ml"))
    monkeypatch.setattr(handoff, "_execvp", lambda file, argv: None)
    monkeypatch.chdir(tmp_path)
    return bin_dir
