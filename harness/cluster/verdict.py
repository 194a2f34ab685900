"""The cluster verdict: a pure function of the snapshot the control plane gathered, so that every
node, given the same snapshot, computes the same verdict, exit code and failure text.

The verdict runs the cluster checks (harness.cluster.checks: `@check` specs like the node
checks) on the snapshot with `harness.checking.run_check`; their CheckResult records are the
cluster's check results, and the bad nodes, links, suspects and stragglers they name make the
failure text and the actions (Slurm exclude and drain, HyperPod replace)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from harness.base.blast import DEFAULT_CAP, blast_radius
from harness.base.jsontypes import JSONMapping, JSONObject
from harness.checking import run_check, spec_of
from harness.cluster.checks import CLUSTER_CHECKS
from harness.cluster.snapshot import ClusterView
from harness.cluster.wire import ClusterBandwidth, SnapshotError, required
from harness.topology.hostlist import compress_hostlist

__all__ = [
    "CLUSTER_IDS",
    "ClusterVerdict",
    "decide",
    "for_nodes",
    "verdict_of",
]


@dataclass(slots=True)
class ClusterVerdict:
    """The cluster's verdict, the same on every node."""

    verdict: str
    exit_code: int
    checks: list[JSONObject]
    """The cluster checks' results (CheckResult records, as report.json holds them)."""
    bad_nodes: list[JSONObject]
    bad_links: list[JSONObject] = field(default_factory=list)
    suspects: list[JSONObject] = field(default_factory=list)
    actions: JSONObject = field(default_factory=dict)
    text: str = ""
    stragglers: list[JSONObject] = field(default_factory=list)
    """Nodes PF-CLUSTER-006 found slower than the rest (bad nodes too where it fails)."""
    usage_error: str = ""
    """Set when no node judged anything (every selected check skipped on every node): the
    run ends as an empty selection does, exit 2 on every node."""
    blast_radius: JSONObject = field(default_factory=dict)
    """harness.base.blast: the bad nodes against the drain cap; `suspect` past it (no drain)."""

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> JSONObject:
        return {"verdict": self.verdict, "exit_code": self.exit_code,
                "bad_nodes": self.bad_nodes, "bad_links": self.bad_links,
                "suspects": self.suspects, "stragglers": self.stragglers,
                "actions": self.actions,
                "checks": [c["id"] + ": " + c["outcome"] for c in self.checks],
                "usage_error": self.usage_error or None, "blast_radius": self.blast_radius}


    def to_full(self) -> JSONObject:
        """Every field, for `from_full` on another node (what `for_nodes` publishes)."""
        return asdict(self)

    @classmethod
    def from_full(cls, data: JSONMapping) -> ClusterVerdict:
        """The master's verdict as `for_nodes` published it: every field required, of its
        type (SnapshotError naming the first that is not)."""
        where = "the master's verdict"
        return cls(**{f.name: required(data, f.name, _FULL_TYPES[f.name], where)
                      for f in fields(cls)})


#: The JSON type of each ClusterVerdict field, as `from_full` checks it.
_FULL_TYPES: dict[str, type] = {
    "verdict": str, "exit_code": int, "checks": list, "bad_nodes": list, "bad_links": list,
    "suspects": list, "actions": dict, "text": str, "stragglers": list, "usage_error": str,
    "blast_radius": dict}

#: The IDs of the cluster checks: a node's selection holding one is judged by the cluster step.
CLUSTER_IDS = frozenset(spec_of(judge).id for judge in CLUSTER_CHECKS)
#: The exit status of a usage error (harness.commands.EXIT_USAGE: cluster/ does not import the
#: commands).
EXIT_USAGE = 2


