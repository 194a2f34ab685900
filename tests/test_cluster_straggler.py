"""Straggler detection (harness.cluster.straggler): median/MAD over per-node figures."""

from __future__ import annotations

import math

import pytest

from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS, find_stragglers


def test_slow_node_above_floor_is_flagged():
    busbw = {f"node{i}": 440.0 + i for i in range(7)} | {"node7": 380.0}
    result = find_stragglers(busbw, higher_is_better=True)
    assert [s.node for s in result.stragglers] == ["node7"]
    assert (result.median, result.mad) == (442.5, 2.0)
    assert result.stragglers[0].z < -3.5 and round(result.stragglers[0].rel_dev, 3) == -0.141


def test_fast_node_is_not_a_straggler():
    busbw = {f"n{i}": 440.0 for i in range(5)} | {"fast": 520.0}
    assert find_stragglers(busbw, higher_is_better=True).stragglers == []


def test_step_time_high_is_bad():
    steps = {"a": 1.00, "b": 1.01, "c": 0.99, "d": 1.00, "e": 1.35}
    result = find_stragglers(steps, higher_is_better=False)
    assert [s.node for s in result.stragglers] == ["e"]


def test_tight_cluster_tiny_deviation_not_flagged_even_with_zero_mad():
    busbw = {f"n{i}": 450.0 for i in range(6)} | {"n6": 449.0}
    assert find_stragglers(busbw, higher_is_better=True).stragglers == []
    result = find_stragglers({f"n{i}": 450.0 for i in range(6)} | {"bad": 400.0},
                             higher_is_better=True)
    assert [(s.node, s.z) for s in result.stragglers] == [("bad", -math.inf)]


def test_too_few_nodes_and_unusable_figures_are_said():
    result = find_stragglers({"a": 400.0, "b": 100.0, "c": None, "d": float("nan")},
                             higher_is_better=True)
    assert result.stragglers == [] and result.not_judged == "2 usable figures, at least 4 needed"
    assert result.unusable == ["c", "d"]


# --- PF-CLUSTER-006: the check on synthetic snapshots (harness.cluster.verdict.decide) --------

def _snap(busbw, *, tier="preflight", gpus=8, step=None, per_rank=None):
    """A snapshot of len(busbw) healthy nodes publishing their node-local busbw (and step
    time); `per_rank`: the cluster all_reduce's per-rank figures."""
    nodes = {}
    for r, value in enumerate(busbw):
        figures = {"node_busbw_gb_s": value, "step_time_s": step[r] if step else None}
        nodes[str(r)] = {"rank": r, "host": f"node{r}", "verdict": "pass", "failed": [],
                         "num_failed": 0, "harness_errors": [], "facts": {"gpu_count": gpus},
                         "env": {}, "figures": figures, "sdc": None, "nothing_judged": None}
    snap = {"num_nodes": len(busbw), "profile": "p5.48xlarge", "tier": tier,
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(len(busbw))}, "nodes": nodes,
            "missing": {}}
    if per_rank is not None:
        snap["bandwidth"] = {"size_bytes": 1 << 30, "nranks": len(busbw),
                             "ranks": list(range(len(busbw))), "floor_gb_s": 1.0,
                             "busbw_gb_s": min(per_rank), "data_ok": True, "errors": [],
                             "missing": {}, "per_rank": {str(r): v for r, v in
                                                         enumerate(per_rank)}}
    return snap


def _straggler_check(v):
    return next(c for c in v.checks if c["id"] == "PF-CLUSTER-006")


