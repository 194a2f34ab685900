"""Job-shaped groups (harness.cluster.groups, PF-CLUSTER-008): the layout from a spec, a file
or the launcher's SM_HPS; Megatron's rank order mapped to groups of nodes; rounds of disjoint
groups; the isolation inside a group on a simulated cluster with a slow pair inside and outside
a group; the check on synthetic snapshots. The real gloo runs (selftest --groups with a slow
link inside and outside a group) are in tests/e2e/test_e2e_groups.py."""

from __future__ import annotations

import json

import pytest

from harness.cluster.groups import (
    GroupError,
    judge_sweep,
    layout_from_env,
    node_groups,
    pair_rounds,
    parse_groups,
    rounds,
)
from harness.cluster.isolate import isolate, simulate_measure
from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS


def test_spec_file_and_launcher_env(tmp_path):
    assert dict(parse_groups("tp=8,pp=4,ep=2").sizes) == {"tp": 8, "pp": 4, "ep": 2}
    toml = tmp_path / "layout.toml"
    toml.write_text("tp = 8\nep = 4\n")
    assert dict(parse_groups(str(toml)).sizes) == {"tp": 8, "ep": 4}
    js = tmp_path / "layout.json"
    js.write_text(json.dumps({"tp": 2}))
    assert dict(parse_groups(str(js)).sizes) == {"tp": 2}
    env = {"SM_HPS": json.dumps({"tensor_parallel_degree": 8, "expert_parallel_degree": 2,
                                 "lr": 0.1})}
    layout = layout_from_env(env)
    assert layout is not None and dict(layout.sizes) == {"tp": 8, "ep": 2}
    assert "SM_HPS" in layout.source
    assert layout_from_env({"SM_HPS": json.dumps({"lr": 0.1})}) is None  # says nothing
    assert layout_from_env({}) is None  # no spec: today's behaviour
    assert dict(layout_from_env(env, "tp=4").sizes) == {"tp": 4}  # the spec wins


@pytest.mark.parametrize(("spec", "said"), [
    ("tp=0", "must be at least 1"), ("xx=2", "'xx' is not one of tp, cp, ep, dp, pp"),
    ("tp=two", "is not a whole number"), ("tp", "neither tp=N,... nor a readable"),
    ("tp=2,,", "is not DIM=N"),
])
def test_bad_specs_say_why(spec, said):
    with pytest.raises(GroupError, match=said):
        parse_groups(spec)


def _sets(groups, kind):
    return [(g.index, g.nodes) for g in groups if g.kind == kind]


def test_megatron_order_tp_groups_across_nodes():
    # tp=16 over 8-GPU nodes: each tp group spans two consecutive nodes
    groups = node_groups(parse_groups("tp=16"), num_nodes=4, gpus_per_node=8)
    assert _sets(groups, "tp") == [(0, (0, 1)), (1, (2, 3))]


def test_tp_inside_a_node_is_left_to_the_node_checks():
    assert node_groups(parse_groups("tp=8,pp=2"), num_nodes=4, gpus_per_node=8) == []


def test_expert_groups_are_strided_by_tp():
    # tp=8 fills a node; ep=4 takes the next dimension: ranks i, i+8, i+16, i+24 -> nodes 0-3
    groups = node_groups(parse_groups("tp=8,ep=4"), 8, 8,
                         {"ep": 1 << 20})
    assert _sets(groups, "ep") == [(0, (0, 1, 2, 3)), (8, (4, 5, 6, 7))]
    assert {g.size_bytes for g in groups} == {1 << 20}
    assert [[g.nodes for g in r] for r in rounds(groups)] == [[(0, 1, 2, 3), (4, 5, 6, 7)]]


def test_a_layout_that_does_not_divide_the_job_is_refused():
    with pytest.raises(GroupError, match="does not divide the job's 24 ranks"):
        node_groups(parse_groups("tp=16"), num_nodes=3, gpus_per_node=8)


def test_overlapping_groups_take_separate_rounds():
    groups = node_groups(parse_groups("tp=12"), num_nodes=3, gpus_per_node=8)
    assert _sets(groups, "tp") == [(0, (0, 1)), (1, (1, 2))]
    assert [[g.nodes for g in r] for r in rounds(groups)] == [[(0, 1)], [(1, 2)]]


# --- isolation inside a group: a slow pair inside it is named, one outside it never measured --

