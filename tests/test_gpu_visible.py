"""The one decision that stops the harness launching CUDA ranks: it is certain that no GPU is
visible only with no GPU device node under the sysroot AND an inventory that found none (NVML
could not start, or 0 GPUs); every other combination leaves the launch as it was."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from harness.base.errors import ProbeError
from harness.fixtures.reading import Reading
from harness.probes import gpu
from harness.probes.gpu_visible import device_nodes, no_gpu_cause
from harness.probes.nvml import NvmlStartError, NvmlUnavailableError
from tests.fake_nvml import FakeNvml, h100_node


@pytest.fixture(autouse=True)
def no_nvidia_smi(monkeypatch, tmp_path):
    """No nvidia-smi to fall back on: the inventory is NVML's answer alone."""
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))


def _sysroot(tmp_path: Path, *nodes: str) -> Path:
    root = tmp_path / "root"
    (root / "dev").mkdir(parents=True)
    for node in nodes:
        (root / "dev" / node).touch()
    return root


def _reading(nvml: FakeNvml) -> Reading:
    return Reading.of(lambda: gpu.inventory(nvml))


NVML_ERROR = FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound)
ZERO_GPUS = FakeNvml([])
EIGHT_H100 = FakeNvml(h100_node())


@pytest.mark.parametrize(("nodes", "nvml", "certain"), [
    ((), NVML_ERROR, True),
    ((), ZERO_GPUS, True),
    ((), EIGHT_H100, False),  # a fake NVML (tests/fake_gpu_node.py): GPUs behind no node
    (("nvidia0", "nvidiactl"), NVML_ERROR, False),  # compute-only container: no NVML
    (("nvidia0", "nvidiactl"), ZERO_GPUS, False),
    (("nvidia0", "nvidiactl"), EIGHT_H100, False),
    (("nvidia3",), NVML_ERROR, False),  # a container given GPU 3 alone
    (("dxg",), NVML_ERROR, False),  # WSL2
    (("nvidiactl", "nvidia-uvm"), NVML_ERROR, True),  # control nodes are not GPUs
])
def test_certain_only_without_a_node_and_with_an_inventory_that_found_none(
        tmp_path, nodes, nvml, certain):
    sysroot = _sysroot(tmp_path, *nodes)
    reading = _reading(nvml)
    cause = no_gpu_cause(sysroot, reading.value, reading.error)
    assert (cause is not None) == certain, cause
    if certain:
        assert cause.startswith("no NVIDIA GPU is visible in this container: no "
                                f"/dev/nvidia[0-9]* device node (nor WSL's /dev/dxg) under "
                                f"{sysroot} and ")
        assert "`docker run --gpus all`" in cause and "NVIDIA_VISIBLE_DEVICES=all" in cause


def test_the_cause_quotes_nvml(tmp_path):
    sysroot = _sysroot(tmp_path)
    failed = _reading(NVML_ERROR)
    assert (" and NVML could not start (NVML Shared Library Not Found "
            "(NVMLError_LibraryNotFound)); start the container") in no_gpu_cause(
        sysroot, None, failed.error)
    counted = _reading(ZERO_GPUS)
    assert " and NVML found 0 GPUs; " in no_gpu_cause(sysroot, counted.value, None)


@pytest.mark.parametrize("error", [
    # A driver that hung is there, only stuck: never "no GPU".
    gpu.GpusUnreadableError("cannot read the GPUs", NvmlStartError("x"), stuck=True),
    # NVML started and failed later: a driver answered.
    gpu.GpusUnreadableError("cannot read the GPUs",
                            NvmlUnavailableError("NVML started but could not count"), False),
    ProbeError("something else"),
])
def test_an_inventory_failure_that_does_not_say_no_gpu_is_not_certain(tmp_path, error):
    assert no_gpu_cause(_sysroot(tmp_path), None, error) is None


def test_device_nodes_without_a_dev_directory(tmp_path):
    assert device_nodes(tmp_path) == []
    assert device_nodes(_sysroot(tmp_path, "nvidia1", "nvidia0", "nvidiactl")) == [
        tmp_path / "root/dev/nvidia0", tmp_path / "root/dev/nvidia1"]
