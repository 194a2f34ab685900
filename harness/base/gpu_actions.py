"""What a bad GPU needs: the actions, most severe first, and the XID catalogue that maps each
kernel-log XID to one. The vocabulary under harness.base.gpu, the parsers and
the checks; it imports nothing.

The catalogue (XID_CATALOGUE, at the end) is NVIDIA's Xid catalogue for Ampere and newer GPUs:
every code it lists as used, the resolution bucket NVIDIA gives it (its "immediate action") and
the action preflight takes. NVIDIA's buckets map to actions: RESET_GPU and the DBE / NVLink
workflows -> reset GPU; RESTART_BM (bare metal) and RESTART_VM -> reboot; CHECK_MECHANICALS (54,
no auxiliary power) -> replace node; RESTART_APP, IGNORE, CONTACT_SUPPORT, UPDATE_SWFW,
CHECK_UVM -> monitor (the application, or a later look, not the node). Three take their action
from their text (`by text`, xid_action): 45 follows the Xid it names, 144-149 (NVLink5) are reset
GPU when `Fatal`, 154 names the recovery action. Codes not listed (unused in the catalogue, or
newer than it) are watched: `monitor`, a warning, never a pass."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ACTIONS",
    "BAD_THROTTLE_REASONS",
    "MONITOR",
    "NO_GPU_FIX",
    "REBOOT",
    "REPLACE",
    "RESET",
    "XID_ACTIONS",
    "XID_CATALOGUE",
    "XID_SOURCES",
    "Problem",
    "plural",
    "worst_action",
    "xid_action",
]

# What a bad GPU needs, most severe first (automation keys on these exact words).
REPLACE = "replace node"
REBOOT = "reboot"
RESET = "reset GPU"
MONITOR = "monitor"
ACTIONS = (REPLACE, REBOOT, RESET, MONITOR)


#: The action is in the event's text (xid_action); `monitor` without a cue.
BY_TEXT = "by text"

# Xid 154 (R565+) says what the GPU now needs: `GPU recovery action changed from 0x0 (None) to
# 0x4 (Drain and Reset)`; drivers name 0x1 `GPU Reset Required` or `PF FLR`, 0x2 `Node Reboot
# Required` or `OS Reboot`, 0x3 `Drain P2P`.
_RECOVERY_CHANGE = re.compile(
    r"recovery action changed from .*? to 0x(?P<code>[0-9A-Fa-f]+)(?:\s*\((?P<name>[^)]*)\))?"
)
# Xid 144-149 (NVLink5, Blackwell: NVIDIA's catalogue says WORKFLOW_NVLINK5_ERR) carry their
# severity: `149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (...)`, `145, RLW_RXPIPE Nonfatal ...`.
# A fatal one needs what Xid 74 (NVLink, Hopper) needs; a nonfatal one is watched. Xid 150
# (MSE watchdog) is always fatal: the catalogue resets it whatever its text says.
_NVLINK5_XIDS = range(144, 150)
_FATAL = re.compile(r"\bFatal\b")
# Xid 94/95 (error containment, A100+) end with `RST: Yes, D-RST: No`: whether the GPU must be
# reset, or drained and reset (NVIDIA, A100 GPU Memory Error Management; kernel_rc.c).
_RESET_FLAG = re.compile(r"\b(?:D-)?RST: Yes\b")
# Xid 45 (preemptive cleanup) follows another Xid; newer drivers name it: `45, pid=22884,
# name=VLLM::Worker, channel 0x00000010 caused by previous Xid 79`. NVIDIA's catalogue: "follow
# the other Xid" (useful when a `--since` window cut the first one off).
_CAUSED_BY = re.compile(r"caused by previous Xid ([0-9]{1,9})\b")  # ASCII: int() takes what \d does

#: Clock event reasons that mean the GPU is being slowed by heat or a power brake (as NVML and
#: nvidia-smi name them). `SW Power Cap` and `Idle` are normal and not judged.
BAD_THROTTLE_REASONS = frozenset({
    "HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown", "SW Thermal Slowdown",
})


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one GPU and the action it needs."""

    gpu: int
    what: str
    action: str
    fatal: bool = True
    """False: worth a warning, not a failure (historic counts, monitor-class signals)."""


