"""`dcgmi diag -r N` results: the JSON of DCGM 3.x (`DCGM GPU Diagnostic`, `gpu_id(s)`) and 4.x
(`DCGM Diagnostic`, `entity_id`, `metadata`), and the text table dcgmi prints without `-j`."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TextIO

from harness.parsers import ParseError, read_text

__all__ = ["INSPECT", "DcgmDiag", "DcgmResult", "inspect_dcgm", "parse_dcgm_diag"]

_STATUS = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
           "skipped": "skip", "not run": "skip", "not_run": "skip"}


@dataclass(frozen=True, slots=True)
class DcgmResult:
    """One test's outcome on one GPU (gpu None: the test reports for the whole node)."""

    test: str
    gpu: int | None
    status: str
    """pass, fail, warn, skip (an unknown word is kept as it was, and counts as a failure)."""
    message: str = ""
    category: str = ""
    """`Deployment` (software checks), `Hardware`, `Integration`, `Stress`; "" when unknown."""


@dataclass(frozen=True, slots=True)
class DcgmDiag:
    """A whole diagnostic run."""

    dcgm_version: str | None
    driver_version: str | None
    results: tuple[DcgmResult, ...]
    errors: tuple[str, ...] = ()
    """Node-level errors dcgmi reported instead of (or besides) test results."""

    @property
    def failed(self) -> list[DcgmResult]:
        """Failed results, and results whose status is a word this parser does not know."""
        return [r for r in self.results if r.status not in ("pass", "warn", "skip")]

    @property
    def passed(self) -> bool | None:
        """False: a test failed or dcgmi reported an error; True: something ran and nothing
        failed; None: no test ran (all skipped), or only the deployment (software) checks did
        while every GPU test past them was skipped (DCGM skips plugins a SKU does not allow)."""
        if self.failed or self.errors:
            return False
        ran = [r for r in self.results if r.status in ("pass", "warn")]
        gpu_tests = [r for r in self.results if r.category.lower() != "deployment"]
        if gpu_tests and not any(r.status in ("pass", "warn") for r in gpu_tests):
            return None
        return True if ran else None

    @property
    def warnings(self) -> list[str]:
        out = []
        for r in self.results:
            if r.status == "warn" or (r.status not in ("pass", "fail", "skip")):
                where = f" on GPU {r.gpu}" if r.gpu is not None else ""
                out.append(f"{r.test}{where}: {r.status}" + (f": {r.message}" if r.message else ""))
        skipped = sorted({r.test for r in self.results if r.status == "skip"})
        if skipped:
            out.append("skipped: " + ", ".join(skipped))
        return out


_DRIVER_VERSION = re.compile(r"^\d{3}(?:\.\d+)*$")


def _status(raw: object) -> str:
    text = str(raw or "").strip().lower()
    return _STATUS.get(text, text or "unknown")


def _gpu_ids(result: dict[str, Any]) -> list[int | None]:
    group = str(result.get("entity_group", "GPU")).upper()
    for key in ("entity_id", "gpu_id", "gpu_ids"):
        if key in result:
            if group not in ("GPU", "1"):
                return [None]
            ids = [p.strip() for p in str(result[key]).split(",") if p.strip()]
            # A deployment test reports once for every GPU as "0,1,2,3": one node-level result.
            if len(ids) == 1 and ids[0].lstrip("-").isdigit():
                return [int(ids[0])]
            return [None]
    return [None]


def _messages(result: dict[str, Any]) -> str:
    parts = []
    for key in ("warnings", "errors", "error", "warning"):
        items = result.get(key)
        if isinstance(items, str | dict):
            items = [items]
        for item in items or []:
            if isinstance(item, dict):
                # 3.x deployment tests nest the text under "warnings" again (dcgmi/Diag.cpp,
                # HelperJsonAddBasicTests): {"warnings": "GPU 3 has ...", "error_id": 95, ...}.
                nested = item.get("warnings")
                item = (item.get("warning") or (nested if isinstance(nested, str) else "")
                        or item.get("error") or item.get("message") or "")
            if str(item).strip():
                parts.append(str(item).strip())
    return " ".join(parts)


