"""Proving a pass: what a run selected (in every phase), what reported, and what did not.

A run passes only when its selection is non-empty and every selected check reported exactly
one result; every pytest exit status is mapped to what it means for the verdict. An empty
selection, a bad -k and a check session that refused its arguments are usage errors."""

from __future__ import annotations

import json
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.results import CheckResult

__all__ = [
    "Accounting",
    "CollectedRecord",
    "Events",
    "ItemRecord",
    "PhaseRun",
    "SelectionError",
    "account",
    "account_interrupted",
    "check_keyword",
    "collection_problems",
    "error_lines",
    "load_events",
    "phases_of",
]

#: pytest's exit statuses (pytest.ExitCode), as the report says them.
PYTEST_EXIT = {0: "every test passed", 1: "tests failed", 2: "interrupted", 3: "internal error",
               4: "usage error", 5: "no tests collected"}
_FAILED = ("fail", "error")


class SelectionError(ValueError):
    """A selection the user asked for that cannot run (bad -k); str() is the message."""


def check_keyword(expr: str) -> None:
    """Raise SelectionError when `expr` is not a valid pytest -k expression."""
    # pytest's own compiler, so that what is accepted here is exactly what the check session
    # accepts. It is private (`_pytest.mark.expression.Expression.compile`, there since pytest
    # 6.0; pytest 8 raises its ParseError, 9 a SyntaxError). Should a pytest move it, the check
    # session refuses the expression itself (exit 4), which `account` maps to a usage error.
    try:
        from _pytest.mark.expression import Expression
    except ImportError:  # pragma: no cover - depends on the pytest installed
        return
    try:
        Expression.compile(expr)
    except Exception as exc:
        detail = f"at column {exc.offset}: {exc.msg}" if isinstance(exc, SyntaxError) else str(exc)
        raise SelectionError(
            f"-k {expr!r} is not a valid expression: {detail}. -k matches check IDs, ID "
            "prefixes and test names: -k PF-ENV-001, -k \"PF-GPU and not PF-GPU-012\""
        ) from None


class ItemRecord(TypedDict, total=False):
    """A selected check as a `collected` event names it (harness.items.describe_item)."""

    id: str
    nodeid: str
    title: str
    tier: str
    exclusive: bool
    kind: str
    suite: str
    why: str
    remedy: str
    defined: str
    reads: list[str]
    family: str


class CollectedRecord(TypedDict, total=False):
    """A `collected` event (harness.run.recorder): the checks this phase's session runs
    (`checks`), the whole selection (`selected`, the same in every phase) and the files it
    could not collect (`errors`: nodeid, message)."""

    phase: str
    worker: str
    checks: list[ItemRecord]
    selected: list[ItemRecord]
    errors: list[dict[str, str]]
    time: float
    reused: list[str]


@dataclass(slots=True)
class Events:
    """Everything the check sessions wrote to the results file (see harness.run.recorder)."""

    collected: list[CollectedRecord] = field(default_factory=list)
    results: list[JSONObject] = field(default_factory=list)
    """Every result event, duplicates kept: a check must report exactly once."""
    lost: dict[str, str] = field(default_factory=dict)
    internal_errors: list[str] = field(default_factory=list)
    finished: dict[str, int] = field(default_factory=dict)

    def has_phase(self, phase: str) -> bool:
        """Does the selection (known from the first phase) hold a check of `phase`? True when
        the selection is unknown: only a proven-empty phase is skipped."""
        if not self.collected:
            return True
        selected = [i for record in self.collected for i in record.get("selected", [])]
        if phase == "exclusive":
            return any(i.get("exclusive") for i in selected)
        return bool(selected) if phase == "checks" else any(not i.get("exclusive") for i in selected)


def load_events(path: Path) -> Events:
    """The events of a results file; a torn last line (a killed session) is ignored."""
    events = Events()
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return events
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        kind = record.pop("event", None)
        if kind == "collected":
            events.collected.append(cast(CollectedRecord, record))  # the recorder's own record
        elif kind == "result" and "nodeid" in record:
            events.results.append(record)
        elif kind == "lost":
            events.lost[str(record.get("nodeid"))] = str(record.get("message", ""))
        elif kind == "internal_error":
            events.internal_errors.append(str(record.get("message", "")))
        elif kind == "finished":
            events.finished[str(record.get("phase", "checks"))] = int(record.get("exitstatus", -1))
    return events


@dataclass(frozen=True, slots=True)
class PhaseRun:
    """What the runner saw of one pytest phase it started."""

    name: str
    exit_code: int | None
    timed_out: bool = False
    output: str = ""
    """The end of the phase's output (pytest's own error lines are there)."""


