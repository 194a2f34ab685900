"""What a bad GPU needs: the actions, most severe first, and the XID catalogue that maps each
kernel-log XID to one. The vocabulary under harness.gpu (which re-exports it), the parsers and
the checks; it imports nothing."""

from __future__ import annotations

import re

__all__ = ["ACTIONS", "BAD_THROTTLE_REASONS", "MONITOR", "REBOOT", "REPLACE", "RESET",
           "XID_ACTIONS", "plural", "worst_action", "xid_action"]

# What a bad GPU needs, most severe first (automation keys on these exact words).
REPLACE = "replace node"
REBOOT = "reboot"
RESET = "reset GPU"
MONITOR = "monitor"
ACTIONS = (REPLACE, REBOOT, RESET, MONITOR)


def _table(groups: dict[str, tuple[int, ...]]) -> dict[int, str]:
    return {code: action for action, codes in groups.items() for code in codes}


#: XID code -> action. Source: NVIDIA's XID catalogue as classified by aws-samples' GPU
#: health-check toolkit (domain-facts.md, "GPU health signals"). 64 and 95 are A100's
#: row-remap-failure / uncontained-ECC codes (reboot there); 168 is their successor. 46 (GPU
#: stopped processing) and 62 (internal micro-controller halt) are RESET_GPU in NVIDIA's own
#: catalogue (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html). 154 names its
#: action in its text (see xid_action).
XID_ACTIONS: dict[int, str] = _table({
    MONITOR: (13, 31, 43, 63, 92, 94, 121, 126, 154),
    RESET: (46, 48, 62, 74, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158),
    REBOOT: (64, 79, 95, 151, 168),
    REPLACE: (54,),
})

# Xid 154 (R565+) says what the GPU now needs: `GPU recovery action changed from 0x0 (None) to
# 0x4 (Drain and Reset)`; drivers name 0x1 `GPU Reset Required` or `PF FLR`, 0x2 `Node Reboot
# Required` or `OS Reboot`, 0x3 `Drain P2P`.
_RECOVERY_CHANGE = re.compile(
    r"recovery action changed from .*? to 0x(?P<code>[0-9A-Fa-f]+)(?:\s*\((?P<name>[^)]*)\))?"
)
# Xid 144-150 (NVLink5, Blackwell: NVIDIA's catalogue says WORKFLOW_NVLINK5_ERR) carry their
# severity: `149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 (...)`, `145, RLW_RXPIPE Nonfatal ...`.
# A fatal one needs what Xid 74 (NVLink, Hopper) needs; a nonfatal one is watched.
_NVLINK5_XIDS = range(144, 151)
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


def plural(n: int, noun: str) -> str:
    """`1 page`, `3 pages`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def xid_action(code: int, message: str = "") -> str:
    """The action an XID needs; codes outside the catalogue are watched (`monitor`). An Xid 154
    takes the action its message names (`... to 0x2 (Node Reboot Required)` -> reboot); an
    NVLink5 Xid (144-150) is reset GPU when its message says Fatal, an Xid 94/95 at least reset
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
