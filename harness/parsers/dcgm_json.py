"""`dcgmi diag -j` JSON of DCGM 3.x (`DCGM GPU Diagnostic`, `gpu_id(s)`), 4.x (`DCGM
Diagnostic`, `entity_id`, `metadata`) and old NVVS, read into a DcgmDiag."""

from __future__ import annotations

import re

from harness.base.jsontypes import JSONObject, JSONValue
from harness.parsers import ParseError
from harness.parsers.dcgm_records import MAX_MESSAGES, MAX_RESULTS, DcgmDiag, DcgmResult, status_of
from harness.parsers.values import ascii_int

_DRIVER_VERSION = re.compile(r"^[0-9]{3}(?:\.[0-9]+)*$")


def _gpu_ids(result: JSONObject) -> list[int | None]:
    group = str(result.get("entity_group", "GPU")).upper()
    for key in ("entity_id", "gpu_id", "gpu_ids"):
        if key in result:
            if group not in ("GPU", "1"):
                return [None]
            ids = [p.strip() for p in str(result[key]).split(",", 1) if p.strip()]
            # A deployment test reports once for every GPU as "0,1,2,3": one node-level result.
            # (ASCII digits only: `"²".isdigit()` is True, and int() of it raises.)
            return [ascii_int(ids[0]) if len(ids) == 1 else None]
    return [None]


def _messages(result: JSONObject) -> str:
    parts = []
    for key in ("warnings", "errors", "error", "warning"):
        items = result.get(key)
        if isinstance(items, str | dict):
            items = [items]
        for item in _list(items)[:MAX_MESSAGES]:
            if isinstance(item, dict):
                # 3.x deployment tests nest the text under "warnings" again (dcgmi/Diag.cpp,
                # HelperJsonAddBasicTests): {"warnings": "GPU 3 has ...", "error_id": 95, ...}.
                nested = item.get("warnings")
                item = (item.get("warning") or (nested if isinstance(nested, str) else "")
                        or item.get("error") or item.get("message") or "")
            if str(item).strip():
                parts.append(str(item).strip())
    return " ".join(parts)


def _list(value: object) -> list[JSONValue]:
    """`value` when it is a JSON list, else [] (a number or string where a list belongs)."""
    return value if isinstance(value, list) else []

def diag_from_json(doc: JSONObject) -> DcgmDiag:
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        body = doc if ("test_categories" in doc or "tests" in doc) else None
    fragment = False
    if body is None and isinstance(doc.get("results"), list) and "name" in doc:
        # One element of DCGM 4's `tests[]` pasted alone (NVIDIA/DCGM#215): read as a
        # document of that one test, whose other tests and metadata are absent.
        body, fragment = {"tests": [doc]}, True
    if body is None:
        raise ParseError("JSON without `DCGM Diagnostic` / `DCGM GPU Diagnostic`: not dcgmi "
                         "diag -j output")
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = metadata.get("version") or body.get("version") or doc.get("version")
    driver = (metadata.get("Driver Version Detected") or body.get("Driver Version Detected")
              or body.get("driver_version_detected") or doc.get("driver_version"))
    if version and _DRIVER_VERSION.match(str(version)):
        # Old NVVS wrote the driver's version there (`"version" : "440.37"`, and its text banner
        # `DCGM GPU Diagnostic (version 418)`); DCGM's own versions are 1.x to 4.x.
        driver, version = driver or version, None
    tests: list[tuple[str, JSONObject]] = []
    for category in _list(body.get("test_categories")):
        if isinstance(category, dict):
            tests.extend((str(category.get("category") or ""), t)
                         for t in _list(category.get("tests")) if isinstance(t, dict))
    tests.extend(("", t) for t in _list(body.get("tests")) if isinstance(t, dict))
    results = []
    for category, test in tests[:MAX_RESULTS]:
        name = str(test.get("name", "?"))
        mine = []
        for result in _list(test.get("results"))[:MAX_RESULTS]:
            if not isinstance(result, dict):
                continue
            for gpu in _gpu_ids(result):
                mine.append(DcgmResult(name, gpu, status_of(result.get("status")),
                                       _messages(result), category))
        # DCGM 4: a test can fail as a whole (an internal error) while every GPU passed.
        summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
        if status_of(summary.get("status")) == "fail" and not any(r.status == "fail" for r in mine):
            mine.append(DcgmResult(name, None, "fail", _messages(summary), category))
        results += mine
    errors = [str(body[k]) for k in ("runtime_error", "error") if body.get(k)]
    errors += [str(doc[k]) for k in ("runtime_error", "error") if doc.get(k) and doc is not body]
    for item in _list(doc.get("errors"))[:MAX_MESSAGES]:
        text = _messages({"errors": [item]}) if isinstance(item, dict) else str(item)
        errors.append(text or str(item))
    if not results and not errors:
        raise ParseError("dcgmi diag JSON holds no test results")
    return DcgmDiag(str(version) if version else None, str(driver) if driver else None,
                    tuple(results), tuple(errors), fragment=fragment)
