"""A shell script's common lines in C (harness/parsers/_env_lines.c: env_run, env_join,
env_words, env_shape_run) read what the Python path reads, line by line: every line of the
recorded scripts and of generated ones, each mutated at random places (quotes, `$`, `$(`,
backslashes, tabs, CR, characters past ASCII, NUL, `#`, `;&|`, parentheses, braces, `/env`) and
under the wrappers and keywords the reader meets (`export -n`, `declare -x`, `readonly`, `ENV`,
`RUN`, a `$ ` prompt, `3: `, `> `), alone and as runs of lines, after `env` output and not;
and the lines the C scan is meant to take, it takes (else these tests compare Python with
itself)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from harness.base.settings import SettingError
from harness.parsers import env_script_lines, env_shape
from harness.parsers.env_script import _effect, _reading, parse_script
from harness.parsers.reader import Input
from harness.parsers.shell_words import shell_words, strip_comment
from tests.test_parsers_env_equivalence import python_path

scan = pytest.importorskip("harness.parsers._nccl_scan", reason="built without a C compiler")
if not hasattr(scan, "env_run"):
    pytest.skip("the extension was built from an older source", allow_module_level=True)

DATA = Path(__file__).parent / "data" / "env"


@pytest.fixture(autouse=True)
def _c_scans_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests compare the C scans with Python: on, whatever the environment says."""
    monkeypatch.delenv("PREFLIGHT_ENV_NO_C", raising=False)

#: Lines the C scan takes: blank, comments, simple assignments (read by the scan itself), and
#: commands that the C lexer lexes (read by env_reading), continued ones too; and lines it
#: leaves to Python.
TAKEN = ["A=1", "export A=1", "export A=1 B=2", "A=", 'A=""', "A=''", 'A="x y"', "A='x y'",
         "A=$B", 'A="$B:x"', "A='$B x'", "  A=1  # c", "\texport\tA=1", "A=x#y", "A=(x)",
         "A={x}", "export=1", "exportA=1", "A=1\t", "", "   ", "# c", "  # c 'x", "A=a",
         'A="it\'s"', "A='a\"b'", "_x9=1 Y=2 # z", "A=~/x:${B}:$C",
         "A=1 B=/usr/bin/env C=3", "A='$B $(x)'", "A=`x`", "A=$(x)", "export -n A=1",
         "declare -x A=1", "declare -a A=(", "readonly A=1", "local A=1", "typeset -rx A=1",
         "3: A=1", "> A=1", "ENV A=1", "ENV A 1", "RUN A=1", "env A=1 prog", "A=1 env",
         "A=\"x\"y", "A=1 B", "export", "export A", "1A=1", "-x A=1", "mpirun -x A=1 -e B=2 p",
         "srun --export=ALL,A=1 p", "docker run --env=A=1 --env B=2 i", "x /usr/bin/env A=1 B p",
         "env", "printenv", "set", "export -p", "declare -x", "a \\\n b=1",
         "mpirun -x A=1 \\\n -x B=2 \\\n  prog", 'A="$(x)"', "x $(a 'b')", 'A="$(a "b c" | d)"']
LEFT = ["env | grep", "A=1;", "A=1 && B=2", 'A="a\\"b"', "A=x\\", "$ A=1", "$ env",
        "A=\u00e9", "A=\x00", 'A="x', "A='x", "A=x\ry", "A\u3000=1", "A=1\u3000#c", "A=x|y",
        "A=1 #c \\", "A=\"$(a 'b'", "A=1 \\\n# c\nB=2", "A=1 \\\n  \u00e9", "A=1\\\\"]
#: Command substitutions (kept whole inside a word where the line has quotes, split at blanks
#: where it has none) and quotes inside them (the Python lexer's).
SUBSTITUTIONS = ['echo "a" $(cat "a b") c', "echo 'a' $(echo 'x y') c", 'x "$(a)" y', "x '$(a b)' y",
                 'x $(a (b)) "c"', 'x $(a b) "c"', "x $(a b)c'd e'", "x $(a b) c", 'x $(a "b) c']
#: What a mutation puts at a random place of a line.
INSERTS = ['"', "'", "$", "$(", "\\", "\t", "\r", "\u00e9", "\u3000", "\x00", "#", " ", ";", "|",
           "&", "(", ")", "{", "}", "=", "`", "/env", " # c", "A=", " B=2", "\u00ff", "\U0001f600"]
WRAPS = ["export ", "export -n ", "declare -x ", "readonly ", "ENV ", "RUN ", "$ ", "3: ", "> ",
         "env ", "  ", "\t"]