@dataclass(slots=True)
class Accounting:
    """The checks of the report (one record per selected check) and what failed the proof."""

    checks: list[JSONObject] = field(default_factory=list)
    harness_errors: list[str] = field(default_factory=list)
    usage_error: str = ""
    selection: JSONObject = field(default_factory=dict)
    phases: dict[str, str] = field(default_factory=dict)
    """nodeid -> the phase whose session ran it (its junit file: harness.run.junit)."""
    not_finished: list[str] = field(default_factory=list)
    """account_interrupted: the IDs of the selected checks without a result."""


def error_lines(text: str, limit: int = 5) -> str:
    """pytest's own error lines (`E   ...`, `ERROR: ...`), else the last line."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    said = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    said += [ln for ln in lines if ln.startswith(("ERROR:", "INTERNALERROR>"))]
    return "; ".join((said or lines[-1:])[-limit:])


def collection_problems(errors: Sequence[dict[str, str]]) -> list[str]:
    """One harness error per file that could not be collected, with pytest's reason."""
    return [f"check file {e['nodeid']} could not be collected: {error_lines(e['message'])}"
            for e in errors]


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code} ({PYTEST_EXIT[code]})" if code in PYTEST_EXIT else f"exit status {code}"


def _no_result(record: JSONMapping, why: str) -> JSONObject:
    return CheckResult.no_result(record, why).to_dict()


def _described(item: ItemRecord) -> JSONObject:
    """What a selected item's no-result record keeps of its collection record."""
    base: JSONObject = {k: item.get(k) for k in ("id", "nodeid", "title", "tier", "kind", "suite")
                        if k in item}
    base["remedy"] = item.get("remedy", "")
    return base


def _selected(events: Events) -> dict[str, ItemRecord]:
    """nodeid -> collection record of every selected check (each phase's session records the
    whole selection, before the phase split)."""
    selected: dict[str, ItemRecord] = {}
    for record in events.collected:
        for item in record.get("selected", []):
            selected.setdefault(item["nodeid"], item)
    return selected


def phases_of(events: Events) -> dict[str, str]:
    """nodeid -> the phase whose session collected it to run (its share of the selection)."""
    return {item["nodeid"]: str(record.get("phase", "checks"))
            for record in events.collected for item in record.get("checks", [])}


def account(
    events: Events, runs: Sequence[PhaseRun], *, empty_message: str,
    unfinished: str | None = None,
) -> Accounting:
    """Match what every phase selected with what reported; map every pytest exit status.
    `empty_message`: the usage error of an empty selection (it names the selection);
    `unfinished`: why a check without a result did not finish, when the run was cut short
    (`did not finish within the run budget (300 s)`); None when it ran to its end."""
    out = Accounting()
    selected: dict[str, ItemRecord] = {}
    ran_in: dict[str, str] = {}
    known = True
    errors: dict[str, str] = {}
    collected: dict[str, CollectedRecord] = {}
    for event in events.collected:
        collected.setdefault(event.get("phase", "checks"), event)
    for run in runs:
        record = collected.get(run.name)
        if record is None:
            known = False
            if not run.timed_out and run.exit_code != 4:  # 4: the usage error says why
                out.harness_errors.append(
                    f"pytest phase {run.name!r} wrote no collection record, so what it selected "
                    f"is unknown ({_status(run.exit_code) if run.exit_code is not None else 'no exit status'}"
                    f"): {error_lines(run.output) or 'see pytest-output.txt'}")
            continue
        for item in record.get("selected", []):
            selected.setdefault(item["nodeid"], item)
        for item in record.get("checks", []):
            ran_in[item["nodeid"]] = run.name
        for err in record.get("errors", []):
            errors.setdefault(err["nodeid"], err["message"])
    out.harness_errors += collection_problems(
        [{"nodeid": n, "message": m} for n, m in errors.items()])
    for message in dict.fromkeys(events.internal_errors):
        out.harness_errors.append(f"pytest INTERNALERROR: {error_lines(message, 3)}")

    by_node: dict[str, list[JSONObject]] = {}
    for result in events.results:
        by_node.setdefault(str(result["nodeid"]), []).append(result)
    missing, duplicates = [], []
    for nodeid, item in selected.items():
        got = by_node.get(nodeid, [])
        if len(got) == 1:
            out.checks.append(got[0])
            continue
        base = _described(item)
        if got:
            duplicates.append(item["id"])
            outcomes = ", ".join(str(r.get("outcome", "?")) for r in got)
            out.checks.append(_no_result(base, f"reported {len(got)} results ({outcomes}); a check "
                                         "must report exactly one"))
            continue
        missing.append(item["id"])
        if nodeid in events.lost:
            why = f"produced no result: {events.lost[nodeid]}"
        elif unfinished:
            why = unfinished
        elif events.internal_errors:
            why = "produced no result (pytest stopped with an INTERNALERROR)"
        elif errors:
            why = "did not run: the session stopped at the collection error(s)"
        else:
            why = "produced no result (its pytest session died)"
        out.checks.append(_no_result(base, why))
    unexpected = [r for node, rs in by_node.items() if node not in selected for r in rs]
    out.checks.extend(unexpected)
    if unexpected and known:
        out.harness_errors.append("results for tests that were not selected: "
                                  + ", ".join(sorted({str(r["id"]) for r in unexpected})))

    for run in runs:
        _map_exit(run, by_node, ran_in, events, errors, out)
    if known and not selected and not errors and not out.usage_error:
        out.usage_error = empty_message
    if out.usage_error:
        out.harness_errors.insert(0, out.usage_error)
    out.selection = {
        "selected": len(selected), "reported": len(selected) - len(missing) - len(duplicates),
        "judged": sum(1 for c in out.checks if c.get("outcome") != "skip"),
        "missing": missing, "duplicates": duplicates,
        "unexpected": sorted({str(r["id"]) for r in unexpected}),
        "per_phase": {run.name: sum(1 for p in ran_in.values() if p == run.name) for run in runs},
    }
    out.phases = dict(ran_in)
    return out


