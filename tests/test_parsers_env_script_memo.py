"""The env script reader's memo (issue 32 item 3): a command line read before is not lexed or
read again, only its assignments replayed against the variables of the moment. The same line in
another context (after `$ env`, inside a continued command or a quoted value, after `RUN`) reads
as it did before the memo: the expected values below are what main at 3c19681 returned.
tests/test_parsers_env_equivalence.py holds every recorded file to the older reader too."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.parsers import env_expand, env_script, env_script_lines, env_shape
from harness.parsers.env import parse_env_dump
from harness.parsers.reader import Input
from tests.test_parsers_env_equivalence import python_path

TESTS = Path(__file__).parent
SCRIPTS = sorted([*TESTS.glob("data/env/*.sh"), *TESTS.glob("samples/env/*.sh"),
                  *TESTS.glob("data/env/*.dockerfile"), *TESTS.glob("data/env/*cmdline*.txt")])

CASES = [
    # the same line in every context: plain, after `$ env` (taken whole), continued, in a value
    ("A=1\nB=$A:x\n$ env | grep B\nB=$A:x\n$ echo\nB=$A:x\nmpirun -x B=$A:x \\\n  -x C=2 prog\n"
     "export D=\"B=$A:x\nB=$A:x\"\nB=$A:x\nA=2\nB=$A:x\n",
     {"A": "2", "B": "2:x", "C": "2", "D": "B=1:x\nB=1:x"}, 2),
    # a list of commands, the same after RUN, and after a prompt
    ("export A=1; B=2 || C=3\nRUN export E=1\nexport A=1; B=2 || C=3\n$ export A=9\n"
     "export A=1; B=2 || C=3\n", {"A": "1", "B": "2", "C": "3"}, 0),
    # an unclosed quote that is no value (prose), twice; one that opens a value, twice
    ("echo \"it's\nexport A=1\necho \"it's\nexport V=\"a\nb\"\nexport V=\"a\nb\"\nW=$V\n",
     {"A": "1", "V": "a\nb", "W": "a\nb"}, 2),
    # declare -x and declare -a; legacy Dockerfile ENV, twice
    ("declare -x A=1\ndeclare -a A=(x)\ndeclare -x A=1\nENV B 1 2\nENV B 1 2\n",
     {"A": "1", "B": "1 2"}, 1),
]


_SEGMENT = "export A=1\nB=$A:$B\nexport C=\"q $B\"\n\n"
#: Segments (lines to a blank line, read before: one item, see env_script_lines.Segment) in contexts.
SEGMENT_CASES = [
    # a segment repeated: expansions against the variables of each time
    (_SEGMENT * 3 + "A=2\n\n" + _SEGMENT,
     {"A": "1", "B": "1:1:1:1:$B", "C": "q 1:1:1:1:$B"}, 0),
    # the same segment after `$ env` output (its assignment lines taken whole), then after a
    # new prompt
    (_SEGMENT + "$ env | grep A\n\n" + _SEGMENT + "$ echo\n\n" + _SEGMENT,
     {"A": "1", "B": "1:$A:$B", "C": "q 1:$A:$B"}, 2),
    # a segment with a prompt in it, twice (env output follows it: C is taken whole)
    ("A=1\n$ env\nB=$A\n\n$ echo\n\nA=1\n$ env\nB=$A\n\nC=$B\n",
     {"A": "1", "B": "$A", "C": "$B"}, 3),
    # a blank line inside a quoted value and inside a continued command
    ("export V=\"a\n\nb\"\nW=$V\n\n" * 2 + "mpirun -x X=1 \\\n\n  -x Y=2 prog\n\n" * 2,
     {"V": "a\n\nb", "W": "a\n\nb", "X": "1", "Y": "2"}, 0),
    # a blank line right after a continuation; a comment ending in a backslash before one
    ("A=1 \\\n\nB=2\n\n# c \\\n\nC=3\n\n" * 2, {"A": "1", "B": "2", "C": "3"}, 0),
]


@pytest.mark.parametrize("segment_min", [0, env_script_lines._SEGMENT_MIN])
@pytest.mark.parametrize(("text", "variables", "skipped"), CASES + SEGMENT_CASES)
def test_a_line_read_before_reads_as_before_in_its_context(
        text: str, variables: dict[str, str], skipped: int, segment_min: int,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """(Segments end at the first blank line _SEGMENT_MIN characters on: these short texts are
    read with it 0 too, so that each blank line ends one.)"""
    _segment_min(monkeypatch, segment_min)
    dump = parse_env_dump(text)
    assert (dump.format, dump.variables, list(dump.variables), dump.skipped) == (
        "script", variables, list(variables), skipped)


def _no_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line lexed and read anew: no memo, no segment kept."""
    monkeypatch.setattr(env_script_lines, "MEMO_LINES", 0)
    monkeypatch.setattr(env_script_lines, "_MEMO_SEGMENT_CHARS", 0)


