"""The one distributed worker: its bounded waits (a fake NCCL Work modelled on both torch code
paths), the FSDP2 import fallback, the compute part's logic on CPU tensors, and real 2-rank
gloo launches: every part from one launch, a hung part named while the others still report,
and the FP8 reference under a stand-in TE that performs TE's world-group amax all_reduce."""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

import pytest

from harness.worker import group
from harness.worker.launch import PartSpec, parse_parts, run_train_step, run_worker

FAKE_TE = str(Path(__file__).parent / "fake_te")


class LegacyNcclWork:
    """ProcessGroupNCCL's Work before torch 2.6: blocking wait is read when the group is
    constructed; without it `wait(timeout)` only orders the streams and returns True at once
    (pytorch/pytorch ProcessGroupNCCL.cpp @0007e752, synchronizeInternal)."""

    def __init__(self, blocking: bool) -> None:
        self.blocking = blocking

    def wait(self, timeout=None):
        if not self.blocking:
            return True
        time.sleep(min(timeout.total_seconds(), 0.05))
        raise RuntimeError("Work ran for 50 milliseconds before timing out. "
                           "timed out in blocking wait (NCCL_BLOCKING_WAIT=1).")


def test_init_group_makes_a_legacy_nccl_wait_bounded(monkeypatch):
    from harness.worker.bandwidth import _CollectiveError, _Waiter

    for name in group.BLOCKING_WAIT_VARS:
        monkeypatch.delenv(name, raising=False)
    made = {}

    def fake_init(backend, **kwargs):  # the group reads the env at construction, as NCCL's
        made["work"] = LegacyNcclWork(group.blocking_wait_on())
        made["kwargs"] = kwargs

    monkeypatch.setattr("torch.distributed.init_process_group", fake_init)
    group.init_group("nccl", timeout_s=7, device="cuda:0")
    assert made["kwargs"]["device_id"] == "cuda:0"
    assert made["kwargs"]["timeout"].total_seconds() == 7
    with pytest.raises(_CollectiveError, match="timed out in blocking wait"):
        _Waiter(0.05).wait(made["work"], "timed all_reduce of 16 bytes")
    assert os.environ["TORCH_NCCL_BLOCKING_WAIT"] == os.environ["NCCL_BLOCKING_WAIT"] == "1"


def test_init_group_leaves_gloo_alone(monkeypatch):
    for name in group.BLOCKING_WAIT_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("torch.distributed.init_process_group", lambda backend, **kw: None)
    group.init_group("gloo", timeout_s=5)
    assert not group.blocking_wait_on()


def test_fsdp_api_falls_back_to_the_composable_path():
    old = types.SimpleNamespace(fully_shard="fs", MixedPrecisionPolicy="mp")

    def torch_2_4(path):
        if path == "torch.distributed.fsdp":
            return types.SimpleNamespace()  # FSDP1 only: no fully_shard there
        return old

    assert group.fsdp_api(torch_2_4) == ("fs", "mp")

    def nothing(path):
        raise ImportError(f"No module named {path!r}")

    with pytest.raises(ImportError, match=r"needs torch >= 2\.4"):
        group.fsdp_api(nothing)


def test_compute_window_lasts_its_seconds_and_takes_readings():
    torch = pytest.importorskip("torch")
    from harness.probes import gpu_compute as gc
    from harness.worker.compute import run_one, timed_matmuls

    a, b = (t.float() for t in gc.make_inputs(32, seed=0))
    calls = []

    def read():
        calls.append(1)
        return {"sm_clock_mhz": 1980 - len(calls), "power_w": 650.0, "event_reasons": 0}

    t0 = time.perf_counter()
    tflops, chunks, digest, readings, timed = timed_matmuls(
        torch.device("cpu"), a, b, seconds=0.05, chunk_iters=2, read=read)
    wall = time.perf_counter() - t0
    # The window lasts its seconds; the matmul time (the TFLOP/s' time) leaves the readings out.
    assert wall >= 0.05 and 0 < timed <= wall
    assert len(chunks) == len(readings) == len(calls) >= 1
    assert digest == gc.digest(a @ b) and tflops > 0
    assert [r.sm_clock_mhz for r in readings] == [1980 - i for i in range(1, len(calls) + 1)]
    one = run_one(torch.device("cpu"), seconds=0.01, n=16, chunk_iters=1, copy_bytes=1024,
                  copy_iters=1)
    assert one.released and one.readings and one.readings[0].sm_clock_mhz is None


