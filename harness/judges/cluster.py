"""The cluster checks' judges. PF-CLUSTER-006, straggler detection: a node whose busbw or step
time is an outlier against the rest of the cluster, even when it is above the absolute floor. A
pure function of the per-node figures and the profile's limits (`straggler_z_max`,
`straggler_min_nodes`, `straggler_min_rel_dev`).

The rule is this project's own (no vendor publishes a cluster-relative one: Google's
cluster-health-scanner and Azure's AzHC use absolute per-SKU floors, AMD CVS a 5 % tolerance
against expected values). It is the modified z-score of Iglewicz and Hoaglin (1993):
z = 0.6745 * (x - median) / MAD, an outlier when |z| > straggler_z_max, 3.5 (their recommended cut-off, as the
NIST/SEMATECH e-Handbook of Statistical Methods gives it, section 1.3.5.17:
https://www.itl.nist.gov/div898/handbook/eda/section3/eda35h.htm), with two guards: at least
straggler_min_nodes figures (a median of 2 or 3 says little), and a relative deviation from the median of
at least straggler_min_rel_dev (AMD CVS's 5 % tolerance), so that a tight cluster (MAD near 0) does not
flag a node 0.1 % slower. Only the bad side counts: low busbw, high step time.

`test_no_straggler_node` (harness/cluster/straggler.py) is the cluster check that applies it."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONObject
from harness.profiles.model import Profile

__all__ = ["DEFAULT_LIMITS", "Straggler", "StragglerLimits", "StragglerResult", "cutoff", "find_stragglers"]


@dataclass(frozen=True, slots=True)
class StragglerLimits:
    """A profile's straggler limits (harness.profiles.model.Profile's `straggler_*` fields)."""

    z_max: float
    """|modified z| above which a figure is an outlier."""
    min_nodes: int
    """Fewest figures judged."""
    min_rel_dev: float
    """Smallest relative distance from the median that can flag a node."""

    @classmethod
    def of(cls, profile: Profile) -> StragglerLimits:
        return cls(profile.straggler_z_max, profile.straggler_min_nodes, profile.straggler_min_rel_dev)

    def to_dict(self) -> JSONObject:
        return {"z_max": self.z_max, "min_nodes": self.min_nodes, "min_rel_dev": self.min_rel_dev}


#: The Profile defaults (Iglewicz & Hoaglin's 3.5, 4 figures, AMD CVS's 5 %).
DEFAULT_LIMITS = StragglerLimits.of(Profile(name="defaults"))
#: 0.6745 = the 0.75 quantile of the standard normal: MAD * 1.4826 estimates sigma.
_K = 0.6745


@dataclass(frozen=True, slots=True)
class Straggler:
    node: int | str
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
    unusable: list[int | str] = field(default_factory=list)
    """Nodes whose figure was missing, NaN or not positive: unknown, never fast."""


def find_stragglers(values: Mapping[int, object] | Mapping[str, object], *,
                    higher_is_better: bool, limits: StragglerLimits = DEFAULT_LIMITS) -> StragglerResult:
    """The outliers on the bad side among per-node figures (busbw: `higher_is_better=True`;
    step time: False), with the median and MAD they were judged against. A figure that is
    not a finite positive number is unusable (named, never judged fast)."""
    usable = {n: x for n, v in values.items() if (x := _positive(v)) is not None}
    unusable = sorted(n for n in values if n not in usable)
    if len(usable) < limits.min_nodes:
        return StragglerResult(None, None, not_judged=f"{len(usable)} usable figures, at least "
                               f"{limits.min_nodes} needed", unusable=unusable)
    median = statistics.median(usable.values())
    mad = statistics.median(abs(v - median) for v in usable.values())
    found = []
    for node, value in sorted(usable.items()):
        delta = value - median
        bad = delta < 0 if higher_is_better else delta > 0
        rel = delta / median
        if not bad or abs(rel) < limits.min_rel_dev:
            continue
        # MAD 0 (most nodes equal): any deviation past the relative guard is infinitely far.
        z = _K * delta / mad if mad > 0 else math.copysign(math.inf, delta)
        if abs(z) > limits.z_max:
            found.append(Straggler(node, value, z, rel))
    return StragglerResult(median, mad, found, unusable=unusable)


def _positive(value: object) -> float | None:
    """A finite positive number, else None (missing, NaN, text: unknown, never fast)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def cutoff(median: float, mad: float, *, higher_is_better: bool,
           limits: StragglerLimits = DEFAULT_LIMITS) -> float:
    """The figure past which a node is a straggler: beyond both guards of `find_stragglers`
    (|z| > z_max and a relative deviation of at least min_rel_dev)."""
    distance = max(limits.z_max * mad / _K, limits.min_rel_dev * median)
    return median - distance if higher_is_better else median + distance
