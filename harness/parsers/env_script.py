"""Shell scripts as environment dumps: sbatch/launch scripts, `export`, `declare -x`, `env VAR=x
cmd`, mpirun `-x`, docker `-e`, srun `--export=`, Dockerfile `ENV`; and the bounded variable store
every form of harness.parsers.env fills."""

from __future__ import annotations

import re
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from itertools import repeat

from harness.parsers.reader import MAX_LINE_CHARS
from harness.parsers.shell_words import shell_words as _shell_words
from harness.parsers.shell_words import strip_comment as _strip_comment

__all__ = ["FLAG_WORDS", "MAX_TOTAL_CHARS", "MAX_VALUE_CHARS", "MAX_VARIABLES", "Variables",
           "parse_script"]

VAR_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
IS_NAME = re.compile(rf"{VAR_NAME}\Z")
ASSIGN = re.compile(rf"^(?P<name>{VAR_NAME})=(?P<value>.*)$", re.S)
# A line whose quoted value may run on: `NAME="...`, `export NAME='...`, `declare -x NAME="...`.
_OPENS_VALUE = re.compile(rf"^\s*(?:(?:export|declare\s+-x|typeset\s+-x|ENV)\s+)?{VAR_NAME}=[\"']")
# `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:=default}`, `$NAME`.
_PARAM = re.compile(rf"\$\{{(?P<name>{VAR_NAME})(?:(?P<op>:?[-=])(?P<default>[^{{}}]*))?\}}"
                    rf"|\$(?P<bare>{VAR_NAME})")
_SHELL_DECLARE = frozenset({"export", "declare", "typeset", "readonly", "local", "ENV"})
#: Launcher flags whose next word is an assignment: mpirun `-x`, docker `-e` / `--env`.
FLAG_WORDS = frozenset({"-x", "-e", "--env"})
#: A quoted value may run over this many lines before the rest is taken as broken input.
_MAX_VALUE_LINES = 50

#: Bounds that keep memory flat on any input. No real environment comes near them: an execve
#: string is at most MAX_ARG_STRLEN = 128 KiB (linux include/uapi/linux/binfmts.h) and the whole
#: environment at most a quarter of the stack limit (fs/exec.c); a dump past them is a flood.
MAX_VARIABLES = 100_000
MAX_VALUE_CHARS = MAX_LINE_CHARS
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
        if (longest > MAX_VALUE_CHARS or len(self) + len(pairs) > MAX_VARIABLES
                or self.total + chars > MAX_TOTAL_CHARS):
            for name, value in pairs:
                self.put(name, value)
            return
        if new is None:
            new = dict(pairs)  # the last value of each name, in the order names first come
        old = sum(map(len, map(self.get, new, repeat(""))))
        self.update(new)
        self.total += sum(map(len, new.values())) - old


#: Backslash-continued lines joined into one command at most (a Dockerfile RUN has tens).
_MAX_CONTINUED_LINES = 1000


#: A line that is no command when nothing is pending: blank or a comment (one that does not end
#: in a backslash, which _logical_lines reads as a continuation).
_NOOP_LINE = re.compile(r"[ \t]*(?:#.*)?", re.S)


#: A run of lines that need no lexer, each ending in `\n`: blank lines, comments (not ending in
#: a backslash) and plain `NAME=value` / `export NAME=value` lines (a value without blanks,
#: quotes, escapes, `;&|`, `#` or parentheses, so its one shell word is the text itself; a
#: comment may follow). One match takes the run (most of a script), where the per-line state
#: machine below costs ~5 us a line.
_PLAIN_VALUE = r"[^\s\"'\\;&|#()]*"
_END = r"(?:#[^\n]*(?<!\\))?\n"  # an optional comment, not a continuation, and the line end
_QUICK = re.compile(rf"(?:[ \t]*{_END}|[ \t]*(?:export[ \t]+)?{VAR_NAME}={_PLAIN_VALUE}"
                    rf"(?:[ \t]+{_END}|\n))+")
_QUICK_ASSIGN = re.compile(rf"^[ \t]*(?:export[ \t]+)?({VAR_NAME})=({_PLAIN_VALUE})", re.M)