def account_interrupted(events: Events, why: str) -> Accounting:
    """The checks of a run a signal stopped: every selected check with its result, or an error
    saying it did not finish (`why`), and nothing that was not selected (a deselected check was
    never to run). The selection is counted once, whatever the phases: `selected` is None when
    no session had collected it yet (the signal came first)."""
    out = Accounting(phases=phases_of(events))
    selected = _selected(events)
    by_node: dict[str, list[JSONObject]] = {}
    for result in events.results:
        by_node.setdefault(str(result["nodeid"]), []).append(result)
    duplicates = []
    for nodeid, item in selected.items():
        got = by_node.get(nodeid, [])
        if got:
            out.checks.append(got[-1])
            if len(got) > 1:
                duplicates.append(item["id"])
            continue
        out.not_finished.append(item["id"])
        lost = events.lost.get(nodeid)
        out.checks.append(_no_result(_described(item), f"produced no result: {lost}" if lost
                                     else f"not finished: {why}"))
    unexpected = [rs[-1] for nodeid, rs in by_node.items() if nodeid not in selected]
    out.checks.extend(unexpected)
    out.selection = {
        "selected": len(selected) if events.collected else None,
        "reported": len(selected) - len(out.not_finished), "missing": list(out.not_finished),
        "duplicates": duplicates, "unexpected": sorted({str(r["id"]) for r in unexpected}),
    }
    return out


def _map_exit(
    run: PhaseRun, by_node: dict[str, list[JSONObject]], ran_in: dict[str, str],
    events: Events, errors: dict[str, str], out: Accounting,
) -> None:
    """What pytest's exit status of one phase says beyond its results (never ignored)."""
    code = run.exit_code
    if run.timed_out or code is None:
        return  # the runner reports the budget
    mine = [r for node, rs in by_node.items() if ran_in.get(node) == run.name for r in rs]
    failed = any(r.get("outcome") in _FAILED for r in mine)
    where = f"pytest phase {run.name!r}"
    if code == 0:
        if failed:
            out.harness_errors.append(f"{where} exited 0 although checks failed")
    elif code == 1:
        lost = any(ran_in.get(node) == run.name for node in events.lost)
        if not failed and not lost and not errors:
            out.harness_errors.append(f"{where} reported failures (exit status 1) that no check "
                                      f"result holds: {error_lines(run.output)}")
    elif code == 2:
        if not errors:
            out.harness_errors.append(f"{where} was interrupted (exit status 2): "
                                      f"{error_lines(run.output)}")
    elif code == 3:
        if not events.internal_errors:
            out.harness_errors.append(f"{where}: pytest internal error (exit status 3): "
                                      f"{error_lines(run.output)}")
    elif code == 4:
        out.usage_error = out.usage_error or (
            f"the check session refused its arguments ({where}, pytest usage error): "
            f"{error_lines(run.output)}")
    elif code == 5:
        if any(p == run.name for p in ran_in.values()):
            out.harness_errors.append(f"{where} collected no tests (exit status 5) although it "
                                      "selected some")
    else:
        out.harness_errors.append(f"{where} ended: {_status(code)}: {error_lines(run.output)}")
