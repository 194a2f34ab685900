"""The tool fault matrix: every external tool the checks run x every way a tool goes wrong,
against the installed `preflight` on a fake p5.48xlarge (real processes, fakes on PATH).

Each cell asserts what issue 12 asks of a run facing that fault: a named failure (the check's
message names the tool and what went wrong) within the check's deadline + 10 s, report.json and
junit.xml written, nothing the run started left running, no hand-off. The `none` column is the
control: the same selection on the same node with a healthy tool passes and hands off, so a
failing cell fails because of its fault. A new tool or fault is one row in TOOLS / FAULTS.

The harness fault rows (issue 26, item 4) break the harness instead of a tool: a report folder
that is a file, on a full disk, or that fills during the run, a check session that dies, a
training command that cannot be exec'd, and the Slurm prolog over them: a harness error is exit
3 naming what broke, never 1 (a node verdict, which the prolog drains on), with the failure file
and junit.xml written wherever they can be.

The cells run one check session (`--workers 0`): a tool fault meets the same probe and the same
subprocess helper either way, and the xdist start-up would be most of a cell's cost (measured
here: 7.4 s vs 2.9 s per healthy cell, median of 4). The GPU-node tests in test_e2e_shipped.py
and the signal tests run the real xdist workers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.e2e import procs
from tests.e2e.fakes.fake_tool import EXIT_ERRORS
from tests.e2e.node import CHECK_TIMEOUT_S, RUN_BUDGET_S, FakeNode
from tests.e2e.node import TOOLS as NODE_TOOLS
from tests.fake_kube_api import FakeApi

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
    checks = [run.check(c) or {"id": c, "outcome": "missing", "message": "", "duration_s": None}
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
    elif named[0]["duration_s"] is None:  # null: not timed, a result the harness wrote for it
        problems.append(f"{named[0]['id']} has no duration: it reported no result of its own")
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


# --- harness faults: a crash is a harness error (exit 3), never a node verdict ---------------

#: A site check whose check session dies under it (no junit.xml from pytest).
DIES = '''import os


def test_session_dies():
    """The check session dies (os._exit)"""
    os._exit(7)
'''
#: A site check that fills the disk of the report folder ($E2E_FILL), then passes.
FILLS = '''import os


def test_fills_the_disk():
    """The report folder's disk fills up"""
    with open(os.path.join(os.environ["E2E_FILL"], "filler"), "wb") as fh:
        try:
            while True:
                fh.write(b"x" * 65536)
                fh.flush()
        except OSError:
            pass
