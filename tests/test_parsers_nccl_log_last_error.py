"""What torch and Open MPI print around an NCCL failure, read as the failure (issue 32, round 5):
torch's `NCCL error in: ...` whose reason is on the line after `Last error:`, under the prefix
its launcher puts on both lines; an `NCCL error` class no catalogue entry names (an error all
the same, shown only where nothing else says why); Open MPI's crash banner; a recv on a socket
the peer closed. The recorded samples are in tests/data/nccl_log (SOURCES.md: NVIDIA/nccl
issues #1247, #1928, #795, #1669; tatsu-lab/stanford_alpaca issue #207); the lines below are
theirs."""

from __future__ import annotations

import io

import pytest

from harness.parsers import ParseError
from harness.parsers.nccl_log import parse_nccl_log_stream
from tests.test_parsers_nccl_log_bare import _inspect

TORCH = [
    "torch.distributed.DistBackendError: NCCL error in: /root/pytorch/torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1333, internal error - please report this issue to the NCCL "
    "developers, NCCL version 2.18.6",
    "ncclInternalError: Internal check failed.",
    "Last error:",
    "Attribute busid of node nic not found",
]
TOPOLOGY = ("NCCL could not read the topology (NCCL_TOPO_FILE, set by aws-ofi-nccl or by hand, "
            "does not match this NCCL version or instance)")
#: The prefixes seen on every line of such a traceback: Ray's and vLLM's (issue #1247), torch's
#: rank tag (issue #1928), and the launchers' the shared unwrapper knows.
PREFIXES = {
    "bare": "{}",
    "ray-vllm": "(RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] {}",
    "torch-rank": "[rank3]: {}",
    "srun": "3: {}",
    "mpirun": "[1,3]<stdout>:{}",
    "pod": "[pod/w-1/c] {}",
    "stamp": "2025-06-01T12:00:00Z {}",
}


@pytest.mark.parametrize("prefix", PREFIXES.values(), ids=list(PREFIXES))
def test_the_reason_after_last_error_is_read_under_the_lines_prefix(prefix: str):
    out = _inspect([prefix.format(line) for line in TORCH])
    assert [(e["line"], e["cause"]) for e in out["errors"]] == [(TORCH[3], TOPOLOGY)]
    assert out["nccl_version"] == "2.18.6"


def test_an_nccl_error_no_entry_names_is_an_error_never_no_problem():
    """Before: the `internal error` matched no catalogue entry and the log read as healthy."""
    out = _inspect(TORCH[:2])
    assert [e["line"] for e in out["errors"]] == [TORCH[0].partition(": ")[2]]
    assert "Last error:" in out["errors"][0]["remedy"]
    # ... and where its reason is unknown to the catalogue, the torch line stays the error.
    out = _inspect([*TORCH[:3], "some reason no entry names"])
    assert [e["line"] for e in out["errors"]] == [TORCH[0].partition(": ")[2]]


def test_the_torch_line_is_not_a_second_error_where_a_warn_line_says_why():
    warn = ("gke-a3-d7j7:936:936 [0] bootstrap.cc:48 NCCL WARN Bootstrap : no socket interface "
            "found")
    out = _inspect([warn, TORCH[0]])
    assert [e["line"] for e in out["errors"]] == ["Bootstrap : no socket interface found"]


def test_last_error_as_the_inputs_last_line_leaves_the_torch_error():
    out = _inspect(TORCH[:3])
    assert [e["line"] for e in out["errors"]] == [TORCH[0].partition(": ")[2]]


def test_a_plugin_line_under_torchs_rank_tag_is_read():
    """issue #1928: NCCL 2.28.8 on an HPE/Cray system; cxi's UNDELIVERABLE is not EFA's."""
    plugin = ("NET/OFI Request 0x7f14cc5b60c0 completed with error. RC: 113. Error: 2 "
              "(UNDELIVERABLE). Completed length: 0")
    out = _inspect([f"[rank3]: {plugin}"])
    assert out["plugin"] == "aws-ofi-nccl"
    assert [e["line"] for e in out["errors"]] == [plugin]
    assert "cxi" in out["errors"][0]["cause"]
    assert not out["errors"][0]["cause"].startswith("an EFA")


