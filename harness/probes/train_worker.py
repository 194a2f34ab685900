"""The torch side of the tiny training step, the `train` part of the distributed worker
(harness.worker): the model (TE or plain torch layers), FSDP2 over all ranks, the reference
(the same model, FSDP2 policy and precision recipe on a one-rank group: it differs from the
sharded run only by sharding), and the comparisons. The process group is the worker's."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import resource
import socket
import statistics
import time
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.jsontypes import JSONObject
from harness.probes.train_step import (
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

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

__all__ = ["TinyLM", "device_for", "step"]


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention and a GELU MLP."""

    def __init__(self, cfg: StepConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.fc1 = nn.Linear(cfg.hidden, cfg.ffn)
        self.fc2 = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        att = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class TinyLM(nn.Module):
    """A few plain-torch transformer blocks over a token embedding, batch-first."""

    def __init__(self, cfg: StepConfig) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        # clone: an FSDP2 root must not return a view (its pre-backward hook would be dropped)
        return self.head(self.norm(h)).clone()


class TeLM(nn.Module):
    """The same shape of model from TransformerEngine layers (TE's default [seq, batch, hidden])."""

    def __init__(self, cfg: StepConfig, te: ModuleType) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.blocks = nn.ModuleList(
            te.TransformerLayer(
                cfg.hidden, cfg.ffn, cfg.heads, hidden_dropout=0.0, attention_dropout=0.0,
                self_attn_mask_type="causal", layer_number=i + 1, params_dtype=torch.float32,
            )
            for i in range(cfg.layers)
        )
        self.norm = te.LayerNorm(cfg.hidden, params_dtype=torch.float32)
        self.head = te.Linear(cfg.hidden, cfg.vocab, params_dtype=torch.float32)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens).transpose(0, 1).contiguous()
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h)).transpose(0, 1).clone()


def _te_recipe(plan: RecipePlan) -> Any:
    from transformer_engine.common import recipe as te_recipe

    if plan.recipe == "fp8-delayed":
        return te_recipe.DelayedScaling(
            fp8_format=te_recipe.Format.HYBRID, amax_history_len=16, amax_compute_algo="max"
        )
    if plan.recipe == "fp8-current":
        return te_recipe.Float8CurrentScaling(fp8_format=te_recipe.Format.HYBRID)
    if plan.recipe == "mxfp8":
        return te_recipe.MXFP8BlockScaling(fp8_format=te_recipe.Format.E4M3)
    return None


class Precision:
    """The forward context and FSDP mixed-precision policy of a plan. The sharded run and the
    reference use the same ones (bf16 params through the policy, the same TE recipe), each
    with its own FP8 amax group passed explicitly: TE reduces amax over the group it is given,
    and `None` means the world (issue 18, finding 1)."""

    def __init__(self, plan: RecipePlan, device_type: str) -> None:
        self.plan = plan
        self.device_type = device_type
        self.low = plan.recipe != "fp32"
        self.fp8 = _te_recipe(plan) if plan.path == "te" else None

    def mp_policy(self) -> MixedPrecisionPolicy:
        _, policy = fsdp_api()
        if not self.low:
            return policy()
        return policy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)

    @contextlib.contextmanager
    def forward(self, group: dist.ProcessGroup | None) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            if self.fp8 is not None:
                import transformer_engine.pytorch as te

                stack.enter_context(te.fp8_autocast(
                    enabled=True, fp8_recipe=self.fp8, fp8_group=group))
            yield


def build_model(cfg: StepConfig, plan: RecipePlan, device: torch.device) -> nn.Module:
    """The model, initialised from the seed (identical on every rank and in the reference)."""
    torch.manual_seed(cfg.seed)
    if plan.path == "te":
        import transformer_engine.pytorch as te

        return TeLM(cfg, te).to(device)
    return TinyLM(cfg).to(device)


def make_batch(cfg: StepConfig, world: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The global batch of synthetic tokens (same on every rank; each rank trains on its slice)."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    tokens = torch.randint(0, cfg.vocab, (world * cfg.batch_per_rank, cfg.seq + 1), generator=gen)
    tokens = tokens.to(device)
    return tokens[:, :-1], tokens[:, 1:]


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
        _sync(device)
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
        loss.backward()
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


def singleton_groups(world: int) -> list[dist.ProcessGroup]:
    """One group per rank holding that rank alone (`new_group` is collective: every rank
    creates every group, in the same order)."""
    return [dist.new_group([r]) for r in range(world)]


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


def step(
    args: argparse.Namespace, fault: Fault | None, device: torch.device
) -> JSONObject | None:
    """Run the step on this rank; rank 0's result record (None on the other ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if fault is not None:
        fault = dataclasses.replace(fault, rank=fault.rank % world)
    plan, te, capability = plan_for(args, device)
    cfg = _config(args, device)
    alone = singleton_groups(world)
    model, facts = train_sharded(cfg, plan, device, fault, hang_s=3 * args.pg_timeout_s)
    losses = torch.tensor(facts["local_losses"], dtype=torch.float64, device=device)
    dist.all_reduce(losses)
    losses = (losses / world).tolist()
    gathered = full_params(model)
    flat = torch.cat([p.reshape(-1) for p in gathered])
    if fault is not None and fault.kind == "corrupt-replica" and rank == fault.rank:
        flat = flat.clone()
        flat[flat.numel() // 2] += 1e-3
    facts.update(replica_facts(flat))
    facts.update(rank=rank, host=socket.gethostname(), device=_device_name(device))
    compared: dict[str, float] = {}
    ref_losses: list[float] = []
    if rank == 0:
        ref_losses, initial, reference = train_reference(cfg, plan, device, world, alone[0])
        compared = compare(gathered, losses, ref_losses, initial, reference)
    ranks: list[Any] = [None] * world
    dist.all_gather_object(ranks, facts)
    if rank != 0:
        return None
    tol = TOLERANCES[plan.recipe]
    return {
        "world_size": world, "backend": dist.get_backend(), "device_type": device.type,
        "path": plan.path, "recipe": plan.recipe, "requested_recipe": plan.requested,
        "recipe_note": plan.note, "te_required": bool(args.te_required),
        "te": {"available": te.available, "version": te.version, "error": te.error},
        "torch_version": torch.__version__,
        "capability": list(capability) if capability else None,
        "model": {**dataclasses.asdict(cfg), "params": sum(p.numel() for p in gathered)},
        "losses": losses, "reference_losses": ref_losses, **compared,
        "tolerance": {"loss_rel": tol.loss_rel, "update_rel": tol.update_rel,
                      "basis": TOLERANCE_BASIS[plan.recipe]},
        "step_time_s": max(r["step_time_s"] for r in ranks),
        "peak_mem_mib": max(r["peak_mem_mib"] for r in ranks), "mem_kind": facts["mem_kind"],
        "fault": fault.describe() if fault else None,
        "ranks": ranks,
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{device.index} {torch.cuda.get_device_name(device)}"
    return "cpu"
