"""The nccl-tests `-J` JSON file (nccl-tests 2.14+ `-J FILE`), whole or cut short (the result
objects are salvaged), as an NcclTestsResult."""

from __future__ import annotations

import contextlib
import json
import math
import re

from harness.base.jsontypes import JSONObject, JSONValue
from harness.parsers import ParseError
from harness.parsers.nccl_tests_model import (
    MAX_ERRORS,
    MAX_ROWS,
    Measurement,
    NcclTestsResult,
    Row,
    bus_factor,
    collective_name,
)
from harness.parsers.values import ascii_int

__all__ = ["parse_json"]

def _json_num(value: JSONValue) -> float | None:
    """A finite JSON number (not a bool, not NaN/Infinity, which Python's json accepts)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _json_int(value: JSONValue) -> int | None:
    """An integer from a JSON number or numeric string (`"root": "0"`)."""
    if isinstance(value, str):
        return ascii_int(value)
    number = _json_num(value)
    return None if number is None or abs(number) >= 1e18 else round(number)


def _json_measure(obj: JSONValue) -> Measurement | None:
    if not isinstance(obj, dict):
        return None
    return Measurement(_json_num(obj.get("time")) if "time" in obj else _json_num(obj.get("cpu_time")),
                       _json_num(obj.get("alg_bw")), _json_num(obj.get("bus_bw")),
                       _json_int(obj.get("nwrong")))


def _json_results(text: str) -> tuple[JSONObject, bool]:
    """The document, or what can be salvaged from a file cut short (result objects only)."""
    try:
        doc = json.loads(text)
        if isinstance(doc, dict):
            return doc, True
    except (ValueError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    results: list[JSONValue] = []
    for m in re.finditer(r'\{"size":', text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except (ValueError, RecursionError):
            continue
        results.append(obj)
        if len(results) >= MAX_ROWS:
            break
    salvaged: JSONObject = {"results": results}
    for key in ("args", "config"):
        m = re.search(rf'"{key}":', text)
        if m:
            with contextlib.suppress(ValueError, RecursionError):
                salvaged[key], _ = decoder.raw_decode(text, m.end())
    return salvaged, False


def parse_json(text: str, collective: str | None) -> NcclTestsResult:
    doc, whole = _json_results(text)
    results = doc.get("results") if isinstance(doc.get("results"), list) else []
    # A run that dies before its first row (e.g. at `# Using devices`) still leaves a whole
    # document: `version`, `args`, `env`, `nccl_version`, `config` and no `results` (nccl-tests
    # 2.19.7, edcadet10/gpu-systems-lab results/published/t4-a48afa5/attempts/v3).
    rowless = whole and not results and "nccl_version" in doc and isinstance(doc.get("config"), dict)
    if not results and "average_bus_bandwidth" not in doc and not rowless:
        raise ParseError("JSON input is not an nccl-tests -J document (no `results` list)")
    rows = []
    for obj in results[:MAX_ROWS]:
        if not isinstance(obj, dict):
            continue
        oop = _json_measure(obj.get("out_of_place"))
        ip = _json_measure(obj.get("in_place"))
        if oop is None and ip is None:
            continue
        redop, dtype = obj.get("redop"), obj.get("type")
        rows.append(Row(_json_int(obj.get("size")) or 0, _json_int(obj.get("count")) or 0,
                        dtype if isinstance(dtype, str) else None,
                        redop if isinstance(redop, str) else None, _json_int(obj.get("root")),
                        oop or ip, ip if oop else None))  # type: ignore[arg-type]
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    devices = config.get("devices") if isinstance(config.get("devices"), list) else []
    per_proc = max(_json_int(config.get("ngpus")) or 1, 1) * max(_json_int(config.get("nthreads")) or 1, 1)
    nranks = len(devices) * per_proc if devices else None
    args = doc.get("args") if isinstance(doc.get("args"), list) else []
    name = collective or (collective_name(str(args[0])) if args else None)
    avg = doc.get("average_bus_bandwidth")
    avg_value = _json_num(avg.get("bandwidth")) if isinstance(avg, dict) else None
    oob = doc.get("out_of_bounds")
    raw_errors = doc.get("errors")
    errors = [str(e)[:500] for e in raw_errors[:MAX_ERRORS] if e] if isinstance(raw_errors, list) else []
    validation = config.get("validation")
    hosts = tuple(dict.fromkeys(str(d.get("hostname")) for d in devices if isinstance(d, dict)))
    return NcclTestsResult(
        collective=name, nranks=nranks,
        dtype=rows[0].dtype if rows else None, redop=rows[0].redop if rows else None,
        rows=tuple(rows),
        avg_busbw_gb_s=avg_value,
        out_of_bounds=_json_int(oob.get("count")) if isinstance(oob, dict) else None,
        completed=whole and avg_value is not None and not errors,
        errors=tuple(errors),
        busbw_mismatches=tuple(_json_mismatches(rows, name, nranks)),
        checked=None if validation is None else bool(validation),
        hosts=hosts,
        devices=tuple(str(d.get("device_info")) for d in devices[:1] if isinstance(d, dict)),
        min_bw_failed=isinstance(avg, dict) and avg.get("okay") is False,
        source_format="json",
        warnings=(("JSON document cut short: rows salvaged",) if not whole else
                  ("-J document without results: the run stopped before its first row",) if rowless
                  else ()),
    )


def _json_mismatches(rows: list[Row], collective: str | None, nranks: int | None) -> list[str]:
    factor = bus_factor(collective, nranks)
    if factor is None:
        return []
    out = []
    for row in rows:
        for name, m in (("out-of-place", row.oop), ("in-place", row.ip)):
            if m is None or m.algbw_gb_s is None or m.busbw_gb_s is None:
                continue
            expected = m.algbw_gb_s * factor
            if abs(expected - m.busbw_gb_s) > 1e-3 * max(1.0, expected):
                out.append(f"busbw mismatch at {row.size_bytes} bytes ({name}): printed "
                           f"{m.busbw_gb_s:g} GB/s, algbw {m.algbw_gb_s:g} x {factor:.4g} = "
                           f"{expected:.4g} GB/s")
    return out
