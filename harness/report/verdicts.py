"""Which nodes of a run are bad, and why, read from many nodes' typed reports (report.json
files read by `Report.from_dict`):
one node's own verdict (its checks without the cluster-wide ones), the cluster's verdict, and
the summary that `preflight report` prints, writes as JSON (`--json`) and draws as HTML.

A multi-node run adds the cluster checks (PF-CLUSTER-*) to every node's report, so a cluster
that fails marks every node's `verdict` fail; a node is judged here on its own checks, and is
bad when they fail or when the cluster's verdict names it. Pure functions, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.report.model import Report
from harness.results import CheckResult

__all__ = [
    "CLUSTER_PREFIX",
    "BadNode",
    "NodeVerdict",
    "RunSummary",
    "bad_nodes",
    "natural_key",
    "summarise",
]

#: The cluster-wide checks (judged once for all nodes; harness.cluster) share this ID prefix.
CLUSTER_PREFIX = "PF-CLUSTER-"
#: Longest reason shown for one failed check.
WHY_CHARS = 240
_WORST = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "pass": 4}


def natural_key(text: str) -> tuple[int | str, ...]:
    """Sort `algo-2` before `algo-10`."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def is_cluster_check(check_id: str) -> bool:
    return check_id.startswith(CLUSTER_PREFIX)


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    """One node: its own verdict, whether it is bad, and why (each reason one line)."""

    host: str
    verdict: str
    """The node's own checks: `pass`, `fail`, `error`, `interrupted`, or `missing` (the
    cluster named it but no report of it was found)."""
    bad: bool
    why: tuple[str, ...] = ()
    named_by: tuple[str, ...] = ()
    """`cluster` (the multi-node verdict named it) and/or `node` (its own checks)."""
    rank: int | None = None
    failed: tuple[str, ...] = ()
    """IDs of its own checks that failed or errored."""

    def to_dict(self) -> JSONObject:
        return {"host": self.host, "verdict": self.verdict, "bad": self.bad,
                "why": list(self.why), "named_by": list(self.named_by), "rank": self.rank,
                "failed": list(self.failed)}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Every node of a run (bad ones first) and the cluster's verdict."""

    verdict: str
    nodes: tuple[NodeVerdict, ...]
    cluster_checks: tuple[CheckResult, ...] = ()
    """The PF-CLUSTER-* results (the same on every node: the worst seen of each)."""
    cluster: JSONMapping = field(default_factory=dict)
    """The cluster section of the first report holding one (bandwidth, isolation, actions)."""
    hosts_by_rank: Mapping[int, str] = field(default_factory=dict)

    @property
    def bad(self) -> list[NodeVerdict]:
        return [n for n in self.nodes if n.bad]

    @property
    def line(self) -> str:
        """`1 bad of 4 nodes`."""
        return f"{len(self.bad)} bad of {len(self.nodes)} nodes"

    def to_dict(self) -> JSONObject:
        """`preflight report --json`: the same facts as the HTML page."""
        return {
            "schema": "gpu-preflight.run-summary/v1",
            "verdict": self.verdict,
            "summary": self.line,
            "num_nodes": len(self.nodes),
            "num_bad": len(self.bad),
            "bad_hosts": [n.host for n in self.bad],
            "nodes": [n.to_dict() for n in self.nodes],
            "cluster": {
                "verdict": self.cluster.get("verdict"),
                "checks": [{"id": c.id, "outcome": c.outcome, "title": c.title,
                            "message": c.message} for c in self.cluster_checks],
                "bad_links": [{"hosts": list(b.get("hosts") or [])}
                              for b in self.cluster.get("bad_links") or []
                              if isinstance(b, Mapping)],
                "suspects": [s.get("host") for s in self.cluster.get("suspects") or []
                             if isinstance(s, Mapping)],
                "actions": dict(self.cluster.get("actions") or {}),
            },
        }


