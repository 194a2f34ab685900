"""The torch side of the tiny training step, the `train` part of the distributed worker
(harness.worker): FSDP2 over all ranks, the reference (the same model, FSDP2 policy and
precision recipe on a one-rank group, with the same per-token loss scaling: it differs from the
sharded run only by sharding), and the comparisons. The model is harness.worker.train_model's;
the process group is the worker's.

The corruption judgement (PF-TRAIN-005/006) is the comparison in bf16 (fp32 on CPU) on every
profile: an FP8/MXFP8 profile runs its recipe's step (the stack check: finite, decreasing loss,
the same recipe on both sides) and then the same step in bf16, whose gap the tolerance of
harness.probes.train_step.TOLERANCES (an error model) judges."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import resource
import socket
import statistics
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from harness.base.jsontypes import JSONObject
from harness.probes.gpu_compute import sync_device
from harness.probes.train_step import (
    FP8_RECIPES,
    GPU_SIZES,
    TOLERANCE_BASIS,
    TOLERANCES,
    Fault,
    RecipePlan,
    StepConfig,
    TeInfo,
    probe_te,
    select_recipe,
)
from harness.worker.group import fsdp_api
from harness.worker.train_model import Precision, build_model, lm_loss, make_batch

__all__ = ["device_for", "step"]


def _peak_mem_mib(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "cpu_max_rss"


def _inject_oom(rank: int) -> None:
    raise torch.OutOfMemoryError(
        f"CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a total capacity of "
        "79.10 GiB of which 1.23 GiB is free. (injected fault)"
    )


def shard(model: nn.Module, group: dist.ProcessGroup, precision: Precision,
          device_type: str) -> nn.Module:
    """FSDP2 over `group`: each block, then the root, under the precision's policy."""
    from torch.distributed.device_mesh import DeviceMesh

    fully_shard, _ = fsdp_api()
    mesh = DeviceMesh.from_group(group, device_type)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, mp_policy=precision.mp_policy())
    fully_shard(model, mesh=mesh, mp_policy=precision.mp_policy())
    return model


def train_sharded(
    cfg: StepConfig, plan: RecipePlan, device: torch.device, fault: Fault | None, hang_s: float
) -> tuple[nn.Module, JSONObject]:
    """FSDP2 over all ranks: each rank trains its slice of the global batch."""
    rank, world = dist.get_rank(), dist.get_world_size()
    precision = Precision(plan, device.type)
    model = shard(build_model(cfg, plan, device), dist.group.WORLD, precision, device.type)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = make_batch(cfg, world, device)
    rows = slice(rank * cfg.batch_per_rank, (rank + 1) * cfg.batch_per_rank)
    faulty = fault is not None and rank == fault.rank
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    losses, times = [], []
    for step in range(cfg.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with precision.forward(dist.group.WORLD):
            loss = lm_loss(model, x[rows], y[rows])
        backward = loss
        if faulty and fault.kind == "grad-perturb":
            backward = loss * (1.0 + fault.scale)
        if faulty and step == fault.step:
            if fault.kind == "nan":
                # times NaN (not plus): the gradients become NaN too, as with a real overflow
                loss = backward = loss * float("nan")
            elif fault.kind == "hang":
                time.sleep(hang_s)
            elif fault.kind == "oom":
                _inject_oom(rank)
        backward.backward()
        opt.step()
        losses.append(loss.item())
        sync_device(device)
        times.append(time.perf_counter() - start)
    peak, mem_kind = _peak_mem_mib(device)
    facts: JSONObject = {"local_losses": losses, "step_times_s": [round(t, 6) for t in times],
             "step_time_s": statistics.median(times[1:] or times), "peak_mem_mib": round(peak, 1),
             "mem_kind": mem_kind}
    return model, facts


def train_reference(
    cfg: StepConfig, plan: RecipePlan, device: torch.device, world: int,
    group: dist.ProcessGroup,
) -> tuple[list[float], list[torch.Tensor], list[torch.Tensor]]:
    """The same steps on the whole global batch, under FSDP2 on `group` (this rank alone: a
    one-rank "shard" is the whole model) with the same policy and recipe as the sharded run,
    FP8 amax reduced over `group` (one rank: TE reduces nothing). Losses, initial and final
    params."""
    precision = Precision(plan, device.type)
    model = build_model(cfg, plan, device)
    initial = [p.detach().float().clone() for p in model.parameters()]
    model = shard(model, group, precision, device.type)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    x, y = make_batch(cfg, world, device)
    losses = []
    for _ in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        with precision.forward(group):
            loss = lm_loss(model, x, y)
        # Equal per-token scaling on both sides: each sharded rank back-propagates the mean over
        # its own tokens (world x the global mean's scale per token) and FSDP2 divides the
        # reduced gradient by `world` in fp32; the reference does the same, so the low-precision
        # gradients and FP8 amaxes see the same magnitudes (exact when world is a power of 2).
        (loss * world).backward()
        if world > 1:
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(world)
        opt.step()
        losses.append(loss.item())
    return losses, initial, full_params(model)


def full_params(model: nn.Module) -> list[torch.Tensor]:
    """Every parameter gathered whole (a collective: all ranks call it in the same order)."""
    return [p.full_tensor().detach().float() for p in model.parameters()]


def replica_facts(flat: torch.Tensor) -> JSONObject:
    """This rank's checksum of the gathered parameters and its max |difference| from rank 0's."""
    positions = torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)
    checksum = f"{flat.double().sum().item():.17g}/{(flat.double() * positions).sum().item():.17g}"
    rank0 = flat.clone()
    dist.broadcast(rank0, src=0)
    diff = (flat - rank0).abs()
    same_nan = torch.isnan(flat) & torch.isnan(rank0)
    diff = torch.where(same_nan, torch.zeros_like(diff), diff).nan_to_num(nan=math.inf)
    return {"checksum": checksum, "max_abs_vs_rank0": diff.max().item()}