def test_compute_tflops_are_over_the_matmuls_alone_not_the_nvml_reads():
    """NVML reads between chunks (a busy driver answers in tens of ms) must not count as matmul
    time: a read that sleeps 50 ms leaves the TFLOP/s those of the chunks themselves."""
    torch = pytest.importorskip("torch")
    from harness.probes import gpu_compute as gc
    from harness.worker.compute import timed_matmuls

    a, b = (t.float() for t in gc.make_inputs(64, seed=0))

    def slow_read():
        time.sleep(0.05)
        return {}

    start = time.perf_counter()
    # 1 s of budget: at least two 50 ms reads even when a loaded machine stretches each one
    # (0.2 s gave a single reading at load 12-19)
    tflops, chunks, _, readings, busy = timed_matmuls(torch.device("cpu"), a, b, seconds=1.0,
                                                       chunk_iters=2, read=slow_read)
    wall = time.perf_counter() - start
    assert len(readings) >= 2 and busy < wall - 0.05 * len(readings) + 0.02
    # the chunk time, not the wall: the figure is over `busy`, which the line above holds clear
    # of every 50 ms read (counting the reads would fail it). A bound on busy against wall / 2
    # failed once at load 11: a loaded machine can stall a chunk for as long as a read.
    assert tflops == pytest.approx(gc.matmul_tflops(64, busy, 2 * len(chunks)))
    assert tflops > gc.matmul_tflops(64, wall, 2 * len(chunks))


def test_parse_parts_names_the_part_that_was_running():
    from harness.base.proc_result import ProcResult

    def line(part, event, rank=0, **kw):
        import json
        return json.dumps({"schema": "gpu-preflight.worker/v1", "part": part, "event": event,
                           "rank": rank, **kw})

    text = "\n".join([line("bandwidth", "start"), line("bandwidth", "end", status="ok",
                      elapsed_s=1.0), line("train", "start"), line("train", "start", 1)])
    killed = ProcResult(("torchrun",), None, text, timed_out=True, timeout_s=9.0)
    got = parse_parts(killed, ["bandwidth", "train", "compute"])
    assert got["bandwidth"].status == "ok" and got["train"].status == "timeout"
    assert "part 'train' was running" in got["train"].message and "compute" not in got


# --- real launches: 2 gloo ranks under torchrun ------------------------------------------------

ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}


@pytest.mark.timeout(600)
def test_one_launch_reports_every_part_on_its_own():
    run = run_worker(2, [PartSpec("compute", 60), PartSpec("bandwidth", 60),
                         PartSpec("train", 120)],
                     env=ENV, extra=["--device=cpu", "--pg-timeout-s=60", "--steps=3"])
    assert len(run.launches) == 1, run.launches[-1].output[-3000:]
    assert {n: p.status for n, p in run.parts.items()} == dict.fromkeys(
        ("compute", "bandwidth", "train"), "ok")
    out = run.launches[0].output
    assert out.count('"torch_bench"') == 1 and out.count("gpu-preflight.compute/v1") == 1
    assert run.parts["train"].startup_s is not None and run.parts["train"].startup_s > 0


@pytest.mark.timeout(600)
def test_hung_part_is_named_and_the_others_still_report():
    run = run_worker(2, [PartSpec("bandwidth", 5), PartSpec("train", 120)],
                     env={**ENV, "PREFLIGHT_WORKER_HANG": "bandwidth"},
                     extra=["--device=cpu", "--pg-timeout-s=60", "--steps=2"])
    bw, train = run.parts["bandwidth"], run.parts["train"]
    assert bw.status == "timeout"
    assert "part 'bandwidth' did not finish within 5 s" in bw.message
    # the hang is not the next launch's: it started train alone, and train reported
    assert train.status == "ok", train.output[-3000:]
    assert len(run.launches) == 2 and "--parts train" in " ".join(run.launches[1].argv)