def test_one_slow_node_among_128_is_named_with_its_figures():
    busbw = [480.0 + (r % 7) for r in range(128)]
    busbw[77] = 400.0
    v = decide(_snap(busbw))
    result = _straggler_check(v)
    assert result["outcome"] == "warn" and v.passed  # preflight tier: named, not stopped
    assert v.stragglers == [{"host": "node77", "rank": 77, "figure": (
        "node-local all_reduce busbw 400.0 GB/s vs cluster median 483.0 GB/s (MAD 2 GB/s, "
        "-17.2%, modified z -28.0; limit 458.9 GB/s)")}]
    assert result["message"].startswith(
        "[PF-CLUSTER-006] stragglers (a warning in tier preflight): node77 (rank 77): "
        "node-local all_reduce busbw 400.0 GB/s vs cluster median 483.0 GB/s")
    flagged = [m for m in result["measurements"] if m["ok"] is False]
    assert flagged == [{"what": "node-local all_reduce busbw", "value": 400.0, "unit": "GB/s",
                        "op": ">=", "threshold": 458.85, "ok": False, "node": "node77",
                        "name": "node_local_all_reduce_busbw"}]
    figures = {m["what"]: m["value"] for m in result["measurements"] if m["ok"] is None}
    assert figures == {"node-local all_reduce busbw: cluster median": 483.0,
                       "node-local all_reduce busbw: cluster MAD": 2.0}
    assert v.bad_nodes == []


def test_certify_on_gpu_nodes_fails_and_drains_the_straggler():
    busbw = [450.0] * 16
    busbw[3] = 300.0
    v = decide(_snap(busbw, tier="certify"))
    assert _straggler_check(v)["outcome"] == "fail" and not v.passed
    assert [(b["host"], b["reason"].split(":")[0]) for b in v.bad_nodes] == [
        ("node3", "straggler")]
    assert v.actions["slurm_exclude"] == "node3"
    assert "bad nodes: node3." in v.text.split("\n", 1)[0]


def test_cpu_only_nodes_only_warn_even_in_certify():
    busbw = [1.0] * 6 + [0.5]
    v = decide(_snap(busbw, tier="certify", gpus=0))
    result = _straggler_check(v)
    assert result["outcome"] == "warn" and v.passed and v.bad_nodes == []
    assert "a warning in tier certify on CPU-only nodes" in result["message"]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_too_few_nodes_cannot_be_judged(n):
    v = decide(_snap([400.0, 100.0, 400.0][:n]))
    result = _straggler_check(v)
    assert (result["outcome"], result["message"]) == (
        "skip", f"not applicable to p5.48xlarge: {n}-node job: a median of fewer than 4 nodes "
                "cannot single one out")
    assert v.stragglers == []


def test_all_equal_nodes_pass_with_the_median_and_mad_recorded():
    v = decide(_snap([450.0] * 8, step=[0.5] * 8))
    result = _straggler_check(v)
    assert result["outcome"] == "pass" and result["message"] == ""
    assert {m["what"]: m["value"] for m in result["measurements"]} == {
        "node-local all_reduce busbw: cluster median": 450.0,
        "node-local all_reduce busbw: cluster MAD": 0.0,
        "training step time: cluster median": 0.5, "training step time: cluster MAD": 0.0}


def test_ties():
    """Half the nodes at one figure, half at another: no node is singled out. Two nodes tied
    at the same low figure among 16: both are named."""
    assert _straggler_check(decide(_snap([400.0] * 4 + [440.0] * 4)))["outcome"] == "pass"
    busbw = [450.0] * 16
    busbw[2] = busbw[9] = 350.0
    v = decide(_snap(busbw))
    assert [s["host"] for s in v.stragglers] == ["node2", "node9"]


def test_a_slow_step_time_is_judged_beside_busbw():
    step = [1.0] * 8
    step[5] = 1.4
    v = decide(_snap([450.0] * 8, step=step))
    assert [(s["host"], s["figure"].split(" vs")[0]) for s in v.stragglers] == [
        ("node5", "training step time 1.4 s")]


def test_the_cluster_all_reduce_per_rank_figure_is_not_judged():
    """Every rank reports the cluster's mean time there: not a per-node figure."""
    per_rank = [40.0] * 8
    per_rank[6] = 20.0
    v = decide(_snap([450.0] * 8, per_rank=per_rank))
    assert v.stragglers == [] and _straggler_check(v)["outcome"] == "pass"


