"""A tiny FSDP2 (+ TransformerEngine) training step on every rank of this node, judged fact by
fact: it ran and exited cleanly, on the stack the profile requires, with finite and decreasing
loss, matching an unsharded reference, identical replicas, within the time budget."""

from __future__ import annotations

import math
from typing import Any

from harness.base.errors import ProbeError
from harness.checking import check, expect, expect_none, fail, measure, not_applicable, warn
from harness.probes.train_step import FP8_RECIPES, TrainStepRun
from harness.profiles.model import Profile

_SDC = ("possible silent data corruption or a stack bug: rerun on another node; if it follows "
        "this node, drain it and run `dcgmi diag -r 3`; if it follows the image, check the "
        "torch / NCCL / TransformerEngine versions")

#: Remedy per failure kind (harness.parsers.train_step.KIND_ORDER).
REMEDIES = {
    "no_torch": "run preflight with the training image's python (the one with torch), or "
    "install torch there",
    "no_gpu": "the profile expects GPUs on this node: check the instance type, the container's "
    "GPU access (--gpus all / the device plugin) and that torch is a CUDA build",
    "te_import": "install the TransformerEngine build made for this torch and CUDA "
    "(`pip install transformer-engine[pytorch]==VERSION`, one version for every TE package), "
    "or use the image's own",
    "cuda_oom": "another process holds GPU memory (nvidia-smi --query-compute-apps=pid,"
    "used_memory --format=csv): stop it or reset the GPU",
    "nccl_timeout": "a rank hung in a collective: check NCCL_DEBUG=INFO output, the fabric "
    "(PF-NET checks) and for stuck processes on this node",
    "nccl_error": "rerun with NCCL_DEBUG=INFO; check the fabric (PF-NET checks) and NCCL_* "
    "variables (PF-ENV checks)",
    "collective_timeout": "a rank hung in a collective: look for a stuck or slow process on "
    "this node",
    "abort_at_exit": "a rank aborted at teardown: report it with the log (torch version, "
    "launcher)",
    "peer_lost": "a rank died during a collective: see the first rank's error in the log",
    "exception": "see the log of the step for the full traceback",
}


def _outcome_failure(run: TrainStepRun) -> str | None:
    """Why the step produced no usable result (None when it did)."""
    if run.output is not None and run.output.result is not None:
        return None
    if run.not_finished is not None and (run.output is None or run.output.failure is None):
        return f"training step did not finish: {run.not_finished}"
    if run.proc.timed_out:
        return f"training step did not finish within {run.proc.timeout_s:g} s and was killed"
    if run.output is not None and run.output.failure is not None:
        failure = run.output.failure
        where = f" on rank {failure.rank}" if failure.rank is not None else ""
        return f"training step failed{where}: {failure.message}"
    return f"training step produced no result ({run.parse_error}): {run.proc.describe()}"


def _result(run: TrainStepRun) -> dict[str, Any]:
    """Rank 0's result; ProbeError (outcome error) when the step did not produce one."""
    why = _outcome_failure(run)
    if why is not None:
        raise ProbeError(f"{why} (see PF-TRAIN-001)")
    result = run.output.result
    # imported here: a session whose training checks do not run loads no log parser
    from harness.parsers.train_step import unread_in_result
    if missing := unread_in_result(result):  # never a KeyError, never a guess
        raise ProbeError(f"rank 0's training step result has no {', '.join(missing[:12])}: "
                         "not judged")
    return result


def _judged(result: dict[str, Any]) -> dict[str, Any]:
    """The comparison that judges corruption: the bf16 one beside an FP8/MXFP8 step, else the
    step's own. Not applicable on one rank (the sharded step and the reference are then the
    same computation); a ProbeError for an FP8 step without its bf16 comparison."""
    if result.get("world_size", 2) < 2:
        not_applicable("1 rank: the sharded step and the reference are the same computation, "
                       "so no sharding fault can show; the comparison needs >= 2 ranks")
    comparison = result.get("comparison")
    if comparison:
        for key in ("loss_max_rel_diff", "update_rel_diff"):  # the stack check's, not judged
            measure(f"{result['recipe']} step {key} (same recipe both sides, not judged)",
                    result.get(key), name="step_same_recipe_both_sides_not_judged")
        return comparison
    if result["recipe"] in FP8_RECIPES:
        raise ProbeError(f"the {result['recipe']} step's result has no bf16 comparison: an FP8 "
                         "gap alone cannot judge corruption (see PF-TRAIN-001)")
    return result


