"""Shell scripts as environment dumps: sbatch/launch scripts, `export`, `declare -x`, `env VAR=x
cmd`, mpirun `-x`, docker `-e`, srun `--export=`, Dockerfile `ENV`; and the bounded variable store
every form of harness.parsers.env fills."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat

from harness.parsers import env_script_lines as script_lines
from harness.parsers.env_expand import Expansion, Joined, expanded, joined_text
from harness.parsers.env_script_lines import QUICK_ASSIGN, VAR_NAME, Item, Run, Segment, logical_lines
from harness.parsers.reader import MAX_LINE_CHARS

__all__ = ["FLAG_WORDS", "MAX_TOTAL_CHARS", "MAX_VALUE_CHARS", "MAX_VARIABLES", "Variables",
           "parse_script"]

IS_NAME = re.compile(rf"{VAR_NAME}\Z")
ASSIGN = re.compile(rf"^(?P<name>{VAR_NAME})=(?P<value>.*)$", re.S)
_SHELL_DECLARE = frozenset({"export", "declare", "typeset", "readonly", "local", "ENV"})
#: Launcher flags whose next word is an assignment: mpirun `-x`, docker `-e` / `--env`.
FLAG_WORDS = frozenset({"-x", "-e", "--env"})

#: Bounds that keep memory flat on any input. No real environment comes near them: an execve
#: string is at most MAX_ARG_STRLEN = 128 KiB (linux include/uapi/linux/binfmts.h) and the whole
#: environment at most a quarter of the stack limit (fs/exec.c); a dump past them is a flood.
MAX_VARIABLES = 100_000
MAX_VALUE_CHARS = MAX_LINE_CHARS  # (env_expand cuts an expansion there too)
MAX_TOTAL_CHARS = 64 << 20


class Variables(dict[str, str]):
    """The variables read so far, bounded: `put` refuses what would pass the limits."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0
        self.dropped = 0

    def put(self, name: str, value: str) -> None:
        if len(value) > MAX_VALUE_CHARS:
            value = value[:MAX_VALUE_CHARS]
        old = self.get(name)
        grow = len(value) - (0 if old is None else len(old))
        if (old is None and len(self) >= MAX_VARIABLES) or (
                grow > 0 and self.total + grow > MAX_TOTAL_CHARS):
            self.dropped += 1
            return
        self[name] = value
        self.total += grow

    def put_all(self, pairs: Sequence[tuple[str, str]], longest: int, chars: int,
                new: dict[str, str] | None = None) -> None:
        """put() each pair in order. `longest` and `chars` bound a value's and all values'
        length: where no put could be refused or cut, the pairs are taken in one update (of
        `new`, dict(pairs), where the caller has it)."""
        if not self.fits(len(pairs), longest, chars):
            for name, value in pairs:
                self.put(name, value)
            return
        self.take(dict(pairs) if new is None else new)  # each name's last value, in first order

    def fits(self, count: int, longest: int, chars: int) -> bool:
        """No put() of `count` pairs, none longer than `longest`, `chars` in all, could be refused
        or cut."""
        return not (longest > MAX_VALUE_CHARS or len(self) + count > MAX_VARIABLES
                    or self.total + chars > MAX_TOTAL_CHARS)

    def take(self, new: dict[str, str]) -> None:
        """put() each of `new`'s items, in one update, where fits() said none could be refused."""
        old = sum(map(len, map(self.get, new, repeat(""))))
        self.update(new)
        self.total += sum(map(len, new.values())) - old