def _lines() -> list[str]:
    """Every line of the recorded scripts, TAKEN and LEFT, long ones, and mutated copies."""
    rng = random.Random(32)
    base = [line for path in sorted(DATA.glob("*.sh"))
            for line in path.read_text(encoding="utf-8").split("\n")]
    base += TAKEN + LEFT + SUBSTITUTIONS + ["A=" + "x" * 70_000, "export A=" + "x/" * 40_000 + " B=1",
                            " ".join(f"V{i}={i}" for i in range(70))]
    out = list(base)
    for _ in range(6000):
        line = rng.choice(base)[:300]
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(line))
            line = line[:at] + rng.choice(INSERTS) + line[at:]
        if rng.random() < 0.2:
            line = rng.choice(WRAPS) + line
        out.append(line)
    return out


LINES = _lines()


def _flat(ops: list) -> list[tuple[str, str, bool]]:
    """Ops as (name, value, whether it is expanded): chunks are cut anywhere between pairs."""
    out = []
    for op in ops:
        if len(op) == 2:
            out.append((op[0], op[1], True))
        else:
            assert op[1] == max(map(len, (v for _, v in op[0])))
            assert op[2] == sum(len(v) for _, v in op[0]) and op[3] == dict(op[0])
            out += [(name, value, False) for name, value in op[0]]
    return out


def _python_effect(text: str, memo: dict) -> tuple[list, int]:
    items = list(env_script_lines.logical_lines([text[:-1].split("\n")], memo, scan=False))
    (ops, unset), _ = _effect(items, False, memo, {})
    return _flat(ops), unset


def test_each_line_the_run_takes_reads_as_on_the_python_path() -> None:
    """env_run on each line (some hold line ends: continued commands, values over lines), with
    an empty memo and with the Python path's readings of them in the memo: the lines it takes
    give the same pairs (expanded or not) and unset count as the Python path gives them."""
    taken = 0
    for line in LINES:
        text = line + "\n"
        for memo in ({}, None):
            if memo is None:
                memo = {}
                _python_effect(text, memo)  # (fills the memo as parse_script would)
            stop, ops, unset = scan.env_run(text, 0, len(text), memo, 4096, 1024)
            if stop:  # (the lines up to stop: nothing is pending there)
                taken += 1
                assert text[stop - 1] == "\n"
                assert (_flat(ops), unset) == _python_effect(text[:stop], dict(memo)), repr(line)
    assert taken > len(LINES) // 2


@pytest.mark.parametrize("line", TAKEN)
def test_the_common_lines_are_taken_without_the_memo(line: str) -> None:
    text = line + "\n"
    assert scan.env_run(text, 0, len(text), {}, 0, 0)[0] == len(text)


def test_a_line_read_in_c_is_kept_in_the_memo_within_its_bounds() -> None:
    text = "mpirun -x A=1 prog\n"
    for lines, chars, kept in ((1, 1024, True), (0, 1024, False), (10, 5, False)):
        memo: dict = {}
        assert scan.env_run(text, 0, len(text), memo, lines, chars)[0] == len(text)
        assert memo == ({text[:-1]: (False, (("A", "1"),), True)} if kept else {})


@pytest.mark.parametrize("line", LEFT)
def test_the_other_lines_are_left_to_python(line: str) -> None:
    """Not taken without a reading of them in the memo (a prompt or a continuation: never)."""
    text = line + "\n"
    assert scan.env_run(text, 0, len(text), {}, 0, 0)[0] == 0
    if line.startswith("$ ") or line.endswith("\\"):
        assert scan.env_run(text, 0, len(text), {line: (False, (), False)}, 0, 0)[0] == 0


def _c_words(text: str) -> str:
    """How env_words read `text`: "lexed" (shell_words' words), "left" (None) or "raised"
    (ValueError, only where shell_words raises too)."""
    try:
        expected = shell_words(strip_comment(text))
    except ValueError:
        expected = None
    try:
        got = scan.env_words(text)
    except ValueError:
        assert expected is None, repr(text)
        return "raised"
    if got is None:
        return "left"
    assert got == expected, repr(text)
    return "lexed"


def test_the_c_lexer_splits_as_shell_words_or_leaves_the_text() -> None:
    assert sum(_c_words(line) == "lexed" for line in LINES) > 500
    assert scan.env_words("$(which mpirun) -x A=\"b c\" 'd e'") == [
        "$(which mpirun)", "-x", "A=b c", "d e"]
    assert scan.env_words("$(which mpirun) -x A=1") == ["$(which", "mpirun)", "-x", "A=1"]


