"""The SDC cross-check (harness.probes.sdc, PF-GPU-020, PF-CLUSTER-007): the deterministic
work on CPU tensors, the majority rule, the node check on a worker's ranks, and the cross-node
judge on synthetic snapshots. One flipped bit in one device's (or one node's) result must be
named; the real multi-process paths (gloo ranks, `selftest cluster --inject sdc=K`) are in
tests/e2e/test_e2e_sdc.py."""

from __future__ import annotations

import copy

import pytest

from harness.checking import run_check
from harness.cluster.snapshot import node_sdc
from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS
from harness.probes import sdc

torch = pytest.importorskip("torch")


# --- the work ---------------------------------------------------------------------------------

def test_the_same_work_gives_the_same_bits_and_one_flipped_bit_changes_every_later_digest():
    cpu = torch.device("cpu")
    a, b = sdc.run_sdc(cpu, "short"), sdc.run_sdc(cpu, "short")
    assert a["digest"] == b["digest"] and a["outputs"] == b["outputs"]
    bad = sdc.run_sdc(cpu, "short", flip=True)
    assert bad["digest"] != a["digest"]
    # every product differs; a 1-ulp difference may round away in an fp32 row sum
    assert {"bf16 gemm", "fp16 gemm", "fp32 gemm"} <= set(
        sdc.differing_outputs(bad["outputs"], a["outputs"]))
    assert a["spec"] == sdc.spec_text("short", "cpu") != sdc.spec_text("long", "cpu")


def test_flip_one_bit_flips_exactly_one_bit():
    t = torch.ones(4, dtype=torch.bfloat16)
    before = t.clone()
    sdc.flip_one_bit(t)
    diff = (t.view(torch.int16) ^ before.view(torch.int16))
    assert diff.tolist() == [1, 0, 0, 0]


@pytest.mark.parametrize(("values", "good", "odd"), [
    ({"0": "a", "1": "a", "2": "b"}, "a", {"2": "b"}),
    ({"0": "a", "1": "a"}, "a", {}),
    ({"0": "a", "1": "b"}, None, {"0": "a", "1": "b"}),           # no strict majority
    ({"0": "a", "1": "a", "2": "b", "3": "b"}, None, {"0": "a", "1": "a", "2": "b", "3": "b"}),
    ({"0": "a"}, "a", {}),
    ({}, None, {}),
])
def test_majority_needs_a_strict_majority(values, good, odd):
    assert sdc.majority(values) == (good, odd)


def test_level_by_tier():
    assert sdc.level_for_tier("preflight") == "short"
    assert sdc.level_for_tier("certify") == sdc.level_for_tier("diagnose") == "long"


# --- PF-GPU-020 on a worker's ranks -----------------------------------------------------------

GOOD_RUN = {"spec": "sdc/v1 short x", "outputs": {"bf16 gemm": "o"}, "totals": {"bf16 gemm": 1.0},
            "seconds": 0.1, "sm_count": 132}


def _ranks(n, flip=None):
    good = sdc.run_sdc(torch.device("cpu"), "short")
    bad = sdc.run_sdc(torch.device("cpu"), "short", flip=True)
    return [{"rank": r, "device": None, "uuid": None, **(bad if r == flip else good)}
            for r in range(n)]


def _node_check(ranks, nproc):
    from checks.test_sdc import test_sdc_cross_check_in_node
    from harness.fixtures.sdc import SdcRun
    from harness.profiles.table import get_profile

    profile = get_profile("local-cpu")
    return run_check(test_sdc_cross_check_in_node, SdcRun("short", ranks, nproc), profile, None,
                     profile="local-cpu")


def test_node_check_passes_on_identical_ranks_and_records_what_the_node_publishes():
    result = _node_check(_ranks(3), 3)
    assert result.outcome == "pass", result.message
    published = node_sdc([result])
    assert published is not None and set(published.devices) == {
        "rank 0 (CPU)", "rank 1 (CPU)", "rank 2 (CPU)"}
    assert published.spec == sdc.spec_text("short", "cpu")
    assert set(published.outputs) == {"bf16 gemm", "bf16 row sums", "fp16 gemm",
                                         "fp16 row sums", "fp32 gemm", "fp32 row sums"}


