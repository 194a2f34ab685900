"""The sections the collectives add to the cluster snapshot, typed (harness.cluster.wire): the
cluster all_reduce (`bandwidth`: ClusterBandwidth) and the reasons it gives (`not_measured`,
`left_out`, `isolation_skipped`). Read once by ClusterView.of: a missing or malformed field is
an error naming it, never a default; the bytes on the wire do not change."""

from __future__ import annotations

import json

import pytest

from harness.cluster.snapshot import ClusterView
from harness.cluster.verdict import PER_RANK_FOR_NODES, decide, for_nodes
from harness.cluster.wire import ClusterBandwidth, SnapshotError
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