def _within_tolerance(judged: dict[str, Any], what: str, key: str, limit_key: str) -> None:
    """Judge the comparison's `key` against its recipe's tolerance (an error model for bf16,
    measured for fp32: harness.probes.train_step.TOLERANCES); NaN fails."""
    tolerance = judged["tolerance"]
    expect(what, judged[key], "<=", tolerance[limit_key],
           detail=f"{judged.get('recipe', '?')} tolerance", name=key)


@check(
    "PF-TRAIN-001",
    family="training",
    title="Tiny FSDP training step completes on every rank and exits cleanly",
    why="Proves the stack the job uses (torch.distributed, FSDP2, NCCL, TransformerEngine) runs "
    "a real forward/backward/optimizer step on every GPU, not only that libraries import; names "
    "the failure (TE import error, CUDA OOM, NCCL error or timeout, abort at exit).",
    remedy="see the failure named; the step's full log is in the check's output",
    exclusive=True,
)
def test_train_step_completes(train_step: TrainStepRun):
    why = _outcome_failure(train_step)
    if why is not None:
        failure = train_step.output.failure if train_step.output is not None else None
        fail(why, remedy=REMEDIES.get(failure.kind if failure else "", REMEDIES["exception"]))
    result = train_step.output.result
    measure("stack", f"{result['path']} {result['recipe']} on {result['device_type']}",
            name="stack")
    expect("ranks that reported", len(result["ranks"]), "==", train_step.nproc, "ranks",
           name="ranks_that_reported")
    if train_step.proc.returncode != 0:
        abort = "a rank aborted at exit (SIGABRT)" if train_step.output.aborted_at_exit else (
            train_step.proc.describe())
        fail(f"training step finished but torchrun exited with status "
             f"{train_step.proc.returncode}: {abort}", remedy=REMEDIES["abort_at_exit"])


@check(
    "PF-TRAIN-002",
    title="Training step ran TransformerEngine with the profile's precision recipe",
    why="A job that expects FP8/MXFP8 but silently runs bf16 (TE missing, too old, or the GPU "
    "lacks the recipe) trains slower or differently than planned.",
    remedy="install a TransformerEngine that imports with this torch (see the import error), "
    "or fix the profile's te_recipe for this GPU",
    exclusive=True,
)
def test_train_step_te_recipe(profile: Profile, train_step: TrainStepRun):
    if not profile.te_required and profile.te_recipe is None:
        not_applicable("the profile requires no TransformerEngine recipe")
    result = _result(train_step)
    ran = f"{result['path']} {result['recipe']}"
    measure("stack", ran, name="stack")
    te = result["te"]
    if profile.te_required and result["path"] != "te":
        fail(f"TransformerEngine required for {profile.name}, the step ran plain torch "
             f"{result['recipe']}: {te.get('error') or result['recipe_note']}")
    if profile.te_recipe and result["recipe"] != profile.te_recipe:
        body = (f"recipe {result['recipe']} ran, {profile.te_recipe} required for "
                f"{profile.name} ({result['recipe_note']})")
        if result["path"] == "te":
            fail(body)
        warn(body)


def _first_nonfinite(losses: list[float]) -> tuple[int, float] | None:
    return next(((i, v) for i, v in enumerate(losses) if not math.isfinite(v)), None)


@check(
    "PF-TRAIN-003",
    title="Training loss is finite on every rank and step",
    why="From a fixed seed and a tiny model a NaN/Inf loss is not bad luck: it points at the "
    "GPU (silent data corruption, bad HBM) or the precision stack.",
    remedy=_SDC,
    exclusive=True,
)
def test_train_loss_finite(train_step: TrainStepRun):
    offenders = []
    for facts in _result(train_step)["ranks"]:
        bad = _first_nonfinite(facts["local_losses"])
        if bad is not None:
            offenders.append(f"rank {facts['rank']} ({facts['host']} {facts['device']}): loss "
                             f"{bad[1]} from step {bad[0]}")
    expect_none("ranks with a non-finite loss", offenders, name="ranks_with_a_non_finite_loss")


