"""PF-CLUSTER-008: the job-shaped groups (harness.cluster.groups, measured by
harness.cluster.group_phase): each tensor- and expert-parallel group that spans nodes met its
threshold at its message size (and its all_to_all ran, for expert groups); a group that did not
is named, with the bad node or link its own pairwise rounds found."""

from __future__ import annotations

from collections.abc import Sequence

from harness.checking import check, fail, measure, not_applicable, not_run
from harness.cluster.group_wire import GroupResult
from harness.cluster.snapshot import ClusterView

__all__ = ["test_job_shaped_groups_meet_their_threshold"]


def _nodes(cluster: ClusterView, nodes: Sequence[int]) -> str:
    return ", ".join(cluster.host(n) for n in nodes)


@check(
    "PF-CLUSTER-008",
    title="Job-shaped groups: every tensor/expert-parallel group that spans nodes meets its "
    "threshold at its message size",
    why="A bad link between two nodes of one tensor-parallel group slows every step; one between "
    "nodes that never talk in the job does not. The groups come from the job's layout "
    "(--groups tp=8,pp=4,ep=2, PREFLIGHT_GROUPS, or the launcher's SM_HPS), Megatron-Core's "
    "rank order; expert groups also run an all_to_all (MoE dispatch/combine).",
    remedy="drain the node (or report the link) named with its group; rerun `preflight run "
    "--tier certify` with the same --groups to confirm",
)
def test_job_shaped_groups_meet_their_threshold(cluster: ClusterView) -> None:
    plan = cluster.groups_plan
    if plan is None:
        not_applicable("no job layout given (--groups, PREFLIGHT_GROUPS or the launcher's "
                       "SM_HPS): the cluster gate and isolation as before")
    if plan.error:
        fail(f"the job layout cannot be used: {plan.error}",
             remedy="fix --groups / PREFLIGHT_GROUPS (tp x cp x ep x pp must divide the job's "
             "ranks)")
    measure("groups spanning nodes", len(plan.groups), "groups",
            name="job_groups_spanning_nodes")
    if not plan.groups:
        return  # every group lies inside one node: the node-local checks cover them
    if cluster.groups is None:
        said = cluster.not_measured.get("job-shaped groups")
        not_run(f"the groups phase did not run: {said}" if said else
                "the groups phase did not run (a node stopped answering in the cluster "
                "all_reduce, or the master was lost: named by PF-CLUSTER-001/004)")
    problems = []
    for r in cluster.groups.results:
        g = r.group
        name = f"{g.kind} group {g.index} ({_nodes(cluster, g.nodes)})"
        busbw, thr = r.busbw_gb_s, r.threshold_gb_s
        measure(f"{name} all_reduce busbw", busbw, "GB/s", op=">=", threshold=thr,
                ok=r.passed, size_bytes=g.size_bytes or None,
                name=f"{g.kind}_group_{g.index}_allreduce_busbw", collective="all_reduce")
        if r.alltoall_gb_s is not None:
            measure(f"{name} all_to_all busbw", r.alltoall_gb_s, "GB/s",
                    size_bytes=g.size_bytes or None,
                    name=f"{g.kind}_group_{g.index}_alltoall_busbw", collective="all_to_all")
        if r.passed:
            continue
        why = r.error or f"busbw {busbw} GB/s < {thr} GB/s"
        problems.append(f"{name}: {why}" + _isolated(cluster, r, name))
    if problems:
        fail("; ".join(problems))


def _isolated(cluster: ClusterView, r: GroupResult, name: str) -> str:
    """What the group's own pairwise rounds found, recorded as bad nodes and links (or why
    they did not run)."""
    g, iso = r.group, r.isolation
    said = []
    for n in iso.bad_nodes if iso else ():
        cluster.bad.add(n, f"bad node in {name}: pairwise all_reduce below the group's "
                           "threshold with every good peer of its group")
        said.append(f"bad node {cluster.name(n)}")
    links = list(iso.bad_links) if iso else []
    if not links and not (iso and iso.bad_nodes) and len(g.nodes) == 2:
        links = [(g.nodes[0], g.nodes[1])]  # two nodes: the group is the one link between them
    for a, b in links:
        cluster.links.append({"hosts": [cluster.host(a), cluster.host(b)], "ranks": [a, b],
                              "group": f"{g.kind} group {g.index}", "evidence": []})
        said.append(f"link {cluster.host(a)}-{cluster.host(b)} in {g.kind} group {g.index}")
    suspects = [n for n in (iso.suspects if iso else ()) if len(g.nodes) > 2]
    if suspects:
        said.append("unconfirmed suspects " + ", ".join(cluster.name(n) for n in suspects))
    if r.isolation_not_run:
        said.append(f"not isolated: {r.isolation_not_run}")
    return f" -> {'; '.join(said)}" if said else ""