def _from_json(doc: dict[str, Any]) -> DcgmDiag:
    body = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic")
    if not isinstance(body, dict):
        body = doc if ("test_categories" in doc or "tests" in doc) else None
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
    tests: list[tuple[str, dict[str, Any]]] = []
    for category in body.get("test_categories") or []:
        if isinstance(category, dict):
            tests.extend((str(category.get("category") or ""), t)
                         for t in category.get("tests") or [] if isinstance(t, dict))
    tests.extend(("", t) for t in body.get("tests") or [] if isinstance(t, dict))
    results = []
    for category, test in tests:
        name = str(test.get("name", "?"))
        mine = []
        for result in test.get("results") or []:
            if not isinstance(result, dict):
                continue
            for gpu in _gpu_ids(result):
                mine.append(DcgmResult(name, gpu, _status(result.get("status")),
                                       _messages(result), category))
        # DCGM 4: a test can fail as a whole (an internal error) while every GPU passed.
        summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
        if _status(summary.get("status")) == "fail" and not any(r.status == "fail" for r in mine):
            mine.append(DcgmResult(name, None, "fail", _messages(summary), category))
        results += mine
    errors = [str(body[k]) for k in ("runtime_error", "error") if body.get(k)]
    errors += [str(doc[k]) for k in ("runtime_error", "error") if doc.get(k) and doc is not body]
    for item in doc.get("errors") or []:
        text = _messages({"errors": [item]}) if isinstance(item, dict) else str(item)
        errors.append(text or str(item))
    if not results and not errors:
        raise ParseError("dcgmi diag JSON holds no test results")
    return DcgmDiag(str(version) if version else None, str(driver) if driver else None,
                    tuple(results), tuple(errors))


# ---- text table ----
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*?)(?P<close>\|)?\s*$")
_CATEGORY = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z ]+?)\s+-+\+")
_OUTCOME = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<who>.*))?$", re.I)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<status>Pass|Fail|Warn|Skip|Not Run)\b", re.I)
_MENTION = re.compile(r"\bGPU\s+(\d+)\b")


def _who(who: str | None) -> list[int | None]:
    """`All`, `GPU: 1`, `GPUs: 0, 2, 3` -> GPU ids (None: every GPU / the node)."""
    if not who or who.strip().lower() == "all":
        return [None]
    ids = re.findall(r"\d+", who.split(":", 1)[-1])
    return [int(i) for i in ids] or [None]


