"""GPU health vocabulary shared by the NVML probe, the nvidia-smi / DCGM / kernel-log parsers and
the checks: one per-GPU record, the problems a record shows, and the action each needs (the
actions and the XID catalogue live in harness.base.gpu_actions, PCIe links in gpu_pcie, the
record in gpu_record)."""

from __future__ import annotations

from harness.base.gpu_actions import (
    BAD_THROTTLE_REASONS,
    MONITOR,
    REBOOT,
    REPLACE,
    RESET,
    Problem,
    plural,
)
from harness.base.gpu_pcie import pcie_problems
from harness.base.gpu_record import GpuInfo

__all__ = [
    "RECOVERY_ACTIONS",
    "ecc_problems",
    "fabric_problems",
    "health_problems",
    "remap_problems",
    "reset_problems",
    "retirement_problems",
    "thermal_problems",
]

def health_problems(gpu: GpuInfo, *, max_temp_c: float | None = None,
                    require_ecc: bool = False) -> list[Problem]:
    """Every problem one GPU record shows (what `inspect nvidia-smi` lists); the checks judge
    the same facts, one check per kind."""
    return [*reset_problems(gpu), *ecc_problems(gpu, require_ecc=require_ecc),
            *remap_problems(gpu), *retirement_problems(gpu),
            *thermal_problems(gpu, max_temp_c), *pcie_problems(gpu), *fabric_problems(gpu)]


#: The driver's GPU recovery actions (nvmlGpuRecoveryAction_t, `GPU Recovery Action` in
#: nvidia-smi) -> our action.
RECOVERY_ACTIONS = {"gpu reset": RESET, "drain p2p": RESET, "drain and reset": RESET,
                    "bus reset": RESET, "node reboot": REBOOT, "system reboot": REBOOT,
                    "recover imex domain": REBOOT}


def reset_problems(gpu: GpuInfo) -> list[Problem]:
    """A GPU that is lost, says it needs a reset, or names a recovery action."""
    p: list[Problem] = []
    if gpu.requires_reset:
        p.append(Problem(gpu.index, "GPU is lost or requires a reset", RESET))
    if gpu.recovery_action and gpu.recovery_action.lower() != "none":
        action = RECOVERY_ACTIONS.get(gpu.recovery_action.lower(), RESET)
        p.append(Problem(gpu.index, f"the driver asks for recovery: {gpu.recovery_action}",
                         action))
    return p


def ecc_problems(gpu: GpuInfo, *, require_ecc: bool = False) -> list[Problem]:
    """Uncorrected ECC errors since the driver loaded (reset), or only in the GPU's lifetime
    (monitor); ECC turned off where the profile's GPUs have it (`require_ecc`)."""
    p: list[Problem] = []
    if require_ecc and gpu.ecc_enabled is False:
        p.append(Problem(gpu.index, "ECC is disabled (enable: nvidia-smi -e 1, then reboot)",
                         REBOOT))
    errors = "uncorrected ECC error"
    if gpu.ecc_uncorrected_volatile:
        p.append(Problem(gpu.index, f"{plural(gpu.ecc_uncorrected_volatile, errors)} since the "
                                    "driver loaded", RESET))
    elif gpu.ecc_uncorrected_aggregate:
        p.append(Problem(gpu.index, f"{plural(gpu.ecc_uncorrected_aggregate, errors)} in its "
                                    "lifetime, none since the driver loaded", MONITOR,
                         fatal=False))
    return p


def remap_problems(gpu: GpuInfo) -> list[Problem]:
    """HBM row remapping (A100 and later): failed (no spare rows) or pending a reset."""
    p: list[Problem] = []
    if gpu.remapped_rows_failure:
        p.append(Problem(gpu.index, "row remapping failed (no spare rows left)", REPLACE))
    if gpu.remapped_rows_pending:
        p.append(Problem(gpu.index, "row remapping pending (applied at the next GPU reset)",
                         RESET))
    return p


def retirement_problems(gpu: GpuInfo) -> list[Problem]:
    """Page retirement (before A100): pending a reset, or pages already retired for DBEs."""
    p: list[Problem] = []
    if gpu.retired_pages_pending:
        p.append(Problem(gpu.index, "page retirement pending (applied at the next GPU reset)",
                         RESET))
    if gpu.retired_pages_dbe:
        p.append(Problem(gpu.index, f"{plural(gpu.retired_pages_dbe, 'page')} retired for "
                                    "double-bit ECC errors", MONITOR, fatal=False))
    return p


def thermal_problems(gpu: GpuInfo, max_temp_c: float | None) -> list[Problem]:
    """Too hot, or clocks slowed by heat or a power brake. Neither is fixed by a reset: the
    host's cooling or power delivery is at fault, so the node is replaced (on a cloud instance,
    a stop/start moves it to another host)."""
    p: list[Problem] = []
    t = gpu.temperature_c
    if max_temp_c is not None and t is not None and t > max_temp_c:
        p.append(Problem(gpu.index, f"temperature {t:g} C > {max_temp_c:g} C", REPLACE))
    bad = sorted(BAD_THROTTLE_REASONS.intersection(gpu.throttle_reasons or ()))
    if bad:
        p.append(Problem(gpu.index, "clocks slowed by " + ", ".join(bad), REPLACE))
    return p


#: NVSwitch / NVLink-domain fabric states (nvmlGpuFabricState_t, nvidia-smi's `Fabric > State`)
#: that mean "not ready", and what to do about each. NVML: the status "must be checked only if
#: state returns complete" (nvmlGpuFabricInfo_v2_t); CUDA cannot start on a GPU that is not
#: registered (cudaErrorSystemNotReady, 802).
FABRIC_NOT_READY = {
    "not started": "registration has not started: start nvidia-fabricmanager (HGX), or check "
                   "the NVLink switch trays and nvidia-imex (NVL72 / UltraServer), then wait for "
                   "State: Completed",
    "in progress": "registration is still running: wait for nvidia-fabricmanager (HGX) or IMEX "
                   "(NVL domains) to finish; stuck for minutes: restart the fabric manager, then "
                   "reset the GPU",
}


def fabric_problems(gpu: GpuInfo) -> list[Problem]:
    """A GPU whose NVSwitch fabric registration is not ready: not started, in progress, or
    completed with an error status (then the registration failed: restart the fabric manager and
    reset the GPU). Nothing when the state was not read (harness.base.gpu_facts judges that)."""
    state = gpu.fabric_state
    if state is None:
        return []
    wait = FABRIC_NOT_READY.get(state.lower())
    if wait is not None:
        return [Problem(gpu.index, f"fabric state {state}: not ready ({wait})", RESET)]
    if state.lower() != "completed":
        return [Problem(gpu.index, f"fabric state {state}: not ready (a state NVML does not "
                                   "name; expected Completed)", RESET)]
    status = gpu.fabric_status
    if status is not None and status.lower() != "success":
        return [Problem(gpu.index, f"fabric state Completed with status {status}: not ready "
                                   "(registration failed: restart nvidia-fabricmanager / IMEX, "
                                   "then reset the GPU)", RESET)]
    return []