def decide(snap: JSONMapping) -> ClusterVerdict:
    """The verdict from a gathered snapshot (see `harness.cluster.plane` for its keys). A
    snapshot whose head cannot be read (harness.cluster.wire) judges nothing: an error that
    names the field, never a pass."""
    try:
        cluster = ClusterView.of(snap)
    except SnapshotError as exc:
        return _unread(exc)
    if (idle := _nothing_judged(cluster)) is not None:
        text = (f"gpu-preflight could not judge anything on a {cluster.num_nodes}-node cluster "
                f"({cluster.profile}, tier {cluster.tier}): {idle}\n")
        return ClusterVerdict(verdict="error", exit_code=EXIT_USAGE, checks=[], bad_nodes=[],
                              text=text, usage_error=idle)
    checks = [run_check(judge, cluster, profile=cluster.profile, worker="cluster",
                        nodeid=f"cluster::{spec_of(judge).id}").to_dict()
              for judge in CLUSTER_CHECKS]
    bad_nodes = cluster.bad.entries()
    failed = [c for c in checks if c["outcome"] in ("fail", "error")]
    verdict = "fail" if failed or bad_nodes else "pass"
    radius = blast_radius(cluster.num_nodes, len(bad_nodes),
                          cluster.head.drain_cap or DEFAULT_CAP)
    actions = _actions(bad_nodes) if bad_nodes else {}
    if radius["suspect"]:  # a shared cause, likely: the drains are held back, and said
        actions = {k: v for k, v in actions.items() if k not in _DRAINS}
        actions["held_back"] = {k: v for k, v in _actions(bad_nodes).items()
                                if k in _DRAINS}
        actions["suspect"] = radius["why"]
    text = _text(cluster, failed, bad_nodes, cluster.suspects, cluster.links, actions) \
        if verdict == "fail" else ""
    return ClusterVerdict(verdict=verdict, exit_code=0 if verdict == "pass" else 1,
                          checks=checks, bad_nodes=bad_nodes, bad_links=cluster.links,
                          suspects=cluster.suspects, actions=actions, text=text,
                          stragglers=cluster.stragglers, blast_radius=radius)


#: A snapshot for the nodes keeps the all_reduce's per-rank figures up to this many nodes
#: (above, they are on the master's report only: N floats to N nodes grows as N squared).
PER_RANK_FOR_NODES = 64


def for_nodes(snap: JSONMapping) -> JSONObject:
    """The snapshot the master publishes to the other nodes: the verdict it decided (every
    node takes it as is: the same verdict, exit code and failure text) and the snapshot
    without each node's summary or the host list. The full snapshot is ~1 KB a node: 16 MB at 16,384 nodes,
    sent to every node, is 270 GB through one store and a 1.4 s verdict on each node."""
    out = {k: v for k, v in snap.items() if k not in ("nodes", "hosts")}
    out["nodes_reported"] = len(snap.get("nodes", {}))
    bw = out.get("bandwidth")
    if isinstance(bw, Mapping) and len(bw.get("per_rank") or {}) > PER_RANK_FOR_NODES:
        # kept as read when it cannot be: the verdict below names what is wrong with it
        with contextlib.suppress(SnapshotError):
            out["bandwidth"] = replace(ClusterBandwidth.from_dict(bw), per_rank=None,
                                       per_rank_on="the master's report").to_json()
    out["verdict"] = decide(snap).to_full()
    return out


def verdict_of(snap: JSONMapping) -> ClusterVerdict:
    """The verdict of a snapshot: the master's when it published one (`for_nodes`), else
    decided here (the master, and a node that lost the master)."""
    if isinstance(snap.get("verdict"), Mapping):
        try:
            return ClusterVerdict.from_full(snap["verdict"])
        except SnapshotError as exc:
            return _unread(exc)
    return decide(snap)


def _unread(exc: SnapshotError) -> ClusterVerdict:
    """The verdict of a snapshot that cannot be read: an error naming what, never a pass."""
    text = f"gpu-preflight could not read the cluster snapshot, so judged nothing: {exc}\n"
    return ClusterVerdict(verdict="error", exit_code=1, checks=[], bad_nodes=[], text=text)


def _nothing_judged(cluster: ClusterView) -> str | None:
    """Why the whole cluster judged nothing: every node reported, and on every node each
    selected check was skipped (a node's skip may be another node's judgement: the leader runs
    the multi-node test the others take part in). None when any node judged anything."""
    if cluster.missing or len(cluster.nodes) < cluster.num_nodes:
        return None
    said = [cluster.nodes[r].nothing_judged for r in sorted(cluster.nodes)]
    if not said or not all(said):
        return None
    return f"on every node, {said[0]}"


