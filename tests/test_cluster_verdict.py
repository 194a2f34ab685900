"""The cluster verdict as a pure function of a gathered snapshot; consistency by majority."""

from __future__ import annotations

import copy
import json

import pytest

from harness.cluster.checks import consistency_outliers
from harness.cluster.isolate import isolate, simulate_measure
from harness.cluster.snapshot import node_summary
from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS
from harness.report.model import Report
from harness.results import CheckResult

FACTS = {"driver": "550.90.07", "cuda": "12.4", "nccl": "2.21.5", "ofi_nccl": "1.13.2",
         "libfabric": "1.22.0amzn4.0", "torch": "2.13.0", "gpu_count": 8,
         "gpu_model": "NVIDIA H100 80GB HBM3"}


def _summary(rank, verdict="pass", failed=(), facts=None, env=None):
    return {"rank": rank, "host": f"node{rank}", "verdict": verdict, "failed": list(failed),
            "num_failed": len(failed), "harness_errors": [], "facts": dict(facts or FACTS),
            "env": dict(env or {"NCCL_DEBUG": "WARN"}), "figures": {}, "sdc": None,
            "nothing_judged": None}


def _snap(n=4, **changes):
    snap = {"num_nodes": n, "profile": "p5.48xlarge", "tier": "preflight",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(n)},
            "nodes": {str(r): _summary(r) for r in range(n)}, "missing": {}}
    snap.update(changes)
    return snap


def _ids(v, outcome):
    return [c["id"] for c in v.checks if c["outcome"] == outcome]


def test_all_good_passes_with_no_failure_text():
    v = decide(_snap())
    assert v.passed and v.exit_code == 0 and v.bad_nodes == [] and v.text == ""
    assert _ids(v, "pass") == ["PF-CLUSTER-001", "PF-CLUSTER-002", "PF-CLUSTER-003"]


def test_missing_node_is_named_with_host_and_rank():
    snap = _snap()
    del snap["nodes"]["2"]
    snap["missing"] = {"2": {"host": "node2", "reason": "never joined the control plane"}}
    v = decide(snap)
    assert not v.passed and v.exit_code == 1
    assert v.bad_nodes == [{"host": "node2", "rank": 2, "reason": "never joined the control plane",
                            "evidence": []}]
    assert "PF-CLUSTER-001" in _ids(v, "fail")
    assert v.text.startswith("gpu-preflight FAILED on a 4-node cluster (p5.48xlarge, tier "
                             "preflight): bad nodes: node2.")
    assert v.actions["slurm_exclude"] == "node2"
    assert v.actions["slurm_drain"] == [
        'scontrol update nodename=node2 state=drain reason="gpu-preflight: never joined the '
        'control plane"']
    assert v.actions["hyperpod_replace"] == [
        'scontrol update nodename=node2 state=fail reason="Action:Replace"']
    assert "node2" in v.actions["sagemaker_failure_reason"]


def test_local_failure_names_node_and_carries_messages():
    snap = _snap()
    msg = "[PF-ENV-004] malformed environment values: NCCL_DEBUG=verbose; fix the values"
    snap["nodes"]["1"] = _summary(1, "fail", [{"id": "PF-ENV-004", "outcome": "fail",
                                               "message": msg}])
    v = decide(snap)
    assert [b["host"] for b in v.bad_nodes] == ["node1"]
    assert v.bad_nodes[0]["reason"] == "node-local checks failed: PF-ENV-004"
    assert v.bad_nodes[0]["evidence"] == [msg]
    fail = next(c for c in v.checks if c["id"] == "PF-CLUSTER-002")
    assert fail["message"].startswith("[PF-CLUSTER-002] 1 of 4 nodes failed node-local checks: "
                                      "node1 (rank 1): [PF-ENV-004] malformed")


def test_version_outlier_named_by_majority():
    snap = _snap()
    snap["nodes"]["3"]["facts"]["nccl"] = "2.18.3"
    snap["nodes"]["0"]["env"]["NCCL_NET"] = "Socket"
    v = decide(snap)
    reasons = {b["host"]: b["reason"] for b in v.bad_nodes}
    assert reasons == {"node3": "nccl = 2.18.3 (majority: 2.21.5)",
                       "node0": "env NCCL_NET = Socket (majority: (unset))"}
    assert v.actions["slurm_exclude"] == "node[0,3]"


