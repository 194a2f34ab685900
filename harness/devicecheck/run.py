"""The device-check run: its steps in order within one budget (<= 7 min on 8 GPUs, <= 3 min on
one, so a rerun fits a 10-minute loan), the NVLink sampler around them, and the output files
(figures.json, summary.txt, device-check.log, logs/, profile-patch.toml)."""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.base.deadline import Deadline
from harness.base.jsontypes import JSONObject
from harness.devicecheck import launch, machine, nccl, patch
from harness.devicecheck.context import DEVICE, REHEARSE, Context
from harness.devicecheck.record import StepResult, write_outputs
from harness.profiles.model import Profile

__all__ = ["STEPS", "budget_s", "main", "make_context", "run_steps"]

#: The steps in the order they run (the NVLink sampler runs across all of them).
STEPS: tuple[tuple[str, str], ...] = (
    ("versions", "torch, CUDA, NCCL, TransformerEngine, driver, GPU"),
    ("nvml", "NVML beside nvidia-smi; PCIe generations"),
    ("worker", "the production worker launch (compute, sdc, links, bandwidth, train), NCCL INFO"),
    ("train", "the training step per recipe x 3 seeds, and a perturbed run it must fail"),
    ("nccl-tests", "all_reduce_perf at the gate's sweep, -J, NCCL INFO"),
    ("nccl-tests-nvls", "the same with NCCL_ALGO=NVLS, where NVLS exists"),
    ("dcgm", "dcgmi diag -r 1"),
    ("nvlink-counters", "NVLink error counters sampled across the run"),
)
#: Below this much of the budget left a step is not started (it is reported as not run).
MIN_STEP_S = 10.0


def budget_s(num_gpus: int, rehearsal: bool) -> float:
    """The whole run's default bound: 7 min on 8 GPUs, 3 on one (a rerun fits a 10-minute
    loan); 150 s for a rehearsal on CPU (it takes about a minute)."""
    if rehearsal:
        return 150.0
    return 180.0 if num_gpus <= 1 else 420.0


def make_context(out: Path, *, rehearsal: bool, profile: Profile,
                 budget: float, nvml: object = None,
                 env: dict[str, str] | None = None) -> Context:
    """The run's context; the environment is this process's (a rehearsal has put its fakes
    there) with the checkout importable by every child."""
    child = dict(os.environ if env is None else env)
    root = str(Path(__file__).resolve().parents[2])
    child["PYTHONPATH"] = os.pathsep.join(p for p in (root, child.get("PYTHONPATH")) if p)
    nvls = rehearsal or (profile.nvls and profile.nvswitch and profile.num_gpus > 1)
    return Context(out=out, mode=REHEARSE if rehearsal else DEVICE, profile=profile, env=child,
                   deadline=Deadline.after(budget, f"device-check's {budget:g} s budget"),
                   nvml=nvml, nvls=nvls)


def _one(ctx: Context, name: str) -> list[StepResult]:
    if name == "versions":
        return [machine.versions_step(ctx)]
    if name == "nvml":
        return [machine.nvml_step(ctx)]
    if name == "worker":
        return [launch.worker_step(ctx)]
    if name == "train":
        return launch.train_steps(ctx)
    if name in ("nccl-tests", "nccl-tests-nvls"):
        return [nccl.nccl_tests_step(ctx, nvls=name.endswith("nvls"))]
    if name == "dcgm":
        return [machine.dcgm_step(ctx)]
    raise ValueError(f"unknown step {name!r}")


