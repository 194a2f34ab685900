"""The sections the collectives add to the cluster snapshot, typed (harness.cluster.wire,
harness.cluster.isolate, harness.cluster.group_wire): the cluster all_reduce (`bandwidth`:
ClusterBandwidth), the reasons it gives (`not_measured`, `left_out`, `isolation_skipped`), the
pairwise rounds (`isolation`: IsolationResult), the job's groups (`groups_plan`: GroupsPlan,
`groups`: JobGroups) and a node's SDC figures (NodeSdc). Read once by ClusterView.of: a missing
or malformed field is an error naming it, never a default; `from_dict(x).to_json()` gives back
the same bytes."""

from __future__ import annotations

import copy
import json

import pytest

from harness.cluster.group_wire import GroupResult, GroupsPlan, JobGroups
from harness.cluster.groups import NodeGroup, judge_sweep, pair_rounds
from harness.cluster.isolate import IsolationResult, PairResult, isolate, simulate_measure
from harness.cluster.snapshot import ClusterView
from harness.cluster.verdict import PER_RANK_FOR_NODES, decide, for_nodes
from harness.cluster.wire import ClusterBandwidth, NodeSdc, SnapshotError
from harness.judges.cluster import DEFAULT_LIMITS

#: What the master writes (harness.cluster.collectives._gather_bw), key for key in its order;
#: a rank that stopped answering, an int floor (it stays an int on the wire).
BANDWIDTH = {"size_bytes": 1 << 20, "nranks": 4, "ranks": [0, 1, 2, 3], "floor_gb_s": 1,
             "busbw_gb_s": None, "data_ok": True,
             "per_rank": {"0": 20.5, "1": 20.0, "3": None},
             "errors": ["rank 0: timed all_reduce: Connection closed by peer"],
             "missing": {"2": "stopped answering during the cluster all_reduce"}}


def _snap(n: int = 4, **sections: object) -> dict:
    summary = {"verdict": "pass", "failed": [], "num_failed": 0, "harness_errors": [],
               "facts": {}, "env": {}, "figures": {}, "sdc": None, "nothing_judged": None}
    return {"num_nodes": n, "profile": "p5.48xlarge", "tier": "certify",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(n)},
            "nodes": {str(r): {"rank": r, "host": f"node{r}", **summary} for r in range(n)},
            "missing": {}, **sections}


def test_the_bandwidth_section_round_trips_byte_for_byte():
    wire = json.dumps(BANDWIDTH)
    bw = ClusterBandwidth.from_dict(json.loads(wire))
    assert json.dumps(bw.to_json()) == wire
    assert (bw.ranks, bw.floor_gb_s, bw.missing) == ((0, 1, 2, 3), 1, BANDWIDTH["missing"])
    # the nodes' copy of a large job: per_rank left out, where it is said last
    shared = {**BANDWIDTH, "per_rank": None, "per_rank_on": "the master's report"}
    assert json.dumps(ClusterBandwidth.from_dict(shared).to_json()) == json.dumps(shared)


def test_the_nodes_copy_of_a_large_job_drops_only_the_per_rank_figures():
    n = PER_RANK_FOR_NODES + 1
    bw = {**BANDWIDTH, "nranks": n, "ranks": list(range(n)),
          "per_rank": {str(r): 20.0 for r in range(n)}, "missing": {}, "errors": []}
    shared = for_nodes(_snap(n, bandwidth=bw))["bandwidth"]
    assert shared == {**bw, "per_rank": None, "per_rank_on": "the master's report"}
    assert list(shared) == [*BANDWIDTH, "per_rank_on"]


@pytest.mark.parametrize("key", list(BANDWIDTH))
def test_a_bandwidth_section_missing_a_field_judges_nothing_and_names_it(key):
    """Before: `bw.get("data_ok", True)` read a section without `data_ok` as correct data."""
    snap = _snap(bandwidth={k: v for k, v in BANDWIDTH.items() if k != key})
    v = decide(snap)
    assert (v.verdict, v.exit_code, v.checks) == ("error", 1, [])
    assert f"the cluster snapshot's 'bandwidth' has no {key!r}" in v.text


