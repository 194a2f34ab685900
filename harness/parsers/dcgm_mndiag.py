"""`dcgmi mndiag` (DCGM 4.3+, the multi-node diagnostic: the MNUBERGEMM test run over MPI on every
host): its text table and its JSON, read into a DcgmDiag whose results name the host of each GPU.

The shapes are DCGM's own (NVIDIA/DCGM 4.6.0, dcgmi/MnDiag.cpp: HelperDisplayAsCli,
HelperDisplayErrorSummary, HelperJsonBuildOutput; the rows its tests expect are in
dcgmi/tests/MnDiagTests.cpp):

    | MNUBERGEMM Test           | Fail                                           |   (Metadata)
    |-----  Host Details  ------+------------------------------------------------|
    | Host 1                    | Fail                                           |
    |   GPUs: 0, 1              | Pass                                           |   (all passed)
    |   GPU 1                   | Fail                                           |   (or each GPU)
    |                           | Error: <the message, 45 characters a line>     |
    |-----  Error Summary  -----+------------------------------------------------|
    | Host 1 (GPU 1)            | Error: <the message>                           |
    | MPI Error                 | Error: <mpirun's failure, no GPU error>         |

and in JSON `"DCGM Diagnostic": "DCGM Multi-Node Diagnostic"`, `hosts[]`, `test_categories[].
tests[]` with `results[]` (`host_id`, `entity_id`, `status`, `warnings[]`), `mpi_error`, and
`global_errors[]`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from harness.parsers import ParseError
from harness.parsers.dcgm_records import MAX_MESSAGES, MAX_RESULTS, DcgmDiag, DcgmResult, status_of
from harness.parsers.dcgm_text import table_cells
from harness.parsers.values import ascii_int

__all__ = ["is_mndiag_json", "is_mndiag_text", "mndiag_from_json", "mndiag_from_text"]

CATEGORY = "Multi-Node"
# (The closing `|` is cut in Python, see `_cell`: a lazy group before `\|?\s*$` rescanned the
# rest of the row from each of its characters.)
_ROW = re.compile(r"^\|(?P<name>[^|]*)\|(?P<value>.*)$")
_SECTION = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z]+(?: [A-Za-z]+)*)\s+-+\+")
_HOST = re.compile(r"^Host\s+([0-9]{1,6})$")
_GPU = re.compile(r"^GPU\s+([0-9]{1,6})$")
_GPUS = re.compile(r"^GPUs:\s*([0-9, ]+)$")
_WHERE = re.compile(r"^Host\s+([0-9]{1,6})\s+\(GPU\s+([0-9]{1,6})\)$")
_OUTCOMES = ("pass", "fail", "warn", "skip", "not run", "unknown")


def is_mndiag_text(head: str) -> bool:
    """The head of `dcgmi mndiag` output (its banner, its sections or its test's row)."""
    return bool(re.search(r"multi-node diagnostic|\|-+\s+Host Details\s|^\W*\|\s*MNUBERGEMM Test\s",
                          head, re.I | re.M))


def is_mndiag_json(doc: dict[str, object]) -> bool:
    """A `dcgmi mndiag -j` document (`"DCGM Diagnostic": "DCGM Multi-Node Diagnostic"`)."""
    return "Multi-Node" in str(doc.get("DCGM Diagnostic", "")) or isinstance(doc.get("hosts"), list)


class _Table:
    """What the table said so far."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.driver: str | None = None
        self.test = "MNUBERGEMM Test"
        self.overall: str | None = None
        self.section = ""
        self.host: int | None = None
        self.results: dict[tuple[int | None, int | None], list[Any]] = {}  # -> [status, [msg]]
        self.message: list[str] | None = None  # the `Error: ...` being continued
        self.errors: list[list[str]] = []
        # The message being continued and the list it was kept in: once complete, it is dropped
        # there if that list holds it already (the same table printed again, a log of runs:
        # one GPU's error kept once, not once a run, so memory stays flat).
        self.pending: tuple[list[list[str]], list[str]] | None = None

    def keep(self, box: list[list[str]], message: list[str]) -> None:
        """Keep `message` (being continued) in `box`, at most MAX_MESSAGES there."""
        self.message = message
        if len(box) < MAX_MESSAGES:
            box.append(message)
            self.pending = (box, message)

    def settle(self) -> None:
        """The message continued so far is complete: drop it if its list held it already."""
        if self.pending is not None:
            box, message = self.pending
            self.pending = None
            if box and box[-1] is message and message in box[:-1]:
                box.pop()

    def row(self, name: str, value: str, raw: str) -> None:
        if not name and self.message is not None:  # a wrapped message's next 45 characters
            if len(self.message) < MAX_MESSAGES:
                self.message.append(raw)
            return
        self.settle()
        self.message = None
        if self.section == "Metadata":
            if name.endswith(" Test") and value.lower() in _OUTCOMES:
                self.test, self.overall = name, status_of(value)
            elif name == "DCGM Version":
                self.version = value
            elif name == "Driver Version":
                self.driver = value
        elif self.section == "Host Details":
            self._detail(name, value, raw)
        elif self.section == "Error Summary":
            self._summary(name, value, raw)

    def _detail(self, name: str, value: str, raw: str) -> None:
        if m := _HOST.match(name):
            self.host = ascii_int(m[1])
        elif m := _GPUS.match(name):
            for gpu in re.findall(r"[0-9]+", m[1])[:MAX_MESSAGES]:
                self._result(self.host, ascii_int(gpu))[0] = status_of(value)
        elif m := _GPU.match(name):
            self._result(self.host, ascii_int(m[1]))[0] = status_of(value)
        elif not name and value.startswith("Error:"):
            # The failed GPU's errors, right under its row (the last GPU row of this host).
            mine = [k for k in self.results if k[0] == self.host]
            if mine:
                self.keep(self.results[mine[-1]][1], [raw])

    def _summary(self, name: str, value: str, raw: str) -> None:
        if m := _WHERE.match(name):
            result = self._result(ascii_int(m[1]), ascii_int(m[2]))
            if result[0] is None:
                result[0] = "fail"  # a GPU error the (failed) run printed no detail row for
            self.message = [raw]
            if not result[1]:  # the same text as under its row: kept once
                result[1].append(self.message)
            else:
                self.message = []  # read, not kept twice
        elif name == "MPI Error" or (name and value.startswith("Error:")):
            self.keep(self.errors, [raw])

    def _result(self, host: int | None, gpu: int | None) -> list[Any]:
        key = (host, gpu)
        if key not in self.results and len(self.results) < MAX_RESULTS:
            self.results[key] = [None, []]
        return self.results.get(key, [None, []])

    def diag(self) -> DcgmDiag:
        self.settle()
        results = [DcgmResult(self.test, gpu, status or "unknown", _text(messages), CATEGORY, host)
                   for (host, gpu), (status, messages) in self.results.items()]
        errors = [_text([e]) for e in self.errors]
        if self.overall == "fail" and not any(r.status == "fail" for r in results):
            # The run failed with no GPU at fault: mpirun's own error says why (or nothing did).
            results.append(DcgmResult(self.test, None, "fail", " ".join(errors) or
                                      "dcgmi mndiag reported a failure and no reason", CATEGORY))
            errors = []
        elif self.overall is not None and not results:
            results.append(DcgmResult(self.test, None, self.overall, "", CATEGORY))
        if not results and not errors:
            raise ParseError("dcgmi mndiag output without a test result (`| MNUBERGEMM Test | "
                             "Pass |`) or a host's row")
        return DcgmDiag(self.version, self.driver, tuple(results), tuple(errors))


def _text(chunks: list[list[str]]) -> str:
    """Messages (each its 45-character pieces, rejoined as dcgmi cut them), `Error: ` dropped."""
    texts = []
    for pieces in chunks:
        text = re.sub(r"\s+", " ", "".join(pieces).strip())
        texts.append(text.removeprefix("Error: ").removeprefix("Error:").strip())
    return " ".join(t for t in texts if t)


def _cell(value: str) -> str:
    """A stripped row's value cell as `(?P<value>.*?)\\|?\\s*$` took it: without the one closing
    `|` (the row has no trailing blanks)."""
    return value[:-1] if value.endswith("|") else value


def mndiag_from_text(lines: Iterable[str]) -> DcgmDiag:
    """The `dcgmi mndiag` table: the test's overall result, each host's GPUs with their
    result and error, and the errors of no GPU (MPI)."""
    table = _Table()
    for got in table_cells(lines, _split):
        if len(got) == 1:
            table.settle()
            table.section, table.message = got[0], None
            continue
        table.row(*got)
    return table.diag()


def _split(stripped: str) -> tuple[str, ...] | None:
    """A table line: (section name,), (name, value, raw value: the cell as dcgmi cut it), or
    None (not a table line)."""
    if stripped[1:2] == "-" and (section := _SECTION.match(stripped)):
        return (section["name"],)
    m = _ROW.match(stripped)
    if m is None:
        return None
    value = _cell(m["value"])
    # dcgmi's cells: one pad blank, 45 characters (a message cut mid-word), then blanks.
    raw = value[1:46] if value.startswith(" ") else value
    return (m["name"].strip(), value.strip(), raw)


def mndiag_from_json(document: dict[str, object]) -> DcgmDiag:
    """`dcgmi mndiag -j`: every result with its host, the test's `mpi_error`, `global_errors`."""
    doc: Any = document  # parsed JSON: every level is checked as it is read
    hosts = [h for h in doc.get("hosts") or [] if isinstance(h, dict)]
    version = next((str(h["dcgm_version"]) for h in hosts if h.get("dcgm_version")), None)
    driver = next((str(h["driver_version"]) for h in hosts if h.get("driver_version")), None)
    results: list[DcgmResult] = []
    errors: list[str] = []
    for category in doc.get("test_categories") or []:
        for test in (category.get("tests") or []) if isinstance(category, dict) else []:
            if not isinstance(test, dict):
                continue
            name = str(test.get("name") or "mnubergemm")
            mine = []
            for r in (test.get("results") or [])[:MAX_RESULTS]:
                if not isinstance(r, dict):
                    continue
                gpu = ascii_int(str(r.get("entity_id"))) if str(
                    r.get("entity_group", "GPU")).upper() == "GPU" else None
                words = [str(w.get("warning", "")) if isinstance(w, dict) else str(w)
                         for w in (r.get("warnings") or [])[:MAX_MESSAGES]]
                mine.append(DcgmResult(name, gpu, status_of(r.get("status")), " ".join(words),
                                       CATEGORY, ascii_int(str(r.get("host_id")))))
            status = status_of((test.get("test_summary") or {}).get("status") or test.get("status"))
            mpi = test.get("mpi_error") if isinstance(test.get("mpi_error"), dict) else {}
            if status == "fail" and not any(r.status == "fail" for r in mine):
                reason = str(mpi.get("warning") or "dcgmi mndiag reported a failure and no reason")
                mine.append(DcgmResult(name, None, "fail", reason.removeprefix("Error: "), CATEGORY))
            results += mine
    for e in (doc.get("global_errors") or [])[:MAX_MESSAGES]:
        if isinstance(e, dict) and e.get("error_category") != "MPI":  # the MPI one is above
            where = f"host {e['host_id']}: " if "host_id" in e else ""
            errors.append(where + str(e.get("warning", "")))
    if not results and not errors:
        raise ParseError("dcgmi mndiag JSON holds no test results")
    return DcgmDiag(version, driver, tuple(results), tuple(errors))
