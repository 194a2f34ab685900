"""The bandwidth gates' judgement (checks/test_bandwidth.py, PF-BW-001/002/006): which all_reduce
floor applies to a profile and a run, and busbw at its message size against it; `preflight
inspect nccl-tests` lists the same verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from harness.judges.judgement import Verdict, expect, na

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["NO_OUT_OF_BOUNDS", "NO_WRONG_COUNT", "Floor", "busbw_floor", "cpu_floor",
           "intra_node_floor", "nccl_tests_verdicts", "net_floor", "size_text", "unchecked_data"]

#: What PF-BW-003 / PF-BW-004 say of an nccl-tests output that does not count wrong elements
#: (an old `error` column, a cut row) / has no out-of-bounds footer line: an error, never a pass.
NO_WRONG_COUNT = "no #wrong values in the output"
NO_OUT_OF_BOUNDS = "no `# Out of bounds values` line"


def unchecked_data(has_rows: bool, num_wrong: int | None, finished: bool,
                   out_of_bounds: int | None) -> list[tuple[str, str]]:
    """(check, why) for each data check an nccl-tests output leaves unproven: PF-BW-003 when its
    rows count no wrong elements, PF-BW-004 when its footer (`finished`: it has one) has no
    out-of-bounds line. The checks error on these; `inspect nccl-tests` names them."""
    found = []
    if has_rows and num_wrong is None:
        found.append(("PF-BW-003", f"reduced data not checked: {NO_WRONG_COUNT}"))
    if finished and out_of_bounds is None:
        found.append(("PF-BW-004", NO_OUT_OF_BOUNDS))
    return found


class _Row(Protocol):
    @property
    def busbw_gb_s(self) -> float | None: ...


class NcclTestsFacts(Protocol):
    """What the bandwidth gates read of an nccl-tests output (NcclTestsResult)."""

    @property
    def collective(self) -> str | None: ...
    @property
    def nranks(self) -> int | None: ...
    @property
    def num_nodes(self) -> int | None: ...
    def at_size(self, size_bytes: int) -> _Row | None: ...


def size_text(n: int) -> str:
    """`16 GiB`, `512 MiB`, `4096 B`: a message size in a check's words."""
    for unit, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def _estimate(profile: Profile, field: str) -> str | None:
    return profile.sources.get(field, "estimate") if profile.is_estimate(field) else None


@dataclass(frozen=True, slots=True)
class Floor:
    """The all_reduce busbw floor a bandwidth gate judges against."""

    check_id: str
    field: str
    """The profile field it comes from (`nvlink_busbw_gb_s_min`, `net_busbw_gb_s_min`, ...)."""
    threshold: float
    size_bytes: int
    estimate: str | None
    """The floor's source when it is an estimate (then a value below it only warns)."""


def intra_node_floor(profile: Profile) -> Floor | str:
    """PF-BW-001's floor (NVLink, or PCIe on PCIe-only GPUs), or why it does not apply."""
    floor = profile.intra_node_floor
    if floor is None:
        return str(profile.intra_node_na_reason)
    field, threshold = floor
    return Floor("PF-BW-001", field, threshold, profile.intra_gate_size_bytes,
                 _estimate(profile, field))


def net_floor(profile: Profile, num_nodes: int | None, source: str = "") -> Floor | str:
    """PF-BW-002's floor across nodes, or why it does not apply (`source`: where the node count
    came from)."""
    if profile.net_busbw_gb_s_min is None:
        return f"profile {profile.name} has no multi-node bandwidth floor"
    if num_nodes is not None and num_nodes < 2:
        return f"single-node job (1 node, from {source}): no network gate"
    return Floor("PF-BW-002", "net_busbw_gb_s_min", profile.net_busbw_gb_s_min,
                 profile.bw_gate_size_bytes, _estimate(profile, "net_busbw_gb_s_min"))


def cpu_floor(profile: Profile, size_bytes: int) -> Floor | str:
    """PF-BW-006's gloo floor on CPU-only profiles (at `size_bytes`), or why it does not apply.
    (It has never been an estimate: a value below it fails.)"""
    if profile.has_gpus or profile.cpu_busbw_gb_s_min is None:
        return f"profile {profile.name} has GPUs or no CPU bandwidth floor"
    return Floor("PF-BW-006", "cpu_busbw_gb_s_min", profile.cpu_busbw_gb_s_min, size_bytes, None)


def busbw_floor(floor: Floor, profile: Profile, busbw: float | None, *, remedy: str = "",
                detail: str = "", missing: str = "") -> Verdict:
    """all_reduce busbw at the floor's message size against it. No row at that size is unknown
    (`missing` says why). A floor that is an estimate (no measured basis) makes a value below
    it a warning that says so, never a failure."""
    what = f"all_reduce busbw at {size_text(floor.size_bytes)}"
    cid, threshold, size = floor.check_id, floor.threshold, floor.size_bytes
    if busbw is None:
        return Verdict(cid, "unknown", missing or f"no row at {size_text(size)}")
    if floor.estimate is not None:
        ok = busbw >= threshold
        return Verdict(
            cid, "pass" if ok else "warn",
            "" if ok else f"{what} {busbw:g} GB/s is below the estimated floor {threshold:g} "
            f"GB/s ({detail}); the floor is an estimate, not a failure until measured (source: "
            f"{floor.estimate})",
            None if ok else "record this node's figure with scripts/device-check and set the "
            f"floor in a profile file; {remedy}",
            "measure", what, busbw, ">=", threshold, "GB/s", size_bytes=size,
            collective="all_reduce")
    return expect(cid, profile, what, busbw, ">=", threshold, "GB/s", remedy=remedy,
                   detail=detail, size_bytes=size, collective="all_reduce")


def nccl_tests_verdicts(profile: Profile | None, result: NcclTestsFacts) -> list[Verdict]:
    """The bandwidth gates' verdicts on one nccl-tests output read on its own (`inspect
    nccl-tests`): the single-node floor when its rank lines name one host, the network floor
    when they name several; unknown when they name none (which floor applies is not known)."""
    if profile is None:
        return []  # no profile (a library call): nothing to judge against
    intra, net = intra_node_floor(profile), net_floor(profile, result.num_nodes, "its rank lines")
    floors = [f for f in (intra, net) if isinstance(f, Floor)]
    if not floors:
        return [na("PF-BW-001", str(intra)), na("PF-BW-002", str(net))]
    if result.collective not in (None, "all_reduce"):
        why = f"the floors are all_reduce's; this is {result.collective}"
        return [na("PF-BW-001", why), na("PF-BW-002", why)]
    nodes = result.num_nodes
    if nodes is None:
        return [Verdict(f.check_id, "unknown", "the output names no host (no `#  Rank N ... on "
                        "HOST` lines): single- or multi-node, which floor applies is unknown")
                for f in floors]
    chosen, other = (intra, "PF-BW-002") if nodes == 1 else (net, "PF-BW-001")
    if not isinstance(chosen, Floor):
        return [na("PF-BW-001" if nodes == 1 else "PF-BW-002", chosen),
                na(other, f"a {nodes}-node run")]
    row = result.at_size(chosen.size_bytes)
    where = f"{result.nranks or '?'} ranks on {nodes} node{'s' if nodes > 1 else ''}"
    verdict = busbw_floor(chosen, profile, None if row is None else row.busbw_gb_s, detail=where,
                          missing=f"no row at {size_text(chosen.size_bytes)}")
    return [verdict, na(other, f"a {nodes}-node run")]
