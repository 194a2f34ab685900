"""Whether it is certain that this container sees no NVIDIA GPU: asked before the harness
launches CUDA ranks (the distributed worker, the NCCL evidence run, the torch all_reduce
fallback), so that a GPU profile run in a container started without the NVIDIA runtime fails
those checks at once with the cause instead of launching ranks that each find no device.

Certain means both: no GPU device node under the sysroot (`/dev/nvidia0`, `/dev/nvidia1`, ...:
the NVIDIA container runtime creates one per GPU it exposes, so a container given only GPU 3
has `/dev/nvidia3` alone; WSL2 exposes its GPUs as `/dev/dxg` instead), and the GPU inventory
found none: NVML could not start, or it (or nvidia-smi) counted 0 GPUs. Either alone is not
enough: a compute-only container (NVIDIA_DRIVER_CAPABILITIES=compute) has the device nodes but
no NVML (the `utility` capability brings nvidia-smi and NVML), and a test's fake NVML has GPUs
behind no device node. A source that hung means a driver that is there but stuck: not certain.

NVIDIA Container Toolkit, "Specialized Configurations with Docker", GPU Enumeration
(https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/docker-specialized.html):
GPUs are given with `--gpus` (Docker 19.03+) or NVIDIA_VISIBLE_DEVICES (with `--runtime=nvidia`
unless it is the default); unset, the runtime behaves as runc: no GPU and no driver library."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.base.gpu_actions import NO_GPU_FIX
from harness.probes.nvml import NvmlStartError

if TYPE_CHECKING:
    from harness.base.gpu_record import GpuInventory

__all__ = ["DEVICE_NODE_PATTERNS", "device_nodes", "no_gpu_cause"]

#: Device nodes under `<sysroot>/dev` that mean a GPU is exposed to this container.
DEVICE_NODE_PATTERNS = ("nvidia[0-9]*", "dxg")



def device_nodes(sysroot: Path = Path("/")) -> list[Path]:
    """The GPU device nodes under `sysroot` (`dev/nvidia0`, ..., `dev/dxg`), sorted."""
    dev = sysroot / "dev"
    return sorted(path for pattern in DEVICE_NODE_PATTERNS for path in dev.glob(pattern))


def _inventory_says_none(inventory: GpuInventory | None, error: BaseException | None) -> str | None:
    """What the inventory said that means no GPU (NVML could not start, 0 GPUs counted); None
    when it found GPUs, or failed in a way that does not say (a hang, a later NVML error)."""
    from harness.probes.gpu import GpusUnreadableError  # its NVML and tool chain: only here

    if inventory is not None:
        source = "NVML" if inventory.source == "nvml" else inventory.source
        return None if inventory.gpus else f"{source} found 0 GPUs"
    if (isinstance(error, GpusUnreadableError) and not error.stuck
            and isinstance(error.nvml_error, NvmlStartError)):
        return f"NVML could not start ({error.nvml_error.reason})"
    return None


def no_gpu_cause(sysroot: Path, inventory: GpuInventory | None,
                 error: BaseException | None) -> str | None:
    """Why it is certain that no NVIDIA GPU is visible in this container (the message a check
    that needs CUDA ranks reports, with the fix); None when one may be. `inventory`/`error`: the
    session's GPU inventory reading (harness.probes.gpu.inventory's value or exception)."""
    if device_nodes(sysroot):
        return None
    says = _inventory_says_none(inventory, error)
    if says is None:
        return None
    return (f"no NVIDIA GPU is visible in this container: no /dev/nvidia[0-9]* device node "
            f"(nor WSL's /dev/dxg) under {sysroot} and {says}; {NO_GPU_FIX}")
