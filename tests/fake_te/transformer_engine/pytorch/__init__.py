"""Stand-in transformer_engine.pytorch: plain torch layers and an fp8_autocast that performs
TE's amax all_reduce (tests/fake_te/README.md)."""

import contextlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__version__ = "2.4.0+fake"
_depth = 0
_group: list = []  # the amax groups of the autocasts entered


class LayerNorm(nn.LayerNorm):
    def __init__(self, hidden, params_dtype=torch.float32, **_):
        super().__init__(hidden, dtype=params_dtype)


class Linear(nn.Linear):
    """With FAKE_TE_GRAD_AMAX set, the output layer (out_features = that value) prints the amax of
    the gradient reaching it in backward: what delayed scaling quantises to E5M2 with a scale
    from its history, so both sides of a comparison must see the same magnitudes."""

    def __init__(self, i, o, params_dtype=torch.float32, **_):
        super().__init__(i, o, dtype=params_dtype)

    def forward(self, x):
        out = super().forward(x)
        if os.environ.get("FAKE_TE_GRAD_AMAX") == str(self.out_features) and out.requires_grad:
            group = _group[-1] if _group else None
            size = dist.get_world_size(group=group) if dist.is_initialized() else 1
            out.register_hook(lambda g: print(
                f"fake-te: grad amax {g.abs().max().item():.6e} rank {dist.get_rank()} group "
                f"{size}", file=sys.stderr, flush=True))
        return out


class TransformerLayer(nn.Module):
    """[seq, batch, hidden] -> same; a residual MLP (enough for sharding and amax)."""

    def __init__(self, hidden, ffn, heads, params_dtype=torch.float32, **_):
        super().__init__()
        self.ln = LayerNorm(hidden, params_dtype=params_dtype)
        self.fc1 = Linear(hidden, ffn, params_dtype=params_dtype)
        self.fc2 = Linear(ffn, hidden, params_dtype=params_dtype)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


@contextlib.contextmanager
def _autocast(enabled=True, calibrating=False, recipe=None, amax_reduction_group=None, **_):
    """TE >= 2.8's name (quantization.py `autocast(enabled, calibrating, recipe,
    amax_reduction_group)`): on leaving the outermost one with grad enabled, a DelayedScaling
    recipe all_reduces its amax over `amax_reduction_group` (None: the world)."""
    global _depth
    _depth += 1
    _group.append(amax_reduction_group)
    try:
        yield
    finally:
        _depth -= 1
        _group.pop()
        if (enabled and _depth == 0 and torch.is_grad_enabled()
                and getattr(recipe, "reduce_amax", False) and dist.is_initialized()
                and dist.get_world_size(group=amax_reduction_group) > 1):
            amax = torch.ones(1)
            dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=amax_reduction_group)
            print(f"fake-te: amax all_reduce over {dist.get_world_size(group=amax_reduction_group)}"
                  f" ranks ({_API})", file=sys.stderr, flush=True)


def fp8_autocast(enabled=True, calibrating=False, fp8_recipe=None, fp8_group=None, **_):
    """The deprecated name, with its own argument names (TE 1.x-2.x)."""
    global _API
    _API = "fp8_autocast"
    return _autocast(enabled, calibrating, fp8_recipe, fp8_group)


_API = "autocast"
if os.environ.get("FAKE_TE_API") != "fp8_autocast":  # else a TE from before autocast existed
    autocast = _autocast
