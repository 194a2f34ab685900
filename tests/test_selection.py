"""Proving a pass from the results file: selection against results, every pytest exit status
mapped, -k validated with pytest's own compiler. Tables over hand-written event streams; the
sessions that write them for real are in test_plugin.py and test_cli.py."""

from __future__ import annotations

import json

import pytest

from harness.run.selection import (
    Events,
    PhaseRun,
    SelectionError,
    account,
    account_interrupted,
    check_keyword,
    load_events,
    phases_of,
)

EMPTY = "no check selected (...)"


def _item(n: int, exclusive: bool = False) -> dict:
    return {"id": f"PF-T-{n:03d}", "nodeid": f"t.py::test_{n}", "title": f"check {n}",
            "tier": "preflight", "exclusive": exclusive, "kind": "check", "suite": "built-in"}


def _collected(phase: str, selected: list[dict], errors: tuple = ()) -> dict:
    mine = [i for i in selected if phase == "checks" or i["exclusive"] == (phase == "exclusive")]
    return {"event": "collected", "phase": phase, "checks": mine, "selected": selected,
            "errors": list(errors)}


def _result(n: int, outcome: str = "pass", phase: str = "checks") -> dict:
    return {"event": "result", "phase": phase, **_item(n), "outcome": outcome,
            "message": "" if outcome == "pass" else f"[PF-T-{n:03d}] {outcome}"}


def _account(tmp_path, lines: list[dict], runs: list[PhaseRun], unfinished: str | None = None):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return account(load_events(path), runs, empty_message=EMPTY, unfinished=unfinished)


OK = [PhaseRun("checks", 0)]


def test_every_selected_check_reported_once_is_proven(tmp_path):
    proof = _account(tmp_path, [_collected("checks", [_item(1), _item(2)]), _result(1),
                                _result(2)], OK)
    assert [c["id"] for c in proof.checks] == ["PF-T-001", "PF-T-002"]
    assert proof.harness_errors == [] and proof.usage_error == ""
    assert proof.selection == {"selected": 2, "reported": 2, "judged": 2, "missing": [],
                               "duplicates": [], "unexpected": [], "per_phase": {"checks": 2}}


def test_empty_selection_is_the_usage_error_whatever_pytest_said(tmp_path):
    for code in (0, 5):  # decided from the collection record, not from pytest's exit 5
        proof = _account(tmp_path, [_collected("checks", [])], [PhaseRun("checks", code)])
        assert proof.usage_error == EMPTY and proof.harness_errors == [EMPTY]


def test_a_check_without_result_is_an_error_naming_it(tmp_path):
    proof = _account(tmp_path, [_collected("checks", [_item(1), _item(2)]), _result(1)],
                     [PhaseRun("checks", 0)])
    missing = proof.checks[1]
    assert (missing["id"], missing["outcome"]) == ("PF-T-002", "error")
    assert missing["message"] == "[PF-T-002] produced no result (its pytest session died)"
    assert proof.selection["missing"] == ["PF-T-002"] and proof.selection["reported"] == 1


def test_a_check_without_result_has_no_duration_never_0(tmp_path):
    """A check that reported nothing was not timed: its duration is None (null in report.json,
    no JUnit time, no metric sample), in every way a result goes missing, never a 0.0."""
    lines = [_collected("checks", [_item(1), _item(2)]), _result(1), _result(1, "fail")]
    checks = _account(tmp_path, lines, [PhaseRun("checks", 1)]).checks  # a duplicate, a missing
    checks += _interrupted(tmp_path, [_collected("checks", [_item(3)])]).checks  # not finished
    assert [c["outcome"] for c in checks] == ["error"] * 3
    assert [c["duration_s"] for c in checks] == [None, None, None]


def test_a_duplicate_result_is_an_error(tmp_path):
    proof = _account(tmp_path, [_collected("checks", [_item(1)]), _result(1),
                                _result(1, "fail")], [PhaseRun("checks", 1)])
    assert proof.checks[0]["outcome"] == "error"
    assert proof.checks[0]["message"] == ("[PF-T-001] reported 2 results (pass, fail); a check "
                                          "must report exactly one")
    assert proof.selection["duplicates"] == ["PF-T-001"]


