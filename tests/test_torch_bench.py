"""The torch.distributed all_reduce bench, run for real on gloo with 2 and 4 local processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from harness.worker import bandwidth as torch_bench
from harness.worker.bandwidth import BenchRow, TorchBenchResult, bus_factor, parse_size

pytest.importorskip("torch")

KIB = 1024
MIB = 1024 * KIB


def _worker(rank: int, world: int, store: str, out: str, plan: str) -> None:
    """One rank: join the group (bounded), run the plan's benches, write results, tear down."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    from datetime import timedelta

    import torch.distributed as dist

    from harness.worker.bandwidth import allreduce_bench

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=30))
    results = {}
    sizes = (64 * KIB, 1 * MIB)
    if plan == "sweep":
        results["plain"] = allreduce_bench(sizes_bytes=sizes, warmup=1, iters=3)
        results["corrupt"] = allreduce_bench(sizes_bytes=sizes, warmup=0, iters=1,
                                             corrupt_rank=world - 1)
        results["unchecked"] = allreduce_bench(sizes_bytes=(MIB,), warmup=0, iters=1,
                                               check_data=False)
    elif plan == "pairs":
        # Every rank must create every subgroup, in the same order.
        pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        mine = pairs[rank // 2]
        results["pair"] = allreduce_bench(group=mine, sizes_bytes=sizes, warmup=1, iters=2)
        results["world"] = allreduce_bench(sizes_bytes=sizes, warmup=1, iters=2,
                                           corrupt_rank=2)
    elif plan == "hang":
        if rank == 0:
            results["hung"] = allreduce_bench(sizes_bytes=(KIB,), warmup=1, iters=1,
                                              timeout_s=2.0)
        else:
            time.sleep(6)  # never joins the all_reduce; stays alive so rank 0 must time out
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({k: v.to_dict() for k, v in results.items()}))
    if plan != "hang":
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def _run(world: int, plan: str, tmp_path: Path, timeout_s: float = 120.0) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(r, world, str(tmp_path / "store"), str(tmp_path),
                                               plan)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.1))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join(5)
    assert not alive, f"{len(alive)} ranks still running after {timeout_s} s"
    out = []
    for r in range(world):
        data = json.loads((tmp_path / f"rank{r}.json").read_text())
        out.append({k: TorchBenchResult.from_dict(v) for k, v in data.items()})
    return out


def _assert_nccl_tests_arithmetic(result: TorchBenchResult, nranks: int) -> None:
    assert result.nranks == nranks and result.backend == "gloo" and result.dtype == "float32"
    for row in result.rows:
        assert row.count * 4 == row.size_bytes
        assert row.time_us > 0
        # nccl-tests: algbw = bytes / 1e9 / seconds; busbw = algbw * 2(n-1)/n.
        assert row.algbw_gb_s == pytest.approx(row.size_bytes / 1e9 / (row.time_us / 1e6))
        assert row.busbw_gb_s == pytest.approx(row.algbw_gb_s * 2 * (nranks - 1) / nranks)


@pytest.mark.timeout(180)
def test_two_ranks_measure_and_catch_corruption(tmp_path):
    ranks = _run(2, "sweep", tmp_path)
    for res in ranks:
        plain = res["plain"]
        _assert_nccl_tests_arithmetic(plain, 2)
        assert [r.size_bytes for r in plain.rows] == [64 * KIB, MIB]
        assert plain.data_ok and plain.errors == () and plain.ok
        assert all(r.wrong == 0 for r in plain.rows)
        assert plain.at_size(MIB) is plain.largest and plain.at_size(123) is None
        corrupt = res["corrupt"]
        assert not corrupt.data_ok and not corrupt.ok
        # One element perturbed on one rank: its sum is wrong on both ranks.
        assert [r.wrong for r in corrupt.rows] == [2, 2]
        unchecked = res["unchecked"]
        assert unchecked.data_ok and unchecked.rows[0].wrong is None and not unchecked.checked
        # gloo: the CPU clock, in one repetition per timed iteration (3), the spread beside
        assert {(r.timer, r.reps) for r in plain.rows} == {("cpu-clock", 3)}
        assert all(r.time_us_spread is not None and r.time_us_spread >= 0 for r in plain.rows)
    # Timings are averaged across ranks: every rank reports the same rows.
    assert ranks[0]["plain"].rows == ranks[1]["plain"].rows


@pytest.mark.timeout(240)
def test_four_ranks_world_and_pair_subgroups(tmp_path):
    ranks = _run(4, "pairs", tmp_path, timeout_s=200)
    for res in ranks:
        _assert_nccl_tests_arithmetic(res["pair"], 2)
        assert res["pair"].ok
        _assert_nccl_tests_arithmetic(res["world"], 4)
        assert not res["world"].data_ok and res["world"].errors == ()
        assert [r.wrong for r in res["world"].rows] == [4, 4]
    assert ranks[0]["pair"].rows == ranks[1]["pair"].rows
    assert ranks[2]["pair"].rows == ranks[3]["pair"].rows


@pytest.mark.timeout(120)
def test_hung_peer_is_an_error_not_a_hang(tmp_path):
    start = time.monotonic()
    hung = _run(2, "hang", tmp_path, timeout_s=60)[0]["hung"]
    assert time.monotonic() - start < 60
    assert hung.rows == () and not hung.data_ok and not hung.ok
    assert len(hung.errors) == 1 and hung.errors[0].startswith("rank 0: warm-up all_reduce")


def test_result_round_trips_and_finds_the_printed_line():
    result = TorchBenchResult(backend="gloo", nranks=2, dtype="float32", data_ok=True, errors=(),
                              rows=(BenchRow(1024, 256, 10.0, 0.1024, 0.1024, 0),))
    text = "W1129 warning\n" + json.dumps({"torch_bench": result.to_dict()}) + "\nbye\n"
    assert torch_bench.result_from_output(text) == result
    assert torch_bench.result_from_output("{not json\n") is None


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_bus_factor_is_nccl_tests_all_reduce(n, factor):
    assert bus_factor(n) == factor


@pytest.mark.parametrize(("text", "size"), [("8", 8), ("64K", 65536), ("1M", MIB),
                                            ("256MB", 256 * MIB), ("1G", 1024**3)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.timeout(180)
def test_torchrun_entry_prints_one_result(tmp_path):
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    proc_result, result = torch_bench.run_under_torchrun(
        2, (64 * KIB, 256 * KIB), timeout_s=120, env=env, warmup=1, iters=2, backend="gloo")
    assert proc_result.ok, proc_result.describe()
    assert result is not None and result.ok
    _assert_nccl_tests_arithmetic(result, 2)
    assert proc_result.stdout.count('"torch_bench"') == 1  # rank 0 only

    proc_result, result = torch_bench.run_under_torchrun(
        2, (64 * KIB,), timeout_s=120, env=env, warmup=0, iters=1, backend="gloo",
        corrupt_rank=0)
    assert not proc_result.ok and result is not None and not result.data_ok