def test_the_nccl_version_on_a_process_group_tagged_line_is_read():
    line = ("[E ProcessGroupNCCL.cpp:455] Some NCCL operations have failed or timed out. what(): "
            "NCCL error: remote process exited or there was a network error, NCCL version 2.14.3 "
            "ncclRemoteError: ... Last error: NET/IB : Got completion from peer 11.214.147.122"
            "<39138> with error 12, opcode 0, len 0, vendor err 129")
    out = _inspect([line])
    assert out["nccl_version"] == "2.14.3"
    assert "IB error 12" in out["errors"][0]["cause"]


def test_a_broken_pipe_on_an_nccl_socket_is_a_peer_failure():
    warn = ("a100-st-p4d24xlarge-22:183006:183220 [1] misc/socket.cc:518 NCCL WARN Net : Call to "
            "recv from 10.200.84.247<58355> failed : Broken pipe")
    out = _inspect([warn])
    assert out["errors"][0]["cause"] == "a peer rank died or the network between the nodes failed"


SIGNAL = "[rtptest1621:405884] *** Process received signal ***"
RAS = "rtptest1620:935572:937467 [0] NCCL INFO RAS client listening socket at ::1<28028>"


def test_open_mpis_crash_banner_in_an_nccl_log_is_a_failure():
    """issue #1669: NCCL's RAS crashed during init; before, the log read as no problem."""
    out = _inspect([RAS, SIGNAL])
    assert [e["line"] for e in out["errors"]] == [SIGNAL]
    assert _inspect([RAS])["errors"] == []


def test_the_crash_banner_alone_is_no_nccl_log_and_a_named_cause_comes_first():
    with pytest.raises(ParseError):
        _inspect([SIGNAL])
    warn = "h:1:2 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer"
    out = _inspect([warn, SIGNAL])
    assert [e["line"] for e in out["errors"]] == [warn.split("NCCL WARN ")[1]]


def test_the_reason_is_read_wherever_the_chunks_of_the_stream_end():
    """A `Last error:` line that ends a chunk: its reason is the next chunk's first line."""
    text = "".join(PREFIXES["ray-vllm"].format(line) + "\n" for line in TORCH).encode()
    for size in range(40, len(text) + 1, 7):
        summary = parse_nccl_log_stream(io.BytesIO(text), chunk_bytes=size)
        assert [e.line for e in summary.errors] == [TORCH[3]], size


ABORT = ("[rank12]:[E218 04:54:23.314083987 ProcessGroupNCCL.cpp:630] [Rank 0] Some NCCL operations "
         "have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU "
         "operations might run on corrupted/incomplete data.")
WATCHDOG = ("[rank0]:[E626 06:24:44.159932949 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, "
            "NumelOut=9801523, Timeout(ms)=600000) ran for 600030 milliseconds before timing out.")


def test_the_watchdog_taking_the_process_down_is_a_failure_where_nothing_names_it():
    """issue #1610: the copy kept no `Watchdog caught` line; before, read as no problem."""
    out = _inspect([ABORT])
    assert [e["line"] for e in out["errors"]] == [ABORT.partition("630] ")[2]]
    named = _inspect([WATCHDOG, ABORT])  # the timeout names it: no error besides
    assert named["errors"] == [] and len(named["timeouts"]) == 1


@pytest.mark.parametrize(("exception", "cause"), [
    ("CUDA error: uncorrectable ECC error encountered", "uncorrectable ECC error"),
    ("CUDA error: unknown error", "a CUDA error reached PyTorch's NCCL watchdog"),
    ("c10::Error: something else", "PyTorch's NCCL watchdog stopped on an exception"),
])
def test_the_watchdog_stopped_by_an_exception_is_a_failure(exception: str, cause: str):
    """pytorch/pytorch#113128, DeepSpeed#4648: before, only a timeout or an NCCL error there
    was read; a GPU's uncorrectable ECC error read as no problem."""
    line = ("[rank12]:[E817 17:40:34.227531918 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank "
            f"12] Process group watchdog thread terminated with exception: {exception}")
    out = _inspect([line])
    assert [e["line"] for e in out["errors"]] == [line.partition("1515] ")[2]]
    assert cause in out["errors"][0]["cause"]
    with_timeout = [e["cause"] for e in _inspect([WATCHDOG, line])["errors"]]
    if exception.startswith("c10"):  # the last resort gives way to the timeout
        assert with_timeout == []
    else:  # a named cause stays beside it
        assert len(with_timeout) == 1 and cause in with_timeout[0]
