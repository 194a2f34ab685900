"""`dcgmi diag -r N` results: the JSON of DCGM 3.x (`DCGM GPU Diagnostic`, `gpu_id(s)`) and 4.x
(`DCGM Diagnostic`, `entity_id`, `metadata`), and the text table dcgmi prints without `-j`."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.dcgm_json import diag_from_json
from harness.parsers.dcgm_mndiag import (
    is_mndiag_json,
    is_mndiag_text,
    mndiag_from_json,
    mndiag_from_text,
)
from harness.parsers.dcgm_records import MAX_RESULTS, DcgmDiag, level_of, tests_not_seen
from harness.parsers.dcgm_text import diag_from_text
from harness.parsers.reader import Input, as_input
from harness.parsers.unwrap_transport import inside_transport

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "inspect_dcgm", "parse_dcgm_diag"]


def parse_dcgm_diag(text: str | Input) -> DcgmDiag:
    """Parse `dcgmi diag -r N [-j]` output: JSON (3.x or 4.x; the banner `Successfully ran
    diagnostic for group.` before it is skipped) or the text table
    (`| GPU Memory | Pass - GPUs: 1, 2 |`, `|  | Fail - GPU: 0 |`, `| Warning | GPU 0 ... |`).
    Input past MAX_DOCUMENT_CHARS (16 MiB) is read as a table, streamed."""
    source = inside_transport(as_input(text))  # `srun -l dcgmi diag -j`, `kubectl logs --prefix`
    doc = source.document() if _looks_json(source) else None
    if doc is None:  # a table (or many), or larger than any JSON dcgmi writes: read line by line
        if is_mndiag_text(source.head(16384)):
            return mndiag_from_text(source.lines())
        return _table_or_error(itertools.chain.from_iterable(source.batches()))
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
                return mndiag_from_json(found) if is_mndiag_json(found) else diag_from_json(found)
    lines = doc.split("\n")
    return mndiag_from_text(lines) if is_mndiag_text(doc[:16384]) else _table_or_error(lines)


def _looks_json(source: Input) -> bool:
    """A `{` comes before any table line (a banner line before it is skipped)."""
    for line in source.lines():
        if "{" in line:
            return not line.lstrip().startswith(("|", "+"))
        if line.lstrip().startswith(("|", "+")):
            return False
    return False


#: Lines before the first table line kept while looking for it (then watched one at a time).
_WATCHED = 4096


#: dcgmi's own `Error: ...` lines kept for the refusal: the first says what failed, the next
#: ones why (DCGM 4.4 on a missing plugin folder: `Error: Unable to complete diagnostic ...
#: (-30)` then `Error: Cannot load plugins. Unable to change to the plugin dir ...`).
_ERRORS_KEPT = 3


def _table_or_error(lines: Iterable[str]) -> DcgmDiag:
    """The text table's results; without one, the ParseError says what the input held instead
    (nothing, or dcgmi's own `Error: ...` lines, the first few, in order)."""
    seen: dict[str, bool] = {"nonblank": False, "bar": False}
    errors: list[str] = []

    it = iter(lines)

    def watch(line: str) -> None:
        if not seen["nonblank"] and line.strip():
            seen["nonblank"] = True
        if len(errors) < _ERRORS_KEPT and line.startswith("Error: "):
            error = line.strip()
            if error not in errors:
                errors.append(error)
        if "|" in line:
            seen["bar"] = seen["nonblank"] = True

    def watched() -> Iterator[str]:
        for line in it:
            watch(line)
            yield line
            if seen["bar"]:
                yield from it

    # The lines up to the first table line are watched here (at most _WATCHED kept, then a
    # generator watches the rest); from a table line on, the rest is the table's: handed on by
    # itertools.chain, no Python call per line.
    head: list[str] = []
    for line in it:
        watch(line)
        head.append(line)
        if seen["bar"] or len(head) >= _WATCHED:
            break
    try:
        return diag_from_text(itertools.chain(head, it if seen["bar"] else watched()))
    except ParseError:
        if not seen["nonblank"]:
            raise ParseError("empty input: no dcgmi diag output") from None
        if errors and not seen["bar"]:
            raise ParseError(f"dcgmi reported an error and no results: {' '.join(errors)}") from None
        raise


def inspect_dcgm(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """`preflight inspect dcgm FILE`: keys passed (bool|null), dcgm_version, contended (dcgmi's
    words when another diagnostic held the GPUs, else null), failed_tests
    [{test, gpu, message; host for `dcgmi mndiag`}], warnings [str], categories_seen, cut_at,
    fragment (test objects without their document: `passed` stays null), tests_seen, and for
    DCGM >= 4.6 `level_tests` {level, not_seen}: the level those tests are and its tests absent;
    where the table names the GPUs DCGM detected, `untested_gpus`: those without any result."""
    diag = parse_dcgm_diag(as_input(stream))
    failed = [{"test": r.test, "gpu": r.gpu, "message": r.reason if r.status != "fail" else r.message,
               **({} if r.host is None else {"host": r.host})} for r in diag.failed]
    failed += [{"test": "dcgmi", "gpu": None, "message": e} for e in diag.errors]
    out = {"passed": diag.passed, "dcgm_version": diag.dcgm_version,
           "contended": diag.contended, "failed_tests": failed,
           "warnings": diag.warnings,
           "categories_seen": list(dict.fromkeys(r.category for r in diag.results if r.category)),
           "cut_at": diag.cut_at, "fragment": diag.fragment,
           "tests_seen": list(dict.fromkeys(r.test for r in diag.results))}
    level = level_of(out["tests_seen"])
    if level is not None and _version(diag.dcgm_version) >= (4, 6):
        # Which DCGM 4.6 level these tests are, and that level's tests the output lacks (a
        # plugin not installed, or a paste cut short): said, never judged as passed.
        out["level_tests"] = {"level": level, "not_seen": tests_not_seen(out["tests_seen"], level)}
    tested = {r.gpu for r in diag.results if r.gpu is not None}
    if diag.gpus_detected is not None and all(g < diag.gpus_detected for g in tested):
        # GPUs DCGM detected (numbered 0..N-1, as the results number them) but gave no result
        # for: not tested (PF-GPU-012 errors on them, with the node's inventory).
        out["untested_gpus"] = diag.untested(range(diag.gpus_detected))
    if diag.omitted:
        out["notes"] = [f"{diag.omitted:,} test rows after the first {MAX_RESULTS:,} distinct ones "
                        "were not read: `passed` cannot be true"]
    return out


def _version(text: str | None) -> tuple[int, ...]:
    """`4.6.0` -> (4, 6, 0); () when unknown."""
    parts = []
    for part in (text or "").split(".")[:3]:
        if not part.isascii() or not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


INSPECT = {"dcgm": inspect_dcgm}
