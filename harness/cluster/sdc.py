"""PF-CLUSTER-007: the SDC cross-check across nodes. Every node's PF-GPU-020 compared its own
GPUs; here the nodes' results are compared with each other, within groups of nodes that must
agree bit for bit (the same GPU model, driver, CUDA, torch, workload and SM count:
harness/probes/sdc.py says why), and the minority node is named "silent data corruption
suspected" with its figures. Mixed SKUs or drivers are compared within their own group only.

What a node publishes (`node_sdc`, into its node summary): the workload, each device's
combined digest, and the outputs and fp32 totals of its own majority."""

from __future__ import annotations

from collections.abc import Mapping

from harness.base.jsontypes import JSONValue
from harness.checking import check, fail, measure, not_applicable, warn
from harness.cluster.snapshot import ClusterView
from harness.cluster.wire import NodeSdc, NodeSummary
from harness.probes.sdc import differing_outputs, majority, short

__all__ = ["test_no_silent_data_corruption_across_nodes"]

#: The node facts that must be equal for two nodes' digests to be compared.
GROUP_FACTS = ("gpu_model", "driver", "cuda", "torch")
#: Bound on the devices one node publishes (the store holds one summary per node).
MAX_DEVICES = 72
#: A comparison group: GROUP_FACTS' values, the workload and the SM count.
GroupKey = tuple[JSONValue, ...]


def _group_key(summary: NodeSummary, sdc: NodeSdc) -> GroupKey:
    return (*(summary.facts.get(k) for k in GROUP_FACTS), sdc.spec, sdc.sm_count)


def _describe(key: GroupKey) -> str:
    model, driver, cuda, torch, _, sms = key
    return (f"{model or 'no GPU'}, driver {driver or '-'}, CUDA {cuda or '-'}, torch "
            f"{torch or '-'}" + (f", {sms} SMs" if sms else ""))


@check(
    "PF-CLUSTER-007",
    title="SDC cross-check across nodes: nodes of one SKU and driver give bit-identical results",
    why="A node whose GPUs all compute the same wrong bits passes its own comparison "
    "(PF-GPU-020); only another node of the same SKU, driver and libraries can show it. Silent "
    "data corruption poisons a run for days before a loss spike shows it.",
    remedy="take the node named out of the job and replace it (rerun `preflight run --tier "
    "certify` on it to see whether the difference repeats); a group without a majority needs "
    "a third node of its kind to tell which result is good",
)
def test_no_silent_data_corruption_across_nodes(cluster: ClusterView) -> None:
    published = {r: s.sdc for r, s in cluster.nodes.items()}
    if all(sdc is None for sdc in published.values()):
        not_applicable("no node ran the SDC cross-check (PF-GPU-020 not selected, or it "
                       "measured nothing)")
    groups: dict[GroupKey, dict[int, str]] = {}
    notes, found = [], []
    for rank, sdc in sorted(published.items()):
        if sdc is None:
            notes.append(f"{cluster.name(rank)}: published no SDC figures (not compared)")
            continue
        node_good, _ = majority(dict(sdc.devices))
        if node_good is None:
            notes.append(f"{cluster.name(rank)}: its own GPUs disagree without a majority "
                         "(PF-GPU-020 names them; not compared across nodes)")
            continue
        groups.setdefault(_group_key(cluster.nodes[rank], sdc), {})[rank] = node_good
    for key, digests in sorted(groups.items(), key=lambda kv: min(kv[1])):
        label = _describe(key)
        if len(digests) < 2:
            notes.append(f"{cluster.name(next(iter(digests)))}: the only node of its group "
                         f"({label}): compared inside the node only")
            continue
        good, odd = majority({str(r): d for r, d in digests.items()})
        measure(f"SDC nodes agreeing ({label})", len(digests) - len(odd), "nodes",
                op="==", threshold=len(digests), ok=not odd, name="sdc_nodes_agreeing")
        ref_rank = next((r for r, d in digests.items() if d == good), None)
        for r in sorted(int(k) for k in odd):
            found.append((r, _figures(cluster, r, ref_rank, digests, good, label)))
    for rank, text in found:
        cluster.bad.add(rank, f"silent data corruption suspected: {text}")
        measure("SDC node digest", digests_of(cluster, rank), "sha256", ok=False,
                node=cluster.host(rank), name="sdc_node_digest")
    body = "; ".join([*(f"{cluster.name(r)}: {t}" for r, t in found), *notes])
    if found:
        fail(f"silent data corruption suspected: {body}")
    if notes:
        warn(f"not every node could be compared: {'; '.join(notes)}")


def digests_of(cluster: ClusterView, rank: int) -> str | None:
    sdc = cluster.nodes[rank].sdc
    return None if sdc is None else majority(dict(sdc.devices))[0]


def _figures(cluster: ClusterView, rank: int, ref_rank: int | None, digests: Mapping[int, str],
             good: str | None, label: str) -> str:
    """The minority node's figures against the group's majority (or why none is known)."""
    if good is None or ref_rank is None:
        return (f"digest {short(digests[rank])}; no strict majority among the "
                f"{len(digests)} nodes of {label}: the good result cannot be told apart")
    mine, ref = cluster.nodes[rank].sdc, cluster.nodes[ref_rank].sdc
    assert mine is not None and ref is not None  # only nodes with figures are grouped
    agree = sum(1 for d in digests.values() if d == good)
    diff = differing_outputs(mine.outputs, ref.outputs)
    totals, ref_totals = mine.totals, ref.totals
    figures = ", ".join(f"{n} fp32 total {totals.get(n)!r} vs {ref_totals.get(n)!r}"
                        for n in sorted(ref_totals) if totals.get(n) != ref_totals.get(n))
    return (f"digest {short(digests[rank])} vs {short(good)} on {agree} of {len(digests)} "
            f"nodes of {label}; differs in {', '.join(diff) or 'the combined digest'}"
            + (f" ({figures})" if figures else ""))