def test_phases_each_prove_their_share(tmp_path):
    selected = [_item(1), _item(2, exclusive=True)]
    lines = [_collected("node-local", selected), _result(1, phase="node-local"),
             _collected("exclusive", selected), _result(2, phase="exclusive")]
    proof = _account(tmp_path, lines, [PhaseRun("node-local", 0), PhaseRun("exclusive", 0)])
    assert proof.harness_errors == []
    assert proof.selection["per_phase"] == {"node-local": 1, "exclusive": 1}
    # The exclusive phase never ran (the budget ran out): its check is unfinished.
    proof = _account(tmp_path, lines[:2], [PhaseRun("node-local", 0)],
                     unfinished="did not finish within the run budget (60 s)")
    assert proof.checks[1]["message"] == "[PF-T-002] did not finish within the run budget (60 s)"


def _interrupted(tmp_path, lines: list[dict]):
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return account_interrupted(load_events(path), "the run was interrupted by SIGTERM")


def test_an_interrupted_run_counts_the_whole_selection_once(tmp_path):
    """A signal during the node-local phase: the exclusive phase never collected, yet its check
    is part of the selection (every session records the whole selection), counted once."""
    selected = [_item(1), _item(2), _item(3, exclusive=True)]
    proof = _interrupted(tmp_path, [_collected("node-local", selected),
                                    _result(1, "fail", phase="node-local")])
    assert [c["id"] for c in proof.checks] == ["PF-T-001", "PF-T-002", "PF-T-003"]
    assert proof.not_finished == ["PF-T-002", "PF-T-003"]
    assert proof.checks[2]["message"] == (
        "[PF-T-003] not finished: the run was interrupted by SIGTERM")
    assert proof.selection == {"selected": 3, "reported": 1, "missing": ["PF-T-002", "PF-T-003"],
                               "duplicates": [], "unexpected": []}
    # Both phases collected: still 3, not 3 + 3 (nor the node-local share alone).
    proof = _interrupted(tmp_path, [_collected("node-local", selected), _result(1),
                                    _result(2), _collected("exclusive", selected)])
    assert proof.selection["selected"] == 3 and proof.not_finished == ["PF-T-003"]
    assert proof.phases == {"t.py::test_1": "node-local", "t.py::test_2": "node-local",
                            "t.py::test_3": "exclusive"}


def test_an_interrupted_run_before_any_collection_knows_no_selection(tmp_path):
    proof = _interrupted(tmp_path, [])
    assert proof.checks == [] and proof.selection["selected"] is None


def test_deselected_checks_are_never_unfinished(tmp_path):
    """Only the selection counts: a check -k (or the tier) left out is not \"not finished\"."""
    proof = _interrupted(tmp_path, [_collected("checks", [_item(2)]), _result(2)])
    assert [c["id"] for c in proof.checks] == ["PF-T-002"] and proof.not_finished == []


def test_phases_of_reads_each_sessions_share(tmp_path):
    path = tmp_path / "results.jsonl"
    selected = [_item(1), _item(2, exclusive=True)]
    path.write_text("".join(json.dumps(x) + "\n" for x in (
        _collected("node-local", selected), _collected("exclusive", selected))))
    assert phases_of(load_events(path)) == {"t.py::test_1": "node-local",
                                            "t.py::test_2": "exclusive"}


def test_a_lost_item_names_the_crashed_worker(tmp_path):
    lines = [_collected("node-local", [_item(1)]),
             {"event": "lost", "nodeid": "t.py::test_1",
              "message": "worker 'gw1' crashed while running 't.py::test_1'"}]
    proof = _account(tmp_path, lines, [PhaseRun("node-local", 1)])
    assert proof.checks[0]["message"] == ("[PF-T-001] produced no result: worker 'gw1' crashed "
                                          "while running 't.py::test_1'")


def test_collection_errors_and_internal_errors_are_harness_errors(tmp_path):
    error = {"nodeid": "site/test_x.py", "message": "ImportError while importing test module\n"
             "E   ModuleNotFoundError: No module named 'nope'"}
    proof = _account(tmp_path, [_collected("checks", [_item(1)], [error])],
                     [PhaseRun("checks", 2)])
    assert proof.harness_errors == ["check file site/test_x.py could not be collected: "
                                    "ModuleNotFoundError: No module named 'nope'"]
    assert proof.checks[0]["message"] == ("[PF-T-001] did not run: the session stopped at the "
                                          "collection error(s)")
    assert proof.usage_error == ""  # a broken file is not an empty selection
    lines = [_collected("checks", [_item(1)]), _result(1),
             {"event": "internal_error", "message": "INTERNALERROR> DumpError: can't serialize"}]
    proof = _account(tmp_path, lines, [PhaseRun("checks", 3)])
    assert proof.harness_errors == ["pytest INTERNALERROR: INTERNALERROR> DumpError: can't "
                                    "serialize"]