def test_consistency_without_majority_names_every_node():
    out = consistency_outliers({0: {"torch": "2.13.0"}, 1: {"torch": "2.12.0"}})
    assert [(o["rank"], o["majority"]) for o in out] == [(0, False), (1, False)]
    assert consistency_outliers({0: {"a": 1}, 1: {"a": 1}, 2: {"a": 1}}) == []


def test_bandwidth_low_and_isolation_evidence():
    iso = isolate(range(4), simulate_measure(healthy_gb_s=1.0, bad_nodes={2: 0.01}), seed=1,
                  floor_gb_s=0.05)
    snap = _snap(bandwidth={"size_bytes": 1 << 20, "nranks": 4, "ranks": [0, 1, 2, 3],
                            "floor_gb_s": 0.05, "per_rank": None,
                            "busbw_gb_s": 0.01, "data_ok": True, "errors": [], "missing": {}},
                 isolation=iso.to_json())
    v = decide(snap)
    assert _ids(v, "fail") == ["PF-CLUSTER-004", "PF-CLUSTER-005"]
    bad = v.bad_nodes
    assert [b["host"] for b in bad] == ["node2"]
    assert all(e["busbw_gb_s"] < 0.05 for e in bad[0]["evidence"])
    assert {e["peer"] for e in bad[0]["evidence"]} <= {"node0", "node1", "node3"}
    assert "busbw 0.01 GB/s < 0.05 GB/s" in next(c["message"] for c in v.checks
                                                 if c["id"] == "PF-CLUSTER-004")


def test_bandwidth_missing_rank_is_bad():
    snap = _snap(bandwidth={"size_bytes": 1, "nranks": 4, "ranks": [0, 1, 2, 3],
                            "floor_gb_s": 0.05, "per_rank": None,
                            "busbw_gb_s": None, "data_ok": False,
                            "errors": ["rank 0: timed all_reduce: Connection closed by peer"],
                            "missing": {"1": "stopped answering during the cluster all_reduce"}})
    v = decide(snap)
    assert [(b["host"], b["reason"]) for b in v.bad_nodes] == [
        ("node1", "stopped answering during the cluster all_reduce")]


def test_same_snapshot_gives_same_text_on_every_node():
    snap = _snap()
    snap["nodes"]["3"]["facts"]["driver"] = "535.0"
    wire = json.dumps(snap)
    a, b = decide(json.loads(wire)), decide(copy.deepcopy(json.loads(wire)))
    assert a.text == b.text and a.to_dict() == b.to_dict()


def test_failure_text_head_fits_1024_chars_and_names_all_bad_nodes():
    snap = _snap(n=64)
    for r in (5, 17, 40):
        snap["nodes"][str(r)] = _summary(r, "fail", [{"id": "PF-GPU-001", "outcome": "fail",
                                                      "message": "x" * 600}])
    v = decide(snap)
    head = v.text.split("\n", 1)[0]
    assert len(head) <= 1024
    assert "bad nodes: node5, node17, node40." in head


def test_node_summary_from_a_report():
    report = Report(host="node7", profile="local-cpu", profile_source="--profile",
                    tier="preflight")
    report.checks = [CheckResult(id="PF-ENV-004", outcome="fail", message="m" * 2000),
                     CheckResult(id="PF-ENV-001", outcome="pass")]
    s = node_summary(report, rank=7, facts=FACTS,
                     env={"NCCL_DEBUG": "WARN", "FI_PROVIDER": "efa", "HOME": "/root"})
    assert s.verdict == "fail" and s.host == "node7" and s.rank == 7
    assert len(s.failed[0].message) == 600
    assert s.env == {"FI_PROVIDER": "efa", "NCCL_DEBUG": "WARN"}
    assert s.facts["nccl"] == "2.21.5"


def test_cluster_timeouts_round_trip_through_the_environment():
    from harness.cluster.selftest import selftest_timeouts
    from harness.cluster.timeouts import ClusterTimeouts

    t = selftest_timeouts(1.5)
    assert ClusterTimeouts.from_env(t.to_env(), local_s=t.local_s) == t


