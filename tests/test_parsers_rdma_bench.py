"""fabtests and perftest outputs (harness.parsers.rdma_bench): errors and garbage. What each
recorded real transcript (tests/data/rdma_bench) gives is in its X.expect.json."""

from __future__ import annotations

import pytest

from harness.parsers import ParseError
from harness.parsers.rdma_bench import parse_fabtests


@pytest.mark.parametrize("text", ["", "fi_getinfo: -61 (No data available)\n",
                                  "bytes   iters   total       time     MB/sec    usec/xfer   "
                                  "Mxfers/sec\n\x00\x01garbage\n"])
def test_fabtests_errors_and_garbage_raise(text: str):
    with pytest.raises(ParseError):
        parse_fabtests(text)
