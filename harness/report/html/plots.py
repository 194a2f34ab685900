"""The report page's plots as inline SVG: busbw against message size (log axis) per node with
the profile floor, and at many nodes the spread of every node plus a sorted per-node
distribution at the gate size, outliers labelled with their host names.

Hand-written SVG, not a plotting library: the page must be one self-contained file that opens
offline (no script, no CDN), the figures are a few lines and points, and matplotlib (the usual
choice) would be a heavy dependency of a tool that runs in every training container."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.report.figures import Curve, format_size
from harness.report.html.page import esc

__all__ = ["MANY_NODES", "Series", "bandwidth_section", "distribution_plot", "sweep_plot",
           "ticks"]

#: Above this many nodes a plot shows the spread and the outliers, not a line per node.
MANY_NODES = 16
#: A node below this fraction of the median busbw at the gate size is an outlier.
SLOW_FRACTION = 0.9
#: Outliers named on a plot (the rest are counted; the table under the plot lists them all).
MAX_LABELS = 14
PALETTE = ("#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f",
           "#e377c2", "#393b79", "#637939", "#8c6d31", "#ff7f0e")
BAD = "#d62728"
SLOW = "#ef6c00"
FLOOR = "#c62828"

_W, _H, _L, _R, _T, _B = 760, 330, 60, 200, 24, 46


@dataclass(frozen=True, slots=True)
class Series:
    """One node's curve in one plot."""

    host: str
    curve: Curve
    bad: bool


def ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round axis values from `lo` to `hi` (about `n` of them)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


class Frame:
    """A plot area with a linear y axis (GB/s) and the frame drawn."""

    def __init__(self, title: str, top_value: float, aria: str, height: int = _H,
                 bottom_value: float = 0.0) -> None:
        self.pw, self.ph = _W - _L - _R, height - _T - _B
        self.height = height
        self.left, self.right = _L, _L + self.pw
        """The plot area's left and right edges (labels go right of `right`)."""
        self.bottom = bottom_value
        # 10% headroom; an empty or flat plot (every value 0) still gets an axis.
        self.top_value = top_value * 1.1 if top_value > bottom_value else bottom_value + 1.0
        self.out = [f'<svg width="{_W}" height="{height}" viewBox="0 0 {_W} {height}" role="img" '
                    f'aria-label="{esc(aria)}">',
                    f'<rect x="{_L}" y="{_T}" width="{self.pw}" height="{self.ph}" '
                    'fill="#fff" stroke="#bbb"/>',
                    f'<text x="{_L}" y="{_T - 8}" font-weight="600">{esc(title)}</text>']
        for v in ticks(self.bottom, self.top_value):
            self.out.append(f'<line x1="{_L}" x2="{_L + self.pw}" y1="{self.y(v):.1f}" '
                            f'y2="{self.y(v):.1f}" stroke="#eee"/><text x="{_L - 6}" '
                            f'y="{self.y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')

    def y(self, value: float) -> float:
        span = self.top_value - self.bottom
        return _T + self.ph - (max(value, self.bottom) - self.bottom) / span * self.ph

    def hline(self, value: float, colour: str, label: str, dash: str = "6 4") -> None:
        self.out.append(f'<line x1="{_L}" x2="{_L + self.pw}" y1="{self.y(value):.1f}" '
                        f'y2="{self.y(value):.1f}" stroke="{colour}" stroke-dasharray="{dash}"/>'
                        f'<text x="{_L + self.pw - 4}" y="{self.y(value) - 4:.1f}" '
                        f'text-anchor="end" fill="{colour}">{esc(label)}</text>')

    def legend(self, i: int, colour: str, text: str, dash: str = "") -> None:
        ly = _T + 12 + i * 14
        self.out.append(f'<line x1="{_L + self.pw + 12}" x2="{_L + self.pw + 30}" y1="{ly - 4}" '
                        f'y2="{ly - 4}" stroke="{colour}" stroke-width="2.5"{dash}/>'
                        f'<text x="{_L + self.pw + 36}" y="{ly}">{esc(text)}</text>')

    def note(self, i: int, text: str) -> None:
        self.out.append(f'<text x="{_L + self.pw + 12}" y="{_T + 12 + i * 14}">{esc(text)}</text>')

    def svg(self) -> str:
        return "".join(self.out) + "</svg>"


