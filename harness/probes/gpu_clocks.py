"""SM clock and power under load, from the compute part's NVML readings (harness.worker.compute:
one reading after each chunk of matmuls, for a few seconds per GPU): what the clock peaked at,
what it held in the second half of the window, how far it fell, the power drawn, and the clock
event reasons NVML gave while it ran. Pure functions over the part's JSON record."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.base.gpu_actions import BAD_THROTTLE_REASONS
from harness.base.jsontypes import JSONMapping
from harness.probes.gpu import clock_event_reasons as reason_names

__all__ = ["ClockSummary", "summaries", "summarize"]


@dataclass(frozen=True, slots=True)
class ClockSummary:
    """One GPU's readings under load (None: NVML gave no such reading)."""

    device: int
    """CUDA device index (the worker's rank-local GPU)."""
    uuid: str | None
    readings: int
    peak_mhz: int | None
    sustained_mhz: float | None
    """Median SM clock over the second half of the window (after any ramp-up and heat-up)."""
    drop_pct: float | None
    """(peak - sustained) / peak, percent."""
    power_median_w: float | None
    power_max_w: float | None
    reasons: tuple[str, ...]
    """Clock event reasons any reading named (nvidia-smi's words), `Idle` left out."""
    reasons_read: bool
    """At least one reading had the event-reason mask (NVML answered it)."""

    @property
    def throttled_by(self) -> tuple[str, ...]:
        """The reasons that mean heat or a power brake slowed the GPU (DCGM's default
        throttle mask counts the same four as failures; SW Power Cap is normal under load)."""
        return tuple(sorted(BAD_THROTTLE_REASONS.intersection(self.reasons)))

    @property
    def known(self) -> bool:
        return self.peak_mhz is not None


def _values(readings: Iterable[JSONMapping], key: str) -> list[float]:
    return [r[key] for r in readings if isinstance(r.get(key), int | float)
            and not isinstance(r.get(key), bool)]


def summarize(rank: JSONMapping) -> ClockSummary:
    """The summary of one rank's compute record (`{"device", "uuid", "readings": [...]}`)."""
    readings = [r for r in rank.get("readings") or () if isinstance(r, Mapping)]
    clocks = _values(readings, "sm_clock_mhz")
    power = _values(readings, "power_w")
    peak = int(max(clocks)) if clocks else None
    late = clocks[len(clocks) // 2:] if clocks else []
    sustained = float(statistics.median(late)) if late else None
    drop = (round(100.0 * (peak - sustained) / peak, 1)
            if peak and sustained is not None else None)
    masks = [int(m) for m in _values(readings, "event_reasons")]
    names: set[str] = set()
    for mask in masks:
        names.update(reason_names(mask))
    names.discard("Idle")
    return ClockSummary(
        device=int(rank.get("device", 0)), uuid=rank.get("uuid"), readings=len(readings),
        peak_mhz=peak, sustained_mhz=sustained, drop_pct=drop,
        power_median_w=round(float(statistics.median(power)), 1) if power else None,
        power_max_w=round(max(power), 1) if power else None,
        reasons=tuple(sorted(names)), reasons_read=bool(masks))


def summaries(record: JSONMapping) -> list[ClockSummary]:
    """Every rank's summary of a compute record (`{"schema": COMPUTE_SCHEMA, "ranks": [...]}`),
    by device."""
    ranks = [r for r in record.get("ranks") or () if isinstance(r, Mapping)]
    return sorted((summarize(r) for r in ranks), key=lambda s: s.device)