def compare(
    sharded: list[torch.Tensor], losses: list[float], ref_losses: list[float],
    initial: list[torch.Tensor], reference: list[torch.Tensor],
) -> dict[str, float]:
    """How far the sharded step is from the reference: losses and the parameter update."""
    rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses, strict=True)]
    loss_rel = max(rel) if all(math.isfinite(r) for r in rel) else math.nan
    diff = torch.cat([(s - r).cpu().reshape(-1) for s, r in zip(sharded, reference, strict=True)])
    update = torch.cat([(r - i).cpu().reshape(-1) for r, i in zip(reference, initial, strict=True)])
    return {
        "loss_max_rel_diff": loss_rel,
        "update_rel_diff": (diff.norm() / update.norm().clamp_min(1e-30)).item(),
        "param_max_abs_diff": diff.abs().max().item(),
    }


def _config(args: argparse.Namespace, device: torch.device) -> StepConfig:
    sizes = dict(GPU_SIZES) if device.type == "cuda" else {}
    for name in StepConfig.__dataclass_fields__:
        value = getattr(args, name, None)
        if value is not None:
            sizes[name] = value
    return StepConfig(**sizes)


def device_for(choice: str) -> torch.device:
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    count = torch.cuda.device_count()
    if local >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise RuntimeError(
            f"no GPU for LOCAL_RANK {local}: torch sees {count} CUDA devices (CUDA_VISIBLE_DEVICES="
            f"{'unset' if visible is None else repr(visible)}; torch {torch.__version__}, built "
            f"for CUDA {torch.version.cuda})"
        )
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


@functools.cache
def singleton_groups(world: int) -> tuple[dist.ProcessGroup, ...]:
    """One group per rank holding that rank alone (`new_group` is collective: every rank
    creates every group, in the same order), made once per process (runs share them)."""
    return tuple(dist.new_group([r]) for r in range(world))


def plan_for(args: argparse.Namespace,
             device: torch.device) -> tuple[RecipePlan, TeInfo, tuple[int, int] | None]:
    """(plan, TE probe, compute capability); `--plan PATH:RECIPE` (tests) overrides the plan."""
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    te = probe_te() if (device.type == "cuda" or args.te_required or args.plan) else TeInfo(
        False, error="not probed: no GPU")
    if args.plan:
        path, _, recipe = args.plan.partition(":")
        return RecipePlan(path, recipe, args.te_recipe, "forced by --plan"), te, capability
    return select_recipe(args.te_recipe, capability, te, cpu_dtype=args.cpu_dtype), te, capability