def _sweep(group, slow_links, slow_nodes=()):
    measured = []
    base = simulate_measure(bad_links={p: 0.2 for p in slow_links},
                            bad_nodes={n: 0.2 for n in slow_nodes}, noise=0.0)
    results = []
    for rnd in pair_rounds(group):
        measured.extend(rnd)
        results.append(base(rnd))
    return judge_sweep(group, results, 50.0), measured


def test_pair_rounds_cover_every_pair_once_in_disjoint_rounds():
    for n in (2, 3, 4, 5, 8):
        got = pair_rounds(list(range(n)))
        pairs = [tuple(sorted(p)) for rnd in got for p in rnd]
        assert sorted(pairs) == [(a, b) for a in range(n) for b in range(a + 1, n)]
        assert all(len({x for p in rnd for x in p}) == 2 * len(rnd) for rnd in got)
        assert len(got) == (n - 1 if n % 2 == 0 else n)


def test_slow_link_inside_a_group_is_named_and_one_outside_is_never_measured():
    # tp group 0 = nodes 0-3 holds the slow pair 1-2; the slow pair 5-6 is in no failing group
    found, measured = _sweep((0, 1, 2, 3), [(1, 2), (5, 6)])
    assert found.bad_links == ((1, 2),) and found.bad_nodes == ()
    assert all(a in range(4) and b in range(4) for a, b in measured)


def test_a_slow_node_inside_a_group_is_named_not_its_links():
    found, _ = _sweep((0, 1, 2, 3), [], slow_nodes=[3])
    assert found.bad_nodes == (3,) and found.bad_links == ()
    assert found.found_in_round == (3,) and len(found.rounds) == 3  # after the whole sweep


def test_isolate_alone_can_miss_the_one_slow_link_of_a_small_group():
    """Why a small group's pairs are swept: isolate's random first matching passed every pair
    (seed 0) and never met the slow link 1-2."""
    result = isolate((0, 1, 2, 3), simulate_measure(bad_links={(1, 2): 0.2}, noise=0.0),
                     floor_gb_s=50.0, relative=0.0, max_rounds=4, seed=0)
    assert result.bad_links == () and len(result.rounds) == 1


# --- PF-CLUSTER-008 on synthetic snapshots ----------------------------------------------------

def _snap(plan, results=None):
    nodes = {str(r): {"rank": r, "host": f"node{r}", "verdict": "pass", "failed": [],
                      "num_failed": 0, "harness_errors": [], "facts": {}, "env": {},
                      "figures": {}, "sdc": None, "nothing_judged": None}
             for r in range(4)}
    snap = {"num_nodes": 4, "profile": "local-cpu", "tier": "preflight", "nodes": nodes,
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(4)}, "missing": {},
            "groups_plan": plan}
    if results is not None:
        snap["groups"] = {"layout": "tp=2", "results": results}
    return snap


PLAN = {"layout": "tp=2 (groups)", "error": None, "gpus_per_node": 1,
        "groups": [{"kind": "tp", "index": 0, "nodes": [0, 1], "size_bytes": 1 << 20},
                   {"kind": "tp", "index": 1, "nodes": [2, 3], "size_bytes": 1 << 20}]}


def _result(index, nodes, busbw, passed, **extra):
    return {"kind": "tp", "index": index, "nodes": nodes, "size_bytes": 1 << 20,
            "busbw_gb_s": busbw, "alltoall_gb_s": None, "error": None,
            "threshold_gb_s": 0.01, "passed": passed, "isolation": None,
            "isolation_not_run": None, **extra}


def _isolation(nodes, bad_nodes=(), suspects=()):
    """A group's own pairwise rounds as the master writes them (IsolationResult.to_json)."""
    return {"nodes": list(nodes), "num_rounds": 1, "threshold_gb_s": 0.01,
            "bad_nodes": list(bad_nodes), "bad_links": [], "suspects": list(suspects),
            "found_in_round": [1] * len(bad_nodes), "flaky": [],
            "rounds": [[{"a": nodes[0], "b": nodes[1], "busbw_gb_s": 0.002, "error": None}]]}


def _check(v):
    return next(c for c in v.checks if c["id"] == "PF-CLUSTER-008")


def test_no_layout_is_not_applicable_and_changes_nothing():
    v = decide(_snap(None))
    assert _check(v)["outcome"] == "skip" and v.passed