def test_node_summary_publishes_the_typed_figures_or_says_why_it_cannot():
    """What a node publishes is read back by its peers to the same NodeSdc; a figure of the
    wrong type (a digest that is not text) is published as no figures, and why, never a crash
    (PF-CLUSTER-007 then names the node as not compared)."""
    from dataclasses import replace

    from harness.cluster.snapshot import node_summary
    from harness.cluster.wire import NodeSummary
    from harness.report.model import Report

    result = _node_check(_ranks(2), 2)
    report = Report(host="node1", profile="local-cpu", profile_source="--profile",
                    tier="preflight")
    report.checks = [result]
    summary = node_summary(report, rank=1, facts={}, env={})
    assert summary.sdc == node_sdc([result]) and summary.sdc is not None
    assert NodeSummary.from_dict(summary.to_json()) == summary
    digest = next(m for m in result.measurements if m.what.endswith(" SDC digest"))
    broken = replace(result, measurements=tuple(replace(m, value=7) if m is digest else m
                                                for m in result.measurements))
    report.checks = [broken]
    summary = node_summary(report, rank=1, facts={}, env={})
    assert summary.sdc is None
    assert summary.harness_errors[0].startswith(
        "PF-GPU-020's figures cannot be published: this node's PF-GPU-020 result's 'devices' "
        "holds a value that is not text")


def test_node_check_names_the_one_rank_with_a_flipped_bit():
    result = _node_check(_ranks(3, flip=1), 3)
    assert result.outcome == "fail"
    assert "rank 1 (CPU): silent data corruption suspected" in result.message
    assert "rank 0" not in result.message.split("found")[-1]
    assert [m.what for m in result.measurements if m.ok is False and m.unit == "sha256"] == [
        "rank 1 (CPU) SDC digest"]


def test_one_flipped_bit_in_one_gpu_digest_is_named_with_its_device():
    ranks = [{"rank": r, "device": r, "uuid": f"GPU-{r:04d}", **GOOD_RUN, "digest": "d" * 64}
             for r in range(8)]
    ranks[5]["digest"] = "c" + "d" * 63  # one bit: 0xd = 1101 -> 0xc = 1100
    result = _node_check(ranks, 8)
    assert result.outcome == "fail"
    assert "CUDA device 5 (GPU-0005): silent data corruption suspected: digest cddddddddddd vs " \
           "dddddddddddd on 7 of 8 devices" in result.message
    assert [m.what for m in result.measurements if m.ok is False and m.unit == "sha256"] == [
        "CUDA device 5 (GPU-0005) SDC digest"]


def test_node_check_with_two_disagreeing_ranks_names_both():
    result = _node_check(_ranks(2, flip=0), 2)
    assert result.outcome == "fail" and "cannot be told apart" in result.message
    assert "rank 0 (CPU)" in result.message and "rank 1 (CPU)" in result.message


def test_a_rank_without_a_digest_is_not_measured_never_a_pass():
    result = _node_check(_ranks(3)[:2], 3)
    assert result.outcome == "error" and "rank(s) 2 of 3" in result.message


# --- PF-CLUSTER-007 on synthetic snapshots ----------------------------------------------------

GOOD = {"spec": "sdc/v1 short x", "devices": {f"GPU {i}": "d" * 64 for i in range(8)},
        "outputs": {"bf16 gemm": "o1", "bf16 row sums": "o2"}, "totals": {"bf16 gemm": 1.5},
        "sm_count": 132, "outcome": "pass"}
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "driver": "570.1", "cuda": "12.8",
        "torch": "2.13.0", "gpu_count": 8}


def _snap(sdcs, facts=None):
    nodes = {str(r): {"rank": r, "host": f"node{r}", "verdict": "pass", "failed": [],
                      "num_failed": 0, "harness_errors": [],
                      "facts": (facts or {}).get(r, H100), "env": {}, "figures": {}, "sdc": s,
                      "nothing_judged": None} for r, s in enumerate(sdcs)}
    return {"num_nodes": len(sdcs), "profile": "p5.48xlarge", "tier": "preflight",
            "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
            "hosts": {str(r): f"node{r}" for r in range(len(sdcs))}, "nodes": nodes,
            "missing": {}}


