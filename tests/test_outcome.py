"""The outcome of a check is classified in one place (harness.checking.classify and combine):
the plugin's phases and run_check (the cluster checks) both use it."""

from __future__ import annotations

import pytest

from harness.base.errors import ProbeError
from harness.checking import CheckFailure, check, classify, combine, run_check, spec_of


@check("PF-T-950", title="t", why="w", remedy="r")
def _spec_holder() -> None:
    pass


SPEC = spec_of(_spec_holder)


@pytest.mark.parametrize(("exc", "when", "expected"), [
    (None, "call", ("pass", "")),
    (CheckFailure("[PF-T-950] x 1 < 2"), "call", ("fail", "[PF-T-950] x 1 < 2")),
    (ProbeError("tool gone"), "call", ("error", "[PF-T-950] tool gone")),
    (AssertionError("one is not two\nmore"), "call", ("fail", "[PF-T-950] one is not two")),
    (AssertionError("in a fixture"), "setup",
     ("error", "[PF-T-950] harness error in setup: AssertionError: in a fixture")),
    (KeyError("k"), "call", ("error", "[PF-T-950] harness error: KeyError: 'k'")),
])
def test_classify(exc, when, expected):
    assert classify(SPEC, exc, when=when) == expected


def test_classify_skip_and_timeout():
    with pytest.raises(pytest.skip.Exception) as skipped:
        pytest.skip("not applicable to p: no")
    assert classify(SPEC, skipped.value) == ("skip", "not applicable to p: no")
    with pytest.raises(pytest.fail.Exception) as timed_out:
        pytest.fail("Timeout (>120.0s) from pytest-timeout.")
    assert classify(SPEC, timed_out.value)[0] == "error"


def test_combine_takes_the_most_severe_phase_and_warnings_only_on_a_pass():
    assert combine([("pass", ""), ("skip", "s"), ("pass", "")], []) == ("skip", "s")
    assert combine([("skip", "s"), ("fail", "f"), ("error", "e")], ["w"]) == ("error", "e")
    assert combine([("pass", "")], ["w1", "w2"]) == ("warn", "w1\nw2")
    assert combine([], []) == ("pass", "")


def test_run_check_uses_the_same_classification():
    @check("PF-T-951", title="t", why="w", remedy="r")
    def probe_fails() -> None:
        raise ProbeError("nvidia-smi hung")

    result = run_check(probe_fails, profile="p")
    assert (result.outcome, result.message) == classify(spec_of(probe_fails), ProbeError("nvidia-smi hung"))
