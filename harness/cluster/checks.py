"""The cluster checks PF-CLUSTER-001..006: `@check` specs like the node checks, each a judge
of the gathered snapshot (a `ClusterView`). One declaration per check: `preflight list` and
`explain` read it (checks/test_cluster.py collects these functions; on a single-node job their
`cluster` fixture says they do not apply), and the cluster verdict runs the same functions on
the snapshot with `harness.checking.run_check`, in the order of `CLUSTER_CHECKS`, after the
node-local checks. A judge names what it finds bad in `cluster.bad` (the verdict's bad nodes)
and fails, warns or skips with the same calls as any check."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.checking import check, fail, measure, not_run, warn
from harness.cluster.group_check import test_job_shaped_groups_meet_their_threshold
from harness.cluster.isolate import PairResult
from harness.cluster.sdc import test_no_silent_data_corruption_across_nodes
from harness.cluster.snapshot import FACT_KEYS, ClusterView
from harness.cluster.straggler import test_no_straggler_node
from harness.cluster.wire import NodeSummary

__all__ = ["CLUSTER_CHECKS", "consistency_outliers"]


def _v(value: object) -> str:
    return "(unset)" if value is None else str(value)


def _gb(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g} GB/s"


@check(
    "PF-CLUSTER-001",
    title="Every node joined the preflight and reported within the timeouts",
    why="A node that never starts, hangs or dies makes the job's first collective hang for the "
    "NCCL/gloo timeout (30 min by default) instead of failing.",
    remedy="replace or restart the nodes named; check that every node runs preflight and can "
    "reach the master on the control-plane port",
)
def test_every_node_reported(cluster: ClusterView) -> None:
    missing = cluster.missing
    for r, m in sorted(missing.items()):
        cluster.bad.add(r, m.reason)
    if missing:
        gone = "; ".join(f"{cluster.name(r)}: {m.reason}" for r, m in sorted(missing.items()))
        fail(f"{len(missing)} of {cluster.num_nodes} nodes did not report: {gone}")


@check(
    "PF-CLUSTER-002",
    title="Every node passed its node-local checks",
    why="One unfit node fails or slows the whole job: either every node hands off or none does.",
    remedy="see each node's report.json; fix or replace the nodes named",
)
def test_every_node_passed_its_checks(cluster: ClusterView) -> None:
    # Anything but an explicit pass is not a pass (a missing verdict, warn, error).
    local_bad = {r: s for r, s in cluster.nodes.items() if s.verdict != "pass"}
    for r, s in sorted(local_bad.items()):
        cluster.bad.add(r, _local_reason(s), [f.message for f in s.failed]
                        + [f"harness: {e}" for e in s.harness_errors])
    if local_bad:
        fail(f"{len(local_bad)} of {len(cluster.nodes)} nodes failed node-local checks: "
             + "; ".join(f"{cluster.name(r)}: {_local_summary(s)}"
                         for r, s in sorted(local_bad.items())))


def _local_reason(s: NodeSummary) -> str:
    """Why a node's own verdict is not pass: its failed checks, or what stopped the harness."""
    if s.failed:
        return "node-local checks failed: " + ", ".join(dict.fromkeys(f.id for f in s.failed))
    errors = s.harness_errors
    why = f": {errors[0]}" if errors else ": no reason published"
    if s.verdict == "error":
        return f"node-local verdict error (the harness could not judge the node){why}"
    return f"node-local verdict {s.verdict or 'missing'} (not pass){why}"


def _local_summary(s: NodeSummary) -> str:
    """A node's first failures (their first clauses), else its verdict and harness error."""
    if s.failed:
        return " | ".join(f.message.split(";")[0] for f in s.failed[:3])
    return f"verdict {s.verdict or 'missing'}: " + (s.harness_errors[0] if s.harness_errors
                                                    else "no reason published")


