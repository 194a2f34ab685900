"""The real multi-node path: 4 `preflight run` processes as nodes node0..node3 over gloo on
127.0.0.1 (`preflight selftest cluster`), one fault each: verdict, named host, every node's
exit code, no hand-off on failure (exec recorded by a marker file), bounded total time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.cluster.selftest import SelftestConfig, parse_injections, run_selftest

pytestmark = pytest.mark.timeout(400)
REPO_ROOT = Path(__file__).resolve().parent.parent


def _selftest(tmp_path, faults, tier="preflight"):
    cfg = SelftestConfig(nodes=4, faults=faults, work_dir=tmp_path, tier=tier)
    return run_selftest(cfg, echo=False)


def _check_failed_cluster(res, bad_rank, bad_exit=None):
    healthy = [n for n in res.nodes if n.rank != bad_rank]
    assert res.verdict == "fail", [n.verdict for n in res.nodes]
    assert res.bad_nodes == [f"node{bad_rank}"]
    assert [n.exit_code for n in healthy] == [1, 1, 1]
    assert not any(n.executed for n in res.nodes)
    texts = {n.failure_text for n in healthy}
    assert len(texts) == 1 and f"bad nodes: node{bad_rank}." in texts.pop()
    assert res.consistent and res.exit_code == 1
    assert res.duration_s < res.hard_bound_s
    bad = res.nodes[bad_rank]
    if bad_exit is not None:
        assert bad.exit_code == bad_exit
    return bad


def test_healthy_cluster_passes_and_every_node_hands_off(tmp_path):
    res = _selftest(tmp_path, {})
    assert res.verdict == "pass" and res.exit_code == 0
    assert [n.exit_code for n in res.nodes] == [0, 0, 0, 0]
    assert all(n.executed for n in res.nodes)
    report = json.loads((tmp_path / "node3" / "report.json").read_text())
    assert report["cluster"]["verdict"] == "pass" and report["cluster"]["bad_nodes"] == []
    assert report["cluster"]["bandwidth"]["busbw_gb_s"] > 0
    ids = {c["id"]: c["outcome"] for c in report["checks"]}
    assert ids["PF-CLUSTER-001"] == ids["PF-CLUSTER-004"] == "pass"


def test_fail_check_node_is_named(tmp_path):
    bad = _check_failed_cluster(_selftest(tmp_path, {2: "fail-check"}), 2, bad_exit=1)
    assert bad.verdict == "fail" and bad.bad_nodes == ["node2"]
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    entry = report["cluster"]["bad_nodes"][0]
    assert entry["host"] == "node2" and entry["rank"] == 2
    assert "PF-ENV-004" in entry["reason"]


def test_absent_node_is_named_after_the_join_timeout(tmp_path):
    res = _selftest(tmp_path, {1: "absent"})
    bad = _check_failed_cluster(res, 1)
    assert bad.exit_code is None
    assert "never joined" in res.nodes[0].failure_text


def test_absent_master_is_named_by_every_node(tmp_path):
    res = _selftest(tmp_path, {0: "absent"})
    _check_failed_cluster(res, 0)
    assert "control-plane master" in res.nodes[1].failure_text


def test_crashing_node_is_named(tmp_path):
    bad = _check_failed_cluster(_selftest(tmp_path, {3: "crash"}), 3, bad_exit=17)
    assert not bad.executed


def test_crashing_master_is_named_for_one_reason_by_every_node(tmp_path):
    """The master (node rank 0, which serves the store) crashes in the cluster all_reduce:
    each survivor notices it in its own way (a broken pipe publishing its own key, a reset
    connection, a wait that found nothing), but all name the master for the same reason, so
    the cluster has one verdict on why; what each saw stays in its own report."""
    res = _selftest(tmp_path, {0: "crash"})
    _check_failed_cluster(res, 0, bad_exit=17)
    reports = [json.loads((tmp_path / f"node{r}" / "report.json").read_text()) for r in (1, 2, 3)]
    reasons = {b["reason"] for r in reports for b in r["cluster"]["bad_nodes"]}
    assert len(reasons) == 1, reasons
    assert reasons.pop().startswith("the control-plane master node0 (node rank 0, 127.0.0.1:")
    # where each noticed is its own (harness.cluster.collectives._lost_master): the master
    # crashes in the all_reduce, but a node that a loaded machine kept from reading the master's
    # snapshot before the crash notices in the gather (seen once in CI, at load); each says
    # where and why
    phases = [r["cluster"]["master_lost"]["phase"] for r in reports]
    assert set(phases) <= {"the cluster all_reduce", "the gather of node-local results"}, phases
    assert all(r["cluster"]["master_lost"]["error"] for r in reports)


def test_hanging_node_is_named_and_survivors_do_not_hang(tmp_path):
    res = _selftest(tmp_path, {2: "hang"})
    bad = _check_failed_cluster(res, 2)
    assert bad.killed  # it would only have stopped at its own watchdog (hard upper bound)
    assert "stopped answering" in res.nodes[0].failure_text


def test_slow_node_is_isolated_by_pairwise_rounds(tmp_path):
    res = _selftest(tmp_path, {1: "slow"})
    bad = _check_failed_cluster(res, 1, bad_exit=1)
    assert bad.verdict == "fail"
    report = json.loads((tmp_path / "node0" / "report.json").read_text())
    iso = report["cluster"]["isolation"]
    assert iso["bad_nodes"] == [1] and iso["num_rounds"] <= 3
    evidence = report["cluster"]["bad_nodes"][0]["evidence"]
    assert evidence and all(e["busbw_gb_s"] is None or e["busbw_gb_s"] < iso["threshold_gb_s"]
                            for e in evidence)
    assert report["cluster"]["actions"]["slurm_drain"][0].startswith(
        "scontrol update nodename=node1 state=drain reason=\"gpu-preflight: ")
    from harness.report.model import Report
    from harness.report.verdicts import bad_nodes  # the HTML report's bad-node table

    reports = [Report.from_dict(json.loads((tmp_path / f"node{r}" / "report.json").read_text()))
               for r in range(4)]
    assert [(b.host, b.source) for b in bad_nodes(reports)] == [("node1", "cluster")]


def test_certify_tier_always_isolates(tmp_path):
    res = _selftest(tmp_path, {}, tier="certify")
    assert res.verdict == "pass" and all(n.executed for n in res.nodes)
    report = json.loads((tmp_path / "node1" / "report.json").read_text())
    assert report["cluster"]["isolation"]["num_rounds"] == 1  # every random pair passed


@pytest.mark.parametrize(("specs", "message"), [
    (["bogus=1"], "FAULT one of"), (["hang=9"], "node 9 not in 0..3"),
    (["hang=1", "slow=1"], "two faults"), (["hang"], "expected FAULT=K"),
])
def test_selftest_rejects_bad_injections(specs, message, capsys):
    argv = ["selftest", "cluster", "--nodes", "4"]
    for s in specs:
        argv += ["--inject", s]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_parse_injections_lists():
    assert parse_injections(["crash=1,3", "slow=0"], 4) == {1: "crash", 3: "crash", 0: "slow"}


def report_master_lost(folder):
    """Where and how this node lost the master: its own view, kept out of the verdict."""
    return json.loads((folder / "report.json").read_text())["cluster"]["master_lost"]


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def node1_env(monkeypatch, tmp_path):
    """This process as node 1 of 2 whose master (127.0.0.1, a port nobody serves) is absent."""
    from harness.base import handoff

    calls = []
    monkeypatch.setattr(handoff, "_execvp", lambda file, argv: calls.append(list(argv)))
    for k, v in {"PREFLIGHT_NNODES": "2", "PREFLIGHT_NODE_RANK": "1",
                 "PREFLIGHT_MASTER_ADDR": "127.0.0.1", "PREFLIGHT_PORT": str(_free_port()),
                 "PREFLIGHT_HOSTS": "node[0-1]", "PREFLIGHT_HOSTNAME": "node1",
                 "PREFLIGHT_JOIN_TIMEOUT_S": "2", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    return calls


def test_run_names_an_unreachable_master_and_does_not_hand_off(node1_env, tmp_path, capsys):
    import os

    rc = main(["run", "--profile", "local-cpu", "-k", "env", "--report-dir", str(tmp_path),
               "--failure-file", str(tmp_path / "failure"), "--", "train"])
    assert rc == 1 and node1_env == []
    out = capsys.readouterr().out
    assert "hard upper bound join 2 + local 300" in out
    text = (tmp_path / "failure").read_text()
    assert text.startswith("gpu-preflight FAILED on a 2-node cluster (local-cpu, tier "
                           "preflight): bad nodes: node0.")
    assert "the control-plane master node0 (node rank 0, 127.0.0.1:" in text
    assert report_master_lost(tmp_path / "node1")["phase"] == "join"
    report = json.loads((tmp_path / "node1" / "report.json").read_text())
    assert report["cluster"]["bad_nodes"][0]["host"] == "node0"
    assert report["verdict"] == "fail" and report["exit_code"] == 1
    assert "GLOO_SOCKET_IFNAME" not in os.environ  # set for the plane, restored before exit


def test_preflight_cluster_off_runs_node_local_only(node1_env, tmp_path, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_CLUSTER", "off")
    rc = main(["run", "--profile", "local-cpu", "-k", "env", "--report-dir", str(tmp_path),
               "--", "train"])
    assert rc == 0 and node1_env == [["train"]]
    assert "cluster" not in json.loads((tmp_path / "node1" / "report.json").read_text())


def test_per_gpu_launch_is_refused(monkeypatch, tmp_path, capsys):
    for k, v in {"MASTER_ADDR": "127.0.0.1", "GROUP_RANK": "0", "LOCAL_RANK": "3",
                 "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16", "RANK": "3"}.items():
        monkeypatch.setenv(k, v)
    assert main(["run", "--profile", "local-cpu", "--report-dir", str(tmp_path), "--",
                 "train"]) == 2
    assert "run preflight once per node" in capsys.readouterr().err


def test_watchdog_stops_a_hung_node_at_its_hard_bound(tmp_path):
    """A node stuck past its hard upper bound exits 1 and leaves a failure file."""
    import subprocess
    import sys
    import time

    code = f"""