def _read(text: str) -> tuple[object, ...]:
    dump = parse_env_dump(text)
    return dump.format, list(dump.variables.items()), dump.skipped, dump.dropped


@pytest.mark.parametrize("segment_min", [0, env_script_lines._SEGMENT_MIN])
@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_a_repeated_script_reads_the_same_with_and_without_the_memo(
        path: Path, segment_min: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each recorded script three times over (every line after the first copy a memo hit), and
    all of them after it: the memo and the segments give what reading every line anew gives."""
    _segment_min(monkeypatch, segment_min)
    text = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    text = text * 3 + "".join(p.read_text(encoding="utf-8").rstrip("\n") + "\n" for p in SCRIPTS)
    with_memo = _read(text)
    _no_memo(monkeypatch)
    assert _read(text) == with_memo


def test_the_memo_lexes_a_repeated_line_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memo is the path taken (else the tests above compare the lexer with itself): 100
    copies of a script lex as many lines as one copy; without the memo, 100 times as many."""
    python_path(monkeypatch)  # (the Python path's memos: the C scan reads these lines itself)
    text = (TESTS / "data/env/real_sbatch_nccl_tests_2023.sh").read_text(encoding="utf-8")
    calls: list[str] = []
    lexer = env_script_lines._shell_words

    def counted(line: str) -> list[str]:
        calls.append(line)
        return lexer(line)

    monkeypatch.setattr(env_script_lines, "_shell_words", counted)
    parse_env_dump(text)
    once = len(calls)
    calls.clear()
    parse_env_dump(text * 100)
    assert 0 < len(calls) == once
    calls.clear()
    _no_memo(monkeypatch)
    parse_env_dump(text * 100)
    assert len(calls) == 100 * once


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distinct lines past MEMO_LINES, and lines past MEMO_CHARS, are read without being kept."""
    python_path(monkeypatch)  # (the Python path's memos: the C scan reads these lines itself)
    kept: list[int] = []
    reading = env_script._reading

    def spy(words: list[str]) -> env_script._Reading:
        kept.append(1)
        return reading(words)

    monkeypatch.setattr(env_script, "_reading", spy)
    monkeypatch.setattr(env_script_lines, "MEMO_LINES", 10)
    lines = "".join(f"export A{i}=\"{i}\"\n" for i in range(50)) * 2  # quoted: each line lexed
    dump = parse_env_dump(lines)
    assert len(dump.variables) == 50
    assert len(kept) == 50 + 40  # the first 10 kept, read once; the other 40 read twice
    kept.clear()
    long = f"export A=\"{'x' * (env_script_lines.MEMO_CHARS + 1)}\"\n"
    parse_env_dump(long * 3)
    assert len(kept) == 3


def test_the_format_pass_judges_a_repeated_line_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """env_shape.shape_of keeps what it found on a line by itself: 100 copies of a script judge
    as many lines as one copy (the regexes run once a distinct line), and the shape is the same."""
    python_path(monkeypatch)  # (the Python path's memos: the C scan reads these lines itself)
    text = (TESTS / "data/env/real_sbatch_nccl_tests_2023.sh").read_text(encoding="utf-8")
    calls: list[str] = []
    judge = env_shape._is_structured_line

    def counted(line: str) -> bool:
        calls.append(line)
        return judge(line)

    monkeypatch.setattr(env_shape, "_is_structured_line", counted)
    env_shape.shape_of(Input(text))
    once = len(calls)
    calls.clear()
    with_memo = env_shape.shape_of(Input(text * 100))
    assert 0 < len(calls) == once
    monkeypatch.setattr(env_shape, "_MEMO_LINES", 0)
    calls.clear()
    assert env_shape.shape_of(Input(text * 100)) == with_memo
    assert len(calls) == 100 * once


@pytest.mark.parametrize("line", ["- -x", "  - NCCL_DEBUG=INFO", "env:", "- name: A",
                                  '"A": "b",', "x = {env={'A': '1'}}", "export A=1", "B=2"])
def test_a_line_judged_before_is_judged_as_before_after_any_other(line: str) -> None:
    """The shape of a line seen before depends on the line before it (`- -x` then `- A=b` is a
    YAML flag list) as when it was first seen: every order of these lines, twice over, gives the
    shape the memo-less pass gives."""
    others = ["# c", "- -x", "  - NCCL_DEBUG=INFO", "- name: A", "export A=1", "B=2", ""]
    for other in others:
        text = "\n".join(["export Z=1", other, line, other, line, line, other]) + "\n"
        with_memo = env_shape.shape_of(Input(text))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(env_shape, "_MEMO_LINES", 0)
            assert env_shape.shape_of(Input(text)) == with_memo, (other, line)


def test_a_segment_read_before_comes_as_one_item(monkeypatch: pytest.MonkeyPatch) -> None:
    """The segment path is the one taken (else SEGMENT_CASES test only the line path): the
    second copy of a segment comes as one Segment item, a segment with a prompt never does."""
    python_path(monkeypatch)  # (the Python path's memos: the C scan reads these lines itself)
    _segment_min(monkeypatch, 0)
    segments: dict[str, env_script_lines.Segment] = {}
    lines = (_SEGMENT * 2 + "$ env\nA=1\n\n" * 2).split("\n")[:-1]
    items = list(env_script_lines.logical_lines([lines], {}, segments))
    kinds = [type(words).__name__ for _, _, words in items]
    assert kinds == ["slice", "list", "slice", "Segment", "list", "slice", "list", "slice"]
    assert list(segments) == [_SEGMENT]
    assert [text for text, kind in zip([i[1] for i in items], kinds, strict=True)
            if kind == "Segment"] == [_SEGMENT]


def _segment_min(mp: pytest.MonkeyPatch, chars: int) -> None:
    """Segments from `chars` characters on, on the Python path and the C scan's."""
    mp.setattr(env_script_lines, "_SEGMENT_MIN", chars)
    mp.setattr(env_script_lines, "_SEGMENT_MIN_C", chars)


def test_a_segment_ends_at_a_blank_line_past_its_shortest(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default _SEGMENT_MIN, a repeated script of the bench's kind comes mostly as
    segments: of 50 copies of a sample, 3/4 of the text comes in segments read before."""
    python_path(monkeypatch)  # (the C scan's segments are longer: _SEGMENT_MIN_C)
    text = (TESTS / "data/env/real_sbatch_nccl_tests_container_2024.sh").read_text(encoding="utf-8")
    lines = (text.rstrip("\n") + "\n\n") * 50
    segments: dict[str, env_script_lines.Segment] = {}
    items = list(env_script_lines.logical_lines([lines.split("\n")[:-1]], {}, segments))
    hits = [text for _, text, words in items if isinstance(words, env_script_lines.Segment)]
    assert sum(map(len, hits)) >= 0.75 * len(lines)
    assert all(len(text) >= env_script_lines._SEGMENT_MIN for text in segments)


def test_the_segments_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Segments are kept while their text in all fits _MEMO_SEGMENT_CHARS; past it they are
    read line by line, with the same result."""
    _segment_min(monkeypatch, 0)
    monkeypatch.setattr(env_script_lines, "_MEMO_SEGMENT_CHARS", 2000)
    text = "".join(f"export A{i}=\"{i}\"\nB=$A{i}\n\n" for i in range(400)) * 2
    segments: dict[str, env_script_lines.Segment] = {}
    list(env_script_lines.logical_lines([text.split("\n")[:-1]], {}, segments))
    assert 0 < sum(map(len, segments)) <= 2000
    bounded = _read(text)
    _no_memo(monkeypatch)
    assert _read(text) == bounded


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_every_expansion_joined_reads_the_same(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long expansion is kept as its pieces (env_expand.Joined) until the end: with every
    expansion kept so, in chains cut every 2 levels, each recorded script (three times over,
    then all of them) reads as with the default (no expansion of theirs is long)."""
    text = path.read_text(encoding="utf-8").rstrip("\n") + "\n"
    text = text * 3 + "".join(p.read_text(encoding="utf-8").rstrip("\n") + "\n" for p in SCRIPTS)
    default = _read(text)
    monkeypatch.setattr(env_expand, "_JOINED_MIN", 0)
    monkeypatch.setattr(env_expand, "_JOINED_DEPTH", 2)
    assert _read(text) == default


@pytest.mark.parametrize("lines", [1, 3, 200, 3000])
def test_a_value_that_expands_itself_reads_as_copied(lines: int) -> None:
    """`P=/x:$P` again and again from a long value, and `D=$D$D` doubling past the value cap:
    each the text the shell would give, cut at MAX_VALUE_CHARS, as when every expansion was a
    copy (Joined chains of 64 levels are copied into one string along the way)."""
    start = "a" * (env_expand._JOINED_MIN + 1)
    text = f"export P={start}\nexport D=0123456789\n" + "P=/x:$P\nD=$D$D\n" * lines + "E=$P\n"
    dump = parse_env_dump(text)
    cap = env_script.MAX_VALUE_CHARS
    assert dump.variables["P"] == ("/x:" * lines + start)[:cap] == dump.variables["E"]
    assert dump.variables["D"] == ("0123456789" * 2 ** min(lines, 20))[:cap]


def test_a_joined_value_past_the_cap_is_cut_inside_its_last_piece() -> None:
    """C=$A$Y, both long, past MAX_VALUE_CHARS: C is A's characters, then Y's up to the cap."""
    cap = env_script.MAX_VALUE_CHARS
    x, y = "x" * (cap // 4), "0123456789" * (cap // 15)
    dump = parse_env_dump(f"export X={x}\nexport Y={y}\nA=$X$X\nC=$A$Y\n")
    assert dump.variables["A"] == x + x
    assert dump.variables["C"] == (x + x + y)[:cap]
    assert len(dump.variables["C"]) == cap


@pytest.mark.parametrize("run", [
    "A=1\n", "\n\n  export B=2 # C=3\n\t D=x/y:z\n# E=5\nexport\tF=\n",
    "## a comment\nG=7 #\n  \n H=8\n", "I=9\nJ=10 # K=11\nexport L=12\n\n",
])
def test_the_assignments_of_a_run_are_found_from_each_line_end(run: str) -> None:
    """QUICK_ASSIGNS over "\\n" + a run finds what QUICK_ASSIGN (`^` under re.M) finds."""
    found = env_script_lines.QUICK_ASSIGNS.findall("\n" + run)
    assert found == env_script_lines.QUICK_ASSIGN.findall(run)
    assert found and ("K", "11") not in found and ("C", "3") not in found


def _no_expansion_memo(value: str, variables: dict[str, str], known: dict) -> object:
    return env_expand.expand(value, variables)


@pytest.mark.parametrize("memo_lines", [0, 2, 4096])
def test_an_expansion_kept_is_taken_only_where_the_names_it_reads_are_unchanged(
        memo_lines: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """env_expand.expanded keeps a value's expansion with the values of every name it reads (a default's
    too): each of these lines, repeated after the names change, reads as _expand reads it."""
    monkeypatch.setattr(env_script_lines, "MEMO_LINES", memo_lines)
    lines = ["X=${A:-x}", "Y=${A:-$B}", "Z=$A$B", "W=${C:=${A}}", "V=${A}-${B:-b}"]
    script = []
    for step in ["", "export A=1", "export B=2", "A=", "export A=3 B=4", "unset A", "C=5"]:
        script += [step, *lines]
    text = "\n".join(script * 3) + "\n"
    expected = dict(parse_env_dump(text).variables)
    monkeypatch.setattr(env_script, "expanded", _no_expansion_memo)
    assert dict(parse_env_dump(text).variables) == expected
    assert expected["X"] == "3" and expected["Y"] == "3" and expected["V"] == "3-4"