def run_steps(ctx: Context, only: set[str] | None = None,
              say: Callable[[str], None] = print) -> list[StepResult]:
    """Every step in order, each timed and bounded by what is left of the budget; a step that
    raises is failed with the exception, the run goes on."""
    sampler = None
    wants_nvlink = only is None or "nvlink-counters" in only
    if wants_nvlink and (ctx.rehearsal or ctx.profile.nvlinks_per_gpu):
        sampler = machine.NvlinkSampler(ctx, interval_s=5.0 if ctx.rehearsal else 15.0).start()
    results: list[StepResult] = []
    for name, what in STEPS:
        if name == "nvlink-counters" or (only is not None and name not in only):
            continue
        start = time.monotonic()
        if ctx.deadline.left() < MIN_STEP_S:
            got = [StepResult(name, what, problems=[
                f"not run: {ctx.deadline.left():.0f} s left of {ctx.deadline.what}"])]
        else:
            try:
                got = _one(ctx, name)
            except Exception as exc:  # one broken step must not cost the others' figures
                got = [StepResult(name, what, problems=[f"{type(exc).__name__}: {exc}"])]
        took = time.monotonic() - start
        for r in got:
            r.seconds = r.seconds or took / len(got)
            say(f"device-check: {r.step}: {r.outcome}"
                + (f" ({r.reason})" if r.reason else "")
                + (f": {r.problems[0]}" if r.problems else ""))
        results += got
    if sampler is not None:
        results.append(sampler.stop())
    elif wants_nvlink:
        results.append(StepResult("nvlink-counters", "NVLink error counters", "skipped",
                                  reason="the machine has no NVLink"))
    return results


def _machine_record(ctx: Context, duration: float, budget: float) -> JSONObject:
    f = ctx.facts
    return {"mode": ctx.mode, "gpu": f.get("gpu") or ("none (rehearsal)" if ctx.rehearsal
                                                        else "unknown"),
            "driver": f.get("driver"), "gpus": ctx.nproc if ctx.device == "cuda" else 0,
            "ranks": ctx.nproc, "capability": f.get("capability"),
            "te": f.get("te_version"), "host": socket.gethostname(),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
            "profile": ctx.profile.name, "sku": ctx.profile.sku,
            "nvlink": bool(ctx.profile.nvlinks_per_gpu),
            "budget_s": budget, "duration_s": round(duration, 1)}


def _profile(name: str | None, rehearsal: bool) -> Profile:
    from harness.profiles.table import get_profile

    if rehearsal:
        return get_profile("local-cpu")
    if name:
        return get_profile(name)
    from harness.detect.derive import derive_profile, machine_facts

    return derive_profile(machine_facts())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/device-check", description=__doc__)
    p.add_argument("out", nargs="?", help="folder for figures.json, summary.txt and the logs")
    p.add_argument("--rehearse", action="store_true",
                   help="run the same steps on this CPU machine: gloo, 2 ranks, the project's "
                   "fake NVML and tools")
    p.add_argument("--budget-s", type=float, default=None,
                   help="bound of the whole run, s (default 420 on 8 GPUs, 180 on one)")
    p.add_argument("--profile", default=None,
                   help="profile to plan from (default: derived from this machine)")
    p.add_argument("--only", default=None, help="comma-separated step names")
    p.add_argument("--list", action="store_true", help="list the steps and exit")
    return p


def main(argv: Sequence[str] | None = None, *, nvml: object = None) -> int:
    """Run it; 0 when every step that ran brought back its figures, 1 otherwise, 2 on usage."""
    args = parser().parse_args(argv)
    if args.list:
        for name, what in STEPS:
            print(f"{name:<18} {what}")
        return 0
    if not args.out:
        parser().error("OUT is required (or --list)")
    names = {n for n, _ in STEPS}
    only = set(args.only.split(",")) if args.only else None
    if only is not None and only - names:
        parser().error(f"unknown step(s): {', '.join(sorted(only - names))}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    profile = _profile(args.profile, args.rehearse)
    budget = args.budget_s or budget_s(profile.num_gpus, args.rehearse)
    ctx = make_context(out, rehearsal=args.rehearse, profile=profile, budget=budget, nvml=nvml)
    print(f"device-check ({ctx.mode}): profile {profile.name}, {ctx.nproc} ranks on "
          f"{ctx.device}, budget {budget:g} s", flush=True)
    results = run_steps(ctx, only, say=lambda s: print(s, flush=True))
    record = _machine_record(ctx, time.monotonic() - ctx.started, budget)
    write_outputs(out, record, results)
    (out / "device-check.log").write_text("\n".join(ctx.log))
    doc = patch.load(out / "figures.json")
    (out / "profile-patch.toml").write_text(patch.profile_patch(doc))
    print((out / "summary.txt").read_text(), end="")
    failed = [r.step for r in results if r.outcome == "failed"]
    if failed:
        print(f"device-check: FAILED steps: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
