"""The env reader's batch paths (issue 32 item 3: `topology` reads a 20 MB `env` dump within 10x a
plain line loop) give what its line-by-line loop gives.

A batch of plain `NAME=value` lines is judged as a whole by the shape pass (_plain_batch) and read
with one split a distinct line and one bounded update (_Assignments.assignments,
env._last_values, Variables.fits/take). Each test turns
the batch paths off (the line loop, which tests/golden/env_equivalence.json pins to the reader
before them) and compares, on random mixes of the lines that each branch of the loop takes, read
in random chunk sizes so that a batch boundary falls everywhere.
"""

from __future__ import annotations

import random
import re

import pytest

from harness.parsers import ParseError, env, env_script, env_shape
from harness.parsers.env import parse_env_dump
from harness.parsers.env_script import Variables
from harness.parsers.reader import Input

#: Lines for every branch of the shape pass and the assignment loop: plain assignments, values
#: with `=`/`:`/`-`, continuation lines, blanks, exported functions, launcher flags, inline maps,
#: trailing backslashes, rank prefixes, timestamps, YAML and dict lines, script keywords, and a
#: long value (a batch of long lines goes through the line loop).
LINES = [
    "SLURM_NODEID=0", "SLURM_NODELIST=node[1-2]", "A=1", "A=", "_X=a=b", "PATH=/usr/bin:/bin",
    "a_b=lower", "A=x -x B=1", "B=-e C=2", "C=env={A: 1}", "environment={\"A\": \"b\"}",
    "D=x\\", "E=y \\\\", "continued line", "", "   ", "\t", "BASH_FUNC_f%%=() {  echo",
    "}", "0: A=2", "1: A=3", "[1,0]<stdout>:A=4", "[1,1]<stdout>:A=5",
    "2024-06-25T18:45:27.123Z A=6", "- name: NCCL_DEBUG", "  value: INFO", "env:",
    '"NCCL_DEBUG": "INFO",', "export F=1", "declare -x G=\"2\"", "-x", "- -x", "- H=1",
    "ENV=1", "export=1", "é=1", "1A=1", "A=ǅ", "  I=1", "J=1 # c", "$ env", "K=" + "v" * 3000,
]


def _plain(pieces: list[str]) -> list[str]:
    return [line for line in pieces if env_shape._ASSIGN_START.match(line)]


def _mixes(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    plain = _plain(LINES)
    out = []
    for _ in range(n):
        lines = rng.choices(plain, k=rng.randint(1, 40))
        for _ in range(rng.randint(0, 3)):  # a few lines of other kinds, anywhere
            lines.insert(rng.randint(0, len(lines)), rng.choice(LINES))
        out.append("\n".join(lines) + rng.choice(["", "\n"]))
    return out


def _reading(text: str, chunk: int) -> object:
    try:
        dump = parse_env_dump(Input(text, chunk=chunk))
    except ParseError as exc:
        return ("error", str(exc))
    return dump.format, list(dump.variables.items()), dump.skipped, dump.dropped


def _line_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch path: in the format pass (env_shape) nor in the reading (env)."""
    monkeypatch.setattr(env, "distinct_assignments", lambda _: None)
    monkeypatch.setattr(env_shape, "assignment_text", lambda _: None)


def test_batches_read_as_the_line_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    cases = [(text, rng.choice([3, 7, 16, 61, 4096])) for text in _mixes(32, 1000)]
    fast = [(_reading(t, c), env_shape.shape_of(Input(t, chunk=c))) for t, c in cases]
    _line_loop(monkeypatch)
    slow = [(_reading(t, c), env_shape.shape_of(Input(t, chunk=c))) for t, c in cases]
    differ = [cases[i] for i, (a, b) in enumerate(zip(fast, slow, strict=True)) if a != b]
    assert not differ, differ[:3]
    # the mixes reach every form and both paths (not all refused, not all read one way)
    formats = {r[0][0] for r in fast}
    assert {"env", "script", "yaml", "error"} <= formats, formats


@pytest.mark.parametrize("line", [line for line in LINES if not env_shape._ASSIGN_START.match(line)])
def test_one_line_of_another_kind_among_plain_ones(monkeypatch: pytest.MonkeyPatch,
                                                   line: str) -> None:
    """Each line that is not a plain assignment, in the middle of a long run of them (read whole
    and in chunks that end a batch on either side of it), reads as in the line loop."""
    text = "\n".join(["SLURM_NODEID=0", "A=1"] * 50 + [line] + ["B=2", "A=3"] * 50) + "\n"
    chunks = (15, 16, 17, 600, 601, 602, 4096)
    fast = [_reading(text, c) for c in chunks] + [env_shape.shape_of(Input(text, chunk=c)) for c in chunks]
    _line_loop(monkeypatch)
    slow = [_reading(text, c) for c in chunks] + [env_shape.shape_of(Input(text, chunk=c)) for c in chunks]
    assert fast == slow


def test_the_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch path that lost a batch's last assignment reads differently."""
    text = "A=1\nB=2\n" * 20
    before = _reading(text, 7)
    monkeypatch.setattr(env._Assignments, "assignments",
                        lambda self, lines, *_: self.lines(lines[:-1]))
    assert _reading(text, 7) != before


@pytest.mark.parametrize("limits", [(4, 1 << 20, 1 << 20), (1000, 30, 1 << 20), (1000, 1000, 3)])
def test_put_all_keeps_the_bounds_as_put(monkeypatch: pytest.MonkeyPatch,
                                         limits: tuple[int, int, int]) -> None:
    """put_all takes the pairs in one update only where no put could be refused or cut: near
    each bound (variables, total characters, a value's characters) it gives what put gives."""
    for name, value in zip(("MAX_VARIABLES", "MAX_TOTAL_CHARS", "MAX_VALUE_CHARS"), limits,
                           strict=True):
        monkeypatch.setattr(env_script, name, value)
    rng = random.Random(sum(limits))
    for _ in range(500):
        pairs = [(rng.choice("ABCDEFG"), "x" * rng.randint(0, 6)) for _ in range(rng.randint(0, 9))]
        start = [(rng.choice("ABCZ"), "y" * rng.randint(0, 4)) for _ in range(rng.randint(0, 3))]
        one, each = Variables(), Variables()
        for name, value in start:
            one.put(name, value)
            each.put(name, value)
        longest = max((len(v) + 2 for _, v in pairs), default=0)
        one.put_all(pairs, longest, sum(len(v) + 2 for _, v in pairs))
        for name, value in pairs:
            each.put(name, value)
        assert (list(one.items()), one.total, one.dropped) == (
            list(each.items()), each.total, each.dropped), (start, pairs)
        assert one.total == sum(map(len, one.values()))


#: What the batch path read before _last_values (round 5): one findall of the batch's lines.
_ASSIGN_LINES = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.M)


