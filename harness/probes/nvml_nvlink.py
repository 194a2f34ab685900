"""NVLink through NVML: which links are up, and their error counters, read the way the GPU's
architecture exposes them. Sources (nvml.h of nvidia-nvml-dev 13.4.92, pynvml 13.615.71; DCGM
modules/health/DcgmHealthWatch.cpp; docs/gpu.md):

- Link state: the field NVML_FI_DEV_NVLINK_GET_STATE (165, scopeId = link) gives one of
  NVML_NVLINK_STATE_INACTIVE 0, ACTIVE 1, SLEEP 2, ACTIVE_TRAFFIC_DISABLED 3. A sleeping link
  (NVLink low-power idle) is up: it wakes on traffic. nvmlDeviceGetNvLinkState, the fallback
  where the field is not supported, says only enabled/disabled.
- Error counters: before Blackwell nvmlDeviceGetNvLinkErrorCounter (replay, recovery, CRC flit,
  CRC data), else the fields NVML_FI_DEV_NVLINK_ERROR_DL_* (161-163). nvml.h marks 161-163
  "unsupported for Blackwell+. Please use NVML_FI_DEV_NVLINK_COUNT_LINK_RECOVERY_*": on
  compute capability 10+ the NVLink5 fields 213-215 (link recovery successful / failed / all
  events), the ones DCGM's health watch reads on Blackwell.
- NOT_SUPPORTED on every counter of a link means nothing was read there: recorded as unread,
  never as "no errors".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.probes.nvml import NvmlHandle, Reader

__all__ = ["GpuCounters", "LinkStates", "NvlinkCounters", "error_growth", "link_states",
           "read_counters"]

_FI_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT: "Number of NVLinks present on the device"
_FI_LINK_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE: one of NVML_NVLINK_STATE_*
_ACTIVE, _SLEEP = 1, 2  # NVML_NVLINK_STATE_ACTIVE, NVML_NVLINK_STATE_SLEEP
_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS

#: nvmlNvLinkErrorCounter_t, read with nvmlDeviceGetNvLinkErrorCounter (before Blackwell).
_COUNTER_CALLS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
                  ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                  ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
                  ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
#: The same counters as field values (scopeId = link), where the call is not supported.
_LEGACY_FIELDS = (("replay", 161), ("recovery", 162), ("crc", 163))
#: NVLink5 (Blackwell, compute capability 10+).
_NVLINK5_FIELDS = (("recovery_successful", 213), ("recovery_failed", 214),
                   ("recovery_events", 215))
#: Counters whose growth is a warning below CRC_FAIL_PER_S (DCGM: CRC delta >= 1 warns,
#: >= 100/s fails; replay and recovery >= 1 fail; DcgmGPUHardwareLimits.h).
CRC_COUNTERS = frozenset({"crc_flit", "crc_data", "crc"})
CRC_FAIL_PER_S = 100.0


@dataclass(frozen=True, slots=True)
class LinkStates:
    """The GPU's NVLinks: `up` (active or asleep), of which `sleeping`, and `down`."""

    up: tuple[int, ...]
    sleeping: tuple[int, ...]
    down: tuple[int, ...]
    source: str
    """`NVML field 165` or `nvmlDeviceGetNvLinkState`."""


def link_states(r: Reader, handle: NvmlHandle) -> LinkStates | None:
    """The state of every NVLink of the GPU; None when the GPU reports no NVLink."""
    (count,) = r.fields(handle, [_FI_LINK_COUNT])
    links = range(int(count) if count else getattr(r.nvml, "NVML_NVLINK_MAX_LINKS", _MAX_LINKS))
    states = r.fields(handle, [(_FI_LINK_STATE, link) for link in links])
    if any(s is not None for s in states):
        up, sleeping, down = [], [], []
        for link, state in zip(links, states, strict=True):
            if state is None:
                continue  # past the last link when the count was not reported
            (up if state in (_ACTIVE, _SLEEP) else down).append(link)
            if state == _SLEEP:
                sleeping.append(link)
        return LinkStates(tuple(up), tuple(sleeping), tuple(down), "NVML field 165")
    up, down = [], []
    nvml = r.nvml
    for link in links:
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError:
            break  # past the last link (InvalidArgument) or no NVLink at all (NotSupported)
        (up if state == getattr(nvml, "NVML_FEATURE_ENABLED", 1) else down).append(link)
    if not up and not down:
        return None
    return LinkStates(tuple(up), (), tuple(down), "nvmlDeviceGetNvLinkState")


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """One GPU's NVLink error counters now: link -> counter -> value, for the links where at
    least one counter could be read; `unread`: the up links where none could."""

    values: dict[int, dict[str, int]] = field(default_factory=dict)
    how: str = ""
    """What read them: `nvmlDeviceGetNvLinkErrorCounter`, `NVML fields 213-215` ..."""
    unread: tuple[int, ...] = ()
    error: str = ""
    """Why nothing about the GPU's links could be read (NVML gave no handle for it)."""


