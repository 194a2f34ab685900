"""The XID catalogue (harness/base/gpu_actions.py XID_CATALOGUE): complete against NVIDIA's Xid
catalogue for Ampere and newer GPUs, each row with NVIDIA's resolution bucket, an action and a
source, and one test per boundary between action classes (a range's first and last code and
the codes either side)."""

from __future__ import annotations

import pytest

from harness.base.gpu_actions import (
    ACTIONS,
    BY_TEXT,
    MONITOR,
    REBOOT,
    REPLACE,
    RESET,
    XID_ACTIONS,
    XID_CATALOGUE,
    XID_SOURCES,
    xid_action,
)
from harness.parsers.kernel_log import parse_kernel_log

#: NVIDIA's immediate-action buckets -> the action they imply (a row may be stronger, sourced).
BUCKETS = {"RESET_GPU": RESET, "WORKFLOW_XID_48": RESET, "WORKFLOW_NVLINK_ERR": RESET,
           "RESTART_BM": REBOOT, "RESTART_VM": REBOOT, "CHECK_MECHANICALS": REPLACE,
           "RESTART_APP": MONITOR, "IGNORE": MONITOR, "CONTACT_SUPPORT": MONITOR,
           "UPDATE_SWFW": MONITOR, "CHECK_UVM": MONITOR, "WORKFLOW_NVLINK5_ERR": BY_TEXT,
           "WORKFLOW_XID_45": BY_TEXT, "XID_154": BY_TEXT}


def test_every_row_has_an_action_a_bucket_and_a_source():
    codes = [row[0] for row in XID_CATALOGUE]
    assert codes == sorted(set(codes))
    for code, mnemonic, bucket, action, source in XID_CATALOGUE:
        assert mnemonic and source in XID_SOURCES, code
        assert action in (*ACTIONS, BY_TEXT), code
        implied = BUCKETS.get(bucket, MONITOR)  # "-": NVIDIA gives none
        if source == "nvidia":  # NVIDIA's bucket decides
            assert implied == action, (code, bucket, action)
        elif implied != BY_TEXT:  # another source may only be stricter than NVIDIA's bucket
            assert ACTIONS.index(action) <= ACTIONS.index(implied), (code, bucket, action)


def test_the_catalogue_holds_every_used_code_nvidia_lists():
    # NVIDIA's catalogue (analyzing-xid-catalog.html, as read on 2025-10-29) lists these codes
    # as used on Ampere and newer GPUs; 173 is gpud's, newer than that copy.
    used = ({8, 11, 13, 25, 31, 32, 37, 38, 39, 40, 41, 43, 44, 45, 46, 48, 54, 60, 62, 63, 64}
            | {66, 67, 68, 69, 70, 71, 72, 74, 75, 76, 77, 78, 79, 80, 82, 83, 84, 85, 86, 88}
            | {89, 92, 93, 94, 95, *range(96, 108), 109, 110, 119, 120, 121, *range(126, 138)}
            | {*range(139, 174)})
    assert set(XID_ACTIONS) == used


def test_domain_facts_classes_hold():
    # /work/shared/domain-facts.md, "GPU health signals" (aws-samples' classification).
    by_action: dict[str, set[int]] = {}
    for code, action in XID_ACTIONS.items():
        by_action.setdefault(action, set()).add(code)
    assert by_action[REPLACE] == {54}
    assert by_action[REBOOT] >= {79, 151, 168, 64, 95}
    assert by_action[RESET] >= {48, 74, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158}
    assert by_action[MONITOR] >= {13, 31, 43, 63, 92, 94, 121, 126, 154}


@pytest.mark.parametrize(("code", "message", "action"), [
    (78, "", MONITOR), (79, "GPU has fallen off the bus.", REBOOT), (80, "", MONITOR),
    (118, "", MONITOR), (119, "Timeout waiting for RPC from GSP", RESET), (120, "", RESET),
    (121, "", MONITOR),
    (135, "", MONITOR), (136, "", RESET), (137, "", MONITOR),
    (139, "", MONITOR), (140, "", RESET), (141, "", MONITOR), (142, "", MONITOR),
    (143, "", RESET),
    (144, "SAW_MVB Nonfatal XC0 i0 Link -1", MONITOR), (144, "SAW_MVB Fatal XC0 i0", RESET),
    (149, "NETIR_LINK_EVT  Fatal   XC0 i0 Link 01", RESET),
    (149, "NETIR Nonfatal XC0 i0 Link 02", MONITOR),
    # 150 is always fatal (its only decode row, MSE_WATCHDOG): whatever the text says.
    (150, "", RESET), (150, "MSE_WATCHDOG", RESET),
    (151, "", REBOOT), (152, "", MONITOR), (153, "", MONITOR),
    (154, "", MONITOR),
    (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", REBOOT),
    (155, "", RESET), (156, "", RESET), (157, "", MONITOR), (158, "", RESET),
    (159, "", MONITOR), (161, "", MONITOR), (162, "", MONITOR), (163, "", REBOOT),
    (165, "", MONITOR), (166, "", REBOOT), (167, "", REBOOT), (168, "", REBOOT),
    (169, "", REBOOT), (170, "", MONITOR), (171, "", MONITOR), (172, "", REBOOT),
    (173, "", REBOOT), (174, "", MONITOR), (999, "", MONITOR),
])
def test_each_range_boundary(code: int, message: str, action: str):
    assert xid_action(code, message) == action


def test_an_xid_150_in_a_kernel_log_needs_a_reset():
    log = parse_kernel_log("[ 1234.5] NVRM: Xid (PCI:0000:ee:00): 150, pid='<unknown>', "
                           "name=<unknown>, MSE watchdog\n")
    assert [(e.xid, e.action) for e in log.events] == [(150, RESET)]