@check(
    "PF-CLUSTER-003",
    title="Driver, CUDA, NCCL, aws-ofi-nccl, libfabric, torch, NCCL/FI env and GPU inventory "
    "are the same on every node",
    why="Mixed NCCL or plugin versions and differing NCCL_*/FI_* settings cause hangs, protocol "
    "mismatches or one slow node that the others wait for.",
    remedy="rebuild the odd nodes from the same image/AMI; set the same NCCL_*/FI_* variables "
    "everywhere",
)
def test_nodes_are_consistent(cluster: ClusterView) -> None:
    values = {r: {**{k: s.facts.get(k) for k in FACT_KEYS},
                  **{f"env {k}": v for k, v in s.env.items()}}
              for r, s in cluster.nodes.items()
              if s.verdict != "interrupted"}  # a signal stopped it before it read its facts
    # A variable set on some nodes only: unset elsewhere is a value too. The set of names is
    # built once (built per node it made the verdict quadratic in N: bench/bench_verdict.py).
    env_keys = {k for v in values.values() for k in v if k.startswith("env ")}
    for v in values.values():
        for k in env_keys:
            v.setdefault(k, None)
    outliers = consistency_outliers(values) if len(values) > 1 else []
    for o in outliers:
        exp = f"majority: {_v(o['expected'])}" if o["majority"] else "no majority"
        cluster.bad.add(o["rank"], f"{o['key']} = {_v(o['value'])} ({exp})")
    if outliers:
        fail("nodes differ: " + "; ".join(
            f"{cluster.name(o['rank'])} {o['key']}={_v(o['value'])}"
            + (f" (others: {_v(o['expected'])})" if o["majority"] else "") for o in outliers))


def consistency_outliers(values_by_rank: Mapping[int, JSONMapping]) -> list[JSONObject]:
    """Per key, ranks whose value differs from the majority's: {key, rank, value, majority,
    expected}. With no strict majority every rank is named (majority False, expected None)."""
    keys = sorted({k for v in values_by_rank.values() for k in v})
    out = []
    for key in keys:
        values = {r: v.get(key) for r, v in values_by_rank.items()}
        seen = {r: repr(v) for r, v in values.items()}  # hashable, and None != "None"
        counts = Counter(seen.values())
        if len(counts) <= 1:
            continue
        (top, top_n), *rest = counts.most_common()
        majority = top_n * 2 > len(values) and (not rest or rest[0][1] < top_n)
        # The majority's value as the lowest rank holding it reports it (found once per key).
        expected = values[min(r for r, h in seen.items() if h == top)] if majority else None
        for rank in sorted(values):
            if majority and seen[rank] == top:
                continue
            out.append({"key": key, "rank": rank, "value": values[rank], "majority": majority,
                        "expected": expected})
    return out


@check(
    "PF-CLUSTER-004",
    title="Cluster all_reduce reaches the bandwidth floor with correct data",
    why="A slow or faulty node or link caps every collective of the job; wrong data means "
    "silent corruption.",
    remedy="see the pairwise isolation (PF-CLUSTER-005); drain or replace the slow nodes",
)
def test_cluster_bandwidth_meets_floor(cluster: ClusterView) -> None:
    bw = cluster.bandwidth
    if bw is None:
        not_run("cluster bandwidth not measured: " + (
            cluster.not_measured.get("cluster bandwidth") or "earlier cluster checks failed"))
    for r, reason in sorted((int(k), v) for k, v in bw.missing.items()):
        cluster.bad.add(r, reason, list(bw.errors[:4]))
    floor, value, size = bw.floor_gb_s, bw.busbw_gb_s, bw.size_bytes
    measure("cluster all_reduce busbw", value, "GB/s", op=">=", threshold=floor,
            ok=None if value is None or floor is None else value >= floor,
            size_bytes=size, name="cluster_all_reduce_busbw", collective="all_reduce")
    problems = []
    if bw.missing:
        problems.append("did not answer during the cluster all_reduce: " + ", ".join(
            cluster.name(int(r)) for r in sorted(bw.missing, key=int)))
    if bw.errors:
        problems.append(f"errors: {' | '.join(bw.errors[:3])}")
    if not bw.data_ok:
        problems.append("all_reduce returned wrong data")
    if value is not None and floor is not None and value < floor:
        problems.append(f"busbw {_gb(value)} < {_gb(floor)} required at "
                        f"{bw.size_bytes} bytes over {bw.nranks} nodes")
    if value is None and not problems:
        problems.append("no measurement")
    out = _left_out(cluster)
    if problems:
        fail("; ".join(problems) + out)