def _blackwell(r: Reader, handle: NvmlHandle) -> bool | None:
    cc = r.get("nvmlDeviceGetCudaComputeCapability", handle)
    return None if not cc else int(cc[0]) >= 10


def _by_call(r: Reader, handle: NvmlHandle, link: int) -> dict[str, int]:
    counts = {}
    for name, const in _COUNTER_CALLS:
        value = r.get("nvmlDeviceGetNvLinkErrorCounter", handle, link, getattr(r.nvml, const, 0))
        if value is not None:
            counts[name] = int(value)
    return counts


def _by_fields(r: Reader, handle: NvmlHandle, links: tuple[int, ...],
               fields: tuple[tuple[str, int], ...]) -> dict[int, dict[str, int]]:
    ids = [(fid, link) for link in links for _, fid in fields]
    values = iter(r.fields(handle, ids))
    out: dict[int, dict[str, int]] = {}
    for link in links:
        counts = {name: int(v) for name, _ in fields if (v := next(values)) is not None}
        if counts:
            out[link] = counts
    return out


def _fields_label(fields: tuple[tuple[str, int], ...]) -> str:
    return f"NVML fields {fields[0][1]}-{fields[-1][1]}"


def read_counters(r: Reader, handle: NvmlHandle, links: tuple[int, ...]) -> GpuCounters:
    """The error counters of `links`, by the GPU's architecture (see the module's doc); where
    the architecture is unknown, every way in turn until one reads something."""
    if not links:
        return GpuCounters()
    blackwell = _blackwell(r, handle)
    values: dict[int, dict[str, int]] = {}
    how = ""
    if not blackwell:
        values = {link: c for link in links if (c := _by_call(r, handle, link))}
        how = "nvmlDeviceGetNvLinkErrorCounter"
        if not values:
            values, how = _by_fields(r, handle, links, _LEGACY_FIELDS), _fields_label(
                _LEGACY_FIELDS)
    if blackwell or (blackwell is None and not values):
        values, how = _by_fields(r, handle, links, _NVLINK5_FIELDS), _fields_label(
            _NVLINK5_FIELDS)
    unread = tuple(link for link in links if link not in values)
    return GpuCounters(values, how if values else "", unread)


@dataclass(frozen=True, slots=True)
class NvlinkCounters:
    """Two samples of every GPU's NVLink error counters, `interval_s` apart."""

    growth: dict[int, dict[int, dict[str, int]]]
    """GPU -> link -> counter -> increase (only counters that grew)."""
    unread: dict[int, str]
    """GPU -> why (some of) its up links' counters are unknown: never "no errors"."""
    read: dict[int, str]
    """GPU -> what read its counters (`nvmlDeviceGetNvLinkErrorCounter, 18 links`)."""
    interval_s: float


def _links(links: tuple[int, ...]) -> str:
    return ", ".join(str(n) for n in links)


def error_growth(before: dict[int, GpuCounters], after: dict[int, GpuCounters],
                 interval_s: float) -> NvlinkCounters:
    """What grew between two samples (GPU -> GpuCounters), and what could not be read."""
    growth: dict[int, dict[int, dict[str, int]]] = {}
    unread: dict[int, str] = {}
    read: dict[int, str] = {}
    for gpu in sorted(set(before) | set(after)):
        first, second = before.get(gpu), after.get(gpu)
        if first is None or second is None:
            unread[gpu] = "the GPU answered only one of the two samples"
            continue
        missing = tuple(sorted(set(first.unread) | set(second.unread)))
        if first.error or second.error:
            unread[gpu] = first.error or second.error
        elif missing:
            where = (f"any of its {len(missing)} up links" if not (first.values or second.values)
                     else f"link(s) {_links(missing)}")
            unread[gpu] = (f"no NVLink error counter could be read on {where} (NOT_SUPPORTED "
                           "or failing)")
        if second.values:
            read[gpu] = f"{second.how}, {len(second.values)} links"
        for link, counters in second.values.items():
            for name, value in counters.items():
                old = first.values.get(link, {}).get(name)
                if old is not None and value > old:
                    growth.setdefault(gpu, {}).setdefault(link, {})[name] = value - old
    return NvlinkCounters(growth, unread, read, interval_s)