@check(
    "PF-TRAIN-004",
    family="training",
    title="Training loss decreases over the steps",
    why="The step repeats one batch: a loss that does not fall means gradients or the "
    "optimizer update are not reaching the parameters.",
    remedy=_SDC,
    exclusive=True,
)
def test_train_loss_decreases(train_step: TrainStepRun):
    losses = _result(train_step)["losses"]
    measure("first loss", losses[0], name="first_loss")
    expect("final / first loss", losses[-1] / losses[0], "<", 1.0,
           detail=f"losses {', '.join(f'{v:.4g}' for v in losses)}", name="final_first_loss")


@check(
    "PF-TRAIN-005",
    title="Sharded loss matches the unsharded reference",
    why="The same seed and data on one rank without FSDP must give the same losses within "
    "the precision's tolerance; a larger gap is a wrong collective, a bad GPU or a stack bug.",
    remedy=_SDC,
    exclusive=True,
)
def test_train_loss_matches_reference(train_step: TrainStepRun):
    judged = _judged(_result(train_step))
    _within_tolerance(judged, "max relative loss difference from the unsharded reference",
                      "loss_max_rel_diff", "loss_rel")


@check(
    "PF-TRAIN-006",
    title="Updated parameters match the unsharded reference",
    why="The parameter update after the steps must equal the reference's within the "
    "precision's tolerance: a gradient corrupted on one rank shows here.",
    remedy=_SDC,
    exclusive=True,
)
def test_train_params_match_reference(train_step: TrainStepRun):
    judged = _judged(_result(train_step))
    measure("max |param - reference|", judged["param_max_abs_diff"], name="max_param_diff_vs_reference")
    _within_tolerance(judged, "relative error of the parameter update vs the unsharded reference",
                      "update_rel_diff", "update_rel")


@check(
    "PF-TRAIN-007",
    title="Parameters are identical on every data-parallel replica",
    why="After the step every rank gathers the full parameters; any difference from rank 0 "
    "means a collective delivered different data to different ranks.",
    remedy="possible silent data corruption on a GPU or link: rerun; if it repeats, drain the "
    "node named and run `dcgmi diag -r 3` and the NVLink/fabric checks",
    exclusive=True,
)
def test_train_replicas_identical(train_step: TrainStepRun):
    ranks = _result(train_step)["ranks"]
    rank0 = ranks[0]
    expect_none("replicas that differ from rank 0", [
        f"rank {r['rank']} ({r['host']} {r['device']}): max |difference| "
        f"{r['max_abs_vs_rank0']:g}, checksum {r['checksum']} vs {rank0['checksum']}"
        for r in ranks if r["max_abs_vs_rank0"] != 0.0 or r["checksum"] != rank0["checksum"]
    ], name="replicas_that_differ_from_rank_0")


@check(
    "PF-TRAIN-008",
    family="training",
    title="Training step check within the profile's time budget",
    why="The step runs before every job on every node: it must stay seconds long; a slow step "
    "is also a sign of a throttled GPU or a busy node.",
    remedy="look for other processes on the GPUs/CPUs; compare with the PF-GPU checks",
    exclusive=True,
)
def test_train_step_within_budget(profile: Profile, train_step: TrainStepRun):
    result = _result(train_step)
    measure("median step time (slowest rank)", result["step_time_s"], "s",
            name="median_step_time_slowest_rank")
    measure(f"peak memory ({result['mem_kind']}, largest rank)", result["peak_mem_mib"], "MiB",
            name="peak_memory_largest_rank")
    if train_step.startup_s is not None:  # the worker's, shared by its parts: not the step's
        measure("worker start-up (torchrun, imports, process group)",
                round(train_step.startup_s, 2), "s",
                name="worker_start_up_torchrun_imports_process_group")
    expect("training step check wall time", round(train_step.wall_s, 2), "<=",
           profile.train_step_budget_s, "s", name="training_step_check_wall_time")