def _short(text: str, width: int = WHY_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _reason(c: CheckResult) -> str:
    """`PF-NET-003: <message without its ID prefix and remedy>`."""
    message = c.message.removeprefix(f"[{c.id}] ")
    if c.remedy and message.endswith(f"; {c.remedy}"):
        message = message[: -len(c.remedy) - 2]
    return _short(f"{c.id}: {message or c.outcome}")


def cluster_section(report: Report) -> JSONMapping | None:
    """The report's `cluster` section (the multi-node verdict), when it holds one."""
    section = report.extra.get("cluster")
    return section if isinstance(section, Mapping) else None


def own_verdict(report: Report) -> tuple[str, list[CheckResult]]:
    """The node's verdict on its own checks (the cluster checks left out), and the failed ones.
    No own check result, a harness error or a usage error is never a pass."""
    own = [c for c in report.checks if not is_cluster_check(c.id)]
    failed = [c for c in own if c.failed]
    if report.interrupted:
        return "interrupted", failed
    if failed:
        return "fail", failed
    if report.harness_errors or report.usage_error or not own:
        return "error", failed
    return "pass", failed


def _cluster_entries(section: object) -> Iterable[tuple[str, str, int | None]]:
    """(host, reason, rank) for each of a cluster section's `bad_nodes`."""
    if not isinstance(section, Mapping):
        return
    for entry in section.get("bad_nodes") or []:
        if isinstance(entry, str):
            yield entry, "", None
        elif isinstance(entry, Mapping):
            host = entry.get("host") or entry.get("node") or entry.get("name")
            reason = entry.get("reason") or entry.get("evidence") or ""
            if isinstance(reason, list | tuple):
                reason = "; ".join(str(r) for r in reason)
            pairs = _pair_evidence(entry.get("evidence"))
            reason = f"{reason} ({pairs})" if pairs and reason else reason or pairs
            rank = entry.get("rank")
            if host:
                yield str(host), str(reason), rank if isinstance(rank, int) else None


def _pair_evidence(evidence: object) -> str:
    """`round 1 with node-0 57.8 GB/s, round 2 with node-3 error` from the isolation evidence
    the cluster verdict keeps per bad node (dicts with round, peer, busbw_gb_s, error)."""
    if not isinstance(evidence, list):
        return ""
    said = []
    for e in evidence:
        if isinstance(e, Mapping) and e.get("peer") is not None:
            value = e.get("busbw_gb_s")
            what = "error" if e.get("error") or not isinstance(value, int | float) else (
                f"{value:.4g} GB/s")
            said.append(f"round {e.get('round', '?')} with {e['peer']} {what}")
    return ", ".join(said)


def _ranks(reports: Sequence[Report]) -> dict[int, str]:
    """rank -> host, from each report's `cluster.node_rank` and the cluster's named nodes."""
    out: dict[int, str] = {}
    for r in reports:
        section = cluster_section(r)
        if section is None:
            continue
        rank = section.get("node_rank")
        if isinstance(rank, int) and r.host:
            out[rank] = r.host
        for key in ("bad_nodes", "suspects"):
            for e in section.get(key) or []:
                if (isinstance(e, Mapping) and isinstance(e.get("rank"), int)
                        and e.get("host")):
                    out.setdefault(e["rank"], str(e["host"]))
    return out


def _cluster_checks(reports: Sequence[Report]) -> list[CheckResult]:
    worst: dict[str, CheckResult] = {}
    for r in reports:
        for c in r.checks:
            known = worst.get(c.id)
            if is_cluster_check(c.id) and (
                    known is None or _WORST.get(c.outcome, 9) < _WORST.get(known.outcome, 9)):
                worst[c.id] = c
    return [worst[k] for k in sorted(worst, key=natural_key)]


def summarise(reports: Sequence[Report]) -> RunSummary:
    """Every node's verdict (bad nodes first, each group in natural host order) and the run's."""
    sections = [s for s in map(cluster_section, reports) if s is not None]
    ranks = _ranks(reports)
    rank_of = {h: k for k, h in ranks.items()}
    named: dict[str, list[str]] = {}
    for section in sections:
        for host, reason, rank in _cluster_entries(section):
            reasons = named.setdefault(host, [])
            if reason and _short(reason) not in reasons:
                reasons.append(_short(reason))
            if rank is not None:
                rank_of.setdefault(host, rank)
    nodes: dict[str, NodeVerdict] = {}
    for r in reports:
        host = r.host or r.source or "?"
        verdict, failed = own_verdict(r)
        why = [_reason(c) for c in failed]
        why += [_short(f"harness: {e}") for e in r.harness_errors]
        if verdict == "error" and not why:
            why.append(r.usage_error or "no check reported a result")
        if verdict == "interrupted":
            why.append("interrupted: " + str((r.interrupted or {}).get("signal", "signal")))
        by = (("cluster",) if host in named else ()) + (("node",) if verdict != "pass" else ())
        nodes[host] = NodeVerdict(
            host=host, verdict=verdict, bad=bool(by), why=tuple(named.get(host, []) + why),
            named_by=by, rank=rank_of.get(host), failed=tuple(c.id for c in failed))
    for host, reasons in named.items():
        if host not in nodes:
            nodes[host] = NodeVerdict(
                host=host, verdict="missing", bad=True, named_by=("cluster",),
                why=(*(reasons or ["named by the cluster verdict"]),
                     "no report.json of this node was found"), rank=rank_of.get(host))
    ordered = sorted(nodes.values(), key=lambda n: (not n.bad, natural_key(n.host)))
    checks = _cluster_checks(reports)
    failed_cluster = any(c.failed for c in checks) or any(
        s.get("verdict") not in (None, "pass") for s in sections)
    verdict = "fail" if failed_cluster or any(n.bad for n in ordered) else "pass"
    return RunSummary(verdict=verdict, nodes=tuple(ordered), cluster_checks=tuple(checks),
                      cluster=sections[0] if sections else {}, hosts_by_rank=ranks)


@dataclass(frozen=True, slots=True)
class BadNode:
    """A node to drain or replace, and why (the cluster verdict's evidence, or its own checks)."""

    host: str
    reasons: tuple[str, ...]
    source: str
    """`cluster` (named by the multi-node verdict) or `node` (its own checks failed)."""


def bad_nodes(reports: Sequence[Report]) -> list[BadNode]:
    """The bad nodes of `summarise`, in natural host order (the Slurm exclude list's order)."""
    bad = sorted(summarise(reports).bad, key=lambda n: natural_key(n.host))
    return [BadNode(host=n.host, reasons=n.why, source=n.named_by[0]) for n in bad]