@pytest.mark.parametrize(("code", "results", "expected"), [
    (0, ["fail"], "pytest phase 'checks' exited 0 although checks failed"),
    (1, ["pass"], "pytest phase 'checks' reported failures (exit status 1) that no check "
                  "result holds: E   boom"),
    (2, ["pass"], "pytest phase 'checks' was interrupted (exit status 2): E   boom"),
    (3, ["pass"], "pytest phase 'checks': pytest internal error (exit status 3): E   boom"),
    (5, ["pass"], "pytest phase 'checks' collected no tests (exit status 5) although it "
                  "selected some"),
    (-9, ["pass"], "pytest phase 'checks' ended: killed by signal SIGKILL: E   boom"),
    (7, ["pass"], "pytest phase 'checks' ended: exit status 7: E   boom"),
])
def test_every_pytest_exit_status_is_mapped(tmp_path, code, results, expected):
    lines = [_collected("checks", [_item(1)]), _result(1, results[0])]
    proof = _account(tmp_path, lines, [PhaseRun("checks", code, output="x\nE   boom\n")])
    assert proof.harness_errors == [expected.replace("E   boom", "boom")]


def test_pytest_usage_error_is_a_usage_error(tmp_path):
    proof = _account(tmp_path, [], [PhaseRun("checks", 4, output=(
        "ERROR: Wrong expression passed to '-k': a and: at column 6: expected ...\n"))])
    assert proof.usage_error.startswith("the check session refused its arguments")
    assert "Wrong expression passed to '-k'" in proof.usage_error
    assert proof.harness_errors == [proof.usage_error]  # no "wrote no collection record" noise


def test_no_collection_record_means_the_selection_is_unknown(tmp_path):
    proof = _account(tmp_path, [], [PhaseRun("checks", -11, output="Segmentation fault\n")])
    assert proof.usage_error == ""  # unknown is not empty, and never a pass
    assert proof.harness_errors[0] == ("pytest phase 'checks' wrote no collection record, so "
                                       "what it selected is unknown (killed by signal SIGSEGV): "
                                       "Segmentation fault")


@pytest.mark.parametrize("expr", ["PF-ENV-001", "PF-GPU and not PF-GPU-012", "PF-NET-00",
                                  "site/test_x.py::test_y", "not (env or gpu)"])
def test_valid_keywords(expr):
    check_keyword(expr)


@pytest.mark.parametrize(("expr", "error"), [
    ("PF-GPU and (", "-k 'PF-GPU and (' is not a valid expression: at column 13"),
    ("a b", "-k 'a b' is not a valid expression: at column 3"),
    ("not", "-k 'not' is not a valid expression"),
])
def test_malformed_keywords(expr, error):
    with pytest.raises(SelectionError) as info:
        check_keyword(expr)
    assert str(info.value).startswith(error)
    assert "-k PF-ENV-001" in str(info.value)


def test_judged_counts_the_results_that_are_no_skip(tmp_path):
    """A skip judged nothing: `judged` is what the runner's nothing-judged rule reads."""
    proof = _account(tmp_path, [_collected("checks", [_item(1), _item(2)]), _result(1, "skip"),
                                _result(2, "skip")], OK)
    assert (proof.selection["reported"], proof.selection["judged"]) == (2, 0)
    assert proof.usage_error == ""  # the runner words it, naming the profile and the skips
    proof = _account(tmp_path, [_collected("checks", [_item(1), _item(2)]), _result(1, "skip"),
                                _result(2, "fail")], OK)
    assert proof.selection["judged"] == 1


def test_a_phase_is_skipped_only_when_the_selection_proves_it_empty():
    """The runner skips a phase (`Events.has_phase`) only on a known selection holding none of
    its checks; an unknown selection (no collection record yet) runs every phase."""
    assert Events().has_phase("exclusive") and Events().has_phase("node-local")
    local_only = Events(collected=[_collected("node-local", [_item(1)])])
    assert local_only.has_phase("node-local") and local_only.has_phase("checks")
    assert not local_only.has_phase("exclusive")
    both = Events(collected=[{"selected": [_item(1), _item(2, exclusive=True)]}])
    assert both.has_phase("exclusive") and both.has_phase("node-local")
    deep = Events(collected=[{"selected": [_item(2, exclusive=True)]}])
    assert deep.has_phase("exclusive") and not deep.has_phase("node-local")
    assert not Events(collected=[{"selected": []}]).has_phase("checks")
