"""The tiny FSDP2 training step: recipe selection behind a fake capability and a fake TE module,
real 2-rank gloo runs under torchrun (clean, and with injected faults), and the PF-TRAIN checks
judging real and recorded runs through the harness's pytest plugin."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.parsers.train_step import parse_train_step
from harness.probes.train_step import (
    TOLERANCES,
    Fault,
    TeInfo,
    parse_fault,
    probe_te,
    select_recipe,
)
from harness.worker.launch import run_train_step
from tests.conftest import copy_check_file, run_checks
from tests.train_canned import DATA, canned, check_results

ROOT = Path(__file__).resolve().parents[1]
MISMATCH = (DATA / "te_version_mismatch.txt").read_text().strip().splitlines()[-1]
TE_24 = TeInfo(True, version="2.4.0")
TE_113 = TeInfo(True, version="1.13.0")
NO_TE = TeInfo(False, error=MISMATCH)

# --- recipe selection: pure, fake capability and TE ------------------------------------------


@pytest.mark.parametrize(
    ("requested", "capability", "te", "path", "recipe", "note"),
    [
        (None, None, NO_TE, "torch", "fp32", ""),
        ("fp8-delayed", None, NO_TE, "torch", "fp32", "no GPU: plain torch fp32"),
        ("fp8-delayed", (9, 0), TE_24, "te", "fp8-delayed", ""),
        ("fp8-current", (9, 0), TE_24, "te", "fp8-current", ""),
        ("fp8-current", (9, 0), TE_113, "te", "fp8-delayed",
         "fp8-current needs TransformerEngine >= 2.2, found 1.13.0"),
        ("mxfp8", (10, 0), TE_24, "te", "mxfp8", ""),
        ("mxfp8", (9, 0), TE_24, "te", "fp8-delayed", "mxfp8 needs sm100+, GPU is sm90"),
        ("fp8-delayed", (8, 0), TE_24, "te", "bf16", "fp8-delayed needs sm89+, GPU is sm80"),
        ("bf16", (8, 0), TE_24, "te", "bf16", ""),
        ("bf16", (7, 0), TE_24, "torch", "fp32", "bf16 needs sm80+, GPU is sm70"),
        (None, (10, 0), TE_24, "te", "mxfp8", ""),
        (None, (10, 3), TE_24, "te", "mxfp8", ""),
        # sm_120 (RTX PRO 6000 Blackwell): TE refuses MXFP8 there; current scaling is its default
        (None, (12, 0), TE_24, "te", "fp8-current", ""),
        ("mxfp8", (12, 0), TE_24, "te", "fp8-current",
         "mxfp8 runs on sm10x only (TransformerEngine: not supported on 12.0+ yet), GPU is sm120"),
        ("fp8-delayed", (12, 0), TE_24, "te", "fp8-delayed", ""),
        ("mxfp8", (12, 0), TE_113, "te", "fp8-delayed",
         "mxfp8 runs on sm10x only (TransformerEngine: not supported on 12.0+ yet), GPU is sm120"),
        (None, (9, 0), TE_24, "te", "fp8-delayed", ""),
        (None, (8, 9), TE_24, "te", "fp8-delayed", ""),
        (None, (8, 0), TE_24, "te", "bf16", ""),
        (None, (7, 0), TE_24, "torch", "fp32", ""),
        (None, (9, 0), NO_TE, "torch", "bf16", ""),
        ("fp8-delayed", (9, 0), NO_TE, "torch", "bf16",
         f"TransformerEngine not importable: {MISMATCH}"),
    ],
)
def test_select_recipe(requested, capability, te, path, recipe, note):
    plan = select_recipe(requested, capability, te)
    assert (plan.path, plan.recipe, plan.note) == (path, recipe, note)
    assert plan.as_requested == (note == "")


def test_select_recipe_cpu_bf16_and_unknown_recipe():
    assert select_recipe(None, None, NO_TE, cpu_dtype="bf16").recipe == "bf16"
    with pytest.raises(ValueError, match="te_recipe 'fp4' is not one of"):
        select_recipe("fp4", (9, 0), TE_24)


def test_probe_te_catches_any_exception_from_the_import():
    def mismatched(name: str):
        raise AssertionError(MISMATCH.removeprefix("AssertionError: "))

    info = probe_te(mismatched)
    assert not info.available
    assert info.error == MISMATCH
    assert select_recipe("fp8-delayed", (9, 0), info).note.endswith(
        "TransformerEngine package version mismatch. Found transformer_engine_torch v1.13.0, "
        "transformer-engine v2.4.0, and transformer-engine-cu12 v2.4.0. Install "
        "transformer-engine using 'pip3 install transformer-engine[pytorch]==VERSION'")


def test_probe_te_reads_the_stub_modules_version():
    modules = {"transformer_engine.pytorch": types.SimpleNamespace(),
               "transformer_engine": types.SimpleNamespace(__version__="2.1.0+abc")}
    info = probe_te(modules.__getitem__)
    assert info == TeInfo(True, version="2.1.0+abc")
    assert select_recipe("fp8-current", (9, 0), info).recipe == "fp8-delayed"


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        (None, None),
        ("  ", None),
        ("nan", Fault("nan")),
        ("nan,rank=1,step=2", Fault("nan", rank=1, step=2)),
        ("grad-perturb,scale=0.5", Fault("grad-perturb", scale=0.5)),
    ],
)
def test_parse_fault(text, fault):
    assert parse_fault(text) == fault


@pytest.mark.parametrize(
    ("text", "error"),
    [("bitflip", "fault 'bitflip' is not one of"), ("nan,rank", "expected rank=N"),
     ("nan,step=x", "'x' is not a number")],
)
def test_parse_fault_errors(text, error):
    with pytest.raises(ValueError, match=error):
        parse_fault(text)


@pytest.mark.parametrize(
    ("profile", "tier", "timeout_s"),
    [("local-cpu", "preflight", 110.0), ("p5.48xlarge", "preflight", 90.0),
     ("p5.48xlarge", "certify", 90.0)],
)
def test_launch_timeout_inside_the_check_timeout(profile, tier, timeout_s):
    from harness.fixtures.worker import train_step_timeout_s
    from harness.profiles.table import get_profile

    assert train_step_timeout_s(get_profile(profile), tier) == timeout_s


def test_modules_import_without_torch():
    code = ("import sys, harness.probes.train_step, harness.parsers.train_step, "
            "harness.fixtures.training, checks.test_training; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "False"


# --- real runs: 2 gloo ranks under torchrun ---------------------------------------------------


def _run(**options):
    return run_train_step(2, timeout_s=120, device="cpu", **options)


def test_clean_run_matches_reference_and_exits_cleanly():
    run = _run()
    assert run.proc.ok, run.proc.output[-3000:]
    result = run.output.result
    assert (result["path"], result["recipe"], result["backend"]) == ("torch", "fp32", "gloo")
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert result["losses"][-1] < result["losses"][0]
    assert result["loss_max_rel_diff"] <= TOLERANCES["fp32"].loss_rel
    assert result["update_rel_diff"] <= TOLERANCES["fp32"].update_rel
    assert {r["max_abs_vs_rank0"] for r in result["ranks"]} == {0.0}
    assert not run.output.aborted_at_exit and not run.output.errors


def test_corrupted_replica_named():
    result = _run(fault="corrupt-replica,rank=1").output.result
    assert result["ranks"][0]["max_abs_vs_rank0"] == 0.0
    assert result["ranks"][1]["max_abs_vs_rank0"] == pytest.approx(1e-3, rel=1e-3)
    assert result["ranks"][1]["checksum"] != result["ranks"][0]["checksum"]


def test_oom_on_one_rank_named_with_its_allocation_size():
    run = _run(fault="oom,rank=1,step=0")
    assert run.proc.returncode != 0 and run.output.result is None
    failure = run.output.failure
    assert (failure.kind, failure.rank) == ("cuda_oom", 1)
    assert failure.message.startswith("CUDA out of memory: tried to allocate 2.00 GiB on GPU 1")


def test_hung_rank_becomes_a_timeout_error_not_a_hang():
    run = _run(fault="hang,rank=1,step=1", pg_timeout_s=4)
    assert not run.proc.timed_out
    assert run.output.failure.kind == "collective_timeout"
    assert run.output.failure.rank == 0
    assert "Timed out waiting 4000ms" in run.output.failure.message


@pytest.mark.gpu
def test_te_path_on_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    if not probe_te().available:
        pytest.skip(f"TransformerEngine not importable: {probe_te().error}")
    run = run_train_step(torch.cuda.device_count(), timeout_s=180, device="cuda")
    assert run.proc.ok, run.proc.output[-3000:]
    result = run.output.result
    assert result["path"] == "te" and result["backend"] == "nccl"
    assert result["update_rel_diff"] <= result["tolerance"]["update_rel"]


# --- the checks, through the plugin -----------------------------------------------------------


def test_checks_pass_on_a_real_cpu_run(suite):
    # a generous budget: this test must not depend on how busy the machine is
    (suite.path / "profiles.toml").write_text(
        '[profiles."slow-cpu"]\nbase = "local-cpu"\ntrain_step_budget_s = 600.0\n')
    got = check_results(suite, "--preflight-profile", "slow-cpu",
                         "--preflight-profile-file", "profiles.toml")
    assert {k: v[0] for k, v in got.items()} == {
        "PF-TRAIN-001": "pass", "PF-TRAIN-002": "skip", "PF-TRAIN-003": "pass",
        "PF-TRAIN-004": "pass", "PF-TRAIN-005": "pass", "PF-TRAIN-006": "pass",
        "PF-TRAIN-007": "pass", "PF-TRAIN-008": "pass",
    }


def test_the_worker_launch_is_not_cut_at_the_first_checks_timeout(suite):
    """The launch has its own deadline scope: with a per-check timeout of 3 s (far less than 2
    ranks take to import torch and start), the check whose setup launches the worker gets 3 s
    plus the launch's bound, printed at start; without it PF-TRAIN-001 timed out."""
    (suite.path / "profiles.toml").write_text(
        '[profiles."slow-cpu"]\nbase = "local-cpu"\ntrain_step_budget_s = 600.0\n')
    copy_check_file(suite, "test_training.py")
    res, by_id = run_checks(suite, "--preflight-profile", "slow-cpu", "--preflight-profile-file",
                            "profiles.toml", "--timeout", "3")
    assert {k: r["outcome"] for k, r in by_id.items()}["PF-TRAIN-001"] == "pass", \
        by_id["PF-TRAIN-001"]["message"]
    res.stdout.fnmatch_lines(["gpu-preflight worker launch: train on 2 ranks, bound * s (start-up "
                              "and each part's own limit), in PF-TRAIN-001's setup: its timeout "
                              "3 s + * s"])