'''
_ONE = ["--workers", "0", "-k", "test_gpu_count_matches_profile", "--failure-file", "failure"]


def _site(where: Path, text: str) -> list[str]:
    site = where / "site"
    site.mkdir(exist_ok=True)
    (site / "test_site.py").write_text(text)
    return ["--extra-checks", str(site)]


def _tmpfs_wrap(size: str, fill: bool):
    """A tmpfs of `size` mounted on the node's report folder in a mount namespace of its own
    (unshare: no privilege needed where user namespaces are allowed), full already or not."""
    unshare = shutil.which("unshare", path=f"{os.environ.get('PATH', '')}:/usr/bin:/bin")
    probe = subprocess.run([unshare or "unshare", "-rm", "true"], capture_output=True,
                           text=True, check=False) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no user and mount namespaces here (unshare -rm: "
                    f"{probe.stderr.strip() if probe else 'no unshare'}): a full disk cannot be made")
    tools = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"  # the node's PATH has only the fakes and venv
    script = (f'{tools} mount -t tmpfs -o size=$1 tmpfs "$0" || exit 99; export E2E_FILL="$0"; '
              + (f'{tools} head -c 4M /dev/zero > "$0/fill" 2>/dev/null; ' if fill else "")
              + 'shift; exec "$@"')
    return lambda node: [unshare, "-rm", "/bin/sh", "-c", script, str(node.reports), size]


def _harness_error(node: FakeNode, run: procs.Run, said: str) -> list[str]:
    """What a harness error must do: exit 3, saying `said` on the terminal and in the failure
    file, no traceback, no hand-off, nothing left running, within the run's bound."""
    problems = []
    if run.returncode != 3:
        problems.append(f"exit {run.returncode}, not 3 (a harness error)")
    if not re.search(said, run.output):
        problems.append(f"the output does not say /{said}/")
    failure = node.cwd / "failure"
    if not failure.is_file() or not re.search(said, failure.read_text()):
        problems.append(f"the failure file does not say /{said}/: "
                        f"{failure.read_text()[:300] if failure.is_file() else 'missing'}")
    if "Traceback" in run.output:
        problems.append("a traceback in the output")
    if node.marker.exists():
        problems.append("handed off")
    if run.left_running:
        problems.append(f"left running: {run.left_running}")
    if run.duration_s > RUN_BUDGET_S + SLACK_S:
        problems.append(f"took {run.duration_s:.0f} s")
    return problems


def test_report_folder_that_is_a_file(run_node) -> None:
    """Before: a traceback and exit 1 (the Slurm prolog drained the node) after every check ran,
    and no failure file. Now: exit 3 naming the folder before any check runs; the Kubernetes
    marks (label, taint) touch nothing."""
    def wrap(node: FakeNode) -> list[str]:
        (node.reports / "e2e-node").write_text("a file where the report folder goes\n")
        return []

    api = FakeApi().start()
    try:
        node, run = run_node(_ONE, wrap=wrap, extra_env={
            "PREFLIGHT_K8S_MARK": "label,taint", "PREFLIGHT_K8S_API": api.url,
            "PREFLIGHT_NODE_NAME": "e2e-node"})
    finally:
        api.stop()
    problems = _harness_error(node, run, re.escape(f"the report folder {node.reports}/e2e-node "
                                                   "cannot be written: a file is there, not a "
                                                   "folder"))
    if api.requests:
        problems.append(f"the node was marked: {api.requests}")
    assert problems == [], "\n".join(problems) + run.describe()


def test_report_folder_on_a_full_disk(run_node) -> None:
    node, run = run_node(_ONE, wrap=_tmpfs_wrap("256k", fill=True))
    problems = _harness_error(node, run, re.escape(f"the report folder {node.reports}/e2e-node "
                                                   "cannot be written") + ".*No space left")
    assert problems == [], "\n".join(problems) + run.describe()


def test_disk_fills_during_the_run(run_node, tmp_path: Path) -> None:
    """The folder took the probe, then a check filled its disk: the report cannot be written at
    the end, an uncaught error there is still exit 3, and the failure file (elsewhere) says so."""
    node, run = run_node(["--workers", "0", "-k", "test_gpu_count_matches_profile or "
                          "test_fills_the_disk", "--failure-file", "failure",
                          *_site(tmp_path, FILLS)], wrap=_tmpfs_wrap("1m", fill=False))
    problems = _harness_error(node, run, re.escape(f"the report folder {node.reports}/e2e-node "
                                                   "cannot be written") + ".*No space left")
    assert problems == [], "\n".join(problems) + run.describe()


def test_a_check_session_that_dies_leaves_junit_from_the_report(run_node, tmp_path: Path) -> None:
    """`os._exit` in a check, one session (`--workers 0`): pytest writes no junit.xml; the run
    writes it from the report (before: none). The check's error is a node verdict (exit 1)."""
    _, run = run_node(["--workers", "0", "-k", "test_gpu_count_matches_profile or "
                       "test_session_dies", *_site(tmp_path, DIES)])
    problems = [] if run.returncode == 1 else [f"exit {run.returncode}, not 1"]
    died = [c for c in (run.report or {}).get("checks", []) if c["id"].endswith("dies")]
    if not died or "session died" not in died[0]["message"]:
        problems.append(f"the report does not say the session died: {died}")
    junit = run.report_dir / "junit.xml" if run.report_dir else None
    # each testcase's outcome elements (its <properties>, the check's title and record, aside)
    cases = {c.get("name"): [e.tag for e in c if e.tag != "properties"]
             for c in ET.parse(junit).iter("testcase")} if junit and junit.is_file() else {}
    if not any(name.endswith("dies") and tags == ["error"] for name, tags in cases.items()):
        problems.append(f"junit.xml does not hold the dead check as an error: {cases}")
    if cases.get("PF-GPU-001") != []:
        problems.append(f"junit.xml does not hold PF-GPU-001 as passed: {cases}")
    assert problems == [], "\n".join(problems) + run.describe()


def test_a_command_that_cannot_be_execd_is_127_and_says_so(run_node) -> None:
    """Before: report.json said exit 0 and no failure file was written."""
    missing = "/nonexistent/train.py"
    node, run = run_node([*_ONE, "--", missing], handoff=False)
    report = run.report or {}
    problems = [] if run.returncode == 127 else [f"exit {run.returncode}, not 127"]
    said = f"cannot run '{missing}': No such file or directory"
    if (report.get("exit_code"), (report.get("handoff") or {}).get("error")) != (127, said):
        problems.append(f"report.json: exit_code {report.get('exit_code')}, handoff "
                        f"{report.get('handoff')}")
    failure = node.cwd / "failure"
    if not failure.is_file() or said not in failure.read_text():
        problems.append("the failure file does not say the command could not be run")
    assert problems == [], "\n".join(problems) + run.describe()


SLURM = Path(__file__).resolve().parents[2] / "container" / "slurm" / "gpu-preflight-slurm.sh"
SCONTROL = '#!/bin/sh\n[ "$1" = show ] && exit 0\nprintf "%s\\n" "$*" >> "$FAKE_STATE/scontrol"\n'


def test_slurm_prolog_never_drains_on_a_harness_error(shipped, tmp_path: Path) -> None:
    """The installed preflight under the Slurm prolog with a report folder it cannot write:
    before, exit 1 and the node drained (a broken disk took healthy nodes out); now exit 3,
    logged, the node left in service."""
    node = FakeNode(tmp_path / "node")
    (node.bin / "scontrol").write_text(SCONTROL)
    (node.bin / "logger").write_text("#!/bin/sh\n")
    for tool in ("scontrol", "logger"):
        (node.bin / tool).chmod(0o755)
    job = tmp_path / "slurm" / "job-42"
    job.mkdir(parents=True)
    (job / "e2e-node").write_text("a file where the report folder goes\n")
    env = {**node.env(shipped.bin), "PATH": f"{node.bin}:{shipped.bin}:/usr/bin:/bin",
           "PREFLIGHT_BIN": str(shipped.preflight), "PREFLIGHT_SLURM_DIR": str(tmp_path / "slurm"),
           "SLURM_JOB_ID": "42", "SLURM_JOB_GPUS": "0", "SLURMD_NODENAME": "gpu7",
           "PREFLIGHT_PROFILE": "p5.48xlarge"}
    res = subprocess.run(["bash", str(SLURM), "prolog"], env=env, capture_output=True,
                         text=True, timeout=RUN_BUDGET_S * 4)
    log = (job / "preflight.log").read_text() if (job / "preflight.log").exists() else ""
    drained = (node.state / "scontrol").read_text() if (node.state / "scontrol").exists() else ""
    procs.kill_leftovers(node.token, node.state)
    assert (res.returncode, drained) == (0, ""), f"rc {res.returncode}, scontrol: {drained}\n{log}"
    assert "preflight exit 3 on gpu7" in res.stderr, res.stderr
    assert "the report folder" in log and "Traceback" not in log, log
