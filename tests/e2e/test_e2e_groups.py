"""Job-shaped groups against the installed product, over real gloo between 4 `preflight run`
nodes (`preflight selftest cluster --groups ... --inject slowlink=A,B`): a slow link inside a
tensor-parallel group is named with its group; the same slow link outside every group of the
layout (expert groups, with their all_to_all) leaves the cluster passing."""

from __future__ import annotations

import json
import subprocess

from tests.e2e import procs
from tests.e2e.shipped import Shipped


def _selftest(shipped: Shipped, tmp_path, groups: str,
              slow: str) -> tuple[subprocess.CompletedProcess[str], str]:
    token = procs.run_token("groups")
    env = {"PATH": f"{shipped.bin}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "AWS_EC2_METADATA_DISABLED": "true", "E2E_RUN_TOKEN": token}
    argv = [str(shipped.preflight), "selftest", "cluster", "--nodes", "4", "--groups", groups,
            "--inject", f"slowlink={slow}", "--work-dir", str(tmp_path / "world")]
    try:
        out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True,
                             timeout=420)
        assert procs.leftovers(token) == []
    finally:
        procs.kill_leftovers(token)
    return out, out.stdout[-4000:] + out.stderr[-2000:]


def _group_check(tmp_path, rank: int = 0) -> dict:
    report = json.loads((tmp_path / "world" / f"node{rank}" / "report.json").read_text())
    return next(c for c in report["checks"] if c["id"] == "PF-CLUSTER-008")


def test_a_slow_link_inside_a_tensor_parallel_group_is_named_with_the_group(
        shipped: Shipped, tmp_path) -> None:
    out, why = _selftest(shipped, tmp_path, "tp=4", "1,2")
    assert out.returncode == 1, why
    assert "bad links: node1-node2 in tp group 0" in out.stdout, why
    check = _group_check(tmp_path, 3)
    assert check["outcome"] == "fail"
    assert "tp group 0 (node0, node1, node2, node3): busbw" in check["message"]
    assert "-> link node1-node2 in tp group 0" in check["message"]


def test_the_same_slow_link_outside_every_group_leaves_the_job_passing(
        shipped: Shipped, tmp_path) -> None:
    # ep=2, one rank per node: expert groups {node0, node1} and {node2, node3}; 1-2 is in none
    out, why = _selftest(shipped, tmp_path, "ep=2", "1,2")
    assert out.returncode == 0 and "cluster verdict: PASS" in out.stdout, why
    check = _group_check(tmp_path)
    assert check["outcome"] == "pass"
    whats = [m["what"] for m in check["measurements"]]
    assert "ep group 0 (node0, node1) all_to_all busbw" in whats
    assert "ep group 1 (node2, node3) all_reduce busbw" in whats