def _size_axis(frame: Frame, sizes: Sequence[int]):
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    if hi == lo:
        lo, hi = lo - 1, hi + 1

    def x(size: float) -> float:
        return _L + (math.log2(size) - lo) / (hi - lo) * frame.pw

    step = max(1, math.ceil(int(hi - lo) / 9))
    for k in range(math.ceil(lo), int(hi) + 1, step):
        px = x(2**k)
        frame.out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{_T + frame.ph}" '
                         f'y2="{_T + frame.ph + 4}" stroke="#888"/><text x="{px:.1f}" '
                         f'y="{_T + frame.ph + 16}" text-anchor="middle">'
                         f"{esc(format_size(2**k))}</text>")
    frame.out.append(f'<text x="{_L + frame.pw / 2}" y="{frame.height - 8}" text-anchor="middle">message '
                     "size (bytes, log scale)</text>")
    return x


def _line(frame: Frame, x, host: str, points, colour: str, bad: bool) -> str:
    pts = " ".join(f"{x(s):.1f},{frame.y(v):.1f}" for s, v in points)
    dash = ' stroke-dasharray="5 3"' if bad else ""
    return (f'<g><title>{esc(host)}</title><polyline points="{pts}" fill="none" '
            f'stroke="{colour}" stroke-width="{2.5 if bad else 1.5}"{dash}/>'
            + "".join(f'<circle cx="{x(s):.1f}" cy="{frame.y(v):.1f}" r="2.5" fill="{colour}">'
                      f"<title>{esc(host)}: {v:g} GB/s @ {esc(format_size(s))}</title></circle>"
                      for s, v in points) + "</g>")


def outliers(series: Sequence[Series], gate: int | None) -> list[tuple[Series, float | None]]:
    """Bad nodes and nodes under SLOW_FRACTION of the median (or the floor) at the gate size,
    slowest first, with their value there (None: not measured at the gate)."""
    at = [(s, s.curve.at(gate) if gate is not None else _peak(s.curve)) for s in series]
    values = [v for _, v in at if v is not None]
    mid = median(values)
    floor = next((s.curve.threshold_gb_s for s in series if s.curve.threshold_gb_s), None)
    found = [(s, v) for s, v in at if s.bad or v is None or v < SLOW_FRACTION * mid
             or (floor is not None and v < floor)]
    return sorted(found, key=lambda sv: (sv[1] is not None, sv[1] or 0.0, sv[0].host))


def _peak(curve: Curve) -> float | None:
    peak = curve.peak
    return peak[1] if peak else None