#: The actions that take a node out of service: held back on a suspect run (harness.base.blast).
_DRAINS = ("slurm_drain", "hyperpod_replace")


def _actions(bad_nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What to do about the bad nodes: Slurm exclude list and drain, HyperPod replace."""
    names = [b["host"] for b in bad_nodes if not b["host"].startswith("rank ")]
    reason = "gpu-preflight: " + "; ".join(f"{b['host']}: {b['reason']}" for b in bad_nodes)
    out: dict[str, Any] = {
        "sagemaker_failure_reason": reason[:1024],
    }
    named = set(names)  # a set: membership per bad node stays O(1) (linear verdict)
    if names:
        out["slurm_exclude"] = compress_hostlist(names)
        out["slurm_drain"] = [
            f'scontrol update nodename={b["host"]} state=drain '
            f'reason="gpu-preflight: {_quote(b["reason"])[:200]}"'
            for b in bad_nodes if b["host"] in named]
        out["hyperpod_replace"] = [
            f'scontrol update nodename={h} state=fail reason="Action:Replace"' for h in names]
    return out


def _not_measured(said: Mapping[str, str]) -> str:
    """What the cluster step did not measure and why (one clause per reason), or ''."""
    by_reason: dict[str, list[str]] = {}
    for step, why in said.items():
        by_reason.setdefault(why, []).append(step)
    return " | ".join(f"{' and '.join(steps)} not measured: {why}"
                      for why, steps in by_reason.items())


def _quote(text: str) -> str:
    return text.replace('"', "'").replace("\n", " ")


def _text(cluster: ClusterView, failed: Sequence[Mapping[str, Any]],
          bad_nodes: Sequence[Mapping[str, Any]], suspects: Sequence[Mapping[str, Any]],
          links: Sequence[Mapping[str, Any]], actions: Mapping[str, Any]) -> str:
    """The failure file: its first 1024 characters name the bad nodes on their own."""
    head = (f"gpu-preflight FAILED on a {cluster.num_nodes}-node cluster "
            f"({cluster.profile}, tier {cluster.tier}): ")
    parts = []
    if actions.get("suspect"):
        head += f"{actions['suspect']}. "
    if bad_nodes:
        parts.append(f"bad nodes: {', '.join(b['host'] for b in bad_nodes)}. " + " | ".join(
            f"{b['host']} (rank {b['rank']}): {b['reason']}" for b in bad_nodes))
    if links:
        parts.append("bad links: " + ", ".join("-".join(lk["hosts"]) + (
            f" in {lk['group']}" if lk.get("group") else "") for lk in links))
    if suspects:
        parts.append("suspects: " + ", ".join(s["host"] for s in suspects))
    if not bad_nodes and not links:
        parts.extend(c["message"] for c in failed)
    if actions.get("slurm_exclude"):
        parts.append(f"Slurm: --exclude={actions['slurm_exclude']}")
    unmeasured = _not_measured(cluster.not_measured)
    if unmeasured:
        parts.append(unmeasured)
    head += " | ".join(parts)
    lines = [head[:1024], "", "Details:"]
    lines += [c["message"] for c in failed]
    for b in bad_nodes:
        lines.append(f"{b['host']} (rank {b['rank']}): {b['reason']}")
        lines += [f"  {e}" for e in b["evidence"][:10]]
    for key in ("slurm_exclude", "slurm_drain", "hyperpod_replace"):
        if key in actions:
            value = actions[key]
            lines.append(f"{key}: " + (value if isinstance(value, str) else "\n  " +
                                       "\n  ".join(value)))
    for key, value in (actions.get("held_back") or {}).items():
        lines.append(f"{key} (held back: suspect run; run them by hand once the shared cause "
                     "is ruled out):\n  " + "\n  ".join(value))
    return "\n".join(lines) + "\n"