_PUNCTUATION = frozenset(";&|")
def _commands(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a command line (split at `;`, `&&`, `||`, `|`, `&`)."""
    if not any(w[:1] in _PUNCTUATION for w in words):
        if words:
            yield words
        return
    start = 0
    for i, word in enumerate([*words, ";"]):
        if word and set(word) <= set(";&|"):
            if i > start:
                yield words[start:i]
            start = i + 1


def _prints_env(words: list[str]) -> bool:
    """`env`, `printenv`, `env | grep NCCL`, `export -p`: a command whose output is `env` output."""
    head = words[: words.index("|")] if "|" in words else words
    return bool(head) and ((head[0] in ("env", "printenv") and not any("=" in w for w in head))
                           or head in (["export", "-p"], ["declare", "-x"], ["set"]))


#: What reading one command line tells, apart from the variables it is read against: whether
#: it prints the environment (`env | grep NCCL` after a prompt), and None for a line that sets
#: nothing by design (a Dockerfile `RUN`, no words), else its assignments in order, as
#: (name, value as written), and whether it had any.
_Reading = tuple[bool, tuple[tuple[str, str], ...] | None, bool]


def _reading(words: list[str]) -> _Reading:
    """The reading of a command line's words (what parse_script's loop does with them, but
    for the expansion and the store, which depend on the variables read before it)."""
    prints = _prints_env(words)
    if words[:1] == ["RUN"] or not words:  # a Dockerfile build step: not the image's env
        return prints, None, False
    pairs: list[tuple[str, str]] = []

    def add(word: str) -> bool:
        name, sep, value = word.partition("=")
        if not sep or not IS_NAME.match(name):
            return False
        pairs.append((name, value))
        return True

    found = False
    # one simple command (a `;`, `&` or `|` word comes from one of these characters) or several
    joined = "\0".join(words)  # (no `;&|` in it: no word starts with one, the common case)
    several = ("&" in joined or ";" in joined or "|" in joined) and any(
        w[:1] in _PUNCTUATION for w in words)
    for command in _commands(words) if several else (words,):
        found |= _read_command(command, add)
    return prints, tuple(pairs), found


#: A _QUICK run's assignments in order, (name, value as written).
_Run = list[tuple[str, str]]

#: What items of logical_lines do to the variables, given whether they follow `env` output:
#: in order, (name, value) to expand and store, or a chunk of values to store as they are,
#: (pairs, longest value, all values' characters, dict(pairs)) for Variables.put_all; and the
#: count of commands that set nothing.
_Chunk = tuple[list[tuple[str, str]], int, int, dict[str, str]]
_Effect = tuple[list["tuple[str, str] | _Chunk"], int]


def parse_script(batches: Iterable[list[str]]) -> tuple[Variables, int]:
    """The variables a shell script sets, and the count of commands that set none, from its
    lines in batches (Input.batches)."""
    variables = Variables()
    put = variables.put
    skipped = 0
    memo: dict[str, _Reading] = {}  # command line -> its reading (see script_lines.MEMO_LINES)
    runs: dict[str, _Run] = {}  # a _QUICK run's text -> its assignments (bounded as memo)
    env_output = False  # lines after `$ env | grep NCCL` are its output, values taken whole
    expansions: dict[str, Expansion] = {}  # see env_expand.expanded
    expand = expanded
    read = script_lines.ENV_READING if script_lines.c_scans() else None
    for item in logical_lines(batches, memo, {}):
        words = item[2]
        if type(words) is Run and not env_output:  # common lines the C scan read
            skipped += words.unset
            for op in words.ops:
                if len(op) == 2:
                    put(op[0], expand(op[1], variables, expansions))
                else:
                    variables.put_all(*op)
            continue
        if isinstance(words, Segment):  # a segment read before: no prompt in it
            effect = words.effects.get(env_output)
            if effect is None:
                effect = words.effects[env_output] = _effect(words.items, env_output, memo, runs,
                                                               read)[0]
        else:
            effect, env_output = _effect((item,), env_output, memo, runs, read)
        ops, unset = effect
        skipped += unset
        for op in ops:
            if len(op) == 2:
                put(op[0], expand(op[1], variables, expansions))  # a (name, value) to expand
            else:
                variables.put_all(*op)  # a _Chunk
    for name, value in variables.items():
        if isinstance(value, Joined):
            variables[name] = joined_text(value)  # (the same length: Variables.total holds)
    return variables, skipped


def _effect(items: Iterable[Item], env_output: bool, memo: dict[str, _Reading],
            runs: dict[str, _Run], read: Callable[[list[str]], _Reading] | None = None
            ) -> tuple[_Effect, bool]:
    """What `items` do after `env_output` (parse_script's loop, but for the store and the
    expansion, which depend on the variables), and whether env output follows them. Lines and
    runs read before are taken from `memo` and `runs`; new ones are kept there (bounded). `read`:
    how a command's words are read (the C port of _reading, ENV_READING), None: _reading."""
    read = read or _reading
    out: list[tuple[str, str, bool]] = []
    ops: list[tuple[str, str] | _Chunk] = []
    unset = 0
    for prompted, text, words in items:
        if type(words) is Run:  # the C scan's: its ops where no env output is read, else ...
            if env_output:  # ... its lines again, on the Python path (no prompt among them)
                lines = logical_lines([words.text[:-1].split("\n")], memo, scan=False)
                (more, more_unset), _ = _effect(lines, env_output, memo, runs, read)
            else:
                more, more_unset = words.ops, words.unset
            _to_ops(out, ops)
            ops += more
            unset += more_unset
            continue
        if isinstance(words, slice):  # a _QUICK run: one word per assignment, the value as is
            if not env_output:
                run = runs.get(text)
                if run is None:
                    run = script_lines.QUICK_ASSIGNS.findall("\n" + text)
                    if len(runs) < script_lines.MEMO_LINES and len(text) <= script_lines.MEMO_CHARS:
                        runs[text] = run
                out += [(name, value, True) for name, value in run]
                continue
            for line in text[:-1].split("\n"):
                if m := ASSIGN.match(line):
                    out.append((m["name"], m["value"], False))  # `env` output: taken whole
                elif m := QUICK_ASSIGN.match(line):
                    out.append((m[1], m[2], True))
            continue
        if words is None:  # lexed before: read before
            reading = memo[text]
        elif isinstance(words, tuple):  # no command (an unclosed quote): its text as one word
            reading = read(list(words))
        else:
            reading = read(words)
            if len(memo) < script_lines.MEMO_LINES and len(text) <= script_lines.MEMO_CHARS:
                memo[text] = reading
        prints, pairs, found = reading
        if prompted:
            env_output = prints
        elif env_output and (m := ASSIGN.match(text)):
            out.append((m["name"], m["value"], False))
            continue
        if pairs is None:
            continue
        out += [(name, value, True) for name, value in pairs]
        if not found:
            unset += 1
    _to_ops(out, ops)
    return (ops, unset), env_output


