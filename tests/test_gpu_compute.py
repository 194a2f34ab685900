"""Compute sanity: the floors and the bit-for-bit comparison, on CPU tensors."""

from __future__ import annotations

import pytest

from harness.probes import gpu_compute as gc


def test_matmul_tflops():
    # 8192^3 * 2 flops * 50 iterations in 0.1 s = 549.8 TFLOP/s
    assert gc.matmul_tflops(8192, 0.1, 50) == pytest.approx(549.76, abs=0.01)


def test_copy_counts_read_and_write():
    assert gc.copy_gb_s(1 << 30, 1.0, 1) == pytest.approx(2.147, abs=0.001)


@pytest.mark.parametrize("fn", [lambda: gc.matmul_tflops(8, 0.0, 1),
                                lambda: gc.copy_gb_s(8, -1.0, 1)])
def test_no_time_is_an_error(fn):
    with pytest.raises(ValueError, match="seconds must be > 0"):
        fn()


def test_below_floor():
    assert gc.below_floor({0: 700.0, 1: 549.9, 2: 550.0}, 550.0) == {1: 549.9}


@pytest.mark.parametrize(("digests", "suspects"), [
    ({0: "a", 1: "a", 2: "a"}, {}),
    ({0: "a", 1: "a", 2: "b", 3: "a"}, {2: "b"}),
    ({0: "a", 1: "b"}, {0: "a", 1: "b"}),  # no majority: both suspect
    ({0: "a", 1: "a", 2: "b", 3: "b"}, {0: "a", 1: "a", 2: "b", 3: "b"}),
    ({0: "a"}, {}),  # one GPU cannot be compared
])
def test_sdc_suspects(digests, suspects):
    assert gc.sdc_suspects(digests) == suspects


def test_same_inputs_give_identical_digests_on_cpu():
    torch = pytest.importorskip("torch")
    cpu = torch.device("cpu")
    result = gc.run_compute_sanity([cpu, cpu], n=64, iters=2, copy_bytes=1 << 16, copy_iters=2)
    assert result.digests[0] == result.digests[1]
    assert set(result.tflops) == set(result.copy_gb_s) == {0, 1}
    assert result.uuids == {}  # CPU devices have no UUID
    assert all(v > 0 for v in result.tflops.values())


def test_a_flipped_bit_changes_the_digest():
    torch = pytest.importorskip("torch")
    a = torch.ones((4, 4), dtype=torch.bfloat16)
    b = a.clone()
    b.view(torch.int16)[2, 3] ^= 1  # one bit of one bf16 element
    assert gc.digest(a) != gc.digest(b)
    assert gc.digest(a) == gc.digest(a.clone())


def test_run_matmul_digest_matches_reference():
    torch = pytest.importorskip("torch")
    a, b = gc.make_inputs(32, seed=7)
    _, d = gc.run_matmul(torch.device("cpu"), iters=1, inputs=(a, b))
    assert d == gc.digest(a @ b)


def test_no_cuda_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():  # pragma: no cover
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match=r"sees no CUDA device \(CUDA build: "):
        gc.run_compute_sanity()


@pytest.mark.gpu
def test_on_real_gpus():  # pragma: no cover - runs only where CUDA is
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    result = gc.run_compute_sanity(n=4096, iters=10, copy_bytes=1 << 28, copy_iters=5)
    assert gc.sdc_suspects(result.digests) == {}
