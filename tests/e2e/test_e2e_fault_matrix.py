"""The tool fault matrix: every external tool the checks run x every way a tool goes wrong,
against the installed `preflight` on a fake p5.48xlarge (real processes, fakes on PATH).

Each cell asserts what issue 12 asks of a run facing that fault: a named failure (the check's
message names the tool and what went wrong) within the check's deadline + 10 s, report.json and
junit.xml written, nothing the run started left running, no hand-off. The `none` column is the
control: the same selection on the same node with a healthy tool passes and hands off, so a
failing cell fails because of its fault. A new tool or fault is one row in TOOLS / FAULTS.

The cells run one check session (`--workers 0`): a tool fault meets the same probe and the same
subprocess helper either way, and the xdist start-up would be most of a cell's cost (measured
here: 7.4 s vs 2.9 s per healthy cell, median of 4). The GPU-node tests in test_e2e_shipped.py
and the signal tests run the real xdist workers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest

from tests.e2e import procs
from tests.e2e.fakes.fake_tool import EXIT_ERRORS
from tests.e2e.node import CHECK_TIMEOUT_S, RUN_BUDGET_S, FakeNode
from tests.e2e.node import TOOLS as NODE_TOOLS

#: Seconds a named failure may take past its deadline (issue 12, item 11).
SLACK_S = 10.0


@dataclass(frozen=True)
class Tool:
    """One tool row: the checks that run it (as a -k of their function names), and the node."""

    name: str
    select: str
    checks: tuple[str, ...]
    """The checks of which one must name the fault."""
    tier: str = "preflight"
    tools: tuple[str, ...] = NODE_TOOLS
    """The fakes on PATH (a source the probe would fall back to is left off: one source)."""
    env: dict[str, str] = field(default_factory=dict)
    nvml: dict[str, object] = field(default_factory=dict)


_BW = "test_single_node_busbw_meets_nvlink_floor"
_KERNEL = "test_no_serious_xid"
TOOLS = (
    # NVML first, nvidia-smi -q and --query-gpu as its fallbacks: with no NVML, nvidia-smi is
    # the only source of the inventory.
    Tool("nvidia-smi", "test_gpu_count_matches_profile", ("PF-GPU-001",),
         nvml={"init_error": "NVMLError_LibraryNotFound"}),
    Tool("dcgmi", "test_dcgm_diag_passes", ("PF-GPU-012",)),
    Tool("fi_info", "test_fi_info_lists_efa", ("PF-NET-003",)),
    Tool("all_reduce_perf", _BW, ("PF-BW-001",)),
    # nccl-tests under mpirun on one node (-np 8 -g 1), as multi-node images launch it.
    Tool("mpirun", _BW, ("PF-BW-001",), env={"PREFLIGHT_NCCL_TESTS_LAUNCHER": "mpirun"}),
    # The kernel log: journalctl -k, else dmesg; each row leaves the other off PATH. The
    # preflight tier only warns on an unreadable log (checks/test_gpu.py: containers without
    # CAP_SYSLOG); certify fails, so these rows run certify.
    Tool("dmesg", _KERNEL, ("PF-GPU-006",), tier="certify"),
    Tool("journalctl", _KERNEL, ("PF-GPU-006",), tier="certify",
         tools=(*(t for t in NODE_TOOLS if t != "dmesg"), "journalctl")),
)

# What the message must say about each fault (the tool's name must be there too).
_TIMEOUT = r"did not finish|timed? ?out|deadline|no answer"
_UNREADABLE = (r"unexpected|unrecogni[sz]|unreadable|not readable|(cannot|could not|can't) "
               r"(be )?(read|pars)|garbage|neither|printed (no|something)|not valid|invalid|"
               r"no .{0,60}(result|output|found)")
FAULTS = {
    "hang": _TIMEOUT,
    "hang-ignore-term": _TIMEOUT,
    "signal": r"signal|SIGSEGV|crash",
    "exit": r"exit(ed)?\b.{0,20}\d+|status \d+|exit code",
    "garbage": _UNREADABLE,
    # Cut output reads as cut (an end marker missing) or as not valid: either names it.
    "truncated": r"truncat|incomplete|cut short|ends without|end of (its )?output|" + _UNREADABLE,
    "flood": r"\d+(\.\d+)? ?(MB|MiB|GB|GiB|bytes)|dropped|capped|too much output",
    "setsid": (r"detached|holding|left running|still running|descendant|child|pipe|truncat|"
               r"incomplete|ends without"),
}
#: Cells whose fault leaves no trace in what the tool printed: a listing (fi_info) cut after
#: every device was named once reads as a healthy one. They may pass; they must still end in
#: time with nothing left running. (A kernel log cut mid-line is an incomplete log: issue 25.)
UNDETECTABLE = {("fi_info", "truncated")}

CELLS = [pytest.param(tool, fault, id=f"{tool.name}-{fault}")
         for tool in TOOLS for fault in ("none", *FAULTS)]


def _named(message: str, tool: str, fault: str) -> bool:
    """The message names the tool and what went wrong (for `exit`, the status or the error
    line the tool printed)."""
    said = re.search(FAULTS[fault], message, re.I) is not None
    if fault == "exit":
        said = said or EXIT_ERRORS[tool][1][:40] in message
    return tool in message and said


def _problems(tool: Tool, fault: str, node: FakeNode, run: procs.Run) -> list[str]:
    """Every property of the cell the run violated (all of them, so one failure says it all)."""
    if run.returncode is None:
        return [f"it did not end: the test killed it after {run.duration_s:.0f} s"]
    problems = []
    if run.duration_s > RUN_BUDGET_S + SLACK_S:
        problems.append(f"took {run.duration_s:.0f} s, past the run budget + {SLACK_S:g} s")
    if run.report is None:
        problems.append("no report.json")
    if not run.junit_written:
        problems.append("no junit.xml")
    if run.left_running:
        problems.append(f"left running: {run.left_running}")
    checks = [run.check(c) or {"id": c, "outcome": "missing", "message": "", "duration_s": 0}
              for c in tool.checks]
    shown = "; ".join(f"{c['id']} {c['outcome']}: {c['message'][:300]}" for c in checks)
    passing = fault == "none" or ((tool.name, fault) in UNDETECTABLE and run.returncode == 0)
    if passing:
        if run.returncode != 0 or not node.marker.exists():
            problems.append(f"exit {run.returncode}, handed off: {node.marker.exists()}: the "
                            f"healthy control does not pass ({shown})")
        return problems
    if run.returncode != 1:
        problems.append(f"exit {run.returncode}, not 1 (a failed check)")
    if node.marker.exists():
        problems.append("handed off despite the fault")
    named = [c for c in checks if c["outcome"] in ("fail", "error")
             and _named(c["message"], tool.name, fault)]
    if not named:
        problems.append(f"no check names {tool.name!r} and /{FAULTS[fault]}/: {shown}")
    elif named[0]["duration_s"] > CHECK_TIMEOUT_S + SLACK_S:
        problems.append(f"{named[0]['id']} took {named[0]['duration_s']} s "
                        f"(deadline {CHECK_TIMEOUT_S:g} s + {SLACK_S:g} s)")
    return problems


@pytest.mark.parametrize(("tool", "fault"), CELLS)
def test_tool_fault(run_node, tool: Tool, fault: str) -> None:
    faults = {} if fault == "none" else {tool.name: fault}
    node, run = run_node(["--tier", tool.tier, "--workers", "0", "-k", tool.select], faults=faults,
                         tools=tool.tools, extra_env=tool.env, nvml=tool.nvml)
    problems = _problems(tool, fault, node, run)
    assert problems == [], "\n".join(problems) + run.describe()
