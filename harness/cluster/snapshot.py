"""The snapshot the cluster verdict judges: what one node publishes (`node_summary`, a typed
`NodeSummary`), and the view of the whole snapshot the cluster checks read (`ClusterView`), with
the bad nodes they name (`BadNodes`). See `harness.cluster.plane` for how the snapshot is
gathered.

The snapshot is read once, by `ClusterView.of`, through the wire types (harness.cluster.wire,
harness.cluster.isolate, harness.cluster.group_wire): its head (`SnapshotHead`), every node's
summary (`NodeSummary`, its SDC figures a `NodeSdc`) and the sections the collectives add
(`bandwidth`, `isolation`, `groups_plan`, `groups`). A summary with a field missing or of the
wrong type is never read with a default (unknown is never healthy): its node is named as one
whose summary could not be read (`ClusterView.missing`); a head or a section that cannot be
read is a SnapshotError (the verdict says so)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.base.fabric import FABRIC_ENV_PREFIXES
from harness.base.jsontypes import JSONMapping, JSONObject, JSONValue
from harness.base.redact import Redactor
from harness.cluster.group_wire import GroupsPlan, JobGroups
from harness.cluster.isolate import IsolationResult
from harness.cluster.wire import (
    ClusterBandwidth,
    MissingNode,
    NodeSdc,
    NodeSummary,
    SnapshotError,
    SnapshotHead,
    optional_record,
    required,
    text_map,
)
from harness.judges.cluster import StragglerLimits

if TYPE_CHECKING:
    from harness.report.model import Report
    from harness.results import CheckResult

__all__ = [
    "FACT_KEYS",
    "NODE_FIGURES",
    "SDC_CHECK_ID",
    "BadNodes",
    "ClusterView",
    "left_out",
    "node_figures",
    "node_sdc",
    "node_summary",
    "not_measured",
]

#: Node facts that must be equal on every node (versions, GPU inventory).
FACT_KEYS = ("driver", "cuda", "nccl", "ofi_nccl", "libfabric", "torch", "gpu_count",
             "gpu_model")
#: The node-local SDC check whose measurements a node publishes (harness/cluster/sdc.py).
SDC_CHECK_ID = "PF-GPU-020"
#: Bound on the devices one node publishes SDC digests for.
MAX_SDC_DEVICES = 72
#: Bounds on what one node publishes (the store holds N of these).
MAX_FAILED, MAX_MESSAGE_CHARS = 20, 600
#: Bound of a node's `nothing_judged` message (it quotes a few skip reasons).
MAX_IDLE_CHARS = 2000
#: The node-local figures a node publishes for the straggler check (PF-CLUSTER-006):
#: name -> (the checks that measure it, the start of its measurement's `what`, whether only
#: the judged measurement counts: the one with a threshold, not the rest of the sweep).
NODE_FIGURES: dict[str, tuple[tuple[str, ...], str, bool]] = {
    "node_busbw_gb_s": (("PF-BW-001", "PF-BW-006"), "all_reduce busbw at", True),
    "step_time_s": (("PF-TRAIN-008",), "median step time", False),
}


def node_figures(checks: Iterable[CheckResult]) -> dict[str, float | None]:
    """This node's figures (NODE_FIGURES) from its check results; None where none was measured
    or the value is not a finite number."""
    out: dict[str, float | None] = dict.fromkeys(NODE_FIGURES)
    for record in checks:
        for name, (ids, what, judged) in NODE_FIGURES.items():
            if out[name] is not None or record.id not in ids:
                continue
            for m in record.measurements:
                value = m.value
                if not m.what.startswith(what) or (judged and m.op is None):
                    continue
                if isinstance(value, int | float) and not isinstance(value, bool) and \
                        math.isfinite(value):
                    out[name] = float(value)
                    break
    return out


def node_sdc(checks: Iterable[CheckResult]) -> NodeSdc | None:
    """This node's SDC figures from its PF-GPU-020 record (None when it did not run or
    measured nothing). A figure of the wrong type (a digest that is not text) is a
    SnapshotError naming it: the node publishes what the cluster can read, or nothing."""
    record = next((c for c in checks if c.id == SDC_CHECK_ID), None)
    if record is None:
        return None
    spec: JSONValue = None
    sm_count: JSONValue = None
    devices: JSONObject = {}
    outputs: JSONObject = {}
    totals: JSONObject = {}
    for m in record.measurements:
        what, value = m.what, m.value
        if what == "SDC workload":
            spec = value
        elif what.endswith(" SDC digest") and len(devices) < MAX_SDC_DEVICES:
            devices[what[: -len(" SDC digest")]] = value
        elif what.startswith("SDC node majority ") and what.endswith(" fp32 total"):
            totals[what[len("SDC node majority "): -len(" fp32 total")]] = value
        elif what.startswith("SDC node majority "):
            outputs[what[len("SDC node majority "):]] = value
        elif what == "SDC device SM count":
            sm_count = value
    if not spec or not devices:
        return None
    out = {"spec": spec, "devices": devices, "outputs": outputs, "totals": totals,
           "sm_count": sm_count, "outcome": record.outcome}
    return NodeSdc.from_dict(out, f"this node's {SDC_CHECK_ID} result")


def node_summary(report: Report, *, rank: int, facts: JSONMapping,
                 env: Mapping[str, str], cluster_ids: Iterable[str] = ()) -> NodeSummary:
    """What one node publishes: host, local verdict, failed checks, facts, the NCCL/FI env,
    the figures the straggler check compares, and `nothing_judged`: why its selection judged
    nothing (every check skipped, none of them a cluster check: `cluster_ids`, which the
    cluster step judges), else None. Redacted against this node's secrets (the peers' reports
    and failure files quote it, and they do not know them)."""
    report = report.redacted(env)
    failed = [{"id": c.id, "outcome": c.outcome, "message": c.message[:MAX_MESSAGE_CHARS]}
              for c in report.failed[:MAX_FAILED]]
    idle = report.selection.get("nothing_judged") if report.selection else None
    if idle and set(cluster_ids) & {c.id for c in report.checks}:
        idle = None
    errors = list(report.harness_errors)
    try:
        sdc = node_sdc(report.checks)
    except SnapshotError as exc:  # published as none (PF-CLUSTER-007 says so), and why
        sdc = None
        errors.insert(0, f"{SDC_CHECK_ID}'s figures cannot be published: {exc}")
    wire = Redactor.of(env).obj({
        "rank": rank,
        "host": report.host,
        "verdict": report.verdict,
        "failed": failed,
        "num_failed": len(report.failed),
        "harness_errors": [e[:MAX_MESSAGE_CHARS] for e in errors[:MAX_FAILED]],
        "facts": {k: facts.get(k) for k in FACT_KEYS},
        "env": {k: v for k, v in sorted(env.items()) if k.startswith(FABRIC_ENV_PREFIXES)},
        "figures": node_figures(report.checks),
        "sdc": None if sdc is None else sdc.to_json(),
        "nothing_judged": str(idle)[:MAX_IDLE_CHARS] if idle else None,
    })
    assert isinstance(wire, dict)  # the redactor keeps a JSON object's shape
    return NodeSummary.from_dict(wire, f"rank {rank}'s summary")


class BadNodes:
    """Bad-node entries merged per rank (one node can fail several ways)."""

    def __init__(self, hosts: Mapping[int, str]) -> None:
        self.hosts = hosts
        self.by_rank: dict[int, dict[str, Any]] = {}

    def add(self, rank: int, reason: str, evidence: JSONValue = None) -> None:
        entry = self.by_rank.setdefault(rank, {"host": self.hosts.get(rank, f"rank {rank}"),
                                               "rank": rank, "reason": [], "evidence": []})
        entry["reason"].append(reason)
        if evidence:
            entry["evidence"].extend(evidence if isinstance(evidence, list) else [evidence])

    def entries(self) -> list[JSONObject]:
        return [{**e, "reason": "; ".join(e["reason"])} for _, e in sorted(self.by_rank.items())]


@dataclass(slots=True)
class ClusterView:
    """A gathered snapshot as the cluster checks read it, and what they found (bad nodes,
    links, suspects, stragglers) for the verdict to report. Built once per verdict."""

    head: SnapshotHead
    hosts: dict[int, str]
    nodes: dict[int, NodeSummary]
    missing: dict[int, MissingNode]
    """The nodes that did not report, and those whose summary could not be read."""
    bad: BadNodes
    bandwidth: ClusterBandwidth | None = None
    """The cluster all_reduce (None: not measured; `not_measured` says why)."""
    not_measured: Mapping[str, str] = field(default_factory=dict)
    """Step (`cluster bandwidth`, `pairwise isolation`, `job-shaped groups`) -> why the
    collectives did not measure it."""
    left_out: Mapping[int, str] = field(default_factory=dict)
    """The nodes the collectives ran without (they failed their own checks), rank -> why."""
    isolation_skipped: str = ""
    """Why the pairwise rounds did not run ('' when they ran or were not decided on)."""
    isolation: IsolationResult | None = None
    """The pairwise rounds (PF-CLUSTER-005); None: not run (`not_measured` or
    `isolation_skipped` says why)."""
    groups_plan: GroupsPlan | None = None
    """The master's plan of job-shaped groups (PF-CLUSTER-008); None: no layout given."""
    groups: JobGroups | None = None
    """What the job-shaped groups measured; None: the groups phase did not run."""
    links: list[JSONObject] = field(default_factory=list)
    suspects: list[JSONObject] = field(default_factory=list)
    stragglers: list[JSONObject] = field(default_factory=list)

    @classmethod
    def of(cls, snap: JSONMapping) -> ClusterView:
        """Read the snapshot's head and node summaries (harness.cluster.wire, once per verdict);
        a node whose summary cannot be read is missing, with the field that was wrong. The
        nodes' copy (harness.cluster.verdict.for_nodes) carries no summaries. Raises
        SnapshotError naming what of the head, or of a section the collectives added
        (`bandwidth`, `not_measured`, `left_out`, `isolation_skipped`, `isolation`,
        `groups_plan`, `groups`), is missing or malformed."""
        where = "the cluster snapshot"
        head = SnapshotHead.from_dict(snap, where)
        bw = snap.get("bandwidth")
        left = text_map(snap, "left_out", where, optional=True)
        if not all(r.isdigit() for r in left):
            raise SnapshotError(f"{where}'s 'left_out' is not rank -> why")
        skipped = required(snap, "isolation_skipped", str, where) \
            if "isolation_skipped" in snap else ""
        hosts = dict(head.hosts)
        missing = {int(r): MissingNode.from_dict(m, f"rank {r}'s missing entry")
                   for r, m in snap.get("missing", {}).items()}
        nodes: dict[int, NodeSummary] = {}
        for r, raw in snap.get("nodes", {}).items():
            try:
                nodes[int(r)] = NodeSummary.from_dict(raw, f"rank {r}'s summary")
            except SnapshotError as exc:
                host = raw.get("host") if isinstance(raw, Mapping) else None
                missing[int(r)] = MissingNode(
                    host if isinstance(host, str) and host else hosts.get(int(r), f"rank {r}"),
                    f"published a node summary that cannot be read ({exc}): a node running "
                    "another gpu-preflight version, or a corrupted store")
        hosts.update({r: s.host for r, s in nodes.items() if s.host})
        return cls(head=head, hosts=hosts, nodes=nodes,
                   missing=dict(sorted(missing.items())), bad=BadNodes(hosts),
                   bandwidth=None if bw is None else ClusterBandwidth.from_dict(bw),
                   not_measured=text_map(snap, "not_measured", where, optional=True),
                   left_out={int(r): w for r, w in left.items()}, isolation_skipped=skipped,
                   isolation=optional_record(snap, "isolation", IsolationResult.from_dict, where),
                   groups_plan=optional_record(snap, "groups_plan", GroupsPlan.from_dict, where),
                   groups=optional_record(snap, "groups", JobGroups.from_dict, where))

    @property
    def num_nodes(self) -> int:
        return self.head.num_nodes

    @property
    def tier(self) -> str:
        return self.head.tier

    @property
    def profile(self) -> str:
        return self.head.profile

    @property
    def straggler_limits(self) -> StragglerLimits:
        """PF-CLUSTER-006's limits: the leader's profile's, as the snapshot carries them."""
        return self.head.straggler_limits

    def host(self, rank: int) -> str:
        return self.hosts.get(rank, f"rank {rank}")

    def name(self, rank: int) -> str:
        """`host (rank r)`, as every cluster message names a node."""
        return f"{self.host(rank)} (rank {rank})"


