"""`dcgmi diag -r N` results: the JSON of DCGM 3.x (`DCGM GPU Diagnostic`, `gpu_id(s)`) and 4.x
(`DCGM Diagnostic`, `entity_id`, `metadata`), and the text table dcgmi prints without `-j`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from harness.parsers import ParseError
from harness.parsers.reader import Input, as_input
from harness.parsers.values import ascii_int

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
    omitted: int = 0
    """Test rows past MAX_RESULTS, not read (a flood): then a run without failures is unknown."""
    cut_at: str | None = None
    """A text table that ends in a category header with no row under it (`Integration`): the
    paste or the run was cut there, so the categories after it are absent."""

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
        if self.omitted or self.cut_at:
            return None  # rows that were not read (or not printed) may hold a failure
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


_DRIVER_VERSION = re.compile(r"^[0-9]{3}(?:\.[0-9]+)*$")


def _status(raw: object) -> str:
    text = str(raw or "").strip().lower()
    return _STATUS.get(text, text or "unknown")


def _gpu_ids(result: dict[str, Any]) -> list[int | None]:
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


def _messages(result: dict[str, Any]) -> str:
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


def _list(value: Any) -> list[Any]:
    """`value` when it is a JSON list, else [] (a number or string where a list belongs)."""
    return value if isinstance(value, list) else []


#: Bounds on what is kept (memory stays flat): a level-4 run on 8 GPUs has ~150 results.
MAX_RESULTS = 20_000
MAX_MESSAGES = 200


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
                mine.append(DcgmResult(name, gpu, _status(result.get("status")),
                                       _messages(result), category))
        # DCGM 4: a test can fail as a whole (an internal error) while every GPU passed.
        summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else {}
        if _status(summary.get("status")) == "fail" and not any(r.status == "fail" for r in mine):
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
                    tuple(results), tuple(errors))


# ---- text table ----
# (The cell's closing `|` and trailing blanks are cut in Python: a lazy group before `\s*$`
# rescanned a run of blanks from each of its characters.)
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*)$")
_CATEGORY = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z]+(?: [A-Za-z]+)*)\s+-+\+")
_OUTCOME = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<who>.*))?$", re.I)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>[0-9]{1,9})\s*:\s*(?P<status>Pass|Fail|Warn|Skip|Not Run)\b", re.I)
_MENTION = re.compile(r"\bGPU\s+([0-9]{1,9})\b")


def _who(who: str | None) -> list[int | None]:
    """`All`, `GPU: 1`, `GPUs: 0, 2, 3` -> GPU ids (None: every GPU / the node)."""
    if not who or who.strip().lower() == "all":
        return [None]
    ids = re.findall(r"[0-9]+", who.split(":", 1)[-1])[:MAX_MESSAGES]
    return [n for i in ids if (n := ascii_int(i)) is not None] or [None]


class _Tests(list):  # type: ignore[type-arg]
    """The text table's tests in order, each [name, [(gpu, status)], [message chunks],
    category, plain]; a test identical to one already listed (the same table printed again) is
    kept once, and at most MAX_RESULTS are kept."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[object] = set()
        self.omitted = 0

    def add(self, test: list[Any]) -> list[Any]:
        """Start `test`; returns it (its continuation lines go to it, kept or not)."""
        self._settle()
        if len(self) >= MAX_RESULTS:
            self.omitted += 1
        else:
            self.append(test)
        return test

    def _settle(self) -> None:
        """The last test is complete once the next one starts: drop it if it is a repeat."""
        if self:
            name, outcomes, messages, category, plain = self[-1]
            key = (name, tuple(outcomes), tuple(tuple(m) for m in messages), category, plain)
            if key in self.seen:
                self.pop()
            elif len(self.seen) < MAX_RESULTS:
                self.seen.add(key)

    def finish(self) -> _Tests:
        self._settle()
        return self