def test_a_node_whose_own_verdict_is_error_fails_the_cluster_and_says_why():
    """The harness could not judge node 2 (no check failed: its run broke): the cluster does
    not pass, node 2 is named with the harness error, in the check, the bad nodes and the
    failure text."""
    snap = _snap()
    broken = _summary(2, "error")
    broken["harness_errors"] = ["pytest exited with status 3 (internal error) and wrote no "
                                "result for 53 selected checks"]
    snap["nodes"]["2"] = broken
    v = decide(snap)
    assert not v.passed and v.exit_code == 1
    assert [(b["host"], b["reason"]) for b in v.bad_nodes] == [
        ("node2", "node-local verdict error (the harness could not judge the node): pytest "
                  "exited with status 3 (internal error) and wrote no result for 53 selected "
                  "checks")]
    fail = next(c for c in v.checks if c["id"] == "PF-CLUSTER-002")
    assert fail["outcome"] == "fail"
    assert fail["message"].startswith(
        "[PF-CLUSTER-002] 1 of 4 nodes failed node-local checks: node2 (rank 2): verdict error: "
        "pytest exited with status 3 (internal error)")
    assert "node2" in v.text.split("\n", 1)[0]
    assert "harness could not judge" in v.actions["sagemaker_failure_reason"]


def test_a_node_verdict_that_is_not_pass_never_passes():
    snap = _snap()
    snap["nodes"]["1"]["verdict"] = "warn"
    v = decide(snap)
    assert not v.passed
    assert [b["host"] for b in v.bad_nodes] == ["node1"]
    assert v.bad_nodes[0]["reason"].startswith("node-local verdict warn")


@pytest.mark.parametrize(("change", "named"), [
    ({"verdict": None}, "rank 1's summary's 'verdict' is NoneType, not str"),
    ({"failed": [{"id": "PF-GPU-001", "outcome": "fail"}]},
     "rank 1's summary's 'failed' has no 'message'"),
    ({"env": {"NCCL_DEBUG": 3}}, "rank 1's summary's 'env' holds a value that is not text"),
    ({"rank": True}, "rank 1's summary's 'rank' is bool, not int"),
])
def test_a_node_summary_that_cannot_be_read_names_the_field(change, named):
    snap = _snap()
    snap["nodes"]["1"].update(change)
    v = decide(snap)
    assert not v.passed and [b["host"] for b in v.bad_nodes] == ["node1"]
    assert v.bad_nodes[0]["reason"].startswith(
        f"published a node summary that cannot be read ({named})")


@pytest.mark.parametrize("key", list(_summary(0)))
def test_a_node_summary_missing_one_field_is_never_read_with_a_default(key):
    """Unknown is never healthy: every field of a summary is required; a node whose summary
    lacks one is named (PF-CLUSTER-001, a bad node) with the field, never judged a pass."""
    snap = _snap()
    del snap["nodes"]["2"][key]
    v = decide(snap)
    assert not v.passed and [b["host"] for b in v.bad_nodes] == ["node2"]
    assert f"rank 2's summary has no {key!r}" in v.bad_nodes[0]["reason"]
    assert "PF-CLUSTER-001" in _ids(v, "fail")


def test_a_node_summary_round_trips_byte_for_byte():
    """The wire form: what a node publishes (node_summary -> to_json) reads back (from_dict)
    to the same summary and the same bytes, SDC figures and a failed check included."""
    import json

    from harness.cluster.wire import NodeSummary

    report = Report(host="node3", profile="local-cpu", profile_source="--profile",
                    tier="preflight")
    report.checks = [CheckResult(id="PF-ENV-004", outcome="fail", message="bad env"),
                     CheckResult(id="PF-BW-006", outcome="pass")]
    report.harness_errors = ["a harness error"]
    summary = node_summary(report, rank=3, facts=FACTS, env={"NCCL_DEBUG": "WARN"})
    wire = json.dumps(summary.to_json())
    assert NodeSummary.from_dict(json.loads(wire)) == summary
    assert json.dumps(NodeSummary.from_dict(json.loads(wire)).to_json()) == wire
    full = {**_summary(1), "sdc": {"spec": "sdc/v1", "devices": {"GPU 0": "d"}, "outputs": {},
                                   "totals": {}, "sm_count": 132, "outcome": "pass"},
            "figures": {"node_busbw_gb_s": 1.5, "step_time_s": None}, "nothing_judged": "idle"}
    assert json.dumps(NodeSummary.from_dict(full).to_json()) == json.dumps(full)