@dataclasses.dataclass
class PairRun:
    """One recipe's sharded run and its reference (rank 0 holds the comparison)."""

    plan: RecipePlan
    losses: list[float]
    facts: JSONObject
    params: int
    ref_losses: list[float] = dataclasses.field(default_factory=list)
    compared: dict[str, float] = dataclasses.field(default_factory=dict)

    def comparison(self, world: int) -> JSONObject:
        """The gap and the tolerance it is judged against (rank 0)."""
        tol = TOLERANCES[self.plan.recipe]
        basis = TOLERANCE_BASIS[self.plan.recipe]
        if world < 2:
            basis = ("1 rank: the sharded step and the reference are the same computation; a "
                     "sharding tolerance needs >= 2 ranks")
        return {"recipe": self.plan.recipe, "losses": self.losses,
                "reference_losses": self.ref_losses, **self.compared,
                "tolerance": {"loss_rel": tol.loss_rel, "update_rel": tol.update_rel,
                              "basis": basis}}


def run_pair(cfg: StepConfig, plan: RecipePlan, device: torch.device, fault: Fault | None,
             hang_s: float) -> PairRun:
    """The sharded steps on every rank, the replicas compared, and on rank 0 the reference and
    the comparison."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, facts = train_sharded(cfg, plan, device, fault, hang_s=hang_s)
    losses = torch.tensor(facts["local_losses"], dtype=torch.float64, device=device)
    dist.all_reduce(losses)
    mean_losses = (losses / world).tolist()
    gathered = full_params(model)
    flat = torch.cat([p.reshape(-1) for p in gathered])
    if fault is not None and fault.kind == "corrupt-replica" and rank == fault.rank:
        flat = flat.clone()
        flat[flat.numel() // 2] += 1e-3
    facts.update(replica_facts(flat))
    run = PairRun(plan, mean_losses, facts, sum(p.numel() for p in gathered))
    if rank == 0:
        run.ref_losses, initial, reference = train_reference(
            cfg, plan, device, world, singleton_groups(world)[0])
        run.compared = compare(gathered, mean_losses, run.ref_losses, initial, reference)
    return run


def judged_plan(plan: RecipePlan) -> RecipePlan | None:
    """The bf16 run that judges corruption where the step itself runs FP8/MXFP8 (None: the
    step's own comparison is the judgement)."""
    if plan.recipe not in FP8_RECIPES:
        return None
    return RecipePlan(plan.path, "bf16", plan.requested,
                      f"the corruption judgement of a {plan.recipe} step runs in bf16")


def step(
    args: argparse.Namespace, fault: Fault | None, device: torch.device
) -> JSONObject | None:
    """Run the step on this rank (and its bf16 judgement after an FP8/MXFP8 step); rank 0's
    result record (None on the other ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if fault is not None:
        fault = dataclasses.replace(fault, rank=fault.rank % world)
    plan, te, capability = plan_for(args, device)
    cfg = _config(args, device)
    singleton_groups(world)  # collective: every rank, before any rank-0-only work
    hang_s = 3 * args.pg_timeout_s
    main = run_pair(cfg, plan, device, fault, hang_s)
    judged = judged_plan(plan)
    check = run_pair(cfg, judged, device, fault, hang_s) if judged is not None else None
    facts = main.facts
    facts.update(rank=rank, host=socket.gethostname(), device=_device_name(device))
    if check is not None:  # a replica that differs in the judged run differs, whatever the step
        facts["max_abs_vs_rank0"] = max(facts["max_abs_vs_rank0"],
                                        check.facts["max_abs_vs_rank0"])
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, facts)
    if rank != 0:
        return None
    own = main.comparison(world)
    if check is not None:
        own["tolerance"]["basis"] = (f"stack check ({plan.recipe} on both sides): not judged; "
                                     "the bf16 comparison is")
    return {
        "world_size": world, "backend": dist.get_backend(), "device_type": device.type,
        "path": plan.path, "recipe": plan.recipe, "requested_recipe": plan.requested,
        "recipe_note": plan.note, "te_required": bool(args.te_required),
        "te": {"available": te.available, "version": te.version, "error": te.error},
        "torch_version": torch.__version__,
        "capability": list(capability) if capability else None,
        "model": {**dataclasses.asdict(cfg), "params": main.params},
        **{k: v for k, v in own.items() if k != "recipe"},
        "comparison": check.comparison(world) if check is not None else None,
        "step_time_s": max(r["step_time_s"] for r in ranks),
        "peak_mem_mib": max(r["peak_mem_mib"] for r in ranks), "mem_kind": facts["mem_kind"],
        "fault": fault.describe() if fault else None,
        "ranks": ranks,
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
    return "cpu"
