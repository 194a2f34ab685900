"""The training-step output parser over recorded logs (tests/data/train_step/README.md)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from harness.parsers import ParseError, inspect_kinds
from harness.parsers.train_step import classify_failure, parse_train_step

DATA = Path(__file__).parent / "data" / "train_step"


def _read(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("name", "kind", "message", "rank"),
    [
        ("oom_torch25_fsdp.txt", "cuda_oom",
         "CUDA out of memory: tried to allocate 388.00 MiB on GPU 0 (9.68 GiB total, "
         "95.75 MiB free)",
         None),
        ("oom_torch21_capacty.txt", "cuda_oom",
         "CUDA out of memory: tried to allocate 8.06 GiB on GPU 1 (23.70 GiB total, 1.60 GiB free)",
         None),
        ("oom_torch1x.txt", "cuda_oom",
         "CUDA out of memory: tried to allocate 2.87 GiB on GPU 0 (14.76 GiB total, "
         "19.75 MiB free)",
         None),
        ("nccl_watchdog_timeout.txt", "nccl_timeout",
         "NCCL collective timed out: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, "
         "NumelOut=466119168, Timeout(ms)=600000) ran for 600.06 s", 0),
        ("nccl_system_error.txt", "nccl_error",
         "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version "
         "2.19.3 / ncclSystemError: System call (e.g. socket, malloc) or external library call "
         "failed or device error.", None),
        ("te_version_mismatch.txt", "te_import",
         "TransformerEngine failed to import: AssertionError: TransformerEngine package version "
         "mismatch. Found transformer_engine_torch v1.13.0, transformer-engine v2.4.0, and "
         "transformer-engine-cu12 v2.4.0. Install transformer-engine using 'pip3 install "
         "transformer-engine[pytorch]==VERSION'", None),
    ],
)
def test_failures_named_from_raw_logs(name, kind, message, rank):
    out = parse_train_step(_read(name))
    assert out.result is None
    assert (out.failure.kind, out.failure.message, out.failure.rank) == (kind, message, rank)


def test_te_undefined_symbol_is_a_te_import_failure():
    failure = parse_train_step(_read("te_undefined_symbol.txt")).failure
    assert failure.kind == "te_import"
    assert "transformer_engine_torch.cpython-311-x86_64-linux-gnu.so: undefined symbol" in (
        failure.message)


def test_result_line_parsed_with_every_rank():
    out = parse_train_step(_read("result_cpu_gloo.txt"))
    assert out.failure is None and not out.aborted_at_exit
    assert out.result["world_size"] == 2 and len(out.result["ranks"]) == 2
    assert out.result["losses"][-1] < out.result["losses"][0]


def test_abort_at_exit_seen_even_with_a_result():
    out = parse_train_step(_read("abort_at_exit_gloo.txt"))
    assert out.result is not None
    assert out.aborted_at_exit


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


def test_gloo_hang_reported_as_collective_timeout():
    failure = parse_train_step(_read("gloo_hang_timeout.txt")).failure
    assert failure.kind == "collective_timeout"
    assert "Timed out waiting 4000ms" in failure.message


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


def test_inspect_kind_registered_and_json_shaped():
    fn = inspect_kinds()["train-step"]
    out = fn(io.StringIO(_read("oom_torch25_fsdp.txt")), profile=None)
    assert out["result"] is None
    assert out["failure"]["kind"] == "cuda_oom"
    out = fn(io.StringIO(_read("result_cpu_gloo.txt")), profile=None)
    assert out["failure"] is None and math.isfinite(out["result"]["losses"][0])
