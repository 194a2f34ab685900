"""scripts/device-check (harness/devicecheck): a step that ran and brought back no figure, or not
every figure it was meant to, is FAILED; the worker's start-up, the training runs' judgement
(the perturbed run must be caught), nccl-tests through the fake tool with -J, and the profile
patch. The whole rehearsal (`--rehearse`: 2 gloo ranks, the fakes) runs in scripts/test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.base.deadline import Deadline
from harness.devicecheck import launch, machine, patch, record
from harness.devicecheck.context import DEVICE, REHEARSE, Context
from harness.devicecheck.record import Figure, StepResult, settle
from harness.profiles.table import get_profile

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device-check"


def _ctx(tmp_path: Path, mode: str = REHEARSE, profile: str = "local-cpu", **kw) -> Context:
    kw.setdefault("env", {**os.environ, "PYTHONPATH": str(ROOT)})
    return Context(out=tmp_path, mode=mode, profile=get_profile(profile),
                   deadline=Deadline.after(120.0, "the test's budget"), **kw)


def test_list_names_every_step_in_order():
    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True,
                         text=True, timeout=60, check=True)
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names == ["versions", "nvml", "worker", "train", "nccl-tests", "nccl-tests-nvls",
                     "dcgm", "nvlink-counters"]


def test_out_is_required_and_unknown_steps_are_refused(tmp_path):
    from harness.devicecheck.run import main

    with pytest.raises(SystemExit) as no_out:
        main([])
    assert no_out.value.code == 2
    with pytest.raises(SystemExit) as unknown:
        main([str(tmp_path), "--only", "versions,nope"])
    assert unknown.value.code == 2


# --- a step without its figures is failed -------------------------------------------------------

def test_a_step_that_brought_back_no_figure_failed():
    assert settle(StepResult("x", "y")).outcome == "failed"
    assert settle(StepResult("x", "y")).problems == ["the step ran and brought back no figure"]
    ok = settle(StepResult("x", "y", figures=[Figure("busbw_gb_s", 480.0, "GB/s", 1 << 30)]),
                [("busbw_gb_s", "", 1 << 30)])
    assert ok.outcome == "ok"


def test_one_missing_figure_fails_the_step_and_is_named():
    figures = [Figure("import_s", 2.0, "s", where="rank 0"), Figure("init_s", 1.0, "s",
                                                                    where="rank 0")]
    expected = [("import_s", "rank 0", None), ("init_s", "rank 0", None),
                ("first_collective_s", "rank 0", None)]
    result = settle(StepResult("worker", "w", figures=list(figures)), expected)
    assert result.outcome == "failed"
    assert result.problems == ["missing figures: first_collective_s [rank 0]"]
    assert settle(StepResult("worker", "w", figures=figures[:1]), expected[:1]).outcome == "ok"


def test_a_step_whose_program_prints_nothing_is_failed(tmp_path, monkeypatch):
    """What the old script did: `python -m harness.probes.train_step` exited 0, printed nothing,
    and the step said OK. The versions step whose child prints nothing must fail."""
    monkeypatch.setattr(machine, "VERSIONS", "pass")
    result = machine.versions_step(_ctx(tmp_path))
    assert result.outcome == "failed"
    assert result.figures == []
    assert any("no versions line" in p for p in result.problems)
    assert "the step ran and brought back no figure" in result.problems


def test_every_figure_has_a_unit_and_figures_json_has_the_steps(tmp_path):
    steps = [settle(StepResult("nccl-tests", "n", figures=[
        Figure("busbw_gb_s", 460.5, "GB/s", size_bytes=16 << 30)]),
        [("busbw_gb_s", "", 16 << 30)]),
        StepResult("dcgm", "d", "skipped", reason="dcgmi is not installed")]
    record.write_outputs(tmp_path, {"mode": "device", "gpu": "NVIDIA H100 80GB HBM3"}, steps)
    doc = json.loads((tmp_path / "figures.json").read_text())
    assert [(s["step"], s["outcome"]) for s in doc["steps"]] == [("nccl-tests", "ok"),
                                                                  ("dcgm", "skipped")]
    assert doc["steps"][0]["figures"] == [{"name": "busbw_gb_s", "value": 460.5,
                                           "unit": "GB/s", "size_bytes": 16 << 30}]
    summary = (tmp_path / "summary.txt").read_text()
    assert "busbw_gb_s @ 16 GiB = 460.5 GB/s" in summary
    assert "dcgm                   SKIPPED  dcgmi is not installed" in summary


# --- the worker launch: start-up per rank ---------------------------------------------------------

def _ready(rank: int, **values) -> str:
    return json.dumps({"schema": "gpu-preflight.worker/v1", "part": "worker", "event": "ready",
                       "rank": rank, "wall": 1000.0 + rank, "launched": 990.0, **values})


def test_startup_per_rank_and_a_missing_rank_named():
    lines = [_ready(r, import_s=3.0, init_s=9.5, first_collective_s=0.4) for r in range(2)]
    figures, expected = launch.startup_figures("\n".join(lines), 2)
    assert {(f.name, f.where): f.value for f in figures} == {
        ("import_s", "rank 0"): 3.0, ("init_s", "rank 0"): 9.5,
        ("first_collective_s", "rank 0"): 0.4, ("import_s", "rank 1"): 3.0,
        ("init_s", "rank 1"): 9.5, ("first_collective_s", "rank 1"): 0.4, ("startup_s", ""): 11.0}
    assert settle(StepResult("worker", "w", figures=figures), expected).outcome == "ok"
    figures, expected = launch.startup_figures(lines[0], 2)  # rank 1 never said it was ready
    result = settle(StepResult("worker", "w", figures=figures), expected)
    assert result.outcome == "failed"
    assert "import_s [rank 1], init_s [rank 1], first_collective_s [rank 1]" in result.problems[0]


# --- the training runs: the perturbed run must be caught ------------------------------------------

def _result(update: float, loss_rel: float = 1e-5, losses=(5.8, 5.0), seed: int = 1234) -> dict:
    return {"losses": list(losses), "loss_max_rel_diff": loss_rel, "update_rel_diff": update,
            "param_max_abs_diff": 1e-4, "step_time_s": 0.1, "peak_mem_mib": 300.0,
            "model": {"seed": seed}, "ranks": [{"rank": 0, "max_abs_vs_rank0": 0.0}],
            "tolerance": {"loss_rel": 1e-2, "update_rel": 5e-2}}


def test_reference_gaps_name_what_a_run_fails():
    assert launch.reference_gaps(_result(2e-3)) == []
    assert launch.reference_gaps(_result(0.28)) == ["update_rel_diff 0.28 > 0.05"]
    assert launch.reference_gaps(_result(float("nan"))) == ["update_rel_diff nan > 0.05"]
    assert launch.run_problems(_result(2e-3, losses=(5.0, 5.1))) == [
        "loss did not decrease: 5 -> 5.1"]


def test_the_fp8_step_is_judged_on_its_bf16_comparison():
    """An FP8 result carries the bf16 comparison (the corruption judgement) beside its own gap
    (the stack check): the gaps are judged on the comparison."""
    fp8 = {**_result(0.2), "comparison": _result(2e-3)}
    assert launch.reference_gaps(fp8) == []
    assert launch.reference_gaps({**_result(2e-3), "comparison": _result(0.3)}) == [
        "update_rel_diff 0.3 > 0.05"]
    names = {f.name for f in launch._result_figures(fp8)}
    assert {"stack_update_rel_diff", "update_rel_diff"} <= names


def test_perturbed_scale_puts_the_fault_well_above_the_tolerance():
    assert launch.perturbed_scale(0.05, 2) == 0.4
    assert launch.perturbed_scale(0.05, 8) == 1.6


# --- nccl-tests through the fake tool, with -J ---------------------------------------------------

def test_nccl_tests_step_reads_the_gate_sweep_from_the_json(tmp_path, monkeypatch):
    from tests.device_rehearsal import prepare

    monkeypatch.setattr(os, "environ", dict(os.environ))
    prepare(tmp_path)
    from harness.devicecheck.nccl import nccl_tests_step

    ctx = _ctx(tmp_path, nvls=True)
    result = nccl_tests_step(ctx)
    assert result.outcome == "ok", result.problems
    sizes = sorted(f.size_bytes for f in result.figures if f.name == "busbw_gb_s")
    assert sizes == [2 << 30, 4 << 30, 8 << 30, 16 << 30]  # gate/8 .. gate (16 GiB)
    assert Figure("json_output", True, "", where="-J") in result.figures
    assert " -J " in "\n".join(ctx.log)  # the build lists -J: the command asks for it
    nvls = nccl_tests_step(ctx, nvls=True)
    assert nvls.step == "nccl-tests-nvls" and nvls.outcome == "ok"
    ctx.nvls = False
    assert nccl_tests_step(ctx, nvls=True).outcome == "skipped"


# --- the profile patch ---------------------------------------------------------------------------

def _figures_doc() -> dict:
    machine = {"mode": "device", "gpu": "NVIDIA H100 80GB HBM3", "driver": "550.90.07",
               "date": "2027-01-05", "host": "ip-10-0-0-1", "ranks": 8, "gpus": 8,
               "profile": "p5.48xlarge", "sku": "H100-SXM5-80GB", "nvlink": True}
    steps = [
        {"step": "nccl-tests", "outcome": "ok", "figures": [
            {"name": "busbw_gb_s", "value": 300.0, "unit": "GB/s", "size_bytes": 2 << 30},
            {"name": "busbw_gb_s", "value": 470.0, "unit": "GB/s", "size_bytes": 16 << 30}]},
        {"step": "worker", "outcome": "ok", "figures": [
            {"name": "matmul_tflops", "value": 700.0, "unit": "TFLOP/s", "where": "GPU 0"},
            {"name": "matmul_tflops", "value": 650.0, "unit": "TFLOP/s", "where": "GPU 3"},
            {"name": "startup_s", "value": 41.2, "unit": "s"}]},
        {"step": "nccl-tests-nvls", "outcome": "failed", "figures": [
            {"name": "busbw_gb_s", "value": 10.0, "unit": "GB/s", "size_bytes": 16 << 30}]},
    ]
    return {"schema": record.FIGURES_SCHEMA, "machine": machine, "steps": steps}


def test_profile_patch_cites_where_each_floor_was_measured(tmp_path):
    from harness.profiles.table import load_profile_file

    text = patch.profile_patch(_figures_doc())
    assert "# measured on NVIDIA H100 80GB HBM3, driver 550.90.07, 2027-01-05" in text
    assert "nvlink_busbw_gb_s_min = 399.5" in text  # 0.85 x 470 at the gate (16 GiB)
    assert "min_bf16_tflops = 552.5" in text  # 0.85 x the lowest GPU
    assert "nvls_busbw_gb_s_min" not in text  # from a failed step: not a measurement
    assert "# worker start-up (torchrun to every rank ready): 41.2 s" in text
    path = tmp_path / "patch.toml"
    path.write_text(text)
    p5 = load_profile_file(path)["p5.48xlarge"]
    assert p5.nvlink_busbw_gb_s_min == 399.5
    assert p5.sources["nvlink_busbw_gb_s_min"].startswith(
        "measured on NVIDIA H100 80GB HBM3, driver 550.90.07, 2027-01-05: nccl-tests "
        "all_reduce_perf busbw 470.0 GB/s at 16 GiB on 8 GPUs")
    assert "nvlink_busbw_gb_s_min" not in p5.estimates


def test_profile_patch_script_reads_figures_json(tmp_path):
    path = tmp_path / "figures.json"
    path.write_text(json.dumps(_figures_doc()))
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile-patch"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '[profiles."p5.48xlarge"]' in out.stdout
    bad = subprocess.run([sys.executable, str(ROOT / "scripts" / "profile-patch"),
                          str(tmp_path / "none.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "profile-patch:" in bad.stderr


def test_device_mode_expects_the_nccl_log_and_the_gpu_figures(tmp_path):
    ctx = _ctx(tmp_path, DEVICE, "p5.48xlarge")
    assert (ctx.device, ctx.nproc) == ("cuda", 8)
    assert _ctx(tmp_path).device == "cpu" and _ctx(tmp_path).nproc == 2