def sweep_plot(label: str, series: Sequence[Series], gate: int | None) -> str:
    """busbw by message size: a line per node up to MANY_NODES; above, the nodes' min-max band
    and median, and the outliers' own lines; the profile floor as a dashed line."""
    plotted = [s for s in series if s.curve.points]
    sizes = sorted({p for s in plotted for p, _ in s.curve.points})
    floors = sorted({s.curve.threshold_gb_s for s in series if s.curve.threshold_gb_s})
    values = [v for s in plotted for _, v in s.curve.points]
    frame = Frame(f"{label}: busbw (GB/s) by message size, {len(plotted)} nodes",
                   max([*values, *floors]), f"{label} busbw by size")
    x = _size_axis(frame, sizes)
    for f in floors:
        frame.hline(f, FLOOR, f"floor {f:g} GB/s" + (f" @ {format_size(gate)}" if gate else ""))
    if len(plotted) <= MANY_NODES:
        for i, s in enumerate(plotted):
            colour = BAD if s.bad else PALETTE[i % len(PALETTE)]
            frame.out.append(_line(frame, x, s.host, s.curve.points, colour, s.bad))
            frame.legend(i, colour, s.host + (" (bad)" if s.bad else ""),
                         ' stroke-dasharray="5 3"' if s.bad else "")
        return frame.svg()
    by_size = {size: sorted(v for s in plotted for p, v in s.curve.points if p == size)
               for size in sizes}
    upper = " ".join(f"{x(p):.1f},{frame.y(v[-1]):.1f}" for p, v in by_size.items())
    lower = " ".join(f"{x(p):.1f},{frame.y(v[0]):.1f}" for p, v in reversed(by_size.items()))
    frame.out.append(f'<polygon points="{upper} {lower}" fill="#90caf9" fill-opacity="0.45" '
                     'stroke="none"><title>min to max of every node</title></polygon>')
    mid = [(p, median(v)) for p, v in by_size.items()]
    frame.out.append(_line(frame, x, f"median of {len(plotted)} nodes", mid, "#1565c0", False))
    frame.legend(0, "#90caf9", f"min-max of {len(plotted)} nodes")
    frame.legend(1, "#1565c0", "median")
    named = [s for s, _ in outliers(plotted, gate)]
    for i, s in enumerate(named[:MAX_LABELS - 3]):
        colour = BAD if s.bad else SLOW
        frame.out.append(_line(frame, x, s.host, s.curve.points, colour, s.bad))
        frame.legend(i + 2, colour, s.host + (" (bad)" if s.bad else " (slow)"))
    if len(named) > MAX_LABELS - 3:
        frame.note(MAX_LABELS - 1, f"... and {len(named) - MAX_LABELS + 3} more (table below)")
    return frame.svg()


def distribution_plot(label: str, series: Sequence[Series], gate: int | None) -> str:
    """Every node's busbw at the gate size, sorted (slowest left), median and floor as lines,
    the outliers named on the right and joined to their bar."""
    at = sorted(((s, v) for s in series
                 if (v := s.curve.at(gate) if gate is not None else _peak(s.curve)) is not None),
                key=lambda sv: (sv[1], sv[0].host))
    if not at:
        return ""
    floor = next((s.curve.threshold_gb_s for s in series if s.curve.threshold_gb_s), None)
    where = f" at {format_size(gate)}" if gate else " at the largest size"
    values = [v for _, v in at] + ([floor] if floor else [])
    # The axis starts near the slowest value: the spread of a thousand healthy nodes is a few
    # percent, which an axis from zero flattens into one line.
    low = min(values)
    frame = Frame(f"{label}: busbw{where} per node, sorted ({len(at)} nodes)", max(values),
                  f"{label} distribution", bottom_value=max(0.0, low - 0.1 * (max(values) - low)
                                                            - 0.02 * low))
    width = frame.pw / len(at)
    mid = median([v for _, v in at])
    index = {s.host: i for i, (s, _) in enumerate(at)}
    pts = " ".join(f"{_L + (i + 0.5) * width:.1f},{frame.y(v):.1f}" for i, (_, v) in enumerate(at))
    frame.out.append(f'<polyline points="{pts}" fill="none" stroke="#64b5f6" stroke-width="1.5"/>')
    for i, (s, v) in enumerate(at):
        if s.bad or v < SLOW_FRACTION * mid or (floor is not None and v < floor):
            frame.out.append(f'<circle cx="{_L + (i + 0.5) * width:.1f}" cy="{frame.y(v):.1f}" '
                             f'r="3.5" fill="{BAD if s.bad else SLOW}"><title>{esc(s.host)}: '
                             f"{v:g} GB/s</title></circle>")
    frame.hline(mid, "#1565c0", f"median {mid:.4g} GB/s", "2 3")
    if floor:
        frame.hline(floor, FLOOR, f"floor {floor:g} GB/s")
    named = [(s, v) for s, v in outliers(series, gate) if s.host in index]
    for j, (s, v) in enumerate(named[:MAX_LABELS - 1]):
        ly = _T + 12 + j * 14
        bx = _L + (index[s.host] + 0.5) * width
        colour = BAD if s.bad else SLOW
        frame.out.append(f'<line x1="{bx:.1f}" y1="{frame.y(v or 0):.1f}" '
                         f'x2="{_L + frame.pw + 10}" y2="{ly - 4}" stroke="{colour}" '
                         f'stroke-width="0.7"/><text x="{_L + frame.pw + 14}" y="{ly}" '
                         f'fill="{colour}">{esc(s.host)} {v:.4g}</text>')
    if len(named) > MAX_LABELS - 1:
        frame.note(MAX_LABELS, f"... and {len(named) - MAX_LABELS + 1} more (table below)")
    frame.out.append(f'<text x="{_L + frame.pw / 2}" y="{frame.height - 8}" text-anchor="middle">nodes, '
                     "slowest first</text>")
    return frame.svg()


