"""Lines that lost NCCL's `host:pid:tid [dev] NCCL INFO` prefix still say what failed: nccl-tests'
`Test NCCL failure` line and aws-ofi-nccl's bare `NET/OFI ...` lines (issue 32). The recorded
sample is tests/samples/nccl-log/real_nccl_tests_36_*; the plugin lines below are aws-ofi-nccl's
own messages (aws/aws-ofi-nccl issue #24's title line, its prefix removed as a paste does)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.parsers import ParseError, inspect_kind
from harness.profiles.table import get_profile

FRAGMENT = [
    "ip-172-31-10-20: Test NCCL failure all_reduce.cu:84 'unhandled system error'",
    " .. ip-172-31-10-20 pid 23389: Test failure common.cu:496",
    "NET/OFI Selected Provider is efa",
    "NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument",
]
WRAPS = {"bare": "{}", "srun": "3: {}", "mpirun": "[1,3]<stdout>:{}", "pod": "[pod/w-1/c] {}",
         "stamp": "2025-06-01T12:00:00Z {}"}


def _inspect(lines: list[str]) -> dict:
    fn = inspect_kind("nccl-log")
    assert fn is not None
    return fn(io.StringIO("\n".join(lines) + "\n"), profile=get_profile("local-cpu"))


@pytest.mark.parametrize("wrap", WRAPS.values(), ids=list(WRAPS))
def test_a_failure_fragment_without_nccl_prefixes_is_a_failure(wrap: str):
    """The plugin's error is the cause; the test's failure line, its consequence, is the error
    only where nothing else says why."""
    out = _inspect([wrap.format(line) for line in FRAGMENT])
    assert out["provider"] == "efa"
    assert [e["line"] for e in out["errors"]] == [FRAGMENT[3]]
    alone = _inspect([wrap.format(line) for line in FRAGMENT[:3]])
    assert [e["line"] for e in alone["errors"]] == [FRAGMENT[0]]


def test_each_line_is_what_makes_it_a_failure():
    assert [e["line"] for e in _inspect(FRAGMENT[:2])["errors"]] == [FRAGMENT[0]]
    assert [e["line"] for e in _inspect(FRAGMENT[2:])["errors"]] == [FRAGMENT[3]]
    with pytest.raises(ParseError):  # neither: nothing NCCL said
        _inspect([FRAGMENT[1]])


def test_a_warn_line_is_the_cause_and_the_test_failure_its_consequence():
    warn = ("ip-172-31-10-20:23389:23447 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI "
            "Couldn't open AV. RC: -22, ERROR: Invalid argument")
    out = _inspect([warn, FRAGMENT[0]])
    assert [e["line"] for e in out["errors"]] == [warn.split("NCCL WARN ")[1]]


#: Real logs whose lines a NCCL_DEBUG_FILE copy holds without the `host:pid:tid [dev] ` prefix
#: (issue 32: the provider and the rank count were lost there): CollNet/SHARP and IBext (HPC-X
#: SHARP plugin, IBext_v8), the old plugin's `tcp;ofi_rxm`, aws-ofi-nccl 1.11 on p4d.
HOSTLESS = ("real_collnet_sharp_connected.log", "real_ibext_hpcx_sharp_mpijob.log",
            "real_ibext_v8.log", "real_old_plugin_tcp_provider.log",
            "real_sagemaker_ofi_1.11_p4d_ts_lines.log")
FACTS = ("provider", "nranks", "network", "gdr", "plugin", "num_nics", "nccl_version")


@pytest.mark.parametrize("wrap", WRAPS.values(), ids=list(WRAPS))
@pytest.mark.parametrize("name", HOSTLESS)
def test_a_debug_file_without_the_host_prefix_reads_as_the_log(name: str, wrap: str):
    text = (Path(__file__).parent / "data" / "nccl_log" / name).read_text(encoding="utf-8")
    hostless = re.sub(r"^(\S*?: )?[\w.-]+:\d+:\d+ \[\d+\] ", r"\1", text, flags=re.M)
    assert hostless != text
    bare = _inspect(text.splitlines())
    got = _inspect([wrap.format(line) for line in hostless.splitlines()])
    assert {k: got[k] for k in FACTS} == {k: bare[k] for k in FACTS}
    assert bare["provider"]  # (and the CollNet log's rank count, 8: tests/data expectations)
