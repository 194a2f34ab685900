"""The fakes `scripts/device-check --rehearse` runs on (a CPU machine): the end-to-end tests'
fake tools on PATH (nvidia-smi, dcgmi, all_reduce_perf with `-J`, ...: tests/e2e/fakes) and
the fake NVML of eight healthy H100s (tests/fake_nvml.py) for the steps that read NVML. The
launches themselves are real: torchrun, 2 gloo ranks, the worker, the training step."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.e2e.node import FakeNode

__all__ = ["prepare"]


def prepare(out: Path) -> Any:
    """Put the fake tools first on this process's PATH (every child inherits it) and return
    the fake NVML module the in-process steps use."""
    from tests.fake_nvml import FakeNvml, h100_node

    shutil.rmtree(out / "rehearsal", ignore_errors=True)  # a rerun into the same folder
    node = FakeNode(out / "rehearsal", tools=("nvidia-smi", "dcgmi", "all_reduce_perf"),
                    variant={"json_output": True, "nccl_info": True})
    os.environ.update(PATH=f"{node.bin}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
                      FAKE_CONFIG=str(node.config), FAKE_STATE=str(node.state))
    return FakeNvml(h100_node())