#: Distinct command lines whose reading parse_script keeps, and the longest kept. A script's
#: lines recur through a log that holds it many times (the 20 MB bench input reads each of its
#: commands ~2,000 times); each is lexed and read once, its assignments then replayed in order.
#: Past the bound a line is read as before: the memo stays small on any input.
_MEMO_LINES = 4096
_MEMO_CHARS = 4096


#: Lines joined into one text for _QUICK at a time (a batch is a chunk's lines, ~25k): the
#: joined text and a run in it are the only copies, kept small.
_BLOCK_LINES = 1024


def _logical_lines(batches: Iterable[list[str]], known: Container[str] = ()
                   ) -> Iterator[tuple[bool, str, list[str] | tuple[str] | slice | None]]:
    """(after a `$ ` prompt, text, shell words) per command: backslash continuations joined,
    comments dropped, and a quoted value that spans lines (`declare -x A="x<newline>y"`) kept
    whole (up to _MAX_VALUE_LINES lines and MAX_VALUE_CHARS characters). What is still pending
    when the input ends is dropped, as a shell would never run it. A run of _QUICK lines (when
    nothing is pending) comes as one item, (False, the text it is in, its slice of it). A
    command in `known` (parse_script's memo: lexed before) comes unlexed, with None for its
    words; text that is no command (an unclosed quote) comes as (text,)."""
    parts: list[str] = []  # the pending command's pieces
    size = 0
    joined = 0  # lines in the pending command
    newlines = 0  # ... joined at an open quote (the value's own line breaks)
    open_quote = False  # pending because a quote is open (lexing again needs a new quote)
    new_quote = False  # a quote character came since the last failed attempt
    continued = False  # pending ends in a backslash continuation
    prompted = False
    unlexed: set[str] = set()  # texts that failed to lex (a value's first lines), bounded

    def lex(text: str) -> list[str] | None:
        """The words of `text`, None when `known` holds it; ValueError where it cannot be lexed."""
        if text in known:
            return None
        if text in unlexed:
            raise ValueError("not closed")
        try:
            return _shell_words(_strip_comment(text))
        except ValueError:
            if len(unlexed) < _MEMO_LINES and len(text) <= _MEMO_CHARS:
                unlexed.add(text)
            raise

    for batch in batches:
        for first in range(0, len(batch), _BLOCK_LINES):
            block = "\n".join(batch[first:first + _BLOCK_LINES]) + "\n"
            pos, end = 0, len(block)
            while pos < end:
                if not parts and (m := _QUICK.match(block, pos)):
                    yield False, block, slice(pos, m.end())
                    pos = m.end()
                    if pos == end:
                        break
                nl = block.index("\n", pos)
                line, pos = block[pos:nl], nl + 1
                if not parts:
                    if (not line or line[0] in " \t#") and _NOOP_LINE.fullmatch(line) and line[-1:] != "\\":
                        continue  # blank or a comment, nothing pending: no command (most of a script)
                    prompted = line.startswith("$ ")  # a pasted terminal prompt
                    line = line[2:] if prompted else line
                    if line[-1:] != "\\":  # a command on one line (an open quote: read on below)
                        try:
                            words = lex(line)
                        except ValueError:
                            pass
                        else:
                            yield prompted, line, words
                            continue
                elif continued and line.lstrip().startswith("#"):
                    continue  # Docker drops comment lines inside a continued instruction
                new_quote = new_quote or "'" in line or '"' in line or ")" in line  # `)`: ends a $(
                room = size + len(line) < MAX_VALUE_CHARS and joined < _MAX_CONTINUED_LINES
                continued = line.endswith("\\") and not line.endswith("\\\\") and room
                if continued:
                    parts.append(line[:-1] + " ")
                    size, joined = size + len(line), joined + 1
                    continue
                parts.append(line)
                text = "".join(parts)
                try:
                    if open_quote and not new_quote:
                        raise ValueError("the open quote is still open")  # lexing again cannot close it
                    words = lex(text)
                except ValueError:  # an unclosed quote: a value that goes on in the next line, or prose
                    if room and (len(parts) > 1 or _OPENS_VALUE.match(text)) and newlines < _MAX_VALUE_LINES:
                        parts = [text + "\n"]
                        size, joined, newlines = len(text) + 1, joined + 1, newlines + 1
                        open_quote, new_quote = True, False
                        continue
                    parts, size, joined, newlines, open_quote, new_quote = [], 0, 0, 0, False, False
                    yield prompted, text, (text,)  # not a command: counted as skipped
                    continue
                parts, size, joined, newlines, open_quote, new_quote = [], 0, 0, 0, False, False
                yield prompted, text, words


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