def test_perturbed_gradient_on_one_rank_fails_the_reference_checks(suite, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TRAIN_FAULT", "grad-perturb,rank=1,scale=0.05")
    got = check_results(suite, "--preflight-profile", "local-cpu")
    outcome, message = got["PF-TRAIN-006"]
    assert outcome == "fail"
    assert message.startswith(
        "[PF-TRAIN-006] relative error of the parameter update vs the unsharded reference 0.0")
    assert message.endswith("> 0.0001 required for local-cpu (fp32 tolerance); possible silent "
                            "data corruption or a stack bug: rerun on another node; if it follows "
                            "this node, drain it and run `dcgmi diag -r 3`; if it follows the "
                            "image, check the torch / NCCL / TransformerEngine versions")
    assert got["PF-TRAIN-005"][0] == "fail"
    assert got["PF-TRAIN-001"][0] == got["PF-TRAIN-007"][0] == "pass"


def test_nan_loss_on_one_rank_fails_the_finite_check(suite, monkeypatch):
    monkeypatch.setenv("PREFLIGHT_TRAIN_FAULT", "nan,rank=1,step=2")
    got = check_results(suite, "--preflight-profile", "local-cpu")
    outcome, message = got["PF-TRAIN-003"]
    assert outcome == "fail"
    assert message.startswith("[PF-TRAIN-003] ranks with a non-finite loss: 2 found, none "
                              "allowed for local-cpu: rank 0 (")
    assert "cpu): loss nan from step 3; rank 1 (" in message
    assert "cpu): loss nan from step 2; possible silent data corruption" in message
    assert got["PF-TRAIN-004"][0] == "fail"


def test_oom_run_fails_completion_check_with_allocation(suite):
    canned(suite, "oom_torch25_fsdp.txt", 1)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-001"] == ("fail", (
        "[PF-TRAIN-001] training step failed: CUDA out of memory: tried to allocate 388.00 MiB "
        "on GPU 0 (9.68 GiB total, 95.75 MiB free); another process holds GPU memory "
        "(nvidia-smi --query-compute-apps=pid,used_memory --format=csv): stop it or reset the GPU"))
    assert got["PF-TRAIN-005"] == ("error", (
        "[PF-TRAIN-005] training step failed: CUDA out of memory: tried to allocate 388.00 MiB "
        "on GPU 0 (9.68 GiB total, 95.75 MiB free) (see PF-TRAIN-001)"))