IDLE = ("every selected check was skipped, nothing was judged (profile local-cpu; tier "
        "preflight; -k 'PF-GPU-001'; ...)")


def test_a_cluster_where_no_node_judged_anything_is_a_usage_error_on_every_node():
    """Issue 25 item 7: every node's selection all skipped, none a cluster check: exit 2 on
    every node, the same text, no cluster check run on nothing."""
    snap = _snap()
    for node in snap["nodes"].values():
        node["nothing_judged"] = IDLE
    v = decide(snap)
    assert (v.verdict, v.exit_code, v.checks, v.bad_nodes) == ("error", 2, [], [])
    assert v.usage_error == f"on every node, {IDLE}"
    assert v.text == ("gpu-preflight could not judge anything on a 4-node cluster (p5.48xlarge, "
                      f"tier preflight): on every node, {IDLE}\n")
    assert decide(json.loads(json.dumps(snap))).to_dict() == v.to_dict()


def test_one_node_that_judged_is_enough():
    """The leader runs the multi-node test the others only take part in: their skips are its
    judgement, so the cluster judges as usual."""
    snap = _snap()
    for rank in ("1", "2", "3"):
        snap["nodes"][rank]["nothing_judged"] = IDLE
    v = decide(snap)
    assert v.passed and v.usage_error == ""


def test_a_missing_node_is_named_not_taken_for_nothing_judged():
    snap = _snap(n=3, nodes={str(r): {**_summary(r), "nothing_judged": IDLE} for r in (0, 1)},
                 missing={"2": {"host": "node2", "reason": "never joined"}})
    v = decide(snap)
    assert v.verdict == "fail" and v.exit_code == 1 and v.usage_error == ""
    assert [b["host"] for b in v.bad_nodes] == ["node2"]


def test_node_summary_says_nothing_judged_unless_a_cluster_check_was_selected():
    from harness.cluster.verdict import CLUSTER_IDS

    report = Report(host="node1", profile="local-cpu", profile_source="--profile",
                    tier="preflight")
    report.checks = [CheckResult(id="PF-GPU-001", outcome="skip", message="not applicable")]
    report.selection = {"nothing_judged": IDLE}
    assert node_summary(report, rank=1, facts=FACTS, env={},
                        cluster_ids=CLUSTER_IDS).nothing_judged == IDLE
    report.checks.append(CheckResult(id="PF-CLUSTER-004", outcome="skip",
                                     message="judged by the cluster step"))
    assert node_summary(report, rank=1, facts=FACTS, env={},
                        cluster_ids=CLUSTER_IDS).nothing_judged is None


def test_preflight_says_what_it_did_not_measure_and_why():
    """Fast fail: a node failed its own checks, so no collective ran. The failure text,
    PF-CLUSTER-004 and PF-CLUSTER-005 say that the bandwidth and the rounds were not measured,
    and why; neither is a pass."""
    from harness.cluster.snapshot import left_out, not_measured

    snap = _snap()
    snap["nodes"]["3"] = _summary(3, "fail", [{"id": "PF-ENV-004", "outcome": "fail",
                                               "message": "[PF-ENV-004] bad NCCL_DEBUG"}])
    local = decide(snap)
    why = left_out(snap, local.bad_nodes)
    assert why == {3: "failed its own checks"}
    snap["not_measured"] = not_measured(snap, why, "preflight", [0, 1, 2])
    v = decide(snap)
    head = v.text.split("\n", 1)[0]
    assert ("cluster bandwidth and pairwise isolation not measured: stopped after node3 failed "
            "its own checks (the preflight tier stops at the first bad node; --tier certify "
            "measures the nodes that passed)") in head
    by_id = {c["id"]: c for c in v.checks}
    for cid, step in (("PF-CLUSTER-004", "cluster bandwidth"),
                      ("PF-CLUSTER-005", "pairwise isolation")):
        assert by_id[cid]["outcome"] == "skip"
        assert f"not run: {step} not measured: stopped after node3 failed its own checks" \
            in by_id[cid]["message"]