def _left_out(cluster: ClusterView) -> str:
    """' (over 7 of 8 nodes; left out: node3 (rank 3): failed its own checks)', or ''."""
    left = cluster.left_out
    if not left:
        return ""
    return (f" (over {cluster.num_nodes - len(left)} of {cluster.num_nodes} nodes; left out: "
            + ", ".join(f"{cluster.name(r)}: {w}" for r, w in left.items()) + ")")


@check(
    "PF-CLUSTER-005",
    family="isolation",
    title="Pairwise rounds find no bad node or link",
    why="Pairs tested in parallel, then suspects against known-good nodes, name the node or "
    "link that a cluster-wide number cannot.",
    remedy="drain or replace the nodes named (commands in the report's cluster section)",
)
def test_pairwise_rounds_find_no_bad_node(cluster: ClusterView) -> None:
    iso = cluster.isolation
    if iso is None:
        not_run("pairwise isolation not measured: " + (
            cluster.not_measured.get("pairwise isolation") or cluster.isolation_skipped
            or "cluster bandwidth passed"))
    host = cluster.host
    pairs_of: dict[int, list[tuple[int, PairResult]]] = {}
    for i, rnd in enumerate(iso.rounds, 1):  # each node's pairs, found in one pass
        for p in rnd:
            pairs_of.setdefault(p.a, []).append((i, p))
            pairs_of.setdefault(p.b, []).append((i, p))

    def evidence(node: int) -> list[JSONObject]:
        return [{"round": i, "peer": host(p.other(node)), "busbw_gb_s": p.busbw_gb_s,
                 "error": p.error} for i, p in pairs_of.get(node, [])]

    thr = iso.threshold_gb_s
    for r in iso.bad_nodes:
        cluster.bad.add(r, f"pairwise all_reduce below {_gb(thr)} with every good peer it met",
                        evidence(r))
    cluster.links[:] = [{"hosts": [host(a), host(b)], "ranks": [a, b],
                         "evidence": [e for e in evidence(a) if e["peer"] == host(b)]}
                        for a, b in iso.bad_links]
    cluster.suspects[:] = [{"host": host(r), "rank": r, "evidence": evidence(r)}
                           for r in iso.suspects]
    problems = []
    if iso.bad_nodes:
        problems.append("bad nodes: " + ", ".join(cluster.name(r) for r in iso.bad_nodes))
    if cluster.links:
        problems.append("bad links: " + ", ".join("-".join(lk["hosts"]) for lk in cluster.links))
    if cluster.suspects:
        problems.append("unconfirmed suspects: " + ", ".join(cluster.name(s["rank"])
                                                            for s in cluster.suspects))
    for first, again in iso.flaky:  # failed, then both nodes passed: never a bad node
        later = ", ".join(f"{host(a.a)}-{host(a.b)} {_gb(a.busbw_gb_s)}" for a in again)
        warn(f"flaky pair {host(first.a)}-{host(first.b)}: "
             f"{_gb(first.busbw_gb_s) if first.error is None else first.error} "
             f"below {_gb(thr)}, then passed ({later or 'no later figure'}); not condemned")
    if problems:
        fail(f"{'; '.join(problems)} (threshold {_gb(thr)}, {len(iso.rounds)} rounds)"
             + _left_out(cluster))


#: The cluster checks in the order the verdict runs them (a later one reads what an earlier
#: one found: 004 runs only when the node-local gather passed, 005 after 004).
CLUSTER_CHECKS: tuple[Callable[[ClusterView], None], ...] = (
    test_every_node_reported,
    test_every_node_passed_its_checks,
    test_nodes_are_consistent,
    test_cluster_bandwidth_meets_floor,
    test_pairwise_rounds_find_no_bad_node,
    test_no_straggler_node,
    test_no_silent_data_corruption_across_nodes,
    test_job_shaped_groups_meet_their_threshold,
)
