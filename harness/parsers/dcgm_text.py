"""The table `dcgmi diag -r N` prints without `-j` (DCGM 2.x to 4.x: per-GPU lines, wrapped
messages, deployment `Error` rows, a table printed again, a paste cut at a category header),
read into a DcgmDiag."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from harness.parsers import ParseError
from harness.parsers.dcgm_records import (
    MAX_MESSAGES,
    MAX_RESULTS,
    STATUS_WORDS,
    DcgmDiag,
    DcgmResult,
    status_of,
)
from harness.parsers.unwrap import table_line
from harness.parsers.values import ascii_int

# (The cell's closing `|` and trailing blanks are cut in Python: a lazy group before `\s*$`
# rescanned a run of blanks from each of its characters.)
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*)$")
_CATEGORY = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z]+(?: [A-Za-z]+)*)\s+-+\+")
_OUTCOME = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<who>.*))?$", re.I)
_PER_GPU = re.compile(r"^GPU\s*(?P<gpu>[0-9]{1,9})\s*:\s*(?P<status>Pass|Fail|Warn|Skip|Not Run)\b", re.I)
_MENTION = re.compile(r"\bGPU\s+([0-9]{1,9})\b")
_BORDER = re.compile(r"^\+-{5,}\+-{5,}\+$")
_ENTITY_MESSAGE = re.compile(r"^(Warning|Error|Info):\s*GPU\s*([0-9]{1,9})$")


class _Message(list):  # type: ignore[type-arg]
    """A message's wrapped pieces; `gpu`: the GPU its row names (`Warning: GPU1`), if any."""

    gpu: int | None = None


@functools.lru_cache(maxsize=1024)
def _who(who: str | None) -> tuple[int | None, ...]:
    """`All`, `GPU: 1`, `GPUs: 0, 2, 3` -> GPU ids (None: every GPU / the node). (Cached: a
    table printed again names the same GPUs.)"""
    if not who or who.strip().lower() == "all":
        return (None,)
    ids = re.findall(r"[0-9]+", who.split(":", 1)[-1])[:MAX_MESSAGES]
    return tuple(n for i in ids if (n := ascii_int(i)) is not None) or (None,)


#: `_status` of a cell's text (cached: a handful of words).
_text_status = functools.lru_cache(maxsize=256)(status_of)
#: The first characters of `Warning`, `Error`, `Info` rows (`_ENTITY_MESSAGE` only after them).
_MESSAGE_FIRST = ("W", "E", "I")


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


#: Distinct table lines whose split `_from_text` keeps (a log of dcgmi runs prints the same
#: lines again and again; the bound keeps memory flat).
MAX_CACHED = 4096
NO_CELLS = ("",)


def table_cells(lines: Iterable[str],
                split: Callable[[str], tuple[str, ...] | None]) -> Iterator[tuple[str, ...]]:
    """The cells of each table line (`|` or `+` first, also quoted line by line: `# | Memory |
    Pass |`) as `split` reads its stripped text, skipping the lines it reads as none. A line
    printed again (a table printed per iteration) is split once: at most MAX_CACHED distinct
    lines are kept. The dcgmi diag and mndiag tables are read through it."""
    cells: dict[str, tuple[str, ...] | None] = {}
    for line in lines:
        stripped = line.strip()
        if stripped[:1] not in ("|", "+"):
            if stripped[:1] not in ("#", "/", ">"):
                continue
            stripped = table_line(line).strip()  # a quoted table's line
            if stripped[:1] not in ("|", "+"):
                continue
        got = cells.get(stripped, NO_CELLS)
        if got is NO_CELLS:
            got = split(stripped)
            if len(cells) < MAX_CACHED:
                cells[stripped] = got
        if got is not None:
            yield got


def _split(stripped: str) -> tuple[Any, ...] | None:
    """A table line: ("category", name), ("border",), ("row", name, value, raw value: the
    cell's text as dcgmi cut it, outcome: the value's (status, who) when it reads `Pass`,
    `Fail - GPU: 1`..., per GPU: (gpu, status) when it reads `GPU1: Pass`), or None (not a table
    line). (The value's readings are made here, once per distinct line: table_cells keeps the
    split of a line printed again, so the `GPU0: Pass` lines of a log of runs cost no regex.)"""
    if stripped[1:2] == "-":  # (only a border or a category header starts `+-` / `|-`)
        header = _CATEGORY.match(stripped)
        if header:
            return ("category", header["name"])
        if _BORDER.match(stripped):
            return ("border",)
    m = _ROW.match(stripped)
    if not m:
        return None
    # dcgmi writes a message in fixed-width chunks (45 characters in a 48-wide cell: one pad
    # space before, two after), cutting mid-word; keep the chunk exactly so they rejoin.
    cell = m["value"].rstrip()
    close = cell.endswith("|")
    if close:
        cell = cell[:-1]
    raw_value = cell[1:len(cell) - 2] if close and len(cell) > 3 else cell[1:]
    name, value = m["name"].strip(), raw_value.strip()
    outcome = _OUTCOME.match(value)
    per_gpu = None if name else _PER_GPU.match(value)
    return ("row", name, value, raw_value, outcome and (outcome["status"], outcome["who"]),
            per_gpu and (int(per_gpu["gpu"]), _text_status(per_gpu["status"])))