def _from_text(lines: Iterable[str]) -> DcgmDiag:
    version = driver = None
    errors: list[list[str]] = []
    error_seen: set[str] = set()  # node-level errors already listed (a table printed again)
    # Per test: [name, [(gpu, status)], [message chunks], category, plain (its row says only
    # `Fail`, no `- GPU: 1` / `- All`)].
    tests = _Tests()
    current: list[Any] | None = None  # the test the next continuation lines belong to
    category = ""
    message: list[str] | None = None  # the Warning/Error being continued
    in_category = False  # a test row came since the last category header
    for line in lines:
        stripped = line.strip()
        if stripped[:1] not in ("|", "+"):
            continue
        header = _CATEGORY.match(stripped)
        if header:
            message, in_category, category = None, False, header["name"]
            continue
        m = _ROW.match(stripped)
        if not m:
            continue
        # dcgmi writes a message in fixed-width chunks (45 characters in a 48-wide cell: one pad
        # space before, two after), cutting mid-word; keep the chunk exactly so they rejoin.
        cell = m["value"].rstrip()
        close = cell.endswith("|")
        if close:
            cell = cell[:-1]
        raw_value = cell[1:len(cell) - 2] if close and len(cell) > 3 else cell[1:]
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
            explains = in_category and current is not None and any(
                s in ("fail", "warn") for _, s in current[1])
            if (name == "Warning" and current is not None) or (name == "Error" and explains):
                if len(current[2]) < MAX_MESSAGES:  # type: ignore[index]
                    current[2].append(message)  # type: ignore[index]
            elif name == "Error":
                _settle_error(errors, error_seen)
                if len(errors) < MAX_MESSAGES:
                    errors.append(message)
        elif name:
            outcome = _OUTCOME.match(value)
            if outcome is None and value and value.lower() not in _STATUS:
                # Not a result row (a markdown table, a key/value line someone pasted).
                message = None
                continue
            status = outcome["status"] if outcome else value
            who = _who(outcome["who"] if outcome else None)
            plain = not (outcome and outcome["who"])
            # A row without a value states nothing (its per-GPU lines may follow); a test that
            # never gets an outcome is not a result (random `|x|` text is not a failed test).
            outcomes = [(g, _status(status)) for g in who] if value else []
            current = tests.add([name, outcomes, [], category, plain])
            message, in_category = None, True
        else:  # continuation line
            outcome, per_gpu = _OUTCOME.match(value), _PER_GPU.match(value)
            if current is not None and len(current[1]) >= MAX_MESSAGES:
                pass  # more GPUs than any node has: the rest is not kept
            elif per_gpu and current is not None:
                current[1].append((ascii_int(per_gpu["gpu"]), _status(per_gpu["status"])))
                message = None
            elif outcome and current is not None and message is None:
                current[1].extend((g, _status(outcome["status"])) for g in _who(outcome["who"]))
            elif message is not None and len(message) < MAX_MESSAGES:
                message.append(raw_value)
    results: list[DcgmResult] = []
    for name, outcomes, messages, test_category, plain in tests.finish():
        texts = [_join(m) for m in messages]
        per_gpu = {g for g, _ in outcomes if g is not None}
        named = sorted({n for t in texts for g in _MENTION.findall(t)
                        if (n := ascii_int(g)) is not None})
        if plain and outcomes == [(None, "fail")] and named:
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
    _settle_error(errors, error_seen)
    error_texts = [_join(e) for e in errors]
    for err in error_texts:
        gpus = [ascii_int(g) for g in _MENTION.findall(err)] or [None]
        results.append(DcgmResult("Deployment", gpus[0], "fail", err, "Deployment"))
    if not results:
        raise ParseError("no dcgmi diag result table rows (`| Memory | Pass |`) and no DCGM JSON")
    cut_at = category if category and not in_category else None
    return DcgmDiag(version, driver, tuple(results), (), tests.omitted, cut_at)


