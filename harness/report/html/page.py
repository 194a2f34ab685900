"""The report page's frame and its text sections: the style sheet, escaping, the verdict header
("N bad of M nodes"), the failures with their remedies, the warnings and the list of reports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from harness.report.model import Report
from harness.report.verdicts import RunSummary, is_cluster_check
from harness.results import CheckResult

__all__ = ["CSS", "esc", "failures_section", "header", "reports_section", "warnings_section"]

#: A check that failed on more nodes than this shows one message and folds the others.
FOLD_ROWS = 8

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:16px 0 6px}
.meta{color:#555}.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;
font-weight:600;margin:8px 0;font-size:18px}.v-pass{background:#2e7d32}
.v-fail,.v-error{background:#c62828}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4;white-space:nowrap}
.matrix td.c{width:22px;text-align:center;font-weight:700;padding:2px}
.matrix th.id{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;padding:6px 2px;
font-weight:500;font-size:12px}
.o-pass{background:#c8e6c9;color:#1b5e20}.o-warn{background:#fff59d;color:#795548}
.o-skip{background:#eeeeee;color:#777}.o-fail{background:#ef9a9a;color:#b71c1c}
.o-error{background:#e57373;color:#fff}.o-none{background:#fff}
.o-interrupted,.o-missing{background:#ffcc80;color:#6d4c41}
tr.bad th{color:#c62828}tr.n-pass th{background:#e8f5e9}tr.n-fail th,tr.n-error th,
tr.n-interrupted th,tr.n-missing th,tr.named th{background:#ffebee}
pre{white-space:pre-wrap;margin:2px 0;font:12px/1.4 ui-monospace,monospace}
.band{border:2px solid #bbb;border-radius:6px;padding:4px 12px;margin:12px 0;background:#fafafa}
.band.b-fail{border-color:#c62828}.band.b-pass{border-color:#2e7d32}
.remedy{color:#1a4d8f}.legend span{display:inline-block;padding:1px 8px;margin-right:4px;border-radius:3px}
.slow{color:#c62828;font-weight:600}details{margin:4px 0}summary{cursor:pointer}
ul.why{margin:0;padding-left:18px}svg{display:block;margin:6px 0}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""


def esc(value: object) -> str:
    return escape(str(value), quote=True)


def header(summary: RunSummary, reports: Sequence[Report], source: str,
           generated_at: str) -> str:
    """The title, `FAIL: 1 bad of 4 nodes` with the bad hosts, and what the run was."""
    verdict = summary.verdict
    profiles = sorted({r.profile or "?" for r in reports})
    tiers = sorted({r.tier or "?" for r in reports})
    starts = sorted(r.started_at for r in reports if r.started_at)
    ends = sorted(r.finished_at for r in reports if r.finished_at)
    bad = summary.bad
    names = ", ".join(n.host for n in bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8
                                                   else "")
    parts = ["<h1>gpu-preflight report</h1>",
             f'<div class="verdict v-{verdict}" id="verdict">{verdict.upper()}: '
             f"{esc(summary.line)}{': ' + esc(names) if bad else ''}</div>"]
    cluster = summary.cluster.get("verdict")
    if cluster:
        parts.append(f'<div class="meta">cluster verdict: <b>{esc(cluster)}</b></div>')
    parts.append(
        f'<div class="meta">profile {esc(", ".join(profiles))} · tier {esc(", ".join(tiers))} · '
        f'{esc(starts[0] if starts else "?")} → {esc(ends[-1] if ends else "?")} · source '
        f"{esc(source)} · generated {esc(generated_at)}</div>")
    return "\n".join(parts)


def failures_section(reports: Sequence[Report]) -> str:
    """Each node-local check that failed, on which nodes, its message and remedy."""
    by_check: dict[str, list[tuple[str, CheckResult]]] = {}
    for r in reports:
        seen: set[str] = set()
        for c in r.checks:
            if c.failed and not is_cluster_check(c.id) and c.id not in seen:
                seen.add(c.id)
                by_check.setdefault(c.id, []).append((r.host, c))
    errors = [(r.host, e) for r in reports for e in r.harness_errors]
    if not by_check and not errors:
        return "<h2>Failures</h2><p>No node-local check failed.</p>"
    parts = [f"<h2>Failures ({sum(len(v) for v in by_check.values())} on "
             f"{len({h for v in by_check.values() for h, _ in v})} nodes)</h2>"]
    for cid in sorted(by_check):
        hits = by_check[cid]
        first = hits[0][1]
        remedies = sorted({c.remedy for _, c in hits} - {""})
        shown = ", ".join(h for h, _ in hits[:20]) + (" ..." if len(hits) > 20 else "")
        parts.append(f'<h3 id="f-{esc(cid)}">{esc(cid)} {esc(first.title)} — failed on '
                     f"{len(hits)} of {len(reports)} nodes: {esc(shown)}</h3>")
        rows = "".join(f"<tr><th>{esc(host)}</th><td>{esc(c.outcome)}</td>"
                       f"<td><pre>{esc(c.message)}</pre></td></tr>" for host, c in hits)
        table = f"<table><tr><th>host</th><th>outcome</th><th>message</th></tr>{rows}</table>"
        if len(hits) > FOLD_ROWS:  # many nodes, one cause: show one message, fold the rest
            table = (f"<pre>{esc(first.message)}</pre><details><summary>every "
                     f"node's message ({len(hits)})</summary>{table}</details>")
        parts.append(table)
        parts.extend(f'<p class="remedy"><b>Remedy:</b> {esc(r)}</p>' for r in remedies)
    if errors:
        parts.append("<h3>Harness errors (the checks could not be run or judged)</h3><table>"
                     + "".join(f"<tr><th>{esc(h)}</th><td><pre>{esc(e)}</pre></td></tr>"
                               for h, e in errors) + "</table>")
    return "\n".join(parts)


def warnings_section(reports: Sequence[Report], problems: Sequence[str]) -> str:
    items = []
    for r in reports:
        for c in r.checks:
            if c.outcome == "warn":
                items.append((r.host, c.id, c.message))
        uploads = r.extra.get("uploads")
        if isinstance(uploads, Mapping):
            items.extend((r.host, "uploads", str(w))
                         for w in uploads.get("warnings") or [])
    items.extend(("-", "source", p) for p in problems)
    if not items:
        return ""
    rows = "".join(f"<tr><th>{esc(h)}</th><td>{esc(c)}</td><td><pre>{esc(m)}</pre></td></tr>"
                   for h, c, m in items)
    return (f"<h2>Warnings ({len(items)})</h2><details><summary>show</summary><table><tr>"
            f"<th>host</th><th>what</th><th>message</th></tr>{rows}</table></details>")


def reports_section(reports: Sequence[Report]) -> str:
    """Where each node's report came from (folded: one row per node)."""
    rows = []
    for r in reports:
        tally = ", ".join(f"{n} {k}" for k, n in sorted(r.counts().items()) if n)
        rows.append(
            f"<tr><th>{esc(r.host)}</th><td>{esc(r.verdict)}</td>"
            f"<td>{esc(r.profile)}</td><td>{esc(r.tier)}</td>"
            f"<td>{esc(tally)}</td><td>{float(r.duration_s):.1f} s</td>"
            f"<td>{esc(r.started_at)}</td><td>{esc(r.harness_version)}</td>"
            f"<td>{esc(r.source)}</td></tr>")
    return (f"<h2>Reports ({len(reports)})</h2><details><summary>every node's report.json"
            "</summary><table><tr><th>host</th><th>report verdict</th><th>profile</th>"
            "<th>tier</th><th>checks</th><th>duration</th><th>started</th><th>harness</th>"
            "<th>report</th></tr>" + "".join(rows) + "</table></details>")