def _table(label: str, series: Sequence[Series], gate: int | None, opened: bool) -> str:
    """Every node's busbw at the gate size, slowest first, as a share of the median."""
    at = [(s, s.curve.at(gate) if gate is not None else _peak(s.curve)) for s in series]
    values = [v for _, v in at if v is not None]
    mid = median(values)
    rows = []
    for s, v in sorted(at, key=lambda sv: (sv[1] is not None, sv[1] or 0.0, sv[0].host)):
        ratio = v / mid if v is not None and mid else 0.0
        cls = ' class="slow"' if v is None or ratio < SLOW_FRACTION else ""
        row = ' class="bad"' if s.bad else ""
        rows.append(f"<tr{row}><th>{esc(s.host)}</th><td>{esc(format_size(gate) if gate else '-')}"
                    f"</td><td{cls}>{'-' if v is None else f'{v:g}'}</td>"
                    f"<td{cls}>{'-' if v is None else f'{ratio:.0%}'}</td></tr>")
    where = f"at {format_size(gate)}" if gate else "at the largest size"
    return (f"<details{' open' if opened else ''}><summary>{esc(label)}: busbw {where} per "
            f"node, slowest first (median {mid:g} GB/s)</summary><table><tr><th>host</th>"
            "<th>size</th><th>busbw GB/s</th><th>of median</th></tr>"
            + "".join(rows) + "</table></details>")


def bandwidth_section(curves: Sequence[tuple[str, bool, Sequence[Curve]]]) -> str:
    """Per bandwidth check: the sweep against the floor; above MANY_NODES the distribution at
    the gate size too; and the per-node table. `curves`: (host, bad, that node's curves)."""
    by_label: dict[str, list[Series]] = {}
    for host, bad, node_curves in curves:
        for curve in node_curves:
            by_label.setdefault(curve.label, []).append(Series(host, curve, bad))
    if not by_label:
        return ("<h2>Bus bandwidth</h2><p>No bandwidth was measured in these reports (the "
                "bandwidth checks run in the preflight and certify tiers, when selected).</p>")
    parts = ['<h2 id="bandwidth">Bus bandwidth by message size</h2>']
    for label in sorted(by_label):
        series = by_label[label]
        gates = [s.curve.gate_bytes for s in series if s.curve.gate_bytes]
        gate = max(set(gates), key=gates.count) if gates else None
        many = len(series) > MANY_NODES
        if any(s.curve.points for s in series):
            parts.append(sweep_plot(label, series, gate))
        if many:
            parts.append(distribution_plot(label, series, gate))
        if any(s.curve.points or s.curve.unsized for s in series):
            parts.append(_table(label, series, gate, opened=not many))
    return "\n".join(parts)