@pytest.mark.parametrize(("change", "named"), [
    ({"data_ok": "yes"}, "'data_ok' is str, not bool"),
    ({"ranks": ["0"]}, "'ranks' holds a value that is not a rank"),
    ({"per_rank": {"0": "fast"}}, "'per_rank' holds a value that is not a figure"),
    ({"missing": {"2": 7}}, "'missing' holds a value that is not text"),
    ({"errors": [None]}, "'errors' holds a value that is not text"),
])
def test_a_malformed_bandwidth_section_is_an_error_naming_the_field(change, named):
    v = decide(_snap(bandwidth={**BANDWIDTH, **change}))
    assert v.verdict == "error" and named in v.text


def test_the_bandwidth_section_is_judged_as_read():
    v = decide(_snap(bandwidth=BANDWIDTH))
    four = next(c for c in v.checks if c["id"] == "PF-CLUSTER-004")
    assert four["outcome"] == "fail"
    assert "did not answer during the cluster all_reduce: node2 (rank 2)" in four["message"]
    assert "errors: rank 0: timed all_reduce: Connection closed by peer" in four["message"]
    assert [b["host"] for b in v.bad_nodes] == ["node2"]


def test_the_reasons_are_read_typed_and_quoted():
    view = ClusterView.of(_snap(not_measured={"cluster bandwidth": "stopped after node3"},
                                left_out={"3": "failed its own checks"},
                                isolation_skipped="cluster bandwidth passed"))
    assert view.bandwidth is None
    assert view.not_measured == {"cluster bandwidth": "stopped after node3"}
    assert view.left_out == {3: "failed its own checks"}
    assert view.isolation_skipped == "cluster bandwidth passed"
    plain = ClusterView.of(_snap())  # the collectives had nothing to say
    assert (plain.not_measured, plain.left_out, plain.isolation_skipped) == ({}, {}, "")


@pytest.mark.parametrize(("section", "named"), [
    ({"not_measured": {"cluster bandwidth": None}}, "'not_measured' holds a value that is not"),
    ({"not_measured": ["cluster bandwidth"]}, "'not_measured' is list, not dict"),
    ({"left_out": {"node3": "failed its own checks"}}, "'left_out' is not rank -> why"),
    ({"isolation_skipped": None}, "'isolation_skipped' is NoneType, not str"),
])
def test_a_malformed_reason_is_an_error_naming_it(section, named):
    with pytest.raises(SnapshotError, match=named):
        ClusterView.of(_snap(**section))
    assert named in decide(_snap(**section)).text


# --- the pairwise rounds (`isolation`), the job's groups (`groups_plan`, `groups`) and a node's
# SDC figures (`sdc` in its summary): one shape each, every field required --------------------

def _pair(a: int, b: int, busbw: float | None, error: str | None = None) -> dict:
    return {"a": a, "b": b, "busbw_gb_s": busbw, "error": error}


#: What the master writes (IsolationResult.to_json), key for key: a bad node, a bad link, a
#: suspect and a flaky pair, so every field holds something.
ISOLATION = {"nodes": [0, 1, 2, 3], "num_rounds": 2, "threshold_gb_s": 10,
             "bad_nodes": [2], "bad_links": [[0, 3]], "suspects": [1], "found_in_round": [2],
             "flaky": [{"first": _pair(0, 1, 4.5), "again": [_pair(0, 3, 20.0)]}],
             "rounds": [[_pair(0, 1, 4.5), _pair(2, 3, None, "rank 2 did not report")],
                        [_pair(0, 3, 20.0), _pair(1, 2, 3.0)]]}
GROUP = {"kind": "tp", "index": 0, "nodes": [0, 1, 2, 3], "size_bytes": 1 << 20}
PLAN = {"layout": "tp=4 (groups)", "error": None, "gpus_per_node": 1, "groups": [GROUP]}
RESULT = {**GROUP, "busbw_gb_s": 0.002, "alltoall_gb_s": None, "error": None,
          "threshold_gb_s": 0.01, "passed": False, "isolation": ISOLATION,
          "isolation_not_run": None}
GROUPS = {"layout": "tp=4 (groups)", "results": [RESULT]}
SDC = {"spec": "sdc/v1 short x", "devices": {"GPU 0": "d" * 64, "GPU 1": "d" * 64},
       "outputs": {"bf16 gemm": "o1"}, "totals": {"bf16 gemm": 1.5}, "sm_count": 132,
       "outcome": "pass"}


