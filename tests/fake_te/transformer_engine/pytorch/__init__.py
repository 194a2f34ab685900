"""Stand-in transformer_engine.pytorch: plain torch layers and an fp8_autocast that performs
TE's amax all_reduce (tests/fake_te/README.md)."""

import contextlib
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__version__ = "2.4.0+fake"
_depth = 0


class LayerNorm(nn.LayerNorm):
    def __init__(self, hidden, params_dtype=torch.float32, **_):
        super().__init__(hidden, dtype=params_dtype)


class Linear(nn.Linear):
    def __init__(self, i, o, params_dtype=torch.float32, **_):
        super().__init__(i, o, dtype=params_dtype)


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
def fp8_autocast(enabled=True, fp8_recipe=None, fp8_group=None, **_):
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if (enabled and _depth == 0 and torch.is_grad_enabled()
                and getattr(fp8_recipe, "reduce_amax", False) and dist.is_initialized()
                and dist.get_world_size(group=fp8_group) > 1):
            amax = torch.ones(1)
            dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=fp8_group)
            print(f"fake-te: amax all_reduce over {dist.get_world_size(group=fp8_group)} ranks",
                  file=sys.stderr, flush=True)