@pytest.mark.timeout(600)
def test_fp8_delayed_reference_does_not_deadlock_on_te_world_amax_reduction():
    """The stand-in TE all_reduces amax over `fp8_group` (None: the world) on leaving
    fp8_autocast. A reference on rank 0 alone under fp8_group=None issued a world all_reduce
    no other rank joined (issue 18, finding 1); the reference now runs on a one-rank group."""
    env = {**ENV, "PYTHONPATH": os.pathsep.join(p for p in (FAKE_TE, ENV.get("PYTHONPATH"))
                                               if p)}
    run = run_train_step(2, timeout_s=120, env=env, device="cpu", pg_timeout_s=20,
                         plan="te:fp8-delayed", steps=3)
    assert run.output is not None and run.output.result is not None, run.proc.output[-3000:]
    result = run.output.result
    assert (result["path"], result["recipe"]) == ("te", "fp8-delayed")
    assert result["te"]["version"] == "2.4.0+fake"
    assert "fake-te: amax all_reduce over 2 ranks (autocast)" in run.proc.output  # te.autocast
    assert "(fp8_autocast)" not in run.proc.output
    assert result["tolerance"]["basis"].startswith("stack check (fp8-delayed on both sides)")
    # the corruption judgement: the same step in bf16 beside it, judged by its tolerance
    comparison = result["comparison"]
    assert comparison["recipe"] == "bf16" and comparison["tolerance"]["loss_rel"] < 0.01
    assert comparison["update_rel_diff"] <= comparison["tolerance"]["update_rel"]
    assert comparison["loss_max_rel_diff"] <= comparison["tolerance"]["loss_rel"]


@pytest.mark.timeout(600)
def test_both_sides_scale_the_loss_per_token_alike():
    """Delayed scaling quantises the gradient with a scale from its amax: each sharded rank
    back-propagates the mean over its own tokens, so the reference must too (its mean over all
    tokens, x world, and the gradient / world after, as FSDP2 divides). The stand-in TE prints
    the output layer's gradient amax: the reference's equals the larger of the ranks' (its
    tokens are theirs together); with a plain global mean it was half of it."""
    import re

    env = {**ENV, "FAKE_TE_GRAD_AMAX": "128",  # the vocabulary: the output layer alone
           "PYTHONPATH": os.pathsep.join(p for p in (FAKE_TE, ENV.get("PYTHONPATH")) if p)}
    run = run_train_step(2, timeout_s=120, env=env, device="cpu", pg_timeout_s=20,
                         plan="te:fp8-delayed", steps=1, vocab=128)
    assert run.output is not None and run.output.result is not None, run.proc.output[-3000:]
    seen = [(float(a), int(r), int(g)) for a, r, g in re.findall(
        r"fake-te: grad amax (\S+) rank (\d) group (\d)", run.proc.output)]
    sharded = [a for a, _, g in seen if g == 2]
    reference = [a for a, _, g in seen if g == 1]
    # one step: each rank's sharded fp8-delayed run, then its reference on rank 0 under a
    # one-rank amax group (the bf16 run after it uses no autocast: no group to tell it by)
    assert len(sharded) >= 2 and len(reference) == 1, seen
    assert reference[0] == pytest.approx(max(sharded[:2]), rel=1e-6)


@pytest.mark.timeout(600)
def test_an_older_te_without_autocast_gets_fp8_autocast():
    env = {**ENV, "FAKE_TE_API": "fp8_autocast",
           "PYTHONPATH": os.pathsep.join(p for p in (FAKE_TE, ENV.get("PYTHONPATH")) if p)}
    run = run_train_step(2, timeout_s=120, env=env, device="cpu", pg_timeout_s=20,
                         plan="te:fp8-delayed", steps=2)
    assert run.output is not None and run.output.result is not None, run.proc.output[-3000:]
    assert "fake-te: amax all_reduce over 2 ranks (fp8_autocast)" in run.proc.output


def test_te_autocast_passes_the_recipe_and_the_amax_group_by_their_names():
    import types

    pytest.importorskip("torch")
    from harness.worker.train_model import te_autocast

    calls = []
    new = types.SimpleNamespace(autocast=lambda **kw: calls.append(("autocast", kw)),
                                fp8_autocast=lambda **kw: calls.append(("fp8_autocast", kw)))
    old = types.SimpleNamespace(fp8_autocast=lambda **kw: calls.append(("fp8_autocast", kw)))
    te_autocast(new, "recipe", "group")
    te_autocast(old, "recipe", "group")
    assert calls == [
        ("autocast", {"enabled": True, "recipe": "recipe", "amax_reduction_group": "group"}),
        ("fp8_autocast", {"enabled": True, "fp8_recipe": "recipe", "fp8_group": "group"})]