@pytest.mark.parametrize("seed", range(4))
def test_last_values_as_findall(seed: int) -> None:
    """_last_values gives dict(findall) of the joined lines, key order included: on lines that
    repeat (the distinct-lines branch: a name set to 1, then 2, then 1 again ends at 1) and on
    lines that do not (the split-each branch); values with `=`, blanks and odd characters."""
    rng = random.Random(seed)
    names = ["A", "B", "_X", "SLURM_NODEID", "a_b", "C9"]
    values = ["", "1", "2", "a=b", "=", " x ", "ǅ", "node[1-2]", "\\", "\t"]
    for _ in range(400):
        pool = rng.randint(1, 60)
        lines = [f"{rng.choice(names)}={rng.choice(values)}{rng.randrange(pool)}"
                 for _ in range(rng.randint(1, 80))]
        want = dict(_ASSIGN_LINES.findall("\n".join(lines)))
        got = env._last_values(lines)
        assert list(got.items()) == list(want.items()), lines
    assert list(env._last_values(["A=1", "B=0", "A=2", "A=1", "A=2", "A=1"]).items()) == [
        ("A", "1"), ("B", "0")]


def test_last_values_can_fail() -> None:
    """Distinct lines in their first order would end A at 2 (its value before the last): the
    test above tells that apart."""
    lines = ["A=1", "A=2", "A=1", "B=0"]
    wrong = dict(line.split("=", 1) for line in dict.fromkeys(lines))
    assert wrong != env._last_values(lines) == dict(_ASSIGN_LINES.findall("\n".join(lines)))


@pytest.mark.parametrize("seed", range(4))
def test_distinct_assignments_as_the_joined_text(seed: int) -> None:
    """distinct_assignments takes a batch exactly where assignment_text and all_assignments take
    it (a line of another kind first, last, repeated or once; long lines; one line), with the
    same longest line and characters."""
    rng = random.Random(seed)
    plain = _plain(LINES)
    taken = 0
    for _ in range(1500):
        batch = rng.choices(plain, k=rng.randint(1, 30))
        for _ in range(rng.choice([0, 0, 1, 2])):
            batch.insert(rng.randint(0, len(batch)), rng.choice(LINES))
        text = env_shape.assignment_text(batch)
        want = None
        if text is not None and env_shape.all_assignments(text):
            want = (list(dict.fromkeys(batch[:-1])), max(map(len, batch)), len(text))
        got = env_shape.distinct_assignments(batch)
        assert (got and (list(got[0]), *got[1:])) == want, batch
        taken += got is not None
    assert 100 < taken < 1400  # both answers given
