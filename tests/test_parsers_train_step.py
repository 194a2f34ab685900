"""The training-step output parser: root cause across ranks, failure kinds, unrecognised output.
What each recorded log (tests/data/train_step/README.md) gives is in its X.expect.json."""

from __future__ import annotations

import pytest

from harness.parsers import ParseError
from harness.parsers.train_step import classify_failure, parse_train_step


def test_rank_error_lines_pick_the_root_cause_not_the_peer():
    """Rank 1 ran out of memory; rank 0 then lost its peer: the OOM is reported."""
    text = (
        '[rank0]: {"schema": "gpu-preflight.train_step/v1", "error": {"rank": 0, "kind": '
        '"peer_lost", "message": "a peer rank went away"}}\n'
        '{"schema": "gpu-preflight.train_step/v1", "error": {"rank": 1, "kind": "cuda_oom", '
        '"message": "CUDA out of memory: tried to allocate 2.00 GiB"}}\n'
    )
    out = parse_train_step(text)
    assert (out.failure.kind, out.failure.rank) == ("cuda_oom", 1)
    assert len(out.errors) == 2


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("RuntimeError: no GPU for LOCAL_RANK 3: torch sees 2 CUDA devices (CUDA_VISIBLE_DEVICES="
         "'0,1'; torch 2.13.0, built for CUDA 12.8)", "no_gpu"),
        ("RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer "
         "[127.0.0.1]:47784", "peer_lost"),
        ("RuntimeError: [Rank 0]: Rank 1 failed to pass monitoredBarrier in 10000 ms",
         "collective_timeout"),
        ("ValueError: something else entirely", "exception"),
        ("RuntimeError: cudnn shared object not found", "te_import"),
        ("RuntimeError: /opt/TransformerEngine/transformer_engine/common/gemm/cublaslt_gemm.cu:"
         "354 in function cublas_gemm: cuBLAS Error: an unsupported value or parameter was "
         "passed to the function", "exception"),
        ("/usr/bin/python3: Error while finding module specification for "
         "'torch.distributed.run' (ModuleNotFoundError: No module named 'torch')", "no_torch"),
    ],
)
def test_classify_failure_kinds(text, kind):
    assert classify_failure(text).kind == kind


@pytest.mark.parametrize("text", ["", "hello\nworld\n", '{"schema": "other"}'])
def test_unrecognised_output_raises(text):
    with pytest.raises(ParseError, match="no train_step result"):
        parse_train_step(text)


def test_the_rank_tag_of_a_line_matched_from_its_start_is_read():
    """NCCL error codes and gloo timeouts are matched from the line's start (`^.*?`), before the
    `[rankN]` tag: the tag was searched for in one character and never found."""
    code = classify_failure("noise\n[rank5]: ncclInternalError: internal check failed\n")
    assert (code.kind, code.rank) == ("nccl_error", 5)
    gloo = classify_failure("[rank2]: RuntimeError: Timed out waiting 1800000ms for recv\n")
    assert (gloo.kind, gloo.rank) == ("collective_timeout", 2)
    untagged = classify_failure("ncclInternalError: internal check failed\n")
    assert (untagged.kind, untagged.rank) == ("nccl_error", None)


@pytest.mark.parametrize("text", [
    # torch 2.3-2.5 (hiyouga/LlamaFactory#6953): the monitor's line, then the watchdog's.
    "[rank144]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 144] Heartbeat monitor timed out! "
    "Process will be terminated after dumping debug info. workMetaList_.size()=1\n"
    "[rank144]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 144] [PG 0 Rank 144] ProcessGroupNCCL's "
    "watchdog got stuck for 600 seconds without making progress in monitoring enqueued "
    "collectives.\n",
    # the watchdog's line alone (a log cut before the monitor's, or filtered by `grep F`)
    "[rank144]:[F ProcessGroupNCCL.cpp:1169] [PG 0 Rank 144] ProcessGroupNCCL's watchdog got "
    "stuck for 600 seconds without making progress in monitoring enqueued collectives.\n",
])
def test_a_hung_nccl_watchdog_is_an_nccl_timeout(text: str):
    """When the watchdog itself hangs in a NCCL or CUDA call, torch's heartbeat monitor kills
    the process and no `Watchdog caught collective operation timeout` line comes: a NCCL hang
    all the same (it was refused as `no known failure`)."""
    failure = classify_failure(text)
    assert (failure.kind, failure.rank) == ("nccl_timeout", 144)
    assert "stuck for 600 s" in failure.message


def test_the_heartbeat_monitor_line_alone_is_an_nccl_timeout():
    failure = classify_failure("[rank3]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 3] Heartbeat "
                               "monitor timed out! Process will be terminated after dumping "
                               "debug info. workMetaList_.size()=2\n")
    assert (failure.kind, failure.rank) == ("nccl_timeout", 3)


@pytest.mark.parametrize(("text", "rank"), [
    # NVIDIA/TransformerEngine#1541 (TE 1.13): one frame, then the bare exception
    ('Traceback (most recent call last):\n  File "/env/lib/python3.10/site-packages/'
     'transformer_engine/pytorch/__init__.py", line 52, in _load_library\n    so_path = '
     'next(so_dir.glob(f"{module_name}.*.{extension}"))\nStopIteration\n', None),
    # the same under torchrun's rank prefix
    ('[rank1]: Traceback (most recent call last):\n[rank1]:   File "/usr/lib/python3/dist-'
     'packages/transformer_engine/pytorch/__init__.py", line 25, in _load_library\n[rank1]:     '
     'so_path = next(so_dir.glob(f"*.{extension}"))\n[rank1]: StopIteration\n', 1),
])
def test_te_library_loader_failing_is_a_te_import_error(text: str, rank: int | None):
    """TE's `_load_library` raising a bare `StopIteration` (its shared object not found): a TE
    import failure (it was refused as `no known failure`)."""
    failure = classify_failure(text)
    assert (failure.kind, failure.rank) == ("te_import", rank)
    assert "raised StopIteration" in failure.message and "transformer_engine" in failure.message


def test_a_load_library_frame_without_its_exception_is_not_a_te_failure():
    with pytest.raises(ParseError):
        parse_train_step('  File "/x/transformer_engine/pytorch/__init__.py", line 25, in '
                         "_load_library\n    so_path = next(x)\n")