def _expand(value: str, variables: dict[str, str]) -> str:
    """Shell parameter expansion as far as the dump tells: `${A:-default}` is A's value or the
    default, `$A` / `${A}` is A's value when the script set it, else left as written. The result
    stops at MAX_VALUE_CHARS (`A=$A$A` lines would double it each time)."""
    if "$" not in value:
        return value
    out: list[str] = []
    size = 0
    pos = 0
    for m in _PARAM.finditer(value):
        name = m["name"] or m["bare"]
        known = variables.get(name)
        if m["op"] is None:
            piece = m.group(0) if known is None else known
        elif known is None or (m["op"].startswith(":") and not known):
            piece = _expand(m["default"], variables)
        else:
            piece = known
        out += [value[pos:m.start()], piece]
        size += m.start() - pos + len(piece)
        pos = m.end()
        if size >= MAX_VALUE_CHARS:
            return "".join(out)[:MAX_VALUE_CHARS]
    out.append(value[pos:])
    return "".join(out)[:MAX_VALUE_CHARS]


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
    for command in _commands(words) if any(w[:1] in _PUNCTUATION for w in words) else (words,):
        found |= _read_command(command, add)
    return prints, tuple(pairs), found


#: A _QUICK run's assignments in order, (name, value as written), and dict(them) where no
#: value has a `$` to expand (so that they can be taken in one update).
_Run = tuple[list[tuple[str, str]], dict[str, str] | None]


def _run(text: str) -> _Run:
    pairs = _QUICK_ASSIGN.findall(text)
    return pairs, None if "$" in text else dict(pairs)


def parse_script(batches: Iterable[list[str]]) -> tuple[Variables, int]:
    """The variables a shell script sets, and the count of commands that set none, from its
    lines in batches (Input.batches)."""
    variables = Variables()
    put = variables.put
    skipped = 0
    memo: dict[str, _Reading] = {}  # command line -> its reading (see _MEMO_LINES)
    runs: dict[str, _Run] = {}  # a _QUICK run's text -> its assignments (bounded as memo)

    env_output = False  # lines after `$ env | grep NCCL` are its output, values taken whole
    for prompted, text, words in _logical_lines(batches, memo):
        if isinstance(words, slice):  # a _QUICK run: one word per assignment, the value as is
            if not env_output:
                run_text = text[words.start:words.stop]
                run = runs.get(run_text)
                if run is None:
                    run = _run(run_text)
                    if len(runs) < _MEMO_LINES and len(run_text) <= _MEMO_CHARS:
                        runs[run_text] = run
                pairs, new = run
                if new is not None:  # nothing to expand
                    variables.put_all(pairs, len(run_text), len(run_text), new)
                    continue
                for name, value in pairs:
                    put(name, _expand(value, variables) if "$" in value else value)
                continue
            for line in text[words.start:words.stop - 1].split("\n"):
                if m := ASSIGN.match(line):
                    put(m["name"], m["value"])  # `env` output: the value taken whole
                elif m := _QUICK_ASSIGN.match(line):
                    put(m[1], _expand(m[2], variables))
            continue
        if words is None:  # lexed before: read before
            reading = memo[text]
        elif isinstance(words, tuple):  # no command (an unclosed quote): its text as one word
            reading = _reading(list(words))
        else:
            reading = _reading(words)
            if len(memo) < _MEMO_LINES and len(text) <= _MEMO_CHARS:
                memo[text] = reading
        prints, pairs, found = reading
        if prompted:
            env_output = prints
        elif env_output and (m := ASSIGN.match(text)):
            put(m["name"], m["value"])
            continue
        if pairs is None:
            continue
        for name, value in pairs:
            put(name, _expand(value, variables) if "$" in value else value)
        if not found:
            skipped += 1
    return variables, skipped


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
