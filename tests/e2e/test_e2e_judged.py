"""Issue 25 against the installed product: a node whose facts were not read, or a run that
judged nothing, never hands off. A fake p5.48xlarge (tests/e2e/node.py) given a profile file
that weakens it or is not UTF-8 (item 5), a selection whose every check is skipped on one node
and on a 2-node cluster (item 7), and a kernel log cut mid-line in the preflight tier (item 8).
The device counts of item 4 are a row of test_e2e_shipped.py's VARIANTS."""

from __future__ import annotations

import json
import subprocess

from tests.e2e import procs
from tests.e2e.shipped import Shipped

SAID_WHY = b'weakened_because = "issue 25: a p5 seen as having no GPU"\n'


def _refused(node, run, said: str) -> None:
    """A usage error (exit 2) before any check ran: said on stderr and in the report, no
    hand-off, nothing left running."""
    why = run.describe()
    assert run.returncode == 2 and not node.marker.exists(), why
    assert "Traceback" not in run.output, why
    assert f"preflight: error: profile file {node.profile_file}" in run.output, why
    assert said in run.output, why
    report = run.report
    assert report is not None and report["exit_code"] == 2, why
    assert said in report["harness_errors"][0]
    assert run.left_running == []


def test_a_profile_file_that_removes_the_gpus_is_refused(run_node) -> None:
    """`num_gpus = 0` for p5.48xlarge passed a node showing 8 GPUs and handed off."""
    node, run = run_node(["-k", "PF-GPU-001"], profile_extra=b"num_gpus = 0\n",
                         output_free_gib=None)
    _refused(node, run, "weakens p5.48xlarge (built-in): num_gpus 8 -> 0. A node missing "
                        "that hardware would pass")


def test_a_profile_file_that_is_not_utf8_is_refused_naming_the_line(run_node) -> None:
    """It was a traceback with exit 1 and no report."""
    node, run = run_node(["-k", "PF-GPU-001"], profile_extra=b"# caf\xe9\n",
                         output_free_gib=None)
    _refused(node, run, "line 4: not UTF-8 (byte 0xe9")


def test_every_selected_check_skipped_is_no_pass_and_no_hand_off(run_node) -> None:
    """The same file saying why is accepted; `-k PF-GPU-001` then judges nothing (it printed
    "PASS (1 skip)" and exec'd)."""
    node, run = run_node(["-k", "PF-GPU-001"], profile_extra=b"num_gpus = 0\n" + SAID_WHY,
                         output_free_gib=None)
    why = run.describe()
    assert run.returncode == 2 and not node.marker.exists(), why
    assert "PASS" not in run.output, why
    assert ("is weaker than the hardware it derives from, on purpose: num_gpus 8 -> 0 "
            "(weakened_because: issue 25: a p5 seen as having no GPU)") in run.output, why
    said = ("every selected check was skipped, nothing was judged (profile p5.48xlarge; tier "
            "preflight; -k 'PF-GPU-001'")
    assert f"preflight: error: {said}" in run.output, why
    assert "`preflight list --tier preflight -k PF-GPU-001` shows" in run.output, why
    report = run.report
    assert (report["verdict"], report["exit_code"]) == ("error", 2)
    assert report["usage_error"].startswith(said)
    assert report["profile"]["resolved"]["weakened"] == ["num_gpus 8 -> 0"]
    assert run.junit_written and run.left_running == []


def test_a_cluster_that_judged_nothing_stops_every_node_alike(shipped: Shipped, tmp_path) -> None:
    """Two installed `preflight run` nodes over gloo (the selftest's launcher) with a selection
    no check of which applies: every node exits 2 with the same failure text, none hands off."""
    code = (
        "import json, sys; from pathlib import Path\n"
        "from harness.cluster.selftest import SelftestConfig, run_selftest\n"
        "r = run_selftest(SelftestConfig(nodes=2, keyword='PF-GPU-001', "
        "work_dir=Path(sys.argv[1])), echo=False)\n"
        "print(json.dumps([[n.exit_code, n.executed, n.verdict, n.failure_text] "
        "for n in r.nodes]))\n")
    token = procs.run_token("judged")
    env = {"PATH": f"{shipped.bin}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "AWS_EC2_METADATA_DISABLED": "true", "E2E_RUN_TOKEN": token}
    try:
        out = subprocess.run([str(shipped.python), "-c", code, str(tmp_path / "world")],
                             env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        nodes = json.loads(out.stdout.strip().splitlines()[-1])
        assert [(n[0], n[1], n[2]) for n in nodes] == [(2, False, "error"), (2, False, "error")]
        texts = {n[3] for n in nodes}
        assert len(texts) == 1
        assert texts.pop().startswith("gpu-preflight could not judge anything on a 2-node "
                                      "cluster (local-cpu, tier preflight): on every node, every "
                                      "selected check was skipped, nothing was judged")
        for rank in (0, 1):
            report = json.loads((tmp_path / "world" / f"node{rank}" / "report.json").read_text())
            assert (report["exit_code"], report["cluster"]["verdict"]) == (2, "error")
        assert procs.leftovers(token) == []
    finally:
        procs.kill_leftovers(token)


def test_a_kernel_log_cut_mid_line_fails_the_preflight_tier(run_node) -> None:
    """dmesg printing the first 55% of a clean log (cut mid-line, exit 0) was judged a complete
    clean log and the run handed off; in the preflight tier, where an unreadable log only
    warns, a cut one is an error."""
    node, run = run_node(["--workers", "0", "-k", "test_no_serious_xid"],
                         faults={"dmesg": "truncated"})
    why = run.describe()
    assert run.returncode == 1 and not node.marker.exists(), why
    check = run.check("PF-GPU-006")
    assert check is not None and check["outcome"] == "error", why
    assert "`dmesg` exited 0 but its output ends mid-line" in check["message"]
    assert "the log is incomplete (cut)" in check["message"]
    assert run.junit_written and run.left_running == []
