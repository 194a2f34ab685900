"""Reading a report written before the typed measurement fields (`gpu-preflight.report/v1`
without `results_schema`): the one place prose is read. `upgrade` gives today's shape, which
`Report.from_dict` types; nothing else reads a v1 report's text.

A v1 measurement had no `size_bytes`, `gpu_index`, `collective` or `name`: they are recovered
from its `what` (`all_reduce busbw at 1 GiB`, `GPU 3 temperature`, `GPU count`), and the GPUs a
failed check's message names (`GPU 5 fell off the bus`) become failed measurements with their
index. A report of this version that lacks a field is not read here: it says "not recorded"."""

from __future__ import annotations

import re
from collections.abc import Mapping

from harness.base.jsontypes import JSONMapping, JSONObject

__all__ = ["is_v1", "legacy_gpus", "legacy_size", "upgrade"]

_UNITS = {"": 1, "b": 1, "byte": 1, "bytes": 1, "k": 2**10, "kb": 2**10, "kib": 2**10,
          "m": 2**20, "mb": 2**20, "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30,
          "t": 2**40, "tb": 2**40, "tib": 2**40}
# nccl-tests sizes are powers of two (`-e 16G` is 16 GiB), so K/M/G and KB/MB/GB are binary here.
# `(?!/s)` keeps the bandwidth unit (`GB/s`) from reading as a size.
_SIZE_IN_TEXT = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s*(TiB|GiB|MiB|KiB|TB|GB|MB|KB|bytes|byte|B|T|G|M|K)\b(?!/s)"
)
_SIZE_BYTES_IN_TEXT = re.compile(r"size[_ ]?bytes\s*[=:]\s*(\d+)", re.I)
# A GPU named in a v1 message: `GPU 3`, `GPU#3`, `gpu 3:`.
_GPU_INDEX = re.compile(r"\bGPU\s*#?(\d+)\b", re.I)
_COLLECTIVE = re.compile(r"\b(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|"
                         r"broadcast|reduce|sendrecv)\b", re.I)
_BUSBW = re.compile(r"busbw|bus bandwidth|bus bw", re.I)
_GPU_COUNT = re.compile(r"\bgpus?\b.*\b(count|visible|found|present|detected)\b|"
                        r"\b(count|number) of gpus\b", re.I)
#: The name today's PF-GPU-001 gives the GPUs it saw (harness.report.figures.GPU_COUNT_NAME).
GPU_COUNT_NAME = "gpus_visible"
#: What a GPU a v1 message named is recorded as (a failed measurement with its index).
NAMED_GPU = "GPU named by the message (v1 report)"


def legacy_size(text: str) -> int | None:
    """Bytes from `1 GiB`, `128M`, `8 B`, `size_bytes=1073741824` (binary units); else None."""
    found = _SIZE_BYTES_IN_TEXT.search(text)
    if found:
        return int(found.group(1))
    found = _SIZE_IN_TEXT.search(text)
    if not found:
        return None
    return int(float(found.group(1)) * _UNITS[found.group(2).lower()])


def legacy_gpus(text: str) -> set[int]:
    """The GPU indices a v1 message names."""
    return {int(i) for i in _GPU_INDEX.findall(text)}


def is_v1(data: JSONMapping) -> bool:
    """A report written before the typed fields says no `results_schema`."""
    return data.get("results_schema") is None


def _measurement(m: JSONMapping) -> JSONObject:
    what = str(m.get("what") or "")
    out = dict(m)
    if out.get("size_bytes") is None and (size := legacy_size(what)) is not None:
        out["size_bytes"] = size
    if out.get("gpu_index") is None and (gpus := sorted(legacy_gpus(what))):
        out["gpu_index"] = gpus[0]
    if out.get("collective") is None and _BUSBW.search(what):
        found = _COLLECTIVE.search(what)
        out["collective"] = found.group(1).lower() if found else ""
    if not out.get("name") and out.get("gpu_index") is None and _GPU_COUNT.search(what):
        out["name"] = GPU_COUNT_NAME
    return out


def _check(check: JSONMapping) -> JSONObject:
    measurements = [_measurement(m) for m in check.get("measurements") or []
                    if isinstance(m, Mapping)]
    if check.get("outcome") in ("fail", "error"):  # the GPUs a v1 message named, as fields
        known = {m.get("gpu_index") for m in measurements if m.get("ok") is False}
        named = legacy_gpus(str(check.get("message") or "")) - known
        measurements += [{"what": NAMED_GPU, "value": 1, "unit": "found", "op": "==",
                          "threshold": 0, "ok": False, "gpu_index": i} for i in sorted(named)]
    return {**check, "measurements": measurements}


def upgrade(data: JSONMapping) -> JSONObject:
    """A v1 report in today's shape: its checks' sizes and GPU indices as fields, a profile
    given as a bare name as {name, source}. Keys it never had stay absent (the reader's
    defaults); it is not a report of this version, so `results_schema` stays absent too."""
    out = dict(data)
    out["checks"] = [_check(c) for c in data.get("checks") or [] if isinstance(c, Mapping)]
    if isinstance(data.get("profile"), str):
        out["profile"] = {"name": data["profile"], "source": ""}
    return out
