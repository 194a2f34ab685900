"""The cluster checks are @check specs on the node checks' code path (issue 14, item 5): one
declaration each, collected by checks/test_cluster.py for list/explain, run by the cluster
verdict on the snapshot through `harness.checking.run_check`, not a table of tuples."""

from __future__ import annotations

import importlib

import pytest

from conftest import run_check_file
from harness.base.errors import ProbeError
from harness.checking import (
    CheckSpec,
    check,
    expect,
    fail,
    measure,
    not_applicable,
    not_run,
    registry,
    run_check,
    spec_of,
    warn,
)
from harness.cluster import verdict
from harness.cluster.checks import CLUSTER_CHECKS
from harness.judges.cluster import DEFAULT_LIMITS

IDS = [f"PF-CLUSTER-00{i}" for i in range(1, 9)]


def _snap(n=4):
    node = {"verdict": "pass", "failed": [], "num_failed": 0, "harness_errors": [],
            "facts": {"gpu_count": 8}, "env": {}, "figures": {}, "sdc": None,
            "nothing_judged": None}
    return {"num_nodes": n, "profile": "p5.48xlarge", "tier": "preflight",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(n)},
            "nodes": {str(r): {**node, "rank": r, "host": f"node{r}"} for r in range(n)},
            "missing": {}}


def test_every_cluster_check_is_one_check_spec_in_the_registry():
    specs = [spec_of(fn) for fn in CLUSTER_CHECKS]
    assert [s.id for s in specs] == IDS
    assert all(isinstance(s, CheckSpec) and s.title and s.why and s.remedy for s in specs)
    assert all(registry()[s.id] == s for s in specs)


def test_the_verdict_records_come_from_the_specs():
    """Title, tier and remedy of each cluster result are the spec's; the failure message
    ends with the spec's remedy (the standard `[ID] ...; remedy` form)."""
    snap = _snap()
    snap["nodes"]["1"]["verdict"] = "fail"
    checks = {c["id"]: c for c in verdict.decide(snap).checks}
    assert list(checks) == IDS
    for fn in CLUSTER_CHECKS:
        spec, result = spec_of(fn), checks[spec_of(fn).id]
        assert (result["title"], result["tier"], result["remedy"], result["worker"],
                result["nodeid"]) == (spec.title, spec.tier, spec.remedy, "cluster",
                                      f"cluster::{spec.id}")
    assert checks["PF-CLUSTER-002"]["message"].endswith(
        "; " + spec_of(CLUSTER_CHECKS[1]).remedy)


def test_checks_test_cluster_collects_exactly_the_cluster_checks():
    module = importlib.import_module("checks.test_cluster")
    collected = {name: fn for name, fn in vars(module).items()
                 if name.startswith("test_") and callable(fn)}
    assert set(collected.values()) == set(CLUSTER_CHECKS)


def test_a_judge_that_breaks_is_an_error_and_fails_the_cluster(monkeypatch):
    @check("PF-CLUSTER-TEST-BROKEN", title="broken", why="w", remedy="r")
    def test_broken(cluster):
        raise KeyError("bandwidth")

    monkeypatch.setattr(verdict, "CLUSTER_CHECKS", (*CLUSTER_CHECKS, test_broken))
    v = verdict.decide(_snap())
    broken = next(c for c in v.checks if c["id"] == "PF-CLUSTER-TEST-BROKEN")
    assert broken["outcome"] == "error"
    assert broken["message"] == "[PF-CLUSTER-TEST-BROKEN] harness error: KeyError: 'bandwidth'"
    assert not v.passed and v.exit_code == 1


@check("PF-TEST-RUN-001", title="t", why="w", remedy="the remedy")
def _judge(mode):
    measure("figure", 2.5, "GB/s", node="node3")
    if mode == "expect":
        expect("busbw", 1.0, ">=", 2.0, "GB/s")
    elif mode == "fail":
        fail("it broke")
    elif mode == "warn":
        warn("slow", remedy="look")
    elif mode == "na":
        not_applicable("one node")
    elif mode == "not run":
        not_run("nothing measured")
    elif mode == "probe":
        raise ProbeError("tool hung")
    elif mode == "assert":
        assert mode == "other", "plain assert"
    elif mode == "pytest.fail":
        pytest.fail("said so")


@pytest.mark.parametrize(("mode", "outcome", "message"), [
    ("pass", "pass", ""),
    ("expect", "fail", "[PF-TEST-RUN-001] busbw 1 GB/s < 2 GB/s required for prof; "
                       "the remedy"),
    ("fail", "fail", "[PF-TEST-RUN-001] it broke; the remedy"),
    ("warn", "warn", "[PF-TEST-RUN-001] slow; look"),
    ("na", "skip", "not applicable to prof: one node"),
    ("not run", "skip", "[PF-TEST-RUN-001] not run: nothing measured"),
    ("probe", "error", "[PF-TEST-RUN-001] tool hung"),
    ("assert", "fail", "[PF-TEST-RUN-001] plain assert"),
    ("pytest.fail", "fail", "[PF-TEST-RUN-001] said so"),
])
def test_run_check_gives_the_plugins_outcomes(mode, outcome, message):
    result = run_check(_judge, mode, profile="prof", worker="cluster")
    assert (result.outcome, result.message) == (outcome, message)
    assert result.measurements[0].node == "node3" and result.measurements[0].value == 2.5
    assert result.remedy == "the remedy" and result.worker == "cluster"


def test_run_check_refuses_a_function_that_is_no_check():
    with pytest.raises(TypeError, match="not a @check function"):
        run_check(lambda: None, profile="p")


@pytest.mark.parametrize(("env", "reason"), [
    ({"PREFLIGHT_NUM_NODES": "1"}, "not applicable to local-cpu: single-node job (1 node, from "
                                   "PREFLIGHT_NUM_NODES): no other node to judge it with"),
    ({"PREFLIGHT_NUM_NODES": "4"}, "not applicable to local-cpu: 4 nodes (from "
                                   "PREFLIGHT_NUM_NODES), but no launcher environment names "
                                   "them: no cluster step joins them"),
    ({"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "h0", "MASTER_PORT": "29500",
      "PREFLIGHT_CLUSTER": "off"},
     "not applicable to local-cpu: PREFLIGHT_CLUSTER=off: node-local checks only, no cluster "
     "verdict"),
    ({"NNODES": "2", "NODE_RANK": "0", "MASTER_ADDR": "h0", "MASTER_PORT": "29500"},
     "[{id}] judged by the cluster step of this 2-node job after the node-local checks (its "
     "result replaces this one)"),
])
def test_in_a_check_session_each_cluster_check_says_why_it_is_not_judged_there(
        suite, monkeypatch, env, reason):
    """A session has no snapshot: on one node a cluster check does not apply (with the
    reason, the node checks' path); on a multi-node job the cluster step judges it."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    results = run_check_file(suite, "test_cluster.py", "local-cpu")
    assert sorted(results) == IDS
    for cid, record in results.items():
        assert (record["outcome"], record["message"]) == ("skip", reason.format(id=cid))
