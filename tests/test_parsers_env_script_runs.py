"""The env script reader's run path (issue 32 item 3): blank, comment and plain `NAME=value` /
`export NAME=value` lines taken by one regex match per run read as the per-line lexer read them.
Expected values are what the reader before the run path (main at 781bf42) returned for each
input; tests/test_parsers_env_equivalence.py holds the same for every recorded file."""

from __future__ import annotations

import pytest

from harness.parsers.env import parse_env_dump
from harness.parsers.env_script_lines import logical_lines

CASES = [
    # after `$ env`, a line is `env` output: its value taken whole, `#` and `$` included
    ("$ env | grep NCCL\nNCCL_DEBUG=INFO # not a comment in env output\n  NCCL_ALGO=$NCCL_DEBUG\n"
     "export NCCL_PROTO=x\n# c\n",
     {"NCCL_DEBUG": "INFO # not a comment in env output",
      "NCCL_ALGO": "INFO # not a comment in env output", "NCCL_PROTO": "x"}, 1),
    # a comment ending in a backslash continues into the next line (which it swallows)
    ("export A=1\n# a comment that continues \\\nB=2\nC=3\n", {"A": "1", "C": "3"}, 0),
    # `#` inside a word is no comment; after a blank it is; expansion of earlier values
    ("export A=b#c\nB=x # y\nC=$A:$B\nexport D=${C:-z}\n",
     {"A": "b#c", "B": "x", "C": "b#c:x", "D": "b#c:x"}, 0),
    ("export P=/a\nP=$P:/b\n\nP=${P}:/c\n", {"P": "/a:/b:/c"}, 0),
    # a continued launcher command between runs
    ("#!/bin/bash\nA=1\nmpirun -x B=2 \\\n  -x C=3 \\\n  prog\nD=4\n",
     {"A": "1", "B": "2", "C": "3", "D": "4"}, 0),
    # parentheses and quotes go to the lexer
    ("export A=1\nA=(x y)\nB=\"q\"\n", {"A": "(x", "B": "q"}, 0),
]


@pytest.mark.parametrize(("text", "variables", "skipped"), CASES)
def test_runs_read_as_the_lexer_read_them(text: str, variables: dict[str, str],
                                          skipped: int) -> None:
    dump = parse_env_dump(text)
    assert (dump.format, dump.variables, dump.skipped) == ("script", variables, skipped)


def test_plain_lines_are_taken_as_runs() -> None:
    """The run path is the one taken (else the cases above test only the lexer): plain lines
    come as slices, a quoted one as words."""
    items = list(logical_lines([["# c", "export A=1", "", "B=$A # x", 'C="q"', "D=2"]]))
    kinds = [type(words).__name__ for _, _, words in items]
    assert kinds == ["slice", "list", "slice"]
    assert items[0][1][items[0][2]] == "# c\nexport A=1\n\nB=$A # x\n"
