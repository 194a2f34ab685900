"""Environment dump parser: the formats people paste."""

from __future__ import annotations

import pytest

from harness.parsers import ParseError
from harness.parsers.env import parse_env_dump


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NCCL_DEBUG=INFO\nFI_PROVIDER=efa\n", {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa"}),
        ("NCCL_DEBUG=INFO\r\nEMPTY=\r\n", {"NCCL_DEBUG": "INFO", "EMPTY": ""}),
        ("NCCL_DEBUG=INFO\0MULTI=a\nb\0", {"NCCL_DEBUG": "INFO", "MULTI": "a\nb"}),
        ('declare -x FI_PROVIDER="efa"\ndeclare -x OLDPWD\ndeclare -x Q="a \\"b\\""\n',
         {"FI_PROVIDER": "efa", "Q": 'a "b"'}),
        ("export NCCL_NET='Socket'\nexport X=\"1\"\n", {"NCCL_NET": "Socket", "X": "1"}),
        ("A=1\nBASH_FUNC_f%%=() {  echo\n}\nB=x=y\n", {"A": "1", "B": "x=y"}),
    ],
)
def test_env_dump_formats(text, expected):
    variables = parse_env_dump(text).variables
    for name, value in expected.items():
        assert variables[name] == value


@pytest.mark.parametrize("text", ["", "\n\n", "hello world\nno assignments here\n", "=x\n"])
def test_nothing_recognised(text):
    with pytest.raises(ParseError, match="no environment variable assignments"):
        parse_env_dump(text)
