"""The report page's node sections: the cluster-wide checks in their own band, the bad nodes
with why each is bad, and the node x check matrix with rows coloured by the node's own outcome
(bad nodes first, passing nodes folded)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.report.html.page import esc
from harness.report.model import Report
from harness.report.verdicts import NodeVerdict, RunSummary, is_cluster_check
from harness.results import CheckResult

__all__ = ["bad_nodes_section", "cluster_band", "matrix_section"]

_MARK = {"pass": "✓", "warn": "!", "skip": "–", "fail": "✗", "error": "E", None: ""}
_ORDER = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "pass": 4}


def cluster_band(summary: RunSummary) -> str:
    """The PF-CLUSTER-* checks, judged once for the whole cluster (not per node)."""
    checks = summary.cluster_checks
    if not checks:
        return ""
    state = "fail" if any(c.failed for c in checks) else "pass"
    rows = "".join(
        f'<tr><th>{esc(c.id)}</th><td class="o-{esc(c.outcome)}">{esc(c.outcome)}</td>'
        f"<td>{esc(c.title)}</td><td><pre>{esc(c.message)}</pre></td></tr>" for c in checks)
    actions = summary.cluster.get("actions") or {}
    extra = ""
    if isinstance(actions, Mapping) and actions.get("slurm_exclude"):
        extra = (f'<p class="meta">Slurm: <code>--exclude={esc(actions["slurm_exclude"])}'
                 "</code></p>")
    return (f'<div class="band b-{state}" id="cluster"><h2>Cluster-wide checks '
            f"({len(checks)}, judged once for all {len(summary.nodes)} nodes)</h2>"
            "<table><tr><th>check</th><th>outcome</th><th>what</th><th>message</th></tr>"
            f"{rows}</table>{extra}</div>")


def _why(node: NodeVerdict) -> str:
    return '<ul class="why">' + "".join(f"<li>{esc(w)}</li>" for w in node.why) + "</ul>"


def bad_nodes_section(summary: RunSummary) -> str:
    """Each bad node, with its own verdict, who named it and why; and the exclude list."""
    bad = summary.bad
    if not bad:
        return ('<h2 id="bad">Bad nodes (0)</h2><p>None: every node passed its own checks and '
                "no cluster verdict named one.</p>")
    by = {"cluster": "cluster verdict", "node": "own checks"}
    rows = "".join(
        f'<tr class="bad n-{esc(n.verdict)}"><th>{esc(n.host)}</th>'
        f'<td class="o-{esc(n.verdict)}">{esc(n.verdict)}</td>'
        f"<td>{esc(', '.join(by.get(b, b) for b in n.named_by))}</td><td>{_why(n)}</td></tr>"
        for n in bad)
    hosts = " ".join(n.host for n in bad)
    return (f'<h2 id="bad">Bad nodes ({len(bad)} of {len(summary.nodes)})</h2><table><tr>'
            "<th>host</th><th>own verdict</th><th>named by</th><th>why</th></tr>"
            f"{rows}</table><p class=\"meta\">As a list (e.g. a Slurm exclude list): "
            f"<code>{esc(hosts)}</code></p>")


def _worst(report: Report) -> dict[str, CheckResult]:
    """The report's node-local checks by ID (several nodeids of one ID: the worst outcome)."""
    out: dict[str, CheckResult] = {}
    for c in report.checks:
        if is_cluster_check(c.id):
            continue
        known = out.get(c.id)
        if known is None or _ORDER.get(c.outcome, 9) < _ORDER.get(known.outcome, 9):
            out[c.id] = c
    return out


def _rows(nodes: Sequence[NodeVerdict], checks: Mapping[str, Mapping[str, CheckResult]],
          ids: Sequence[str]) -> str:
    rows = []
    for n in nodes:
        mine = checks.get(n.host, {})
        cells = []
        for cid in ids:
            c = mine.get(cid)
            outcome = c.outcome if c else None
            tip = f"{n.host} {cid}: {outcome or 'not run'}" + (
                f" — {c.message}" if c and c.message and c.failed else "")
            cells.append(f'<td class="c o-{outcome or "none"}" title="{esc(tip)}">'
                         f"{_MARK.get(outcome, '?')}</td>")
        cls = f"n-{n.verdict}" + (" bad" if n.bad else "") + (
            " named" if "cluster" in n.named_by else "")
        rows.append(f'<tr class="{cls}"><th>{esc(n.host)}</th>'
                    f'<td class="o-{esc(n.verdict)}">{esc(n.verdict)}</td>'
                    + "".join(cells) + "</tr>")
    return "".join(rows)


def matrix_section(summary: RunSummary, reports: Sequence[Report]) -> str:
    """Node x node-local check; the bad nodes' rows first, the passing ones in a fold."""
    checks = {r.host: _worst(r) for r in reports}
    ids = sorted({cid for per in checks.values() for cid in per})
    titles: dict[str, str] = {}
    for per in checks.values():
        for cid, c in per.items():
            titles.setdefault(cid, c.title)
    head = ('<tr><th>host</th><th>own verdict</th>'
            + "".join(f'<th class="id" title="{esc(titles[c])}">{esc(c)}</th>' for c in ids)
            + "</tr>")
    legend = " ".join(f'<span class="o-{o}">{_MARK[o]} {o}</span>'
                      for o in ("pass", "warn", "skip", "fail", "error"))
    bad = [n for n in summary.nodes if n.bad]
    good = [n for n in summary.nodes if not n.bad]
    parts = [f"<h2>Node × check ({len(summary.nodes)} nodes, {len(ids)} node-local checks)</h2>",
             f'<p class="legend">{legend} <span class="o-none">(blank) not run</span>; a row is '
             "coloured by the node's own verdict (the cluster-wide checks are in their band "
             "above)</p>"]
    if bad:
        parts.append(f'<table class="matrix" id="matrix-bad">{head}'
                     f"{_rows(bad, checks, ids)}</table>")
    if good:
        opened = " open" if not bad and len(good) <= 16 else ""
        parts.append(f'<details{opened} id="matrix-pass"><summary>{len(good)} passing nodes'
                     f'</summary><table class="matrix">{head}{_rows(good, checks, ids)}'
                     "</table></details>")
    return "\n".join(parts)
