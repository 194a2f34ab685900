"""Which lines of a reader's batch may carry a wrapper: one regex pass over the batch joined by
`\n` (harness.parsers.unwrap.Unwrapper.lines and .candidates use it; the lines it does not
match are their own text and skip every per-line rule).
"""

from __future__ import annotations

import functools
import re

from harness.parsers.unwrap_commands import KNOWN_PROGRAMS, PROMPTED_PROGRAMS

__all__ = ["candidates"]


#: Where a line ends, as `candidates` sees it (a line of a batch cannot hold `\n`).
_END = r"(?=[^\S\n]|\n|\Z)"
#: A command line's start, as `command_program` reads it: assignments, a path, a known program.
_COMMAND = (r"(?:[A-Za-z_]\w*+=\S*+[^\S\n]++)*+!?(?:[^\s/]*+/)*+!?(?:(?:"
            + "|".join(sorted(map(re.escape, KNOWN_PROGRAMS | PROMPTED_PROGRAMS), key=len,
                              reverse=True))
            + rf"){_END}|[^\s/]*+(?:(?<=_perf)|(?<=_perf_mpi)){_END})")


@functools.cache  # compiled on first use: a session that unwraps nothing pays none (~35 ms for all 8)
def candidates(timestamps: bool, host_prefix: bool, comments: bool) -> re.Pattern[str]:
    """A line (after `\\n`) that some rule of `Unwrapper._strip_once` may change: a superset of
    the rules' first wrappers, each written so that sre never backtracks into a word
    (possessive), run once over a whole batch joined by `\\n`: the lines between matches are
    handed on as they are (the fast path: no per-line Python work). Kept in step with the rules
    (harness.parsers.unwrap): a rule added there needs its first characters here
    (tests/test_parsers_unwrap.py unwraps every recorded sample both ways and compares).

    The rules are split by the line's first character: a line starting with a letter (most
    lines of most tools: `Product Name : ...`, `provider: efa`) tries only the rules that can
    start with one, and a command only where its first word can be one (a capitalised word is
    a program only with a path or an assignment in it, `FOO=1 cmd`, `Build/x_perf`, or as an
    nccl-tests binary's name, `X_perf`: every known program's name is lower case)."""
    iso = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]"
    word_rules = [r"[\w.-]++@", _COMMAND]  # `user@host$ cmd`, `FOO=1 cmd`, `srun ...`
    host = [r"[A-Za-z][\w.-]*+:(?=\s)"] if host_prefix else []
    # A capitalised first word is one of word_rules' only with `=`, `/` or `@` in it, or as an
    # nccl-tests binary's name (`X_perf`): one scan of the word rules out the rest.
    upper = [r"[A-Z][a-z]{2}[ ][A-Z][a-z]{2}[ ][ 0-9][0-9][ ][0-9:]{8}[ ][0-9]{4}\[",
             r"Warning:[ ]Permanently",
             r"(?=[^\s=/@]*+(?:[=/@]|(?<=_perf)|(?<=_perf_mpi)))(?:" + "|".join(word_rules) + ")",
             *host]
    lower = [*word_rules, *host]
    other = [
        r'\{"log":', r"[0-9]++:[ ]", r"\[(?:pod/|[0-9]++,[0-9]++\]<std)",
        r"```", r"~~~", r">(?=[ \n]|\Z)",
        r"(?:\.\.\.|…)(?=\s|\Z)", r"`", rf"[#+][^\S\n]++{_COMMAND}", r"\([\w.-]++\)",
        r"(?:#++|//|>)[ \t]*+[|+]",
        r"➜", r"[$%]", *word_rules, rf"\[{iso}", r"\|[^\S\n]*+[0-9]",
    ]
    if timestamps:
        other.append(iso)
    if comments:
        other.append(r"(?:\#|//)")
    # Every rule ends before the line's `\n` (lookaheads): the next line's match starts there.
    # (`[ ]*+` first: sre runs a one-character repeat in a tight C loop; the indentation's
    # other blanks, if any, are then taken by `[^\S\n]*+`, as before.)
    return re.compile(r"\n[ ]*+[^\S\n]*+(?:(?=[A-Z])(?:" + "|".join(upper) + ")|(?=[a-z])(?:"
                      + "|".join(lower) + ")|(?![A-Za-z])(?:" + "|".join(other) + "))")