COUNTING_CONFTEST = '''
import json
from pathlib import Path

import harness.fixtures.worker as fw

_real = fw.run_worker


def _counting(nproc, parts, **kw):
    with Path("launches.jsonl").open("a") as f:
        f.write(json.dumps([p.name for p in parts]) + "\\n")
    return _real(nproc, parts, **kw)


fw.run_worker = _counting
'''


@pytest.mark.timeout(900)
def test_local_preflight_runs_bandwidth_and_step_in_one_launch(suite):
    from tests.conftest import copy_check_file, run_checks

    copy_check_file(suite, "test_bandwidth.py")
    copy_check_file(suite, "test_training.py")
    suite.makeconftest(COUNTING_CONFTEST)
    (suite.path / "profiles.toml").write_text(  # the budget must not depend on the load
        '[profiles."slow-cpu"]\nbase = "local-cpu"\ntrain_step_budget_s = 600.0\n')
    _, by_id = run_checks(suite, "--preflight-profile", "slow-cpu",
                          "--preflight-profile-file", "profiles.toml")
    launches = (suite.path / "launches.jsonl").read_text().splitlines()
    assert launches == ['["bandwidth", "train"]']
    assert by_id["PF-BW-006"]["outcome"] == "pass", by_id["PF-BW-006"]["message"]
    assert by_id["PF-TRAIN-001"]["outcome"] == by_id["PF-TRAIN-008"]["outcome"] == "pass"
    startup = [m for m in by_id["PF-TRAIN-008"]["measurements"]
               if m["what"].startswith("worker start-up")]
    assert len(startup) == 1 and startup[0]["value"] > 0


def test_records_glued_by_another_rank_on_one_line_are_still_read():
    # Under PYTHONUNBUFFERED, print() wrote a record and its newline separately: another rank's
    # line landed between them (seen under load: "no result line in its output").
    import json as _json

    from harness.worker.bandwidth import RESULT_KEY, result_from_output
    from harness.worker.launch import WORKER_SCHEMA, schema_records

    bench = {RESULT_KEY: {"backend": "gloo", "nranks": 2, "dtype": "float32", "rows": [],
                          "data_ok": True, "errors": []}}
    marker = {"schema": WORKER_SCHEMA, "part": "train", "event": "end", "rank": 1, "status": "ok"}
    glued = _json.dumps(bench) + _json.dumps(marker) + "\n"
    assert schema_records(glued) == [marker]
    assert result_from_output(glued) is not None


def test_the_ranks_imports_run_without_the_gc_and_leave_no_garbage_frozen():
    """harness.worker.parts.imports_without_gc: the GC is off inside (no collection walks the
    imports' heap again and again), is on again after, the imports' own garbage cycles are
    collected, not frozen (a cycle made inside is gone), and what lives on is frozen."""
    import gc
    import weakref

    from harness.worker.parts import imports_without_gc

    class Node:
        pass

    assert gc.isenabled()
    before = gc.get_freeze_count()
    try:
        with imports_without_gc():
            assert not gc.isenabled()
            cycle = Node()
            cycle.me = cycle
            gone = weakref.ref(cycle)
            kept = Node()
            del cycle
        assert gc.isenabled()
        assert gone() is None  # collected before the freeze, never kept forever
        assert gc.get_freeze_count() > before and kept is not None
    finally:
        gc.unfreeze()


def test_an_fsdp2_that_cannot_be_imported_is_left_to_the_train_part():
    """prefetch_train_imports loads FSDP2 among the rank's imports; where it cannot be imported
    (torch < 2.4) the rank's other parts still run: the train part names the ImportError
    itself (harness.worker.group.fsdp_api), not the shared import step for every part."""
    from harness.worker.parts import prefetch_train_imports

    def missing() -> None:
        raise ImportError("FSDP2 (fully_shard) not found; needs torch >= 2.4")

    prefetch_train_imports(missing)  # no raise
    called = []
    prefetch_train_imports(lambda: called.append(1))
    assert called == [1]
