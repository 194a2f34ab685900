"""Key figures read from typed reports (harness.report.model.Report): busbw by message size, GPUs healthy,
the bad-node list. Pure functions (no I/O) shared by the HTML report and the CloudWatch metrics.

The bad-node list and the per-node verdicts live in harness.report.verdicts.

Where bandwidth comes from, in order: each check's busbw measurements (a `collective` recorded,
unit GB/s) at their `size_bytes` (harness.results.Measurement; a v1 report's are recovered by
harness.report.v1, the one reader of prose), then a top-level `bandwidth` section holding nccl-tests rows
(`preflight inspect nccl-tests --json` shape: `rows` [{`size_bytes`, `oop`: {`busbw_gb_s`}}]).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONMapping
from harness.report.model import Report
from harness.results import Measurement

__all__ = [
    "Curve",
    "bandwidth_curves",
    "format_size",
    "gpus_healthy",
]

_GB_S_UNITS = {"gb/s", "gbps", "gb/sec", "gbyte/s"}
#: The name of PF-GPU-001's measurement of the GPUs the node shows (checks/test_gpu.py).
GPU_COUNT_NAME = "gpus_visible"


def format_size(size: float) -> str:
    """`1 GiB`, `512 MiB`, `8 B`: the largest binary unit that keeps the number >= 1."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor:
            value = size / factor
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{size:.0f} B"


@dataclass(slots=True)
class Curve:
    """busbw by message size for one check (or one `bandwidth` entry) on one node."""

    check_id: str
    label: str
    points: list[tuple[int, float]] = field(default_factory=list)
    """(size_bytes, busbw_gb_s), sorted by size."""
    unsized: list[float] = field(default_factory=list)
    """busbw values recorded without a message size (a gate value)."""
    threshold_gb_s: float | None = None
    gate_bytes: int | None = None
    """The message size the floor was judged at (the measurement with a threshold)."""

    def at(self, size: int | None) -> float | None:
        """busbw at `size`; None when not measured there."""
        return dict(self.points).get(size) if size is not None else None

    @property
    def peak(self) -> tuple[int | None, float] | None:
        """(size, busbw) at the largest size measured; an unsized value when there is no size."""
        if self.points:
            return self.points[-1]
        return (None, self.unsized[-1]) if self.unsized else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _is_busbw(m: Measurement) -> bool:
    return m.collective is not None and m.unit.strip().lower() in _GB_S_UNITS


def _label(check_id: str, m: Measurement) -> str:
    """`PF-BW-002 all_reduce`; the check alone when the report did not say the collective."""
    return f"{check_id} {m.collective}" if m.collective else check_id


def _row_busbw(row: JSONMapping) -> float | None:
    value = _number(row.get("busbw_gb_s"))
    if value is not None:
        return value
    for part in ("oop", "ip"):  # nccl-tests: out-of-place first, in-place when it is all there is
        sub = row.get(part)
        if isinstance(sub, Mapping) and _number(sub.get("busbw_gb_s")) is not None:
            return _number(sub.get("busbw_gb_s"))
    return None


def _section_curves(section: object) -> Iterable[Curve]:
    """Curves from a `bandwidth` section: one result, a list of them, or a dict by name."""
    if isinstance(section, Mapping) and "rows" not in section:
        entries = [({"collective": k, **v} if isinstance(v, Mapping) else v)
                   for k, v in section.items()]
    elif isinstance(section, Mapping):
        entries = [section]
    elif isinstance(section, list):
        entries = section
    else:
        return
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("rows"), list):
            continue
        name = str(entry.get("collective") or entry.get("name") or "busbw")
        curve = Curve(check_id="bandwidth", label=f"bandwidth {name}")
        for row in entry["rows"]:
            if not isinstance(row, Mapping):
                continue
            size, busbw = _number(row.get("size_bytes")), _row_busbw(row)
            if size is not None and busbw is not None:
                curve.points.append((int(size), busbw))
        curve.threshold_gb_s = _number(entry.get("threshold_gb_s"))
        if curve.points:
            curve.points.sort()
            yield curve


def bandwidth_curves(report: Report) -> list[Curve]:
    """Every busbw curve in one report, from check measurements then the `bandwidth` section."""
    curves: dict[str, Curve] = {}
    for check in report.checks:
        for m in check.measurements:
            busbw = _number(m.value)
            if not _is_busbw(m) or busbw is None:
                continue
            label = _label(check.id, m)
            curve = curves.setdefault(label, Curve(check_id=check.id, label=label))
            if m.size_bytes is None:
                curve.unsized.append(busbw)
            else:
                curve.points.append((m.size_bytes, busbw))
            threshold = _number(m.threshold)
            if threshold is not None and m.op in (">=", ">"):
                curve.threshold_gb_s = threshold
                curve.gate_bytes = m.size_bytes
    for curve in curves.values():
        curve.points = sorted(dict(curve.points).items())
    result = list(curves.values())
    result.extend(_section_curves(report.extra.get("bandwidth")))
    return result


def gpus_healthy(report: Report, expected: int | None) -> int | None:
    """GPUs on this node that no GPU check named as faulty; None when that cannot be told.

    `report["gpus"]["healthy"]` wins when present. Otherwise: the GPUs seen (the `gpus_visible`
    measurement, else `expected`, the profile's count) minus the distinct GPU indices named in
    failed PF-GPU checks. A failed GPU check that names no GPU (nvidia-smi missing, DCGM hung)
    leaves the count unknown (None), never "all healthy".
    """
    section = report.extra.get("gpus")
    if isinstance(section, Mapping) and _number(section.get("healthy")) is not None:
        return int(section["healthy"])
    if not expected:
        return None
    seen = expected
    named: set[int] = set()
    unknown = False
    for check in report.checks:
        if not check.id.startswith("PF-GPU-"):
            continue
        for m in check.measurements:
            value = _number(m.value)
            if value is not None and m.gpu_index is None and m.name == GPU_COUNT_NAME:
                seen = min(seen, int(value))
        if check.failed:
            indices = check.failed_gpus()
            named |= indices
            unknown |= not indices and check.outcome == "error"
    if unknown:
        return None
    return max(seen - len({i for i in named if i < seen}), 0)