import pathlib, time
from harness.cluster.step import ClusterStep
from harness.cluster.timeouts import ClusterTimeouts
from harness.topology.model import Topology
from harness.profiles.table import get_profile
topo = Topology(node_rank=1, num_nodes=2, master_addr="127.0.0.1", port=1, source="test")
t = ClusterTimeouts(join_s=0.2, local_s=0.2, gather_s=0.2, collective_s=0.1,
                    isolation_rounds=0, exit_s=0.1)
step = ClusterStep(topo, t, profile=get_profile("local-cpu"), tier="preflight", env={{}})
step.failure_file = pathlib.Path({str(tmp_path / "failure")!r})
step._arm_watchdog()
time.sleep(120)  # hung
"""
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=90, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 1
    assert time.monotonic() - start < 60
    assert "did not finish within its hard upper bound" in (tmp_path / "failure").read_text()


@pytest.mark.parametrize(("failing", "slow"), [(3, 1), (0, 2)], ids=["peer", "master"])
def test_certify_names_a_slow_node_beside_one_that_failed_its_own_checks(tmp_path, failing,
                                                                         slow):
    """Issue 29: in certify the bandwidth and the rounds run over the nodes that passed their
    own checks, so the slow node is named too (before: only the failing one). The master left
    out still plans the rounds (it serves the store) and measures nothing."""
    cfg = SelftestConfig(nodes=5, faults={failing: "fail-check", slow: "slow"},
                         work_dir=tmp_path, tier="certify")
    res = run_selftest(cfg, echo=False)
    bad = sorted([f"node{failing}", f"node{slow}"])
    assert res.verdict == "fail" and res.bad_nodes == bad, res.nodes
    assert res.consistent and not any(n.executed for n in res.nodes)
    report = json.loads((tmp_path / "node4" / "report.json").read_text())
    assert report["cluster"]["left_out"] == {str(failing): "failed its own checks"}
    assert report["cluster"]["bandwidth"]["ranks"] == [r for r in range(5) if r != failing]
    assert report["cluster"]["isolation"]["bad_nodes"] == [slow]
    assert f"bad nodes: {', '.join(bad)}." in res.nodes[4].failure_text


def test_preflight_says_the_bandwidth_was_not_measured_and_why(tmp_path):
    res = _selftest(tmp_path, {2: "fail-check", 1: "slow"})
    assert res.verdict == "fail" and res.bad_nodes == ["node2"]
    head = res.nodes[0].failure_text.split("\n", 1)[0]
    assert ("cluster bandwidth and pairwise isolation not measured: stopped after node2 "
            "failed its own checks") in head
    report = json.loads((tmp_path / "node3" / "report.json").read_text())
    assert set(report["cluster"]["not_measured"]) == {"cluster bandwidth",
                                                      "pairwise isolation"}
    outcomes = {c["id"]: c["outcome"] for c in report["checks"]}
    assert outcomes["PF-CLUSTER-004"] == outcomes["PF-CLUSTER-005"] == "skip"
    out = (tmp_path / "node3" / "output.txt").read_text()
    assert "NOT MEASURED PF-CLUSTER-004: cluster bandwidth not measured: stopped after node2" \
        in out  # the terminal's (a log here: the plain summary)
def test_three_of_four_failing_nodes_make_a_suspect_run_that_drains_none(tmp_path):
    """Issue 30 item 4 on real processes: 4 `preflight run`s over gloo, 3 of them failing a
    node-local check: more than PREFLIGHT_DRAIN_CAP (0.5) of the run, so every node takes the
    same suspect verdict: it fails (no hand-off), names the nodes, and holds back the drain
    and replace commands. (The fault is an environment value: node0, the one node without it,
    is also named, as the consistency check's minority: a shared cause indeed.)"""
    res = _selftest(tmp_path, {1: "fail-check", 2: "fail-check", 3: "fail-check"})
    assert res.verdict == "fail" and res.consistent
    assert {"node1", "node2", "node3"} <= set(res.bad_nodes)
    num_bad = len(res.bad_nodes)
    assert not any(n.executed for n in res.nodes)
    for rank in range(4):
        cluster = json.loads((tmp_path / f"node{rank}" / "report.json").read_text())["cluster"]
        radius = cluster["blast_radius"]
        assert (radius["bad"], radius["allowed"], radius["suspect"]) == (num_bad, 2, True)
        assert "slurm_drain" not in cluster["actions"]
        assert len(cluster["actions"]["held_back"]["slurm_drain"]) == num_bad
    assert {n.failure_text.split(": ", 1)[1][:40] for n in res.nodes if n.failure_text} == {
        f"suspect run: {num_bad} of 4 nodes failed, more t"}


def test_a_pair_that_fails_once_is_flaky_never_a_bad_node(tmp_path):
    """Issue 30 item 2 on real processes: node 1 is slow in the first isolation round only
    (the selftest's `flaky` fault; certify always isolates): its pair fails, then node 1 passes
    with a good peer and the pair's link, re-tested in a round of its own, passes too. No bad
    node or link: the run passes and every node hands off (node 1 too), PF-CLUSTER-005 warns
    with both figures and the pair is counted in report.json's confirmation. (This test found
    that a round re-testing one link ended before its members answered: the bystanders'
    reports counted; only members report now.)"""
    res = _selftest(tmp_path, {1: "flaky"}, tier="certify")
    assert res.verdict == "pass" and res.consistent and all(n.executed for n in res.nodes), \
        [(n.verdict, n.failure_text) for n in res.nodes]
    report = json.loads((tmp_path / "node2" / "report.json").read_text())
    iso = report["cluster"]["isolation"]
    assert iso["bad_nodes"] == [] and iso["bad_links"] == [] and iso["num_rounds"] == 3, iso
    [flaky] = iso["flaky"]
    assert 1 in (flaky["first"]["a"], flaky["first"]["b"]) and len(flaky["again"]) >= 2
    assert report["confirmation"]["isolation_flaky"] == 1
    assert report["confirmation"]["flaky_total"] >= 1
    five = next(c for c in report["checks"] if c["id"] == "PF-CLUSTER-005")
    assert five["outcome"] == "warn" and "flaky pair " in five["message"]
