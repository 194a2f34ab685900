"""The pairwise isolation rounds (harness.cluster.isolate, as the report's `cluster.isolation`)
drawn per round: every pair's busbw against the threshold, slowest first, failed pairs named;
the bad node or link in red; and per round the suspects left and the nodes confirmed bad."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.base.jsontypes import JSONMapping
from harness.report.html.page import esc
from harness.report.html.plots import BAD, FLOOR, MAX_LABELS, SLOW, Frame
from harness.report.verdicts import RunSummary

__all__ = ["RoundView", "isolation_section", "round_views"]

_PASS = "#66bb6a"
#: Each round's plot height (pixels): five rounds fit on a screen or two.
ROUND_HEIGHT = 190


@dataclass(frozen=True, slots=True)
class RoundView:
    """One round as drawn: its pairs, and who was suspect or confirmed bad after it."""

    number: int
    pairs: tuple[JSONMapping, ...]
    failed: tuple[JSONMapping, ...]
    suspects: tuple[int, ...]
    """Failed a pair so far and neither cleared by a passing pair nor confirmed bad."""
    confirmed: tuple[int, ...]
    """Confirmed bad in this round."""


def _gb(value: object) -> str:
    """`57.81 GB/s`; `no value` when the pair reported none (never a crash on a null)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "no value"
    return f"{value:.4g} GB/s"


def _passed(p: JSONMapping, threshold: float) -> bool:
    value = p.get("busbw_gb_s")
    return not p.get("error") and isinstance(value, int | float) and value >= threshold


def round_views(iso: JSONMapping) -> list[RoundView]:
    """The rounds with the suspects after each, rebuilt from the pairs the way isolate() judges
    them: a passing pair clears both nodes; a node confirmed bad stops being a suspect."""
    threshold = float(iso.get("threshold_gb_s") or 0.0)
    found = dict(zip(iso.get("bad_nodes") or [], iso.get("found_in_round") or [], strict=False))
    cleared: set[int] = set()
    failed_nodes: set[int] = set()
    out = []
    for k, rnd in enumerate(iso.get("rounds") or [], 1):
        pairs = tuple(p for p in rnd if isinstance(p, Mapping))
        failed = tuple(p for p in pairs if not _passed(p, threshold))
        for p in pairs:
            (cleared if _passed(p, threshold) else failed_nodes).update((p.get("a"), p.get("b")))
        bad_by_now = {n for n, r in found.items() if r <= k}
        suspects = sorted(n for n in failed_nodes - cleared - bad_by_now if isinstance(n, int))
        out.append(RoundView(number=k, pairs=pairs, failed=failed, suspects=tuple(suspects),
                             confirmed=tuple(sorted(n for n, r in found.items() if r == k))))
    return out


def _plot(view: RoundView, threshold: float, name: Callable[[object], str], bad: set[int],
          bad_links: set[tuple[int, int]]) -> str:
    def value(p: JSONMapping) -> float:
        v = p.get("busbw_gb_s")
        return float(v) if isinstance(v, int | float) and not p.get("error") else 0.0

    pairs = sorted(view.pairs, key=lambda p: (value(p), str(p.get("a"))))
    top = max([value(p) for p in pairs] + [threshold])
    frame = Frame(f"round {view.number}: {len(pairs)} pairs, {len(view.failed)} below "
                  f"{threshold:.4g} GB/s", top, f"isolation round {view.number}",
                  height=ROUND_HEIGHT)
    width = frame.pw / max(len(pairs), 1)
    base = frame.y(0)
    labelled = 0
    for i, p in enumerate(pairs):
        a, b = p.get("a"), p.get("b")
        link = (min(a, b), max(a, b)) if isinstance(a, int) and isinstance(b, int) else None
        ok = _passed(p, threshold)
        colour = _PASS if ok else (BAD if a in bad or b in bad or link in bad_links else SLOW)
        v = value(p)
        what = (f"{name(a)} – {name(b)}: "
                + (f"error: {p.get('error')}" if p.get("error") else f"{v:g} GB/s"))
        height = max(base - frame.y(v), 3.0)  # an error or zero still shows as a stub
        frame.out.append(f'<rect x="{frame.left + i * width:.2f}" y="{base - height:.1f}" '
                         f'width="{max(width - 0.4, 0.6):.2f}" height="{height:.1f}" '
                         f'fill="{colour}"><title>{esc(what)}</title></rect>')
        if not ok and labelled < MAX_LABELS - 4:
            ly = 36 + labelled * 14
            frame.out.append(f'<line x1="{frame.left + (i + 0.5) * width:.1f}" y1="{base - height:.1f}" '
                             f'x2="{frame.right + 10}" y2="{ly - 4}" stroke="{colour}" '
                             f'stroke-width="0.7"/><text x="{frame.right + 14}" y="{ly}" '
                             f'fill="{colour}">{esc(f"{name(a)}–{name(b)}")} '
                             f"{esc('error' if p.get('error') else f'{v:.4g}')}</text>")
            labelled += 1
    if len(view.failed) > labelled:
        frame.note(MAX_LABELS - 3, f"... {len(view.failed) - labelled} more failed (table)")
    frame.hline(threshold, FLOOR, f"threshold {threshold:.4g} GB/s")
    frame.out.append(f'<text x="{(frame.left + frame.right) / 2}" y="{ROUND_HEIGHT - 8}" '
                     'text-anchor="middle">pairs, slowest first</text>')
    return frame.svg()


