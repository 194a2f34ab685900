"""Straggler detection: a node whose busbw or step time is an outlier against the rest of the
cluster, even when it is above the absolute floor. A pure function; the cluster verdict feeds
it the per-node figures.

The rule is this project's own (no vendor publishes a cluster-relative one: Google's
cluster-health-scanner and Azure's AzHC use absolute per-SKU floors, AMD CVS a 5 % tolerance
against expected values). It is the modified z-score of Iglewicz and Hoaglin (1993):
z = 0.6745 * (x - median) / MAD, an outlier when |z| > 3.5 (their recommended cut-off, as the
NIST/SEMATECH e-Handbook of Statistical Methods gives it, section 1.3.5.17:
https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm), with two guards: at least
MIN_NODES figures (a median of 2 or 3 says little), and a relative deviation from the median of
at least MIN_REL_DEV (AMD CVS's 5 % tolerance), so that a tight cluster (MAD near 0) does not
flag a node 0.1 % slower. Only the bad side counts: low busbw, high step time.

`test_no_straggler_node` (PF-CLUSTER-006) is the cluster check that applies it to the figures
in the gathered snapshot: the node-local all_reduce busbw and training step time every node
publishes (`figures`, harness.cluster.snapshot.NODE_FIGURES)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.base.compare import fmt
from harness.checking import check, current, fail, measure, not_applicable, not_run, warn
from harness.cluster.snapshot import NODE_FIGURES, ClusterView
from harness.results import measurement_name

__all__ = ["FAILING_TIERS", "MIN_NODES", "MIN_REL_DEV", "Z_THRESHOLD", "Straggler",
           "StragglerResult", "cutoff", "find_stragglers", "test_no_straggler_node"]

#: |modified z| above which a figure is an outlier (Iglewicz & Hoaglin's recommended value).
Z_THRESHOLD = 3.5
#: Fewest figures judged.
MIN_NODES = 4
#: Smallest relative distance from the median that can flag a node (AMD CVS: 5 %).
MIN_REL_DEV = 0.05
#: Tiers in which a straggler fails the cluster (on GPU nodes): see PF-CLUSTER-006's `why`.
FAILING_TIERS = ("certify", "diagnose")
#: 0.6745 = the 0.75 quantile of the standard normal: MAD * 1.4826 estimates sigma.
_K = 0.6745


@dataclass(frozen=True, slots=True)
class Straggler:
    node: int | str
    value: float
    z: float
    """Modified z-score (inf when the MAD is 0)."""
    rel_dev: float
    """(value - median) / median."""


@dataclass(frozen=True, slots=True)
class StragglerResult:
    median: float | None
    mad: float | None
    stragglers: list[Straggler] = field(default_factory=list)
    not_judged: str | None = None
    """Why no node was judged (too few figures); None when they were."""
    unusable: list[int | str] = field(default_factory=list)
    """Nodes whose figure was missing, NaN or not positive: unknown, never fast."""


def find_stragglers(values: Mapping[int, object] | Mapping[str, object], *,
                    higher_is_better: bool, z_threshold: float = Z_THRESHOLD, min_nodes: int = MIN_NODES,
                    min_rel_dev: float = MIN_REL_DEV) -> StragglerResult:
    """The outliers on the bad side among per-node figures (busbw: `higher_is_better=True`;
    step time: False), with the median and MAD they were judged against. A figure that is
    not a finite positive number is unusable (named, never judged fast)."""
    usable = {n: x for n, v in values.items() if (x := _positive(v)) is not None}
    unusable = sorted(n for n in values if n not in usable)
    if len(usable) < min_nodes:
        return StragglerResult(None, None, not_judged=f"{len(usable)} usable figures, at least "
                               f"{min_nodes} needed", unusable=unusable)
    median = statistics.median(usable.values())
    mad = statistics.median(abs(v - median) for v in usable.values())
    found = []
    for node, value in sorted(usable.items()):
        delta = value - median
        bad = delta < 0 if higher_is_better else delta > 0
        rel = delta / median
        if not bad or abs(rel) < min_rel_dev:
            continue
        # MAD 0 (most nodes equal): any deviation past the relative guard is infinitely far.
        z = _K * delta / mad if mad > 0 else math.copysign(math.inf, delta)
        if abs(z) > z_threshold:
            found.append(Straggler(node, value, z, rel))
    return StragglerResult(median, mad, found, unusable=unusable)


def _positive(value: object) -> float | None:
    """A finite positive number, else None (missing, NaN, text: unknown, never fast)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def cutoff(median: float, mad: float, *, higher_is_better: bool,
           z_threshold: float = Z_THRESHOLD, min_rel_dev: float = MIN_REL_DEV) -> float:
    """The figure past which a node is a straggler: beyond both guards of `find_stragglers`
    (|z| > z_threshold and a relative deviation of at least min_rel_dev)."""
    distance = max(z_threshold * mad / _K, min_rel_dev * median)
    return median - distance if higher_is_better else median + distance


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
        values = {r: (s.get("figures") or {}).get(key) for r, s in cluster.nodes.items()}
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
    if cluster.num_nodes < MIN_NODES:
        not_applicable(f"{cluster.num_nodes}-node job: a median of fewer than {MIN_NODES} "
                       "nodes cannot single one out")
    series = _series(cluster)
    if not series:
        not_run("no node published its busbw or step time (figures "
                f"{', '.join(NODE_FIGURES)}: none of their checks ran)")
    found, notes, judged = [], [], 0
    for what, unit, higher, values in series:
        result = find_stragglers(values, higher_is_better=higher)
        if result.unusable:
            notes.append(f"{what}: no usable figure from " + ", ".join(
                cluster.name(int(r)) for r in result.unusable))
        if result.median is None or result.mad is None:
            notes.append(f"{what} not judged: {result.not_judged}")
            continue
        judged += 1
        limit = cutoff(result.median, result.mad, higher_is_better=higher)
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
    counts = [(s.get("facts") or {}).get("gpu_count") for s in cluster.nodes.values()]
    return bool(counts) and all(isinstance(c, int) and c > 0 for c in counts)
