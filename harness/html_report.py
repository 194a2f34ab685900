"""`preflight report SOURCE --html out.html`: one self-contained HTML page (inline CSS and SVG, no
external URL, no script) from the report.json files of many nodes, read from a folder tree or an
S3 prefix: the verdict, the bad nodes, the node x check matrix, busbw by message size per node,
and the failures with their remedies."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from html import escape
from pathlib import Path
from typing import Any

from harness.figures import (
    Curve,
    bad_nodes,
    bandwidth_curves,
    format_size,
    natural_key,
)

__all__ = ["ReportSet", "ReportSourceError", "load_reports", "render_html", "write_html"]

SCHEMA_PREFIX = "gpu-preflight.report/"
#: Series named in a plot's legend; more nodes than this are drawn but summarised.
MAX_LEGEND = 24
#: A check that failed on more nodes than this shows one message and folds the others.
FOLD_ROWS = 8
#: A node whose busbw at the largest size is below this fraction of the median is flagged.
SLOW_FRACTION = 0.9

_OUTCOME_ORDER = {"error": 0, "fail": 1, "warn": 2, "skip": 3, "pass": 4}
_OUTCOME_MARK = {"pass": "✓", "warn": "!", "skip": "–", "fail": "✗", "error": "E", None: ""}
_PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f",
            "#e377c2", "#ff7f0e", "#393b79", "#637939", "#8c6d31")
_BAD_COLOUR = "#d62728"


class ReportSourceError(Exception):
    """The source holds no readable report; str() says what was looked at."""


@dataclass(slots=True)
class ReportSet:
    """The newest report of every host found in a source, and what was skipped and why."""

    source: str
    reports: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _add(found: dict[str, dict[str, Any]], where: str, raw: bytes | str,
         problems: list[str]) -> None:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        problems.append(f"{where}: not JSON ({exc})")
        return
    if not isinstance(data, dict) or not str(data.get("schema", "")).startswith(SCHEMA_PREFIX):
        problems.append(f"{where}: not a gpu-preflight report (no schema {SCHEMA_PREFIX}v1)")
        return
    # Reports written by preflight are redacted already; ones from elsewhere may not be.
    from harness.redact import Redactor

    data = Redactor().obj(data)
    host = str(data.get("host") or where)
    data["_source"] = where
    known = found.get(host)
    if known is None or str(data.get("started_at", "")) > str(known.get("started_at", "")):
        if known is not None:
            problems.append(f"{known['_source']}: older report of {host}, not shown")
        found[host] = data
    else:
        problems.append(f"{where}: older report of {host}, not shown")


def load_reports(source: str) -> ReportSet:
    """Every report.json under a folder (or one file) or an `s3://` prefix, newest per host."""
    found: dict[str, dict[str, Any]] = {}
    result = ReportSet(source=source)
    if source.startswith("s3://"):
        from harness.publish import download_reports

        try:
            items = download_reports(source)
        except Exception as exc:  # boto3 missing, no credentials, no such bucket
            from harness.publish import _describe

            raise ReportSourceError(f"cannot read {source}: {_describe(exc)}") from None
        for where, raw in items:
            _add(found, where, raw, result.problems)
    else:
        path = Path(source)
        if not path.exists():
            raise ReportSourceError(f"{source} does not exist")
        files = [path] if path.is_file() else sorted(path.rglob("report.json"))
        for file in files:
            try:
                raw = file.read_bytes()
            except OSError as exc:
                result.problems.append(f"{file}: {exc.strerror}")
                continue
            _add(found, str(file), raw, result.problems)
    if not found:
        extra = f" ({'; '.join(result.problems[:3])})" if result.problems else ""
        raise ReportSourceError(f"no gpu-preflight report.json found under {source}{extra}")
    result.reports = [found[h] for h in sorted(found, key=natural_key)]
    return result


# ----------------------------------------------------------------------------------- rendering

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#555}.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;
font-weight:600;margin:8px 0}.v-pass{background:#2e7d32}.v-fail,.v-error{background:#c62828}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4;white-space:nowrap}
.matrix td.c{width:22px;text-align:center;font-weight:700;padding:2px}
.matrix th.id{writing-mode:vertical-rl;transform:rotate(180deg);white-space:nowrap;padding:6px 2px;
font-weight:500;font-size:12px}
.o-pass{background:#c8e6c9;color:#1b5e20}.o-warn{background:#fff59d;color:#795548}
.o-skip{background:#eeeeee;color:#777}.o-fail{background:#ef9a9a;color:#b71c1c}
.o-error{background:#e57373;color:#fff}.o-none{background:#fff}
tr.bad th{color:#c62828}pre{white-space:pre-wrap;margin:2px 0;font:12px/1.4 ui-monospace,monospace}
.remedy{color:#1a4d8f}.legend span{display:inline-block;padding:1px 8px;margin-right:4px;border-radius:3px}
.slow{color:#c62828;font-weight:600}details{margin:4px 0}summary{cursor:pointer}
svg text{font:11px system-ui,sans-serif;fill:#333}
"""


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _checks(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's checks by ID (a check with several nodeids keeps its worst outcome)."""
    by_id: dict[str, dict[str, Any]] = {}
    for c in report.get("checks") or []:
        cid = str(c.get("id", "?"))
        known = by_id.get(cid)
        if known is None or (_OUTCOME_ORDER.get(c.get("outcome"), 9)
                             < _OUTCOME_ORDER.get(known.get("outcome"), 9)):
            by_id[cid] = c
    return by_id


def _header(rs: ReportSet, generated_at: str) -> str:
    reports = rs.reports
    failed = [r for r in reports if r.get("verdict") != "pass"]
    verdict = "pass" if not failed else "fail"
    profiles = sorted({str((r.get("profile") or {}).get("name", "?")) for r in reports})
    tiers = sorted({str(r.get("tier", "?")) for r in reports})
    starts = sorted(str(r.get("started_at", "")) for r in reports if r.get("started_at"))
    ends = sorted(str(r.get("finished_at", "")) for r in reports if r.get("finished_at"))
    cluster = next((r["cluster"] for r in reports if isinstance(r.get("cluster"), Mapping)), None)
    line = (f"{len(reports) - len(failed)} of {len(reports)} nodes passed"
            if failed else f"all {len(reports)} nodes passed")
    parts = [
        "<h1>gpu-preflight report</h1>",
        f'<div class="verdict v-{verdict}">{verdict.upper()}: {_e(line)}</div>',
    ]
    if cluster is not None and cluster.get("verdict"):
        parts.append(f'<div class="meta">cluster verdict: <b>{_e(cluster["verdict"])}</b></div>')
    parts.append(
        f'<div class="meta">profile {_e(", ".join(profiles))} · tier {_e(", ".join(tiers))} · '
        f'{_e(starts[0] if starts else "?")} → {_e(ends[-1] if ends else "?")} · source '
        f'{_e(rs.source)} · generated {_e(generated_at)}</div>'
    )
    return "\n".join(parts)


def _bad_nodes_section(reports: Sequence[Mapping[str, Any]]) -> str:
    bad = bad_nodes(reports)
    if not bad:
        return "<h2>Bad nodes</h2><p>None: no node failed and no cluster verdict named one.</p>"
    rows = "".join(
        f"<tr><th>{_e(b.host)}</th><td>{'cluster verdict' if b.source == 'cluster' else 'own checks'}"
        f"</td><td>{'<br>'.join(_e(r) for r in b.reasons) or '-'}</td></tr>" for b in bad)
    hosts = " ".join(b.host for b in bad)
    return (f"<h2>Bad nodes ({len(bad)})</h2><table><tr><th>host</th><th>named by</th>"
            f"<th>evidence</th></tr>{rows}</table>"
            f'<p class="meta">As a list (e.g. a Slurm exclude list): <code>{_e(hosts)}</code></p>')


def _failures_section(reports: Sequence[Mapping[str, Any]]) -> str:
    by_check: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for r in reports:
        for cid, c in _checks(r).items():
            if c.get("outcome") in ("fail", "error"):
                by_check.setdefault(cid, []).append((str(r.get("host")), c))
    errors = [(str(r.get("host")), e) for r in reports for e in r.get("harness_errors") or []]
    if not by_check and not errors:
        return "<h2>Failures</h2><p>No check failed.</p>"
    parts = [f"<h2>Failures ({sum(len(v) for v in by_check.values())} on "
             f"{len({h for v in by_check.values() for h, _ in v})} nodes)</h2>"]
    for cid in sorted(by_check):
        hits = by_check[cid]
        first = hits[0][1]
        remedies = sorted({str(c.get("remedy") or "") for _, c in hits} - {""})
        parts.append(
            f'<h3 id="f-{_e(cid)}">{_e(cid)} {_e(first.get("title", ""))} — failed on '
            f'{len(hits)} of {len(reports)} nodes: {_e(", ".join(h for h, _ in hits))}</h3>')
        rows = "".join(
            f"<tr><th>{_e(host)}</th><td>{_e(c.get('outcome'))}</td>"
            f"<td><pre>{_e(c.get('message') or '')}</pre></td></tr>" for host, c in hits)
        table = f"<table><tr><th>host</th><th>outcome</th><th>message</th></tr>{rows}</table>"
        if len(hits) > FOLD_ROWS:  # many nodes, one cause: show one message, fold the rest
            table = (f"<pre>{_e(first.get('message') or '')}</pre><details><summary>every "
                     f"node's message ({len(hits)})</summary>{table}</details>")
        parts.append(table)
        for remedy in remedies:
            parts.append(f'<p class="remedy"><b>Remedy:</b> {_e(remedy)}</p>')
    if errors:
        parts.append("<h3>Harness errors (the checks could not be run or judged)</h3><table>"
                     + "".join(f"<tr><th>{_e(h)}</th><td><pre>{_e(e)}</pre></td></tr>"
                               for h, e in errors) + "</table>")
    return "\n".join(parts)


def _matrix_section(reports: Sequence[Mapping[str, Any]]) -> str:
    per_node = [(r, _checks(r)) for r in reports]
    ids = sorted({cid for _, checks in per_node for cid in checks})
    titles: dict[str, str] = {}
    for _, checks in per_node:
        for cid, c in checks.items():
            titles.setdefault(cid, str(c.get("title", "")))
    head = "".join(f'<th class="id" title="{_e(titles[c])}">{_e(c)}</th>' for c in ids)
    rows = []
    for r, checks in per_node:
        cells = []
        for cid in ids:
            c = checks.get(cid)
            outcome = c.get("outcome") if c else None
            tip = (f"{r.get('host')} {cid}: {outcome or 'not run'}"
                   + (f" — {c.get('message')}" if c and c.get("message") else ""))
            cells.append(f'<td class="c o-{outcome or "none"}" title="{_e(tip)}">'
                         f"{_OUTCOME_MARK.get(outcome, '?')}</td>")
        verdict = str(r.get("verdict", "?"))
        cls = ' class="bad"' if verdict != "pass" else ""
        rows.append(f"<tr{cls}><th>{_e(r.get('host'))}</th><td>{_e(verdict)}</td>"
                    + "".join(cells) + "</tr>")
    legend = " ".join(f'<span class="o-{o}">{_OUTCOME_MARK[o]} {o}</span>'
                      for o in ("pass", "warn", "skip", "fail", "error"))
    return (f"<h2>Node × check ({len(reports)} nodes, {len(ids)} checks)</h2>"
            f'<p class="legend">{legend} <span class="o-none">(blank) not run</span></p>'
            f'<table class="matrix"><tr><th>host</th><th>verdict</th>{head}</tr>'
            + "".join(rows) + "</table>")


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def _plot(label: str, series: Sequence[tuple[str, Curve, bool]]) -> str:
    """One inline SVG: busbw (GB/s) against message size (log2 axis), a line per node."""
    width, height, left, right, top, bottom = 760, 330, 60, 190, 24, 46
    pw, ph = width - left - right, height - top - bottom
    sizes = [s for _, c, _ in series for s, _ in c.points]
    values = [v for _, c, _ in series for _, v in c.points]
    thresholds = [c.threshold_gb_s for _, c, _ in series if c.threshold_gb_s is not None]
    lo_x, hi_x = math.log2(min(sizes)), math.log2(max(sizes))
    if hi_x == lo_x:
        lo_x, hi_x = lo_x - 1, hi_x + 1
    top_y = max([*values, *thresholds]) * 1.1 or 1.0

    def x(size: float) -> float:
        return left + (math.log2(size) - lo_x) / (hi_x - lo_x) * pw

    def y(value: float) -> float:
        return top + ph - value / top_y * ph

    out = [f'<svg width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)} busbw by size">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#bbb"/>',
           f'<text x="{left}" y="{top - 8}" font-weight="600">{_e(label)}: busbw (GB/s) by '
           "message size</text>"]
    for v in _ticks(0, top_y):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#eee"/><text x="{left - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{v:g}</text>')
    span = int(hi_x - lo_x)
    step = max(1, math.ceil(span / 9))
    for k in range(math.ceil(lo_x), int(hi_x) + 1, step):
        px = x(2**k)
        out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{top + ph}" y2="{top + ph + 4}" '
                   f'stroke="#888"/><text x="{px:.1f}" y="{top + ph + 16}" '
                   f'text-anchor="middle">{_e(format_size(2**k))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">message size '
               "(bytes, log scale)</text>")
    for t in sorted(set(thresholds)):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" '
                   f'stroke="#c62828" stroke-dasharray="6 4"/><text x="{left + pw - 4}" '
                   f'y="{y(t) - 4:.1f}" text-anchor="end" fill="#c62828">required '
                   f"{t:g} GB/s</text>")
    for i, (host, curve, bad) in enumerate(series):
        colour = _BAD_COLOUR if bad else _PALETTE[i % len(_PALETTE)]
        pts = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in curve.points)
        dash = ' stroke-dasharray="5 3"' if bad else ""
        out.append(f'<g><title>{_e(host)}</title><polyline points="{pts}" fill="none" '
                   f'stroke="{colour}" stroke-width="{2.5 if bad else 1.5}"{dash}/>'
                   + "".join(f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}">'
                             f"<title>{_e(host)}: {v:g} GB/s @ {_e(format_size(s))}</title>"
                             "</circle>" for s, v in curve.points) + "</g>")
        if i < MAX_LEGEND:
            ly = top + 12 + i * 14
            out.append(f'<line x1="{left + pw + 12}" x2="{left + pw + 30}" y1="{ly - 4}" '
                       f'y2="{ly - 4}" stroke="{colour}" stroke-width="2.5"{dash}/>'
                       f'<text x="{left + pw + 36}" y="{ly}">{_e(host)}</text>')
    if len(series) > MAX_LEGEND:
        out.append(f'<text x="{left + pw + 12}" y="{top + 12 + MAX_LEGEND * 14}">… and '
                   f"{len(series) - MAX_LEGEND} more</text>")
    out.append("</svg>")
    return "".join(out)