def _without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


@pytest.mark.parametrize(("record", "wire"), [
    (IsolationResult, ISOLATION), (GroupsPlan, PLAN), (GroupResult, RESULT),
    (JobGroups, GROUPS), (NodeSdc, SDC), (NodeGroup, GROUP), (PairResult, ISOLATION["rounds"][1][0]),
    (GroupResult, {**RESULT, "passed": True, "busbw_gb_s": 3, "isolation": None}),
    (GroupsPlan, {"layout": None, "error": "tp=3 does not divide", "gpus_per_node": None,
                  "groups": []}),
    (NodeSdc, {**SDC, "sm_count": None, "totals": {}})], ids=lambda x: getattr(x, "__name__", ""))
def test_each_new_section_round_trips_byte_for_byte(record, wire):
    text = json.dumps(wire)
    assert json.dumps(record.from_dict(json.loads(text)).to_json()) == text


def test_the_isolation_the_rounds_found_is_read_back_whole():
    """Before: IsolationResult.to_dict dropped `nodes` and had no reader; a group's isolation
    was another shape (judge_sweep's `pairs`, or `{"not_run": ...}`)."""
    res = isolate(range(8), simulate_measure(bad_nodes={5: 0.1}, flake_rate=0.2, seed=3), seed=3)
    assert IsolationResult.from_dict(json.loads(json.dumps(res.to_json()))) == res
    sweep = judge_sweep((0, 1, 2), [simulate_measure(bad_nodes={1: 0.1})(rnd)
                                    for rnd in pair_rounds((0, 1, 2))], 50.0)
    assert sweep.bad_nodes == (1,) and IsolationResult.from_dict(sweep.to_json()) == sweep


def _fields(prefix: str, wire: dict) -> list[tuple[str, str]]:
    return [(prefix, k) for k in wire]


#: Every field of every new record, where it sits in a snapshot.
FIELDS = (_fields("isolation", ISOLATION) + _fields("pair", ISOLATION["rounds"][0][0])
          + _fields("flaky", ISOLATION["flaky"][0]) + _fields("groups_plan", PLAN)
          + _fields("plan group", GROUP) + _fields("groups", GROUPS)
          + _fields("result", RESULT) + _fields("sdc", SDC))


def _snap_without(where: str, key: str) -> dict:
    """A snapshot holding every new section, one field removed from `where`."""
    iso, plan = copy.deepcopy(ISOLATION), copy.deepcopy(PLAN)
    groups, sdc = copy.deepcopy(GROUPS), copy.deepcopy(SDC)
    if where == "isolation":
        iso = _without(iso, key)
    elif where == "pair":
        iso["rounds"][0][0] = _without(iso["rounds"][0][0], key)
    elif where == "flaky":
        iso["flaky"][0] = _without(iso["flaky"][0], key)
    elif where == "groups_plan":
        plan = _without(plan, key)
    elif where == "plan group":
        plan["groups"][0] = _without(GROUP, key)
    elif where == "groups":
        groups = _without(groups, key)
    elif where == "result":
        groups["results"][0] = _without(RESULT, key)
    elif where == "sdc":
        sdc = _without(sdc, key)
    snap = _snap(isolation=iso, groups_plan=plan, groups=groups)
    for node in snap["nodes"].values():
        node["sdc"] = copy.deepcopy(SDC)
    snap["nodes"]["1"]["sdc"] = sdc
    return snap


def test_the_whole_snapshot_with_every_new_section_is_read():
    view = ClusterView.of(_snap_without("none", ""))
    assert view.isolation == IsolationResult.from_dict(ISOLATION)
    assert view.groups_plan is not None and view.groups_plan.groups[0].nodes == (0, 1, 2, 3)
    assert view.groups is not None and view.groups.results[0].isolation is not None
    assert view.nodes[1].sdc == NodeSdc.from_dict(SDC) and not view.missing