def test_certify_bandwidth_over_the_nodes_that_passed_says_who_was_left_out():
    snap = _snap(tier="certify")
    snap["nodes"]["3"] = _summary(3, "fail", [{"id": "PF-ENV-004", "outcome": "fail",
                                               "message": "[PF-ENV-004] bad NCCL_DEBUG"}])
    snap["left_out"] = {"3": "failed its own checks"}
    snap["bandwidth"] = {"size_bytes": 1 << 20, "nranks": 3, "ranks": [0, 1, 2],
                         "floor_gb_s": 100.0, "busbw_gb_s": 20.0, "data_ok": True,
                         "per_rank": {"0": 20.0, "1": 20.0, "2": 20.0}, "errors": [],
                         "missing": {}}
    snap["isolation"] = isolate([0, 1, 2], simulate_measure(healthy_gb_s=200.0,
                                                            bad_nodes={1: 0.1}),
                                floor_gb_s=100.0).to_json()
    v = decide(snap)
    by_id = {c["id"]: c for c in v.checks}
    assert by_id["PF-CLUSTER-004"]["outcome"] == "fail"
    assert "(over 3 of 4 nodes; left out: node3 (rank 3): failed its own checks)" in \
        by_id["PF-CLUSTER-004"]["message"]
    assert "node3" in [b["host"] for b in v.bad_nodes]
def test_flaky_isolation_pair_is_a_warning_counted_never_a_bad_node():
    """Issue 30 item 2: a pair that failed once and whose nodes then passed warns in
    PF-CLUSTER-005 with both figures; no bad node, no drain command."""
    from harness.cluster.isolate import PairResult

    calls = [0]

    def measure(pairs):
        calls[0] += 1
        return [PairResult(a, b, 0.01 if calls[0] == 1 and i == 0 else 1.0)
                for i, (a, b) in enumerate(pairs)]

    iso = isolate(range(4), measure, seed=1, floor_gb_s=0.05)
    assert len(iso.flaky) == 1 and not iso.bad_nodes
    snap = _snap(bandwidth={"size_bytes": 1 << 20, "nranks": 4, "ranks": [0, 1, 2, 3],
                            "floor_gb_s": 0.05, "per_rank": None,
                            "busbw_gb_s": 0.04, "data_ok": True, "errors": [], "missing": {}},
                 isolation=iso.to_json())
    v = decide(snap)
    five = next(c for c in v.checks if c["id"] == "PF-CLUSTER-005")
    assert five["outcome"] == "warn", five
    a, b = iso.flaky[0][0].a, iso.flaky[0][0].b
    assert five["message"].startswith(
        f"[PF-CLUSTER-005] flaky pair node{a}-node{b}: 0.01 GB/s below "
        f"{iso.threshold_gb_s:.3g} GB/s, then passed (node"), five["message"]
    assert five["message"].endswith("1 GB/s); not condemned")
    assert v.bad_nodes == [] and "slurm_drain" not in v.actions


def _failing(snap, ranks):
    for r in ranks:
        snap["nodes"][str(r)] = _summary(r, "fail", [{"id": "PF-GPU-016", "outcome": "fail",
                                                      "message": "[PF-GPU-016] GPU 3 lost"}])
    return snap


def test_more_bad_nodes_than_the_cap_make_a_suspect_run_that_drains_none():
    """Issue 30 item 4: 3 of 4 nodes failing is more than half: likely a shared cause. The run
    still fails; the drain and replace commands are held back and the text says why."""
    v = decide(_failing(_snap(), [1, 2, 3]))
    assert not v.passed and v.exit_code == 1
    assert [b["host"] for b in v.bad_nodes] == ["node1", "node2", "node3"]
    assert v.blast_radius == {"num_nodes": 4, "bad": 3, "cap": 0.5, "allowed": 2,
                              "suspect": True, "why": v.blast_radius["why"]}
    assert v.blast_radius["why"].startswith("suspect run: 3 of 4 nodes failed, more than the "
                                            "50% any one run may drain (2): likely a shared cause")
    assert "slurm_drain" not in v.actions and "hyperpod_replace" not in v.actions
    assert len(v.actions["held_back"]["slurm_drain"]) == 3
    assert v.actions["slurm_exclude"] == "node[1-3]"
    assert v.text.startswith("gpu-preflight FAILED on a 4-node cluster (p5.48xlarge, tier "
                             "preflight): suspect run: 3 of 4 nodes failed")
    assert "slurm_drain (held back: suspect run" in v.text
    assert v.to_dict()["blast_radius"]["suspect"] is True