def _bandwidth_section(reports: Sequence[Mapping[str, Any]]) -> str:
    by_label: dict[str, list[tuple[str, Curve, bool]]] = {}
    for r in reports:
        bad = r.get("verdict") != "pass"
        for curve in bandwidth_curves(r):
            by_label.setdefault(curve.label, []).append((str(r.get("host")), curve, bad))
    if not by_label:
        return ("<h2>Bus bandwidth</h2><p>No bandwidth was measured in these reports (the "
                "bandwidth checks run in the certify tier, or were not selected).</p>")
    parts = ["<h2>Bus bandwidth by message size</h2>"]
    for label in sorted(by_label):
        series = by_label[label]
        plotted = [s for s in series if s[1].points]
        if plotted:
            parts.append(_plot(label, plotted))
        peaks = [(host, curve.peak) for host, curve, _ in series if curve.peak]
        if not peaks:
            continue
        ordered = sorted(v for _, (_, v) in peaks)
        median = ordered[len(ordered) // 2] if len(ordered) % 2 else (
            ordered[len(ordered) // 2 - 1] + ordered[len(ordered) // 2]) / 2
        rows = []
        for host, (size, value) in sorted(peaks, key=lambda hp: hp[1][1]):
            ratio = value / median if median else 0.0
            cls = ' class="slow"' if ratio < SLOW_FRACTION else ""
            rows.append(f"<tr><th>{_e(host)}</th><td>{_e(format_size(size) if size else '-')}"
                        f"</td><td{cls}>{value:g}</td><td{cls}>{ratio:.0%}</td></tr>")
        parts.append(f"<details open><summary>{_e(label)}: busbw at the largest size, slowest "
                     f"first (median {median:g} GB/s)</summary><table><tr><th>host</th>"
                     "<th>size</th><th>busbw GB/s</th><th>of median</th></tr>"
                     + "".join(rows) + "</table></details>")
    return "\n".join(parts)


def _warnings_section(reports: Sequence[Mapping[str, Any]], problems: Sequence[str]) -> str:
    items = []
    for r in reports:
        for cid, c in _checks(r).items():
            if c.get("outcome") == "warn":
                items.append((str(r.get("host")), cid, str(c.get("message") or "")))
        uploads = r.get("uploads")
        if isinstance(uploads, Mapping):
            items.extend((str(r.get("host")), "uploads", str(w))
                         for w in uploads.get("warnings") or [])
    items.extend(("-", "source", p) for p in problems)
    if not items:
        return ""
    rows = "".join(f"<tr><th>{_e(h)}</th><td>{_e(c)}</td><td><pre>{_e(m)}</pre></td></tr>"
                   for h, c, m in items)
    return (f"<h2>Warnings ({len(items)})</h2><details><summary>show</summary><table><tr>"
            f"<th>host</th><th>what</th><th>message</th></tr>{rows}</table></details>")


def _nodes_section(reports: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for r in reports:
        counts = r.get("counts") or {}
        tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        profile = r.get("profile") or {}
        rows.append(
            f"<tr><th>{_e(r.get('host'))}</th><td>{_e(r.get('verdict'))}</td>"
            f"<td>{_e(profile.get('name', '?'))}</td><td>{_e(r.get('tier'))}</td>"
            f"<td>{_e(tally)}</td><td>{float(r.get('duration_s') or 0):.1f} s</td>"
            f"<td>{_e(r.get('started_at', ''))}</td><td>{_e(r.get('harness_version', ''))}</td>"
            f"<td>{_e(r.get('_source', ''))}</td></tr>")
    return ("<h2>Nodes</h2><table><tr><th>host</th><th>verdict</th><th>profile</th><th>tier</th>"
            "<th>checks</th><th>duration</th><th>started</th><th>harness</th><th>report</th></tr>"
            + "".join(rows) + "</table>")


def render_html(rs: ReportSet, generated_at: str | None = None) -> str:
    """The whole page as one string (every value escaped; no external resource)."""
    generated_at = generated_at or datetime.now(timezone.utc).isoformat(timespec="seconds")
    reports = rs.reports
    body = "\n".join([
        _header(rs, generated_at),
        _bad_nodes_section(reports),
        _matrix_section(reports),
        _bandwidth_section(reports),
        _failures_section(reports),
        _warnings_section(reports, rs.problems),
        _nodes_section(reports),
    ])
    return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>gpu-preflight report: {len(reports)} nodes</title><style>{_CSS}</style>"
            f"</head><body>\n{body}\n</body></html>\n")


def write_html(rs: ReportSet, path: Path) -> Path:
    """Write the page atomically (a reader never sees half a file); returns its path."""
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(render_html(rs))
        os.chmod(tmp, 0o644)  # a page to share, not a secret (mkstemp makes it 0600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