def _settle_error(errors: list[list[str]], seen: set[str]) -> None:
    """The last error message is complete once the next starts: drop it if it is a repeat."""
    if errors:
        text = _join(errors[-1])
        if text in seen:
            errors.pop()
        else:
            seen.add(text)


def _join(chunks: list[str]) -> str:
    """dcgmi wraps long messages at a fixed width, mid-word: join the chunks as they were cut."""
    return re.sub(r"\s+", " ", "".join(c.rstrip("\n") for c in chunks).strip())


def parse_dcgm_diag(text: str | Input) -> DcgmDiag:
    """Parse `dcgmi diag -r N [-j]` output: JSON (3.x or 4.x; the banner `Successfully ran
    diagnostic for group.` before it is skipped) or the text table
    (`| GPU Memory | Pass - GPUs: 1, 2 |`, `|  | Fail - GPU: 0 |`, `| Warning | GPU 0 ... |`).
    Input past MAX_DOCUMENT_CHARS (16 MiB) is read as a table, streamed."""
    source = as_input(text)
    doc = source.document() if _looks_json(source) else None
    if doc is None:  # a table (or many), or larger than any JSON dcgmi writes: read line by line
        return _table_or_error(source.lines())
    start = doc.find("{")
    if start >= 0 and not doc[:start].lstrip().startswith(("|", "+")):
        try:
            found, _ = json.JSONDecoder().raw_decode(doc[start:])
        except (ValueError, RecursionError) as exc:
            if "|" not in doc:
                raise ParseError(
                    f"dcgmi output is neither a result table nor valid JSON: {exc}"
                ) from None
        else:
            if isinstance(found, dict):
                return _from_json(found)
    return _table_or_error(doc.split("\n"))


def _looks_json(source: Input) -> bool:
    """A `{` comes before any table line (a banner line before it is skipped)."""
    for line in source.lines():
        if "{" in line:
            return not line.lstrip().startswith(("|", "+"))
        if line.lstrip().startswith(("|", "+")):
            return False
    return False


def _table_or_error(lines: Iterable[str]) -> DcgmDiag:
    """The text table's results; without one, the ParseError says what the input held instead
    (nothing, or dcgmi's own `Error: ...` line)."""
    seen = {"nonblank": False, "bar": False, "error": ""}

    def watched() -> Iterator[str]:
        for line in lines:
            if not seen["nonblank"] and line.strip():
                seen["nonblank"] = True
            if not seen["bar"] and "|" in line:
                seen["bar"] = True
            if not seen["error"] and line.startswith("Error: "):
                seen["error"] = line.strip()
            yield line

    try:
        return _from_text(watched())
    except ParseError:
        if not seen["nonblank"]:
            raise ParseError("empty input: no dcgmi diag output") from None
        if seen["error"] and not seen["bar"]:
            raise ParseError(f"dcgmi reported an error and no results: {seen['error']}") from None
        raise


def inspect_dcgm(stream: TextIO | Input, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect dcgm FILE`: keys passed (bool|null), dcgm_version, failed_tests
    [{test, gpu, message}], warnings [str]."""
    diag = parse_dcgm_diag(as_input(stream))
    failed = [{"test": r.test, "gpu": r.gpu, "message": r.message} for r in diag.failed]
    failed += [{"test": "dcgmi", "gpu": None, "message": e} for e in diag.errors]
    out = {"passed": diag.passed, "dcgm_version": diag.dcgm_version, "failed_tests": failed,
           "warnings": diag.warnings,
           "categories_seen": list(dict.fromkeys(r.category for r in diag.results if r.category)),
           "cut_at": diag.cut_at}
    if diag.omitted:
        out["notes"] = [f"{diag.omitted:,} test rows after the first {MAX_RESULTS:,} distinct ones "
                        "were not read: `passed` cannot be true"]
    return out


INSPECT = {"dcgm": inspect_dcgm}
