"""The tiny training step's model and precision: a few transformer blocks from plain torch or
TransformerEngine layers, the FSDP2 mixed-precision policy and TE's autocast with the recipe and
its amax group. torch and TE are imported by the worker's ranks only (harness.worker.train)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from harness.probes.train_step import RecipePlan, StepConfig
from harness.worker.group import fsdp_api

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecisionPolicy

__all__ = ["Precision", "TeLM", "TinyLM", "build_model", "lm_loss", "make_batch", "te_autocast"]


def te_autocast(te: ModuleType, recipe: object,
                group: dist.ProcessGroup | None) -> contextlib.AbstractContextManager[None]:
    """TE's autocast with `recipe`, amax reduced over `group`: `te.autocast(recipe=...,
    amax_reduction_group=...)` where TE has it (2.8+; `fp8_autocast` is deprecated there), else
    `te.fp8_autocast(fp8_recipe=..., fp8_group=...)`."""
    autocast = getattr(te, "autocast", None)
    if autocast is not None:
        return autocast(enabled=True, recipe=recipe, amax_reduction_group=group)
    return te.fp8_autocast(enabled=True, fp8_recipe=recipe, fp8_group=group)


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

                stack.enter_context(te_autocast(te, self.fp8, group))
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
    """The mean next-token cross-entropy over every token of `x`."""
    logits = model(x)
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
