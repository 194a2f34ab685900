"""NCCL logs under the wrappers the byte scanner cannot skip by anchoring on `NCCL INFO`: docker's
json-file lines (the payload is JSON-escaped, its tail is JSON) and ANSI colours (a reset code
after the payload). Both parse like the bare log, streamed and as text, in any chunk size."""

from __future__ import annotations

import io
import json

import pytest

from harness.parsers.nccl_log import parse_nccl_log, parse_nccl_log_stream
from tests.test_parsers_nccl_log import PAYLOADS

WANT = ("1.16.3", "Libfabric", "efa", "efa-direct", 32, True, 2)


def _docker(line: str) -> str:
    # docker's json-file driver (daemon/logger/jsonfilelog): one object per line, the line with
    # its newline in `log`; `docker logs` users paste /var/lib/docker/containers/*/*-json.log.
    return json.dumps({"log": line + "\n", "stream": "stderr",
                       "time": "2025-06-01T12:00:00.123456789Z"}, separators=(",", ":"))


def _ansi(line: str) -> str:
    # A colouring log shipper or terminal: the whole line green, then a reset.
    return f"\x1b[32m{line}\x1b[0m"


@pytest.mark.parametrize("wrap", [_docker, _ansi, lambda s: _docker(_ansi(s))],
                         ids=["docker-json-file", "ansi", "docker-of-ansi"])
def test_wrapped_payloads_give_the_bare_facts(wrap):
    text = "".join(wrap(f"ip-10-0-0-1:79:2500 [0] {p}") + "\n" for p in PAYLOADS)
    results = [parse_nccl_log(text)]
    results += [parse_nccl_log_stream(io.BytesIO(text.encode()), chunk_bytes=n)
                for n in (64, 1 << 20)]
    for s in results:
        assert (s.plugin_version, s.network, s.provider, s.fabric, s.num_nics, s.gdr,
                s.num_net_channels) == WANT
        assert s.plugin == "aws-ofi-nccl"


def test_a_docker_log_of_escaped_quotes_keeps_them():
    line = 'h:1:1 [0] NCCL WARN NET/OFI Unable to find provider "efa"'
    s = parse_nccl_log(_docker(line) + "\n")
    assert s.warnings == ('NET/OFI Unable to find provider "efa"',)