#: Pieces of the texts below: quotes, `$(`, parentheses and `;&|` in every order, line ends.
_LEXER_PIECES = ["a", "b", "=", "A", "$(", ")", "(", '"', "'", " ", "\n", "\t", ";", "|", "&",
                 "x y", "$", "-x ", "echo ", "||"]


def test_the_c_lexer_raises_only_where_shell_words_does() -> None:
    """On 60,000 random texts of quotes, `$(`, parentheses, `;&|` and line ends: env_words
    gives shell_words' words, or None, or raises ValueError where shell_words raises (a value
    left open, whose next line is joined to it); it lexes and raises on thousands of them."""
    rng = random.Random(32)
    read = Counter(_c_words("".join(rng.choice(_LEXER_PIECES) for _ in range(rng.randint(0, 24))))
                   for _ in range(60_000))
    assert read["lexed"] > 5_000 and read["raised"] > 5_000


def test_a_value_over_several_lines_is_lexed_in_c_once_closed() -> None:
    """serve.sh's `NVSHMEM_LIB="$(python3 -c '...` over 4 lines: open (ValueError) until its
    last line, then one word, `$(...)` inside double quotes with its quotes, `(`, `||`."""
    lines = (DATA / "real_serve_sh_defaults_expansion_p5en.sh").read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("NVSHMEM_LIB="))
    for k in range(1, 4):
        with pytest.raises(ValueError):
            scan.env_words("\n".join(lines[start:start + k]))
    text = "\n".join(lines[start:start + 4])
    assert scan.env_words(text) == shell_words(text) == [text.replace('"', "", 1)[:-1]]
    assert scan.env_words("A=$(a (b) 'c)' \"d)\")") == ["A=$(a (b) 'c)' \"d)\")"]


def _shapes(text: str) -> tuple[env_shape.Shape, env_shape.Shape]:
    with_c = env_shape.shape_of(Input(text))
    with pytest.MonkeyPatch.context() as mp:
        python_path(mp)
        return with_c, env_shape.shape_of(Input(text))


def test_the_shape_of_each_line_is_the_python_paths() -> None:
    """env_shape_run passes over lines only as _shape_lines would count them: a script with
    each line between a flag list item and an assignment item (`- -x`, then the line, then
    `- A=1`: a YAML flag list where the line is nothing) has the same shape."""
    passed = 0
    for line in LINES:
        if "\n" in line:
            continue
        text = f"export Z=1\n- -x\n{line}\n- A=1\n{line}\n"
        with_c, without = _shapes(text)
        assert with_c == without, repr(line)
        passed += scan.env_shape_run(["export Z=1", line], 1)[0] == 2
    assert passed > len(LINES) // 2


def _script(rng: random.Random) -> str:
    """Lines of LINES, some continued with a backslash, some after a `$ env` prompt."""
    out = []
    for _ in range(rng.randint(1, 40)):
        line = rng.choice(LINES)[:400]
        roll = rng.random()
        if roll < 0.15:
            line += " \\"
        elif roll < 0.2:
            line = "$ env | grep NCCL" if roll < 0.18 else "$ echo"
        out.append(line)
    return "\n".join(out) + "\n"


def _read(batches: list[list[str]]) -> tuple[list[tuple[str, str]], int, int]:
    variables, skipped = parse_script(batches)
    return list(variables.items()), skipped, variables.dropped


def test_runs_of_lines_read_as_on_the_python_path() -> None:
    """parse_script over random scripts of these lines (continued commands joined in C or
    not, `env` output after a prompt, memos and segments on) reads the same with the C scan
    and without it; in one batch and in batches of 3 lines."""
    rng = random.Random(7)
    for _ in range(1500):
        lines = _script(rng)[:-1].split("\n")
        for size in (len(lines), 3):
            batches = [lines[i:i + size] for i in range(0, len(lines), size)]
            with_c = _read(batches)
            with pytest.MonkeyPatch.context() as mp:
                python_path(mp)
                assert _read(batches) == with_c, lines