def _flipped(base):
    """Every GPU of the node computed the same wrong bits (its own comparison passes)."""
    out = copy.deepcopy(base)
    out["devices"] = {k: "e" + v[1:] for k, v in out["devices"].items()}
    out["outputs"]["bf16 gemm"] = "oX"
    out["totals"]["bf16 gemm"] = 1.25
    return out


def _check(verdict):
    return next(c for c in verdict.checks if c["id"] == "PF-CLUSTER-007")


def test_identical_nodes_pass():
    v = decide(_snap([GOOD] * 4))
    assert _check(v)["outcome"] == "pass" and v.passed


def test_the_node_whose_gpus_agree_on_wrong_bits_is_named_with_its_figures():
    v = decide(_snap([GOOD, GOOD, _flipped(GOOD), GOOD]))
    result = _check(v)
    assert result["outcome"] == "fail" and not v.passed
    assert [b["host"] for b in v.bad_nodes] == ["node2"]
    assert "silent data corruption suspected: node2 (rank 2): digest eddddddddddd vs " \
           "dddddddddddd on 3 of 4 nodes of NVIDIA H100 80GB HBM3, driver 570.1" in \
           result["message"]
    assert "silent data corruption suspected" in v.bad_nodes[0]["reason"]
    assert "differs in bf16 gemm (bf16 gemm fp32 total 1.25 vs 1.5)" in result["message"]


def test_one_flipped_bit_in_one_gpu_digest_is_named_by_the_node_check_not_here():
    one = copy.deepcopy(GOOD)
    one["devices"]["GPU 3"] = "x" + "d" * 63  # the node's majority is still the good digest
    v = decide(_snap([GOOD, one, GOOD]))
    assert _check(v)["outcome"] == "pass"


def test_mixed_skus_and_drivers_are_compared_within_their_group_only():
    other = dict(H100, driver="580.2")
    b = copy.deepcopy(GOOD)
    b["devices"] = {k: "f" * 64 for k in b["devices"]}  # another driver: other bits, legitimately
    v = decide(_snap([GOOD, GOOD, b, b, _flipped(b)], facts={2: other, 3: other, 4: other}))
    result = _check(v)
    # PF-CLUSTER-003 fails the driver mismatch; PF-CLUSTER-007 names node4 alone
    sdc_named = [x["host"] for x in v.bad_nodes if "silent data corruption" in x["reason"]]
    assert sdc_named == ["node4"]
    assert "driver 580.2" in result["message"] and "2 of 3 nodes" in result["message"]


def test_two_nodes_that_disagree_are_both_named_as_undecidable():
    v = decide(_snap([GOOD, _flipped(GOOD)]))
    assert [b["host"] for b in v.bad_nodes] == ["node0", "node1"]
    assert "cannot be told apart" in _check(v)["message"]


def test_a_node_without_figures_is_said_never_silently_passed():
    v = decide(_snap([GOOD, GOOD, None]))
    result = _check(v)
    assert result["outcome"] == "warn" and "node2 (rank 2): published no SDC figures" in \
        result["message"]


def test_not_applicable_when_no_node_ran_it():
    assert _check(decide(_snap([None, None])))["outcome"] == "skip"


# --- in the worker launch: short in preflight, long in certify, bounded -----------------------

@pytest.mark.parametrize(("tier", "level", "limit"), [("preflight", "short", 60.0),
                                                       ("certify", "long", 180.0)])
def test_the_launch_runs_the_tiers_level_within_its_own_limit(tier, level, limit):
    from types import SimpleNamespace

    from harness.fixtures.worker import WorkerSession, wanted_parts
    from harness.profiles.table import get_profile

    for name in ("local-cpu", "p5.48xlarge"):
        profile = get_profile(name)
        session = WorkerSession(profile, tier, {}, ("sdc",))
        assert f"--sdc-level={level}" in session.extra()
        assert session.spec("sdc").timeout_s == limit
        item = SimpleNamespace(fixturenames=("sdc_run",), module=None)
        assert "sdc" in wanted_parts([item], profile, {})