@pytest.mark.parametrize(("where", "key"), FIELDS, ids=[f"{w}.{k}" for w, k in FIELDS])
def test_a_new_section_missing_a_field_is_never_a_pass_and_names_it(where, key):
    v = decide(_snap_without(where, key))
    assert v.verdict != "pass"
    assert f"has no {key!r}" in v.text
    if where == "sdc":  # inside a node's summary: that node cannot be read, and is named
        node1 = next(b for b in v.bad_nodes if b["host"] == "node1")
        assert f"rank 1's summary's 'sdc' has no {key!r}" in node1["reason"]
    else:  # a section of the master's: nothing is judged
        assert (v.verdict, v.exit_code, v.checks) == ("error", 1, [])


@pytest.mark.parametrize(("section", "change", "named"), [
    ("isolation", {"num_rounds": 3}, "'num_rounds' is 3, but 'rounds' holds 2"),
    ("isolation", {"bad_nodes": ["2"]}, "'bad_nodes' holds str at 0, not int"),
    ("isolation", {"found_in_round": []}, "'found_in_round' holds 0 rounds for 1 bad nodes"),
    ("isolation", {"bad_links": [[0]]}, "'bad_links' holds a value that is not a pair"),
    ("isolation", {"threshold_gb_s": True}, "'threshold_gb_s' is bool, not int or float"),
    ("isolation", {"rounds": [[_pair(0, 1, "fast")], []]}, "round 1, pair 1's 'busbw_gb_s'"),
    ("groups_plan", {"gpus_per_node": "1"}, "'gpus_per_node' is str, not int or null"),
    ("groups_plan", {"groups": [{**GROUP, "nodes": [0, None]}]}, "group 0's 'nodes' holds"),
    ("groups", {"results": [{**RESULT, "passed": "yes"}]}, "'passed' is str, not bool"),
    ("groups", {"results": [{**RESULT, "isolation": {**ISOLATION, "suspects": None}}]},
     "result 0's 'isolation''s 'suspects' is NoneType, not list"),
])
def test_a_malformed_new_section_is_an_error_naming_the_field(section, change, named):
    wire = {"isolation": ISOLATION, "groups_plan": PLAN, "groups": GROUPS}[section]
    v = decide(_snap(**{section: {**wire, **change}}))
    assert v.verdict == "error" and named in v.text, v.text


def test_a_section_read_as_healthy_before_is_now_an_error():
    """Before: `iso.get("flaky") or []` read an isolation without `flaky` as no flaky pair, and
    `bool(g.get("passed"))` a group that said "yes" as passed: both a pass."""
    clean = {**ISOLATION, "bad_nodes": [], "found_in_round": [], "bad_links": [],
             "suspects": [], "flaky": [], "rounds": [[_pair(0, 1, 20.0), _pair(2, 3, 20.0)]],
             "num_rounds": 1}
    assert decide(_snap(isolation=clean)).verdict == "pass"
    assert decide(_snap(isolation=_without(clean, "flaky"))).verdict == "error"
    passing = {**RESULT, "busbw_gb_s": 0.3, "passed": True, "isolation": None}
    assert decide(_snap(groups_plan=PLAN, groups={**GROUPS, "results": [passing]})).passed
    said_yes = {**passing, "passed": "yes"}
    assert decide(_snap(groups_plan=PLAN, groups={**GROUPS, "results": [said_yes]})
                  ).verdict == "error"


def test_a_node_whose_sdc_figures_lack_a_field_is_named_not_compared_as_healthy():
    """Before: a node's `sdc` without `totals` was read with `.get("totals") or {}`."""
    snap = _snap()
    for node in snap["nodes"].values():
        node["sdc"] = SDC
    assert decide(snap).passed
    snap["nodes"]["1"]["sdc"] = _without(SDC, "totals")
    v = decide(snap)
    assert not v.passed and [b["host"] for b in v.bad_nodes] == ["node1"]
    one = next(c for c in v.checks if c["id"] == "PF-CLUSTER-001")
    assert one["outcome"] == "fail" and "'sdc' has no 'totals'" in one["message"]


def test_a_failing_group_whose_pairs_were_not_measured_says_so():
    not_run = {**RESULT, "isolation": None, "isolation_not_run": "the phase's isolation "
               "rounds were used by the groups before it"}
    v = decide(_snap(groups_plan=PLAN, groups={**GROUPS, "results": [not_run]}))
    eight = next(c for c in v.checks if c["id"] == "PF-CLUSTER-008")
    assert eight["outcome"] == "fail"
    assert "not isolated: the phase's isolation rounds were used" in eight["message"]