def test_a_continued_command_is_joined_as_line_by_line() -> None:
    """env_join gives the command logical_lines joins line by line, and where it stopped."""
    text = "mpirun -x A=1 \\\n  -x B=\"2 3\" \\\n# a comment inside\n  prog\n"
    assert scan.env_join(text, 0, len(text)) is None  # (Docker drops it: the Python path)
    assert scan.env_join("a \\\nb", 0, 5) is None  # the text ends before the command does
    assert scan.env_join("a \\\\\nb\n", 0, 7) is None  # `\\`: no continuation
    joined = 0
    for line in LINES:
        text = f"{line} \\\n  -x B=1 \\\n  prog\nA=1\n"
        if "\n" in line or text.startswith("$ "):
            continue  # (logical_lines joins no prompted command in C)
        got = scan.env_join(text, 0, len(text))
        if got is None:
            continue
        joined += 1
        first = next(env_script_lines.logical_lines([text[:-1].split("\n")], {}, scan=False),
                     None)
        if first is not None and isinstance(first[2], list):  # (else an open quote: Python reads)
            assert got == (first[1], text.index("A=1\n")), repr(line)
    assert joined > len(LINES) // 2


@pytest.mark.parametrize("memo_lines", [0, 3, 4096])
def test_scripts_read_the_same_with_every_memo_bound(memo_lines: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The C run takes lines the memo holds: with a memo that holds none, a few, or all."""
    monkeypatch.setattr(env_script_lines, "MEMO_LINES", memo_lines)
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(DATA.glob("*.sh"))) * 3
    lines = text.split("\n")
    expected = _read([lines])
    python_path(monkeypatch)
    assert _read([lines]) == expected


#: The words _read_command and _prints_env look at, and words around them.
VOCABULARY = ["export", "declare", "typeset", "readonly", "local", "ENV", "RUN", "env",
              "/usr/bin/env", "x/env", "-x", "-e", "--env", "--env=A=1", "--env=", "--export=",
              "--export=ALL,A=1,B", "-a", "-ax", "-p", "-n", "A=1", "B=$C", "1A=2", "A-B=1", "=x",
              "", "|", ";", "&&", "||&", ";x", "set", "printenv", "prog", "A=1=2", "_=1",
              "a\x00-x", "\u00e9=1", "B", "ENV=1"]


def test_the_c_reading_is_the_python_reading() -> None:
    """env_reading(words) == _reading(words): the words of every line, and random lists of
    VOCABULARY (keywords, flags and assignments in every order)."""
    rng = random.Random(3)
    lists = []
    for line in LINES:
        try:
            lists.append(shell_words(strip_comment(line)))
        except ValueError:
            continue
    lists += [rng.choices(VOCABULARY, k=rng.randint(0, 8)) for _ in range(30000)]
    for words in lists:
        assert scan.env_reading(words) == _reading(words), words
    assert scan.env_reading(["mpirun", "-x", "A=1", "--export=ALL,B=2"]) == (
        False, (("A", "1"), ("B", "2")), True)


def test_a_run_after_env_output_is_read_again_on_the_python_path() -> None:
    """Lines after `$ env` are its output (values taken whole, quotes and all): a run the C
    scan read there is read again line by line; the prompt ends the run before it."""
    lines = ["A=1", "$ env | grep X", "X_A='x y'", "export X_B=2", "", "$ echo", "X_C='x y'"]
    variables, skipped = parse_script([lines])
    assert dict(variables) == {"A": "1", "X_A": "'x y'", "X_B": "2", "X_C": "x y"}
    with pytest.MonkeyPatch.context() as mp:
        python_path(mp)
        assert parse_script([lines]) == (variables, skipped)
    items = list(env_script_lines.logical_lines([lines], {}))
    assert [type(words).__name__ for _, _, words in items] == ["Run", "list", "Run", "list", "Run"]


def test_preflight_env_no_c_switches_the_c_scans_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """PREFLIGHT_ENV_NO_C=1: no Run item, no C shape pass (the Python path, read the same);
    a malformed value is a SettingError naming the variable, where a reading starts."""
    lines = ["export A=1", "B=2 C=3", "mpirun -x D=4 prog"]
    assert {type(w).__name__ for _, _, w in env_script_lines.logical_lines([lines], {})} == {"Run"}
    expected = _read([lines])
    monkeypatch.setenv("PREFLIGHT_ENV_NO_C", "1")
    assert "Run" not in {type(w).__name__ for _, _, w in env_script_lines.logical_lines([lines], {})}
    calls: list[int] = []
    monkeypatch.setattr(env_shape, "SHAPE_RUN", lambda batch, i: calls.append(i) or (i, 0))
    env_shape.shape_of(Input("export A=1\n" * 10))
    assert not calls and _read([lines]) == expected
    monkeypatch.setenv("PREFLIGHT_ENV_NO_C", "0")
    env_shape.shape_of(Input("export A=1\n" * 10))
    assert calls
    monkeypatch.setenv("PREFLIGHT_ENV_NO_C", "maybe")
    with pytest.raises(SettingError, match="PREFLIGHT_ENV_NO_C"):
        _read([lines])