def _to_ops(out: list[tuple[str, str, bool]], ops: list[tuple[str, str] | _Chunk]) -> None:
    """`out`'s (name, value, whether to expand) as ops after `ops`: a (name, value) to expand
    where the value holds `$`, else chunks of values stored as they are; `out` emptied."""
    plain: list[tuple[str, str]] = []  # values to store as they are, since the last expansion
    for name, value, expand in out:
        if expand and "$" in value:
            if plain:
                ops.append(_chunk(plain))
                plain = []
            ops.append((name, value))
        else:
            plain.append((name, value))
    if plain:
        ops.append(_chunk(plain))
    out.clear()


def _chunk(pairs: list[tuple[str, str]]) -> _Chunk:
    lengths = [len(value) for _, value in pairs]
    return pairs, max(lengths), sum(lengths), dict(pairs)


#: Where a word of _read_command's second loop is (its words joined with NULs around each).
_FLAG_WORD = re.compile(r"\0(?:-x\0|-e\0|--env[\0=]|--export=|env\0)|/env\0")


def _read_command(words: list[str], add: Callable[[str], bool]) -> bool:
    """Record the assignments of one simple command through `add`; whether there were any."""
    found = False
    i = 0
    # `VAR=x VAR2=y cmd`, `env VAR=x cmd`, `export VAR=x`, `declare -x VAR=x`, `ENV VAR=x`
    while i < len(words):
        word = words[i]
        if word == "ENV" and len(words) - i >= 3 and "=" not in words[i + 1]:
            # legacy Dockerfile `ENV NAME value`
            return add(f"{words[i + 1]}={' '.join(words[i + 2:])}")
        if word in _SHELL_DECLARE:
            j = i + 1
            while j < len(words) and words[j].startswith("-") and "=" not in words[j]:
                j += 1  # the options right after the keyword
            flags = words[i + 1:j]
            if word in ("declare", "typeset", "local") and not any("x" in f for f in flags):
                break  # not exported (arrays, locals)
            i = j
            continue
        if word == "env":
            i += 1
            continue
        if not add(word):
            break
        found = True
        i += 1
    # launcher flags anywhere in the command: mpirun -x, docker -e/--env, srun --export=
    # (first one search for any of them over the command's words: most commands have none)
    if not _FLAG_WORD.search("\0".join(["", *words, ""])):
        return found
    for j, word in enumerate(words):
        if word[:1] != "-" and not word.endswith("env"):
            continue  # (most words: each branch below reads a `-` flag or an `env`)
        if word in FLAG_WORDS and j + 1 < len(words):
            found |= add(words[j + 1])
        elif j and (word == "env" or word.endswith("/env")):
            # `env NAME=value prog` as a launcher's program (`mpirun -np 1 /usr/bin/env A=1
            # prog : -np 1 ...`, `srun env A=1 prog`): the assignments right after it.
            for assignment in words[j + 1:]:
                if not add(assignment):
                    break
                found = True
        elif word.startswith("--env="):
            found |= add(word.split("=", 1)[1])
        elif word.startswith("--export="):
            for item in word.split("=", 1)[1].split(","):
                found |= add(item)
    return found
