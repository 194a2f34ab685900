"""Straggler detection (harness.cluster.straggler): median/MAD over per-node figures."""

from __future__ import annotations

import math

from harness.cluster.straggler import find_stragglers


def test_slow_node_above_floor_is_flagged():
    busbw = {f"node{i}": 440.0 + i for i in range(7)} | {"node7": 380.0}
    result = find_stragglers(busbw, higher_is_better=True)
    assert [s.node for s in result.stragglers] == ["node7"]
    assert (result.median, result.mad) == (442.5, 2.0)
    assert result.stragglers[0].z < -3.5 and round(result.stragglers[0].rel_dev, 3) == -0.141


def test_fast_node_is_not_a_straggler():
    busbw = {f"n{i}": 440.0 for i in range(5)} | {"fast": 520.0}
    assert find_stragglers(busbw, higher_is_better=True).stragglers == []


def test_step_time_high_is_bad():
    steps = {"a": 1.00, "b": 1.01, "c": 0.99, "d": 1.00, "e": 1.35}
    result = find_stragglers(steps, higher_is_better=False)
    assert [s.node for s in result.stragglers] == ["e"]


def test_tight_cluster_tiny_deviation_not_flagged_even_with_zero_mad():
    busbw = {f"n{i}": 450.0 for i in range(6)} | {"n6": 449.0}
    assert find_stragglers(busbw, higher_is_better=True).stragglers == []
    result = find_stragglers({f"n{i}": 450.0 for i in range(6)} | {"bad": 400.0},
                             higher_is_better=True)
    assert [(s.node, s.z) for s in result.stragglers] == [("bad", -math.inf)]


def test_too_few_nodes_and_unusable_figures_are_said():
    result = find_stragglers({"a": 400.0, "b": 100.0, "c": None, "d": float("nan")},
                             higher_is_better=True)
    assert result.stragglers == [] and result.not_judged == "2 usable figures, at least 4 needed"
    assert result.unusable == ["c", "d"]
