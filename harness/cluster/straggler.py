"""PF-CLUSTER-006, the cluster check: `test_no_straggler_node` applies the straggler judge
(harness.judges.cluster: the rule, its sources) to the figures in the gathered snapshot, the
node-local all_reduce busbw and training step time every node publishes (`figures`,
harness.cluster.snapshot.NODE_FIGURES), with the limits of the leader's profile
(`straggler_*` fields, shown by `preflight profiles`)."""

from __future__ import annotations

from harness.base.compare import fmt
from harness.checking import check, current, fail, measure, not_applicable, not_run, warn
from harness.cluster.snapshot import NODE_FIGURES, ClusterView
from harness.judges.cluster import cutoff, find_stragglers
from harness.results import measurement_name

__all__ = ["FAILING_TIERS", "test_no_straggler_node"]

#: Tiers in which a straggler fails the cluster (on GPU nodes): see PF-CLUSTER-006's `why`.
FAILING_TIERS = ("certify", "diagnose")


# --- PF-CLUSTER-006: the cluster check --------------------------------------------------------

#: The figures judged: (what, unit, higher is better, its key in a node's `figures`). Each is
#: measured on its node alone. The cluster all_reduce's `per_rank` figure is not one of them:
#: every rank reports the cluster's mean time (harness.worker.bandwidth all_reduces the
#: timings), so it is the same on every rank and cannot single out a node.
_SERIES = (
    ("node-local all_reduce busbw", "GB/s", True, "node_busbw_gb_s"),
    ("training step time", "s", False, "step_time_s"),
)


def _series(cluster: ClusterView) -> list[tuple[str, str, bool, dict[int, object]]]:
    """Each figure some node published, by rank (a node without it is kept: None, named)."""
    out = []
    for what, unit, higher, key in _SERIES:
        values = {r: s.figures.get(key) for r, s in cluster.nodes.items()}
        if any(v is not None for v in values.values()):
            out.append((what, unit, higher, values))
    return out


@check(
    "PF-CLUSTER-006",
    title="No node is a straggler: its busbw and step time are in line with the other nodes'",
    why="A synchronous job runs at the pace of its slowest node, so one node well below its "
    "peers costs the whole job that share of its speed even above the absolute floors. A node "
    "is an outlier when its figure is on the bad side of the cluster median by more than 3.5 "
    "modified z-scores (median/MAD, Iglewicz and Hoaglin) and by at least 5 %, among at least "
    "4 nodes. In the preflight tier this is a warning: the figures come from a few seconds of "
    "measurement and the absolute floors already fail a broken node, so a job is not stopped "
    "on a relative rule alone. In certify and diagnose, on GPU nodes, it fails and the node is "
    "named for draining: certification is where a node slower than its peers is taken out. "
    "On CPU-only nodes it only warns (gloo over TCP on shared cores is too noisy to judge by).",
    remedy="rerun `preflight run --tier diagnose` on the node named and compare its PF-GPU "
    "(clocks, throttling, PCIe), PF-NIC and PF-BW results with a healthy peer's; drain it if "
    "it stays slow",
)
def test_no_straggler_node(cluster: ClusterView) -> None:
    limits = cluster.straggler_limits
    if cluster.num_nodes < limits.min_nodes:
        not_applicable(f"{cluster.num_nodes}-node job: a median of fewer than {limits.min_nodes} "
                       "nodes cannot single one out")
    series = _series(cluster)
    if not series:
        not_run("no node published its busbw or step time (figures "
                f"{', '.join(NODE_FIGURES)}: none of their checks ran)")
    found, notes, judged = [], [], 0
    for what, unit, higher, values in series:
        result = find_stragglers(values, higher_is_better=higher, limits=limits)
        if result.unusable:
            notes.append(f"{what}: no usable figure from " + ", ".join(
                cluster.name(int(r)) for r in result.unusable))
        if result.median is None or result.mad is None:
            notes.append(f"{what} not judged: {result.not_judged}")
            continue
        judged += 1
        limit = cutoff(result.median, result.mad, higher_is_better=higher, limits=limits)
        key = measurement_name(what)
        measure(f"{what}: cluster median", result.median, unit, name=f"{key}_cluster_median")
        measure(f"{what}: cluster MAD", result.mad, unit, name=f"{key}_cluster_mad")
        for s in result.stragglers:
            rank = int(s.node)
            measure(what, s.value, unit, op=">=" if higher else "<=", threshold=round(limit, 6),
                    ok=False, node=cluster.host(rank), name=key)
            found.append((rank, f"{what} {fmt(s.value, unit)} vs cluster median "
                                f"{fmt(result.median, unit)} (MAD {fmt(result.mad, unit)}, "
                                f"{s.rel_dev:+.1%}, modified z {s.z:.1f}; limit "
                                f"{fmt(limit, unit)})"))
    if not judged:
        not_run("; ".join(notes))
    fails = cluster.tier in FAILING_TIERS and _has_gpus(cluster)
    for rank, text in found:
        cluster.stragglers.append({"host": cluster.host(rank), "rank": rank, "figure": text})
        if fails:
            cluster.bad.add(rank, f"straggler: {text}")
    body = "; ".join([*(f"{cluster.name(r)}: {t}" for r, t in found), *notes])
    if found and fails:
        fail(f"stragglers: {body}")
    if found:
        warn(f"stragglers (a warning in tier {cluster.tier}"
             + ("" if _has_gpus(cluster) else " on CPU-only nodes") + f"): {body}",
             remedy=current().remedy)
    elif notes:
        warn(f"not every node could be judged: {'; '.join(notes)}")


def _has_gpus(cluster: ClusterView) -> bool:
    """Every node that published facts reports GPUs (the snapshot's own evidence)."""
    counts = [s.facts.get("gpu_count") for s in cluster.nodes.values()]
    return bool(counts) and all(isinstance(c, int) and c > 0 for c in counts)