def plural(n: int, noun: str) -> str:
    """`1 page`, `3 pages`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def xid_action(code: int, message: str = "") -> str:
    """The action an XID needs; codes outside the catalogue are watched (`monitor`). An Xid 154
    takes the action its message names (`... to 0x2 (Node Reboot Required)` -> reboot); an
    NVLink5 Xid (144-149) is reset GPU when its message says Fatal, an Xid 94/95 at least reset
    GPU when it says `RST: Yes` or `D-RST: Yes`; an Xid 45 takes the action of the Xid it says
    caused it."""
    if code == 154:
        m = _RECOVERY_CHANGE.search(message)
        if m:
            name = (m["name"] or "").lower()
            if "reboot" in name or (not name and int(m["code"], 16) == 2):
                return REBOOT
            if "none" in name or (not name and int(m["code"], 16) == 0):
                return MONITOR
            return RESET
    if code == 45:
        cause = _CAUSED_BY.search(message)
        if cause and int(cause[1]) != 45:
            return xid_action(int(cause[1]))
    if code in _NVLINK5_XIDS:
        return XID_ACTIONS[74] if _FATAL.search(message) else MONITOR
    action = XID_ACTIONS.get(code, MONITOR)
    if code in (94, 95) and _RESET_FLAG.search(message):
        return worst_action([action, RESET]) or RESET
    return action


def worst_action(actions: list[str] | tuple[str, ...]) -> str | None:
    """The most severe of `actions` (replace node > reboot > reset GPU > monitor)."""
    ranked = [a for a in ACTIONS if a in actions]
    return ranked[0] if ranked else None


# ---------------------------------------------------------------- the XID catalogue

#: Where each row's action comes from (a row's last element).
XID_SOURCES = {
    "nvidia": "NVIDIA, Analyzing Xid Errors with the Xid Catalog, Resolution Bucket (Immediate "
              "Action): https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, "
              "read as leptonai/gpud@4a8de33a3f02e207f39e9023d67125592d599731 "
              "components/accelerator/nvidia/xid/catalog_generated.go (generated from that page, "
              "2025-10-29)",
    "nvlink5": "NVIDIA's catalogue, sheet `XID 144-150 Decode` (same gpud file, nvlinkRules): "
               "Xid 150's only decode row is MSE_WATCHDOG, severity Fatal, RESET_GPU",
    "aws": "aws-samples' GPU health-check toolkit classification (/work/shared/domain-facts.md, "
           "GPU health signals): 54 replace node; 64 and 95 reboot (A100), 168 reboot. Stronger "
           "than NVIDIA's RESET_GPU for 64 and 95: kept",
    "gpud": "leptonai/gpud@4a8de33a components/accelerator/nvidia/xid/xid.go "
            "SuggestedActionsByGPUd (RebootSystem -> reboot; none or CheckUserAppAndGPU -> "
            "monitor), for the codes NVIDIA's catalogue lists without an immediate action "
            "(162-172) and 173, which it does not list yet",
}

#: (code, NVIDIA's mnemonic, NVIDIA's immediate resolution bucket ("-": none given), action,
#: source). 171 and 172 accompany an Xid 48 ("Additional to Xid 48 ... DRAM/SRAM"): the 48 line
#: carries the reset; gpud reboots on 172 (SRAM).
XID_CATALOGUE: tuple[tuple[int, str, str, str, str], ...] = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "RESTART_APP", MONITOR, "nvidia"),
    (11, "ROBUST_CHANNEL_GR_ERROR_MISSING_HW", "RESTART_APP", MONITOR, "nvidia"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION/ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "RESTART_APP", MONITOR, "nvidia"),
    (25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "RESTART_APP", MONITOR, "nvidia"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "RESTART_APP", MONITOR, "nvidia"),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "IGNORE", MONITOR, "nvidia"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", MONITOR, "nvidia"),
    (39, "ROBUST_CHANNEL_CE0_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (40, "ROBUST_CHANNEL_CE1_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (41, "ROBUST_CHANNEL_CE2_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", MONITOR, "nvidia"),
    (44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "IGNORE", MONITOR, "nvidia"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45", BY_TEXT, "nvidia"),
    (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", RESET, "nvidia"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "WORKFLOW_XID_48", RESET, "nvidia"),
    (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", REPLACE, "aws"),
    (60, "ROBUST_CHANNEL_SEC2_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (62, "PMU_HALT_ERROR", "RESET_GPU", RESET, "nvidia"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", MONITOR, "nvidia"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", REBOOT, "aws"),
    (66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "IGNORE", MONITOR, "nvidia"),
    (67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "IGNORE", MONITOR, "nvidia"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (70, "ROBUST_CHANNEL_CE3_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (71, "ROBUST_CHANNEL_CE4_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (72, "ROBUST_CHANNEL_CE5_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (74, "NVLINK_ERROR", "WORKFLOW_NVLINK_ERR", RESET, "nvidia"),
    (75, "ROBUST_CHANNEL_CE6_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (76, "ROBUST_CHANNEL_CE7_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (77, "ROBUST_CHANNEL_CE8_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (78, "VGPU_START_ERROR", "UPDATE_SWFW", MONITOR, "nvidia"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", REBOOT, "nvidia"),
    (80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "RESTART_APP", MONITOR, "nvidia"),
    (82, "ROBUST_CHANNEL_NVJPG0_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (83, "ROBUST_CHANNEL_NVDEC1_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (84, "ROBUST_CHANNEL_NVDEC2_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (85, "ROBUST_CHANNEL_CE9_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (86, "ROBUST_CHANNEL_OFA0_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (88, "ROBUST_CHANNEL_NVDEC3_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (89, "ROBUST_CHANNEL_NVDEC4_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "IGNORE", MONITOR, "nvidia"),
    (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", MONITOR, "nvidia"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "RESET_GPU", REBOOT, "aws"),
    (96, "ROBUST_CHANNEL_NVDEC5_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (97, "ROBUST_CHANNEL_NVDEC6_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (98, "ROBUST_CHANNEL_NVDEC7_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (99, "ROBUST_CHANNEL_NVJPG1_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (100, "ROBUST_CHANNEL_NVJPG2_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (101, "ROBUST_CHANNEL_NVJPG3_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (102, "ROBUST_CHANNEL_NVJPG4_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (103, "ROBUST_CHANNEL_NVJPG5_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (104, "ROBUST_CHANNEL_NVJPG6_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (105, "ROBUST_CHANNEL_NVJPG7_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (106, "SMBPBI_TEST_MESSAGE", "IGNORE", MONITOR, "nvidia"),
    (107, "SMBPBI_TEST_MESSAGE_SILENT", "IGNORE", MONITOR, "nvidia"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", RESET, "nvidia"),
    (110, "SEC_FAULT_ERROR", "RESET_GPU", RESET, "nvidia"),
    (119, "GSP_RPC_TIMEOUT", "RESET_GPU", RESET, "nvidia"),
    (120, "GSP_ERROR", "RESET_GPU", RESET, "nvidia"),
    (121, "C2C_ERROR", "IGNORE", MONITOR, "nvidia"),
    (126, "ROBUST_CHANNEL_CE10_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (127, "ROBUST_CHANNEL_CE11_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (128, "ROBUST_CHANNEL_CE12_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (129, "ROBUST_CHANNEL_CE13_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (130, "ROBUST_CHANNEL_CE14_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (131, "ROBUST_CHANNEL_CE15_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (132, "ROBUST_CHANNEL_CE16_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (133, "ROBUST_CHANNEL_CE17_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (134, "ROBUST_CHANNEL_CE18_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (135, "ROBUST_CHANNEL_CE19_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (136, "ALI_TRAINING_FAIL", "RESET_GPU", RESET, "nvidia"),
    (137, "NVLINK_PRIV_ERR", "IGNORE", MONITOR, "nvidia"),
    (139, "ROBUST_CHANNEL_OFA1_ERROR", "RESTART_APP", MONITOR, "nvidia"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "RESET_GPU", RESET, "nvidia"),
    (141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "IGNORE", MONITOR, "nvidia"),
    (142, "ROBUST_CHANNEL_NVENC3_ERROR", "CONTACT_SUPPORT", MONITOR, "nvidia"),
    (143, "GPU_INIT_ERROR", "RESET_GPU", RESET, "nvidia"),
    (144, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (145, "NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (146, "NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (147, "NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", BY_TEXT, "nvidia"),
    (150, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", RESET, "nvlink5"),
    (151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "RESTART_VM", REBOOT, "nvidia"),
    (152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "IGNORE", MONITOR, "nvidia"),
    (153, "ROBUST_CHANNEL_DLA_TIMEOUT", "IGNORE", MONITOR, "nvidia"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154", BY_TEXT, "nvidia"),
    (155, "NVLINK_SW_DEFINED_ERROR", "RESET_GPU", RESET, "nvidia"),
    (156, "RESOURCE_RETIREMENT_EVENT", "RESET_GPU", RESET, "nvidia"),
    (157, "RESOURCE_RETIREMENT_FAILURE", "IGNORE", MONITOR, "nvidia"),
    (158, "GPU_FATAL_TIMEOUT", "RESET_GPU", RESET, "nvidia"),
    (159, "ROBUST_CHANNEL_CHI_NON_DATA_ERROR", "CHECK_UVM", MONITOR, "nvidia"),
    (160, "CHANNEL_RETIREMENT_EVENT", "IGNORE", MONITOR, "nvidia"),
    (161, "CHANNEL_RETIREMENT_FAILURE", "IGNORE", MONITOR, "nvidia"),
    (162, "PSHC_REENGAGED", "-", MONITOR, "gpud"),
    (163, "PSHC_DISENGAGED", "-", REBOOT, "gpud"),
    (164, "PSHC_LOW_LIFETIME", "-", MONITOR, "gpud"),
    (165, "PSHC_ZERO_LIFETIME", "-", MONITOR, "gpud"),
    (166, "NVLINK_SECURE_CRYPTO_ERR", "-", REBOOT, "gpud"),
    (167, "PCIE_FATAL_TIMEOUT", "-", REBOOT, "gpud"),
    (168, "REDUCED_GPU_MEMORY_CAPACITY", "-", REBOOT, "aws"),
    (169, "SEC2_HALT_ERROR", "-", REBOOT, "gpud"),
    (170, "NVLINK_SECURE_OTHER", "-", MONITOR, "gpud"),
    (171, "UNCORRECTABLE_DRAM_ERROR", "-", MONITOR, "gpud"),
    (172, "UNCORRECTABLE_SRAM_ERROR", "-", REBOOT, "gpud"),
    (173, "(C2C Fatal Link Failure)", "-", REBOOT, "gpud"),
)

#: XID code -> action (the codes whose action is in their text are `monitor` here).
XID_ACTIONS: dict[int, str] = {code: MONITOR if action == BY_TEXT else action
                               for code, _mnemonic, _bucket, action, _source in XID_CATALOGUE}


#: How to give the container its GPUs (the toolkit's page above; Kubernetes: the NVIDIA device
#: plugin's `nvidia.com/gpu` resource).
NO_GPU_FIX = ("start the container with the NVIDIA runtime (`docker run --gpus all`, or "
              "`--runtime=nvidia` with NVIDIA_VISIBLE_DEVICES=all; on Kubernetes a "
              "`nvidia.com/gpu` resource limit) and check that the host's `nvidia-smi` lists the "
              "GPUs")