def _from_text(text: str) -> DcgmDiag:
    version = driver = None
    errors: list[list[str]] = []
    # Per test: (name, [(gpu, status)], [message chunks], category).
    tests: list[tuple[str, list[tuple[int | None, str]], list[list[str]], str]] = []
    category = ""
    plain: set[int] = set()  # tests whose row says only `Fail` (no `- GPU: 1` / `- All`)
    message: list[str] | None = None  # the Warning/Error being continued
    in_category = False  # a test row came since the last category header
    for line in text.split("\n"):
        header = _CATEGORY.match(line.strip())
        if header:
            message, in_category, category = None, False, header["name"]
            continue
        m = _ROW.match(line.strip())
        if not m:
            continue
        # dcgmi writes a message in fixed-width chunks (45 characters in a 48-wide cell: one pad
        # space before, two after), cutting mid-word; keep the chunk exactly so they rejoin.
        cell = m["value"]
        raw_value = cell[1:len(cell) - 2] if m["close"] and len(cell) > 3 else cell[1:]
        name, value = m["name"].strip(), raw_value.strip()
        if name in ("Diagnostic", "") and value == "Result":
            continue
        if name == "DCGM Version":
            version = value
        elif name == "Driver Version Detected":
            driver = value
        elif name in ("GPU Device IDs Detected",):
            pass
        elif name in ("Warning", "Error", "Info"):
            # A new message; its wrapped continuation lines are appended to the same list.
            message = [raw_value]
            # dcgmi 3.x prints a deployment test's messages as `Error` rows under the test's own
            # row (dcgmi/Diag.cpp, HelperDisplayDeploymentResult): they explain that test when
            # it failed. Any other `Error` is a failure of its own (never lost on a passed test).
            explains = in_category and tests and any(s in ("fail", "warn")
                                                     for _, s in tests[-1][1])
            if (name == "Warning" and tests) or (name == "Error" and explains):
                tests[-1][2].append(message)
            elif name == "Error":
                errors.append(message)
        elif name:
            outcome = _OUTCOME.match(value)
            if outcome is None and value and value.lower() not in _STATUS:
                # Not a result row (a markdown table, a key/value line someone pasted).
                message = None
                continue
            status = outcome["status"] if outcome else value
            who = _who(outcome["who"] if outcome else None)
            if not (outcome and outcome["who"]):
                plain.add(len(tests))
            tests.append((name, [(g, _status(status)) for g in who], [], category))
            message, in_category = None, True
        else:  # continuation line
            outcome, per_gpu = _OUTCOME.match(value), _PER_GPU.match(value)
            if per_gpu and tests:
                tests[-1][1].append((int(per_gpu["gpu"]), _status(per_gpu["status"])))
                message = None
            elif outcome and tests and message is None:
                tests[-1][1].extend((g, _status(outcome["status"])) for g in _who(outcome["who"]))
            elif message is not None:
                message.append(raw_value)
    results: list[DcgmResult] = []
    for index, (name, outcomes, messages, test_category) in enumerate(tests):
        texts = [_join(m) for m in messages]
        per_gpu = {g for g, _ in outcomes if g is not None}
        named = sorted({int(g) for t in texts for g in _MENTION.findall(t)})
        if index in plain and outcomes == [(None, "fail")] and named:
            # A deployment test fails for the node but its messages name the GPUs concerned.
            outcomes = [(g, "fail") for g in named]
            per_gpu = set(named)
        for gpu, status in outcomes:
            # DCGM 4 prints the test's overall line, then one line per GPU: keep the overall
            # outcome only where it says more than the GPUs do (an internal error).
            if gpu is None and per_gpu and (
                status != "fail" or any(s == "fail" for g, s in outcomes if g is not None)
            ):
                continue
            mine = [t for t in texts if gpu is None or str(gpu) in _MENTION.findall(t)
                    or not _MENTION.search(t)]
            text = " ".join(mine) if status != "pass" else ""
            results.append(DcgmResult(name, gpu, status, text, test_category))
    error_texts = [_join(e) for e in errors]
    for err in error_texts:
        gpus = [int(g) for g in _MENTION.findall(err)] or [None]
        results.append(DcgmResult("Deployment", gpus[0], "fail", err, "Deployment"))
    if not results:
        raise ParseError("no dcgmi diag result table rows (`| Memory | Pass |`) and no DCGM JSON")
    return DcgmDiag(version, driver, tuple(results), ())


def _join(chunks: list[str]) -> str:
    """dcgmi wraps long messages at a fixed width, mid-word: join the chunks as they were cut."""
    return re.sub(r"\s+", " ", "".join(c.rstrip("\n") for c in chunks).strip())


def parse_dcgm_diag(text: str) -> DcgmDiag:
    """Parse `dcgmi diag -r N [-j]` output: JSON (3.x or 4.x; the banner `Successfully ran
    diagnostic for group.` before it is skipped) or the text table
    (`| GPU Memory | Pass - GPUs: 1, 2 |`, `|  | Fail - GPU: 0 |`, `| Warning | GPU 0 ... |`)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start = text.find("{")
    if start >= 0 and not text[:start].lstrip().startswith(("|", "+")):
        try:
            doc, _ = json.JSONDecoder().raw_decode(text[start:])
        except ValueError as exc:
            if "|" not in text:
                raise ParseError(
                    f"dcgmi output is neither a result table nor valid JSON: {exc}"
                ) from None
        else:
            if isinstance(doc, dict):
                return _from_json(doc)
    if not text.strip():
        raise ParseError("empty input: no dcgmi diag output")
    m = re.search(r"^Error: .*$", text, re.M)
    if m and "|" not in text:
        raise ParseError(f"dcgmi reported an error and no results: {m.group(0).strip()}")
    return _from_text(text)


def inspect_dcgm(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect dcgm FILE`: keys passed (bool|null), dcgm_version, failed_tests
    [{test, gpu, message}], warnings [str]."""
    diag = parse_dcgm_diag(read_text(stream))
    failed = [{"test": r.test, "gpu": r.gpu, "message": r.message} for r in diag.failed]
    failed += [{"test": "dcgmi", "gpu": None, "message": e} for e in diag.errors]
    return {"passed": diag.passed, "dcgm_version": diag.dcgm_version, "failed_tests": failed,
            "warnings": diag.warnings}


INSPECT = {"dcgm": inspect_dcgm}