def _not_run_why(cluster: Mapping[str, object]) -> str:
    """Why there were no pairwise rounds, as the cluster step recorded it; never a guess."""
    if not cluster:
        return "no cluster verdict in these reports (single node, or not run as a cluster)"
    said = cluster.get("not_measured")
    if isinstance(said, Mapping) and said.get("pairwise isolation"):
        return str(said["pairwise isolation"])
    if cluster.get("isolation_skipped"):
        return str(cluster["isolation_skipped"])
    return "the report does not say why (no rounds were recorded)"


def isolation_section(summary: RunSummary) -> str:
    """The rounds drawn and tabulated, or why there were none."""
    iso = summary.cluster.get("isolation")
    if not isinstance(iso, Mapping) or not iso.get("rounds"):
        return (f'<h2 id="isolation">Pairwise isolation</h2>'
                f'<p class="not-run">Not run: {esc(_not_run_why(summary.cluster))}.</p>')
    hosts = summary.hosts_by_rank

    def name(rank: object) -> str:
        return hosts.get(rank, f"rank {rank}") if isinstance(rank, int) else str(rank)

    threshold = float(iso.get("threshold_gb_s") or 0.0)
    bad = {n for n in iso.get("bad_nodes") or [] if isinstance(n, int)}
    links = {(min(p), max(p)) for p in iso.get("bad_links") or [] if len(p) == 2}
    views = round_views(iso)
    parts = [f'<h2 id="isolation">Pairwise isolation ({len(views)} rounds, threshold '
             f"{threshold:.4g} GB/s)</h2><p>Round 1 pairs every node at random; each node of a "
             "failed pair is re-tested against nodes known good until it passes or has failed "
             "with enough good peers to be confirmed bad. Red: a pair with a confirmed bad node "
             "or link; orange: failed, not (yet) confirmed; green: passed.</p>"]
    rows = []
    for view in views:
        parts.append(_plot(view, threshold, name, bad, links))
        failed = "<br>".join(
            esc(f"{name(p.get('a'))} – {name(p.get('b'))}: "
                + (f"error: {p.get('error')}" if p.get("error")
                   else _gb(p.get("busbw_gb_s")))) for p in view.failed[:40])
        if len(view.failed) > 40:
            failed += f"<br>... and {len(view.failed) - 40} more"
        rows.append(f"<tr><th>{view.number}</th><td>{len(view.pairs)}</td>"
                    f"<td>{failed or '-'}</td>"
                    f"<td>{esc(', '.join(name(n) for n in view.suspects) or '-')}</td>"
                    f'<td class="slow">{esc(", ".join(name(n) for n in view.confirmed))}</td>'
                    "</tr>")
    parts.append("<table><tr><th>round</th><th>pairs</th><th>failed pairs</th>"
                 "<th>suspects after it</th><th>confirmed bad</th></tr>" + "".join(rows)
                 + "</table>")
    verdict = [f"bad nodes: {', '.join(name(n) for n in sorted(bad))}" if bad else "",
               "bad links: " + ", ".join(f"{name(a)}–{name(b)}" for a, b in sorted(links))
               if links else "",
               "unconfirmed suspects: " + ", ".join(name(n) for n in iso.get("suspects") or [])
               if iso.get("suspects") else ""]
    said = "; ".join(v for v in verdict if v) or "no bad node or link"
    parts.append(f"<p><b>Outcome:</b> {esc(said)}</p>")
    left = summary.cluster.get("left_out")
    if isinstance(left, Mapping) and left:  # never measured: neither passed nor failed here
        parts.append('<p class="not-run"><b>Not measured</b> (left out of the rounds): '
                     + esc("; ".join(f"{name(int(r))}: {w}" for r, w in left.items())) + "</p>")
    return "\n".join(parts)