def test_a_node_without_a_figure_is_named_never_counted_fast():
    busbw = [450.0] * 7 + [None]
    busbw[1] = "garbage"
    result = _straggler_check(decide(_snap(busbw)))
    assert result["outcome"] == "warn"
    assert result["message"] == (
        "[PF-CLUSTER-006] not every node could be judged: node-local all_reduce busbw: no "
        "usable figure from node1 (rank 1), node7 (rank 7)")


def test_no_figures_or_too_few_usable_is_not_run():
    result = _straggler_check(decide(_snap([None] * 5)))
    assert result["outcome"] == "skip"
    assert result["message"].startswith("[PF-CLUSTER-006] not run: no node published its "
                                        "busbw or step time")
    result = _straggler_check(decide(_snap([450.0, 450.0, 450.0, None, None])))
    assert result["outcome"] == "skip" and result["message"].endswith(
        "node-local all_reduce busbw not judged: 3 usable figures, at least 4 needed")


def test_a_node_publishes_its_busbw_gate_and_step_time():
    from harness.cluster.snapshot import node_figures
    from harness.results import CheckResult, Measurement

    checks = [
        CheckResult("PF-BW-001", "pass", measurements=(
            Measurement("all_reduce busbw at 1 GiB", 300.0),
            Measurement("all_reduce busbw at 16 GiB", 470.5, op=">=", threshold=400))),
        CheckResult("PF-TRAIN-008", "pass", measurements=(
            Measurement("median step time (slowest rank)", 0.75, "s"),)),
    ]
    assert node_figures(checks) == {"node_busbw_gb_s": 470.5, "step_time_s": 0.75}
    assert node_figures([CheckResult("PF-BW-001", "pass", measurements=(
        Measurement("all_reduce busbw at 16 GiB", "nan", op=">="),))]) == {
        "node_busbw_gb_s": None, "step_time_s": None}


def test_node_summary_publishes_the_figures_of_its_report():
    from harness.cluster.snapshot import node_summary
    from harness.report.model import Report
    from harness.results import results

    report = Report(host="node2", profile="local-cpu", profile_source="--profile",
                    tier="preflight")
    report.checks = results([{"id": "PF-BW-006", "outcome": "pass", "message": "",
                              "measurements": [
        {"what": "all_reduce busbw at 16 MiB", "value": 1.25, "unit": "GB/s", "op": ">=",
         "threshold": 0.05, "ok": True}]}])
    summary = node_summary(report, rank=2, facts={}, env={})
    assert summary.figures == {"node_busbw_gb_s": 1.25, "step_time_s": None}


# --- the limits are the leader's profile's (Profile.straggler_*), carried by the snapshot -----

def test_the_snapshot_carries_the_profile_limits_and_the_check_uses_them():
    from dataclasses import replace

    from harness.judges.cluster import DEFAULT_LIMITS, StragglerLimits
    from harness.profiles.table import get_profile

    profile = get_profile("p5.48xlarge")
    assert StragglerLimits.of(profile) == DEFAULT_LIMITS == StragglerLimits(3.5, 4, 0.05)
    three = [450.0, 450.0, 300.0]
    assert _straggler_check(decide(_snap(three)))["outcome"] == "skip"  # 3 nodes < 4 by default
    snap = _snap(three) | {"straggler_limits": StragglerLimits.of(
        replace(profile, straggler_min_nodes=3)).to_dict()}
    check = _straggler_check(decide(snap))
    assert check["outcome"] == "warn" and "300" in check["message"]
    # A looser z limit lets the same node through.
    snap["straggler_limits"] = {"z_max": 1e9, "min_nodes": 3, "min_rel_dev": 0.5}
    assert _straggler_check(decide(snap))["outcome"] == "pass"