def left_out(snap: JSONMapping, bad_nodes: Iterable[JSONMapping]) -> dict[int, str]:
    """The nodes the collectives leave out after the node-local gather (`bad_nodes`: its verdict's),
    rank -> why, in a few words: did not report, failed its own checks, differs from the rest."""
    view = ClusterView.of(snap)
    out: dict[int, str] = {}
    for b in bad_nodes:
        r = int(b["rank"])
        node = view.nodes.get(r)
        out[r] = ("its summary cannot be read" if node is None and str(r) in snap.get("nodes", {})
                  else "did not report" if node is None
                  else "failed its own checks" if node.verdict != "pass"
                  else "differs from the other nodes (PF-CLUSTER-003)")
    return dict(sorted(out.items()))


def not_measured(snap: JSONMapping, why: Mapping[int, str], tier: str,
                 members: list[int]) -> dict[str, str]:
    """Why the cluster bandwidth and the pairwise isolation were not measured (the collectives
    were skipped after the node-local gather): step -> reason, as every output says it."""
    hosts = snap.get("hosts", {})
    after = ", ".join(f"{hosts.get(str(r), f'rank {r}')} {w}" for r, w in why.items())
    if tier == "preflight":
        reason = (f"stopped after {after} (the preflight tier stops at the first bad node; "
                  "--tier certify measures the nodes that passed)")
    else:
        reason = (f"only {len(members)} node(s) passed their own checks, too few to measure "
                  f"(after {after})")
    return {"cluster bandwidth": reason, "pairwise isolation": reason}