def diag_from_text(lines: Iterable[str]) -> DcgmDiag:
    version = driver = None
    detected: int | None = None
    errors: list[list[str]] = []
    error_seen: set[str] = set()  # node-level errors already listed (a table printed again)
    # Per test: [name, [(gpu, status)], [message chunks], category, plain (its row says only
    # `Fail`, no `- GPU: 1` / `- All`)].
    tests = _Tests()
    current: list[Any] | None = None  # the test the next continuation lines belong to
    category = ""
    message: list[str] | None = None  # the Warning/Error being continued
    in_category = False  # a test row came since the last category header
    ended = False  # the closing border came after the last category header
    for got in table_cells(lines, _split):
        if got[0] == "category":
            message, in_category, category, ended = None, False, got[1], False
            continue
        if got[0] == "border":
            # dcgmi prints a category's header even when none of its tests ran (`-r 2`: the
            # `Stress` header, then the footer; dcgmi/Diag.cpp HelperDisplayCategory): a header
            # followed by the table's end is an empty category, not a paste cut there.
            ended = bool(category)
            continue
        _, name, value, raw_value, outcome, gpu_line = got
        if not name:  # continuation line (the common case: `GPU0: Pass`, a message's chunk)
            if value == "Result":
                continue
            if current is not None and len(current[1]) >= MAX_MESSAGES:
                pass  # more GPUs than any node has: the rest is not kept
            elif gpu_line and current is not None:
                current[1].append(gpu_line)
                message = None
            elif outcome and current is not None and message is None:
                current[1].extend((g, _text_status(outcome[0])) for g in _who(outcome[1]))
            elif message is not None and len(message) < MAX_MESSAGES:
                message.append(raw_value)
            continue
        if name == "Diagnostic" and value == "Result":
            continue
        if name == "DCGM Version":
            version = value
        elif name == "Driver Version Detected":
            driver = value
        elif name in ("GPU Device IDs Detected",):
            # `2330, 2330`: one PCI device ID per GPU DCGM detected (dcgmi/Diag.cpp)
            detected = len([x for x in value.split(",") if x.strip()]) or None
        elif name[:1] in _MESSAGE_FIRST and (entity := _ENTITY_MESSAGE.match(name)) is not None:
            # DCGM 4 (dcgmi/Diag.cpp HelperDisplayEntityResults): `| Warning: GPU1 | <msg> |`
            # under the test's `GPU1: Fail` line is that GPU's reason (`Info: GPU1`, -v only,
            # is read and not kept).
            message = _Message([raw_value])
            message.gpu = ascii_int(entity[2])
            if current is not None and entity[1] != "Info" and len(current[2]) < MAX_MESSAGES:
                current[2].append(message)
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
        else:
            if outcome is None and value and value.lower() not in STATUS_WORDS:
                # Not a result row (a markdown table, a key/value line someone pasted).
                message = None
                continue
            status = _text_status(outcome[0] if outcome else value)
            who = _who(outcome[1] if outcome else None)
            plain = not (outcome and outcome[1])
            # A row without a value states nothing (its per-GPU lines may follow); a test that
            # never gets an outcome is not a result (random `|x|` text is not a failed test).
            outcomes = [(g, status) for g in who] if value else []
            current = tests.add([name, outcomes, [], category, plain])
            message, in_category = None, True
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
            mine = [t for t, m in zip(texts, messages, strict=True) if _mine(t, m, gpu)]
            text = " ".join(mine) if status != "pass" else ""
            results.append(DcgmResult(name, gpu, status, text, test_category))
    _settle_error(errors, error_seen)
    error_texts = [_join(e) for e in errors]
    for err in error_texts:
        gpus = [ascii_int(g) for g in _MENTION.findall(err)] or [None]
        results.append(DcgmResult("Deployment", gpus[0], "fail", err, "Deployment"))
    if not results:
        raise ParseError("no dcgmi diag result table rows (`| Memory | Pass |`) and no DCGM JSON")
    cut_at = category if category and not in_category and not ended else None
    return DcgmDiag(version, driver, tuple(results), (), tests.omitted, cut_at,
                    gpus_detected=detected)


def _mine(text: str, message: list[str], gpu: int | None) -> bool:
    """The message belongs to `gpu`'s result: its row named that GPU (`Warning: GPU1`), or it
    names that GPU in its text, or it names none."""
    own = getattr(message, "gpu", None)
    if gpu is None:
        return True
    if own is not None:
        return bool(own == gpu)
    return str(gpu) in _MENTION.findall(text) or not _MENTION.search(text)


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