def test_abort_at_exit_fails_completion_check(suite):
    canned(suite, "abort_at_exit_gloo.txt", 1)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-001"][0] == "fail"
    assert got["PF-TRAIN-001"][1].startswith(
        "[PF-TRAIN-001] training step finished but torchrun exited with status 1: a rank "
        "aborted at exit (SIGABRT)")
    assert got["PF-TRAIN-006"][0] == "pass"


def _te_missing(result: dict) -> dict:
    return {**result, "device_type": "cuda", "path": "torch", "recipe": "bf16",
            "requested_recipe": "fp8-delayed",
            "recipe_note": f"TransformerEngine not importable: {MISMATCH}",
            "te": {"available": False, "version": None, "error": MISMATCH},
            "tolerance": {"loss_rel": 1e-2, "update_rel": 5e-2}}


def test_te_required_but_absent_fails_with_the_import_error(suite):
    canned(suite, "result_cpu_gloo.txt", 0, edit=_te_missing)
    (suite.path / "profiles.toml").write_text(
        '[profiles."p5-te"]\nbase = "p5.48xlarge"\nte_required = true\n')
    got = check_results(suite, "--preflight-profile", "p5-te",
                         "--preflight-profile-file", "profiles.toml")
    assert got["PF-TRAIN-002"] == ("fail", (
        "[PF-TRAIN-002] TransformerEngine required for p5-te, the step ran plain torch bf16: "
        f"{MISMATCH}; install a TransformerEngine that imports with this torch (see the import "
        "error), or fix the profile's te_recipe for this GPU"))


