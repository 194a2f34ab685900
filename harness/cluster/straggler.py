"""Straggler detection: a node whose busbw or step time is an outlier against the rest of the
cluster, even when it is above the absolute floor. A pure function; the cluster verdict feeds
it the per-node figures.

The rule is this project's own (no vendor publishes a cluster-relative one: Google's
cluster-health-scanner and Azure's AzHC use absolute per-SKU floors, AMD CVS a 5 % tolerance
against expected values). It is the modified z-score of Iglewicz and Hoaglin (1993):
z = 0.6745 * (x - median) / MAD, an outlier when |z| > 3.5, with two guards: at least
MIN_NODES figures (a median of 2 or 3 says little), and a relative deviation from the median of
at least MIN_REL_DEV (AMD CVS's 5 % tolerance), so that a tight cluster (MAD near 0) does not
flag a node 0.1 % slower. Only the bad side counts: low busbw, high step time."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["MIN_NODES", "MIN_REL_DEV", "Z_THRESHOLD", "Straggler", "StragglerResult",
           "find_stragglers"]

#: |modified z| above which a figure is an outlier (Iglewicz & Hoaglin's recommended value).
Z_THRESHOLD = 3.5
#: Fewest figures judged.
MIN_NODES = 4
#: Smallest relative distance from the median that can flag a node (AMD CVS: 5 %).
MIN_REL_DEV = 0.05
#: 0.6745 = the 0.75 quantile of the standard normal: MAD * 1.4826 estimates sigma.
_K = 0.6745


@dataclass(frozen=True, slots=True)
class Straggler:
    node: str
    value: float
    z: float
    """Modified z-score (inf when the MAD is 0)."""
    rel_dev: float
    """(value - median) / median."""


@dataclass(frozen=True, slots=True)
class StragglerResult:
    median: float | None
    mad: float | None
    stragglers: list[Straggler] = field(default_factory=list)
    not_judged: str | None = None
    """Why no node was judged (too few figures); None when they were."""
    unusable: list[str] = field(default_factory=list)
    """Nodes whose figure was missing, NaN or not positive: unknown, never fast."""


def find_stragglers(values: Mapping[str, float | None], *, higher_is_better: bool,
                    z_threshold: float = Z_THRESHOLD, min_nodes: int = MIN_NODES,
                    min_rel_dev: float = MIN_REL_DEV) -> StragglerResult:
    """The outliers on the bad side among per-node figures (busbw: `higher_is_better=True`;
    step time: False), with the median and MAD they were judged against."""
    usable = {n: float(v) for n, v in values.items()
              if v is not None and math.isfinite(float(v)) and float(v) > 0}
    unusable = sorted(n for n in values if n not in usable)
    if len(usable) < min_nodes:
        return StragglerResult(None, None, not_judged=f"{len(usable)} usable figures, at least "
                               f"{min_nodes} needed", unusable=unusable)
    median = statistics.median(usable.values())
    mad = statistics.median(abs(v - median) for v in usable.values())
    found = []
    for node, value in sorted(usable.items()):
        delta = value - median
        bad = delta < 0 if higher_is_better else delta > 0
        rel = delta / median
        if not bad or abs(rel) < min_rel_dev:
            continue
        z = _K * delta / mad if mad > 0 else math.copysign(math.inf, delta)
        if abs(z) > z_threshold:
            found.append(Straggler(node, value, z, rel))
    return StragglerResult(median, mad, found, unusable=unusable)
