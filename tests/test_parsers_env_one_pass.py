"""env's one-pass script reading (issue 32 item 3): a plain script is read in the format pass
itself; where the input turns out otherwise further on (a NUL, a YAML line, rank prefixes on
most lines, a timestamp to take off), it is read again as the whole input's shape says. Each
reading is held to the two-pass one (the one-pass path switched off)."""

from __future__ import annotations

import pytest

from harness.parsers import ParseError, env
from harness.parsers.reader import Input

SCRIPT = "#!/bin/bash\nexport NCCL_DEBUG=INFO\nA=1\nmpirun -x B=$A \\\n  prog\n\n"
TAILS = {
    "none": "",
    "nul": "C=3\0D=4\0",
    "yaml": "env:\n- name: E\n  value: \"5\"\n",
    "timestamp": "2024-06-25T18:45:27.123Z export F=6\n",
    "ranks": "".join(f"[1,0]<stdout>:export G{i}=7\n" for i in range(40)),
    "a few ranks": "[1,0]<stdout>:export H=8\n",
    "json-like start": "",
}


def _read(text: str, chunk: int | None) -> object:
    try:
        dump = env.parse_env_dump(Input(text, chunk=chunk))
    except ParseError as exc:
        return str(exc)
    return dump.format, list(dump.variables.items()), dump.skipped, dump.dropped


@pytest.mark.parametrize("chunk", [None, 61])
@pytest.mark.parametrize("tail", list(TAILS))
def test_one_pass_reads_as_two(tail: str, chunk: int | None,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    text = SCRIPT * 20 + TAILS[tail] + SCRIPT
    if tail == "json-like start":
        text = "{" + text
    one = _read(text, chunk)
    monkeypatch.setattr(env, "plain_script", lambda shape: False)
    assert one == _read(text, chunk)


def test_one_pass_is_the_path_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain script's input is read once (else the test above compares a path with itself);
    one that turns out tagged is read twice."""
    reads: list[int] = []
    batches = Input.batches

    def counted(self: Input, sep: str | None = None):  # type: ignore[no-untyped-def]
        reads.append(1)
        return batches(self, sep)

    monkeypatch.setattr(Input, "batches", counted)
    assert env.parse_env_dump(SCRIPT * 20).format == "script"
    assert len(reads) == 1
    reads.clear()
    env.parse_env_dump(SCRIPT + TAILS["ranks"] * 3)
    assert len(reads) == 2