def test_te_optional_and_absent_only_warns(suite):
    canned(suite, "result_cpu_gloo.txt", 0, edit=_te_missing)
    got = check_results(suite, "--preflight-profile", "p5.48xlarge")
    outcome, message = got["PF-TRAIN-002"]
    assert outcome == "warn"
    assert message.startswith("[PF-TRAIN-002] recipe bf16 ran, fp8-delayed required for "
                              "p5.48xlarge (TransformerEngine not importable: AssertionError")


def test_slow_step_fails_the_budget_check(suite):
    canned(suite, "result_cpu_gloo.txt", 0, duration_s=75.0)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-008"] == ("fail", (
        "[PF-TRAIN-008] training step check wall time 75.0 s > 60.0 s required for local-cpu; "
        "look for other processes on the GPUs/CPUs; compare with the PF-GPU checks"))
    assert got["PF-TRAIN-001"][0] == "pass"


def test_parse_of_canned_result_used_above_is_clean():
    assert parse_train_step((DATA / "result_cpu_gloo.txt").read_text()).result is not None


def _fp8(stack_gap: float, judged_gap: float | None, world: int = 2):
    """An fp8-delayed result: its own (stack) gap, and its bf16 comparison's (None: none)."""
    def edit(result: dict) -> dict:
        comparison = None if judged_gap is None else {
            "recipe": "bf16", "loss_max_rel_diff": judged_gap, "update_rel_diff": judged_gap,
            "param_max_abs_diff": 1e-4, "tolerance": {"loss_rel": 1.7e-3, "update_rel": 1.7e-2,
                                                      "basis": "error model"}}
        return {**result, "recipe": "fp8-delayed", "loss_max_rel_diff": stack_gap,
                "update_rel_diff": stack_gap, "world_size": world, "comparison": comparison,
                "tolerance": {"loss_rel": 5e-2, "update_rel": 2.5e-1,
                              "basis": "stack check (fp8-delayed on both sides): not judged"}}
    return edit


def test_an_fp8_step_is_judged_on_its_bf16_comparison(suite):
    """Corruption is judged where it can fail: a large FP8 gap (same recipe on both sides, the
    stack check) is reported, not judged; the bf16 comparison beside it is, and fails."""
    canned(suite, "result_cpu_gloo.txt", 0, edit=_fp8(0.3, 1e-3))
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-005"][0] == got["PF-TRAIN-006"][0] == "pass"
    canned(suite, "result_cpu_gloo.txt", 0, edit=_fp8(1e-3, 0.05))
    got = check_results(suite, "--preflight-profile", "local-cpu")
    outcome, message = got["PF-TRAIN-006"]
    assert outcome == "fail"
    assert message.startswith("[PF-TRAIN-006] relative error of the parameter update vs the "
                              "unsharded reference 0.05 > 0.017 required for local-cpu (bf16 "
                              "tolerance)")


def test_an_fp8_step_without_its_bf16_comparison_is_an_error(suite):
    canned(suite, "result_cpu_gloo.txt", 0, edit=_fp8(1e-3, None))
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-005"] == ("error", "[PF-TRAIN-005] the fp8-delayed step's result has no "
                                   "bf16 comparison: an FP8 gap alone cannot judge corruption "
                                   "(see PF-TRAIN-001)")


def test_one_rank_cannot_measure_a_sharding_tolerance(suite):
    canned(suite, "result_cpu_gloo.txt", 0, edit=_fp8(0.0, 0.0, world=1))
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-005"][0] == got["PF-TRAIN-006"][0] == "skip"
    assert "1 rank: the sharded step and the reference are the same computation" in \
        got["PF-TRAIN-006"][1]


def test_a_result_without_a_judged_fact_is_an_error_naming_it(suite):
    """A result that lacks what a check judges (harness.parsers.train_step.unread_in_result,
    which `inspect train-step` lists too) is an error naming it, never a KeyError."""
    def edit(result: dict) -> dict:
        return {k: v for k, v in result.items() if k != "loss_max_rel_diff"}

    canned(suite, "result_cpu_gloo.txt", 0, edit=edit)
    got = check_results(suite, "--preflight-profile", "local-cpu")
    assert got["PF-TRAIN-005"][0] == "error"
    assert "training step result has no loss_max_rel_diff: not judged" in got["PF-TRAIN-005"][1]