def test_healthy_groups_pass_with_their_figures():
    v = decide(_snap(PLAN, [_result(0, [0, 1], 0.3, True), _result(1, [2, 3], 0.3, True)]))
    result = _check(v)
    assert result["outcome"] == "pass" and v.passed
    assert [m["what"] for m in result["measurements"]][1:] == [
        "tp group 0 (node0, node1) all_reduce busbw", "tp group 1 (node2, node3) all_reduce busbw"]


def test_a_slow_group_names_its_link_with_the_group():
    iso = _isolation([0, 1], suspects=[0, 1])
    v = decide(_snap(PLAN, [_result(0, [0, 1], 0.002, False, isolation=iso),
                            _result(1, [2, 3], 0.3, True)]))
    result = _check(v)
    assert result["outcome"] == "fail" and not v.passed
    assert "tp group 0 (node0, node1): busbw 0.002 GB/s < 0.01 GB/s -> link node0-node1 in tp " \
           "group 0" in result["message"]
    assert v.bad_links == [{"hosts": ["node0", "node1"], "ranks": [0, 1], "group": "tp group 0",
                            "evidence": []}]
    assert "bad links: node0-node1 in tp group 0" in v.text


def test_a_bad_node_inside_a_larger_group_is_named_with_it():
    plan = {**PLAN, "groups": [{"kind": "ep", "index": 0, "nodes": [0, 1, 2, 3],
                                "size_bytes": 1 << 20}]}
    iso = _isolation([0, 1, 2, 3], bad_nodes=[2])
    res = {**_result(0, [0, 1, 2, 3], 0.002, False, isolation=iso), "kind": "ep"}
    v = decide(_snap(plan, [res]))
    assert [b["host"] for b in v.bad_nodes] == ["node2"]
    assert "bad node in ep group 0" in v.bad_nodes[0]["reason"]


def test_a_bad_layout_fails_saying_why():
    v = decide(_snap({"layout": None, "error": "layout tp=3: does not divide",
                      "gpus_per_node": None, "groups": []}))
    assert _check(v)["outcome"] == "fail" and "does not divide" in _check(v)["message"]


def test_planned_groups_never_measured_are_not_a_pass():
    assert _check(decide(_snap(PLAN)))["outcome"] == "skip"
    assert "did not run" in _check(decide(_snap(PLAN)))["message"]


def test_the_hard_bound_holds_the_groups_phase_only_when_a_layout_is_given():
    from harness.cluster.timeouts import MAX_GROUP_ROUNDS, ClusterTimeouts

    plain = ClusterTimeouts.from_env({}, 100.0)
    grouped = ClusterTimeouts.from_env({"PREFLIGHT_GROUPS": "tp=2"}, 100.0)
    assert not plain.groups and plain.groups_s == 0.0
    assert grouped.groups and grouped.hard_bound_s - plain.hard_bound_s == \
        MAX_GROUP_ROUNDS * 2 * grouped.bench_s + grouped.isolation_s
    assert "job groups" in grouped.describe() and "job groups" not in plain.describe()
    bad = ClusterTimeouts.from_env({"PREFLIGHT_GROUPS": "tp=zero"}, 100.0)
    assert bad.groups  # a bad layout is judged (PF-CLUSTER-008 fails), not ignored


def test_the_masters_plan_travels_as_json_and_reads_back_the_same():
    """plan_groups gives the typed plan; its wire form (what the master puts in the snapshot)
    is read back by ClusterView to the same record, a usable layout and a bad one alike."""
    from harness.cluster.group_phase import plan_groups
    from harness.cluster.group_wire import GroupsPlan
    from harness.cluster.snapshot import ClusterView
    from harness.profiles.table import get_profile

    profile = get_profile("local-cpu")
    assert plan_groups(profile, {}, 4) is None
    good = plan_groups(profile, {"PREFLIGHT_GROUPS": "tp=2"}, 4)
    bad = plan_groups(profile, {"PREFLIGHT_GROUPS": "tp=3"}, 4)
    assert good is not None and [g.nodes for g in good.groups] == [(0, 1), (2, 3)]
    assert bad is not None and bad.error and bad.groups == () and bad.gpus_per_node is None
    for plan in (good, bad):
        wire = json.loads(json.dumps(plan.to_json()))
        assert GroupsPlan.from_dict(wire) == plan
        assert ClusterView.of(_snap(wire)).groups_plan == plan