def test_bad_nodes_within_the_cap_are_drained():
    """The removal test: 2 of 4 (the cap) keep their drain commands; a cap of 0.25 (the
    master's PREFLIGHT_DRAIN_CAP, in the snapshot) makes the same run suspect."""
    v = decide(_failing(_snap(), [1, 2]))
    assert v.blast_radius["suspect"] is False and len(v.actions["slurm_drain"]) == 2
    tight = decide(_failing(_snap(drain_cap=0.25), [1, 2]))
    assert tight.blast_radius["allowed"] == 1 and tight.blast_radius["suspect"] is True
    assert "slurm_drain" not in tight.actions


def test_one_bad_node_is_always_drainable():
    """At least one node may be drained: a 2-node run with one bad node is not suspect."""
    from harness.base.blast import allowed

    v = decide(_failing(_snap(n=2), [1]))
    assert v.blast_radius["suspect"] is False and v.actions["slurm_drain"]
    assert [allowed(n, 0.5) for n in (1, 2, 3, 4, 5, 1000)] == [1, 1, 1, 2, 2, 500]


HEAD_KEYS = ("num_nodes", "profile", "tier", "straggler_limits", "drain_cap", "hosts")


@pytest.mark.parametrize("key", HEAD_KEYS)
def test_a_snapshot_missing_a_head_field_judges_nothing_and_names_it(key):
    """The snapshot's head (harness.cluster.wire.SnapshotHead) has no default either: without
    one field the verdict is an error naming it, never a pass."""
    snap = _snap()
    del snap[key]
    v = decide(snap)
    assert (v.verdict, v.exit_code, v.checks) == ("error", 1, [])
    assert f"the cluster snapshot has no {key!r}" in v.text


def test_a_snapshot_head_round_trips_byte_for_byte():
    """What the master writes (`_base`: SnapshotHead.to_json) reads back to the same bytes."""
    import json

    from harness.cluster.wire import SnapshotHead

    head = {k: v for k, v in _snap(drain_cap=0.25).items() if k in HEAD_KEYS}
    assert list(head) == list(HEAD_KEYS)  # the order _base writes
    wire = json.dumps(head)
    assert json.dumps(SnapshotHead.from_dict(json.loads(wire)).to_json()) == wire
    limits = {**head, "straggler_limits": {"z_max": 3.5, "min_nodes": 4}}
    with pytest.raises(ValueError, match="'straggler_limits' has no 'min_rel_dev'"):
        SnapshotHead.from_dict(limits)


def test_the_masters_verdict_is_read_whole_or_not_at_all():
    """What the master publishes (`for_nodes`) reads back on a node to the master's verdict;
    one field missing or of the wrong type is an error naming it, never a pass."""
    import json

    from harness.cluster.verdict import for_nodes, verdict_of

    snap = _snap()
    shared = json.loads(json.dumps(for_nodes(snap)))
    assert verdict_of(shared) == decide(snap)
    for key in ("verdict", "exit_code", "text", "blast_radius"):
        broken = {**shared, "verdict": {k: v for k, v in shared["verdict"].items() if k != key}}
        v = verdict_of(broken)
        assert (v.verdict, v.exit_code) == ("error", 1)
        assert f"the master's verdict has no {key!r}" in v.text
    v = verdict_of({**shared, "verdict": {**shared["verdict"], "exit_code": "0"}})
    assert not v.passed and "the master's verdict's 'exit_code' is str, not int" in v.text


def test_a_node_whose_summary_cannot_be_read_is_left_out_of_the_collectives_saying_so():
    from harness.cluster.snapshot import left_out

    snap = _snap()
    del snap["nodes"]["1"]["figures"]
    del snap["nodes"]["2"]
    snap["missing"] = {"2": {"host": "node2", "reason": "never joined"}}
    snap["nodes"]["3"]["verdict"] = "fail"
    assert left_out(snap, decide(snap).bad_nodes) == {
        1: "its summary cannot be read", 2: "did not report", 3: "failed its own checks"}
