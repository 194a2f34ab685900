"""Every figure the PF-TRAIN checks judge, removed from (or made wrong in) a recorded real
result, turns the check that reads it non-pass: a check passes only on figures it read (the
worker's reference step and comparisons make these figures; bench_worker.py times them)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.train_canned import canned, check_results

Edit = Callable[[dict[str, Any]], None]


def _drop(*path: str | int) -> Edit:
    def edit(result: dict[str, Any]) -> None:
        node: Any = result
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
    return edit


def _set(value: Any, *path: str | int) -> Edit:
    def edit(result: dict[str, Any]) -> None:
        node: Any = result
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return edit


CASES: dict[str, tuple[str, Edit]] = {
    # removed: the check has nothing to judge
    "no ranks": ("PF-TRAIN-001", _drop("ranks")),
    "no local losses on rank 1": ("PF-TRAIN-003", _drop("ranks", 1, "local_losses")),
    "no losses": ("PF-TRAIN-004", _drop("losses")),
    "no loss gap": ("PF-TRAIN-005", _drop("loss_max_rel_diff")),
    "no loss tolerance": ("PF-TRAIN-005", _drop("tolerance", "loss_rel")),
    "no update gap": ("PF-TRAIN-006", _drop("update_rel_diff")),
    "no update tolerance": ("PF-TRAIN-006", _drop("tolerance", "update_rel")),
    "no replica difference on rank 1": ("PF-TRAIN-007", _drop("ranks", 1, "max_abs_vs_rank0")),
    "no checksum on rank 1": ("PF-TRAIN-007", _drop("ranks", 1, "checksum")),
    "no step time": ("PF-TRAIN-008", _drop("step_time_s")),
    # wrong: the check judges the figure
    "one rank missing": ("PF-TRAIN-001", lambda r: r["ranks"].pop()),
    "an infinite loss on rank 1": ("PF-TRAIN-003", _set(float("inf"), "ranks", 1,
                                                        "local_losses", 2)),
    "a loss that rises": ("PF-TRAIN-004", _set(9.0, "losses", -1)),
    "a loss gap over its tolerance": ("PF-TRAIN-005", _set(1e-3, "loss_max_rel_diff")),
    "a NaN update gap": ("PF-TRAIN-006", _set(float("nan"), "update_rel_diff")),
    "a replica that differs": ("PF-TRAIN-007", _set(1e-3, "ranks", 1, "max_abs_vs_rank0")),
    "a checksum that differs": ("PF-TRAIN-007", _set("1/2", "ranks", 1, "checksum")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_figure_removed_or_wrong_turns_its_check_non_pass(suite, case):
    check, edit = CASES[case]

    def edited(result: dict[str, Any]) -> dict[str, Any]:
        result = copy.deepcopy(result)
        edit(result)
        return result

    canned(suite, "result_cpu_gloo.txt", 0, edit=edited)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got[check][0] in ("fail", "error"), (case, got[check])


def test_the_recorded_result_passes_every_check_it_is_edited_for(suite):
    """The baseline of the cases above: unedited, each of their checks passes."""
    canned(suite, "result_cpu_gloo.txt", 0)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert {got[check][0] for check, _ in CASES.values()} == {"pass"}, got
