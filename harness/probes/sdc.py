"""Silent data corruption (SDC) cross-check: the same deterministic work on every GPU (or gloo
rank on CPU), reduced to one digest per device, so that devices of one SKU, driver and
library stack can be compared bit for bit, inside a node and across the nodes of a cluster.

The work: GEMMs in the dtypes training uses (bf16, fp16; fp32 with TF32 off), each chained
over a few steps so that one wrong bit early spreads into every later digest, and a
reduction (a row sum and a total in fp32) of each product. Inputs are made on the CPU from
fixed seeds (`torch.Generator`), so every device starts from the same bits.

Why the results are bit-identical across devices of one SKU and driver (and what that rests
on): cuBLAS documents that "all cuBLAS API routines from a given toolkit version generate the
same bit-wise results at every run when executed on GPUs with the same architecture and the
same number of SMs" (cuBLAS docs, "Results reproducibility"), with two exceptions it names:
multiple streams sharing one workspace, and `cublasSetAtomicsMode` allowing atomics; torch
uses neither for `matmul`. The kernel a shape runs is picked by cuBLAS's heuristics from the
architecture, the SM count and the library version, so the comparison key is the SKU (model
name, which fixes the SM count outside MIG), the driver, the CUDA, torch and cuBLAS versions,
the device's SM count and the workload's own spec: only devices that agree on all of them
are compared. torch's `sum` over a dimension is a fixed-order tree reduction on CUDA (no
atomics), so it is reproducible on the same kernel and launch shape too. On CPU (gloo ranks)
the worker runs one thread per rank (OMP_NUM_THREADS=1), which fixes the order of the BLAS
accumulation.

What it cannot prove: that the result is *correct* (every device could be wrong the same
way; the training step's reference comparison covers the arithmetic); that a device is good
on shapes, dtypes or kernels it did not run (an SDC may hit one functional unit or one
voltage/frequency corner: fleet studies find many defects data- and temperature-dependent);
or anything across SKUs, drivers or library versions (different kernels legitimately give
different bits: those are compared within their own group only). A single device, or a group
with no strict majority, cannot say which result is the good one. torch is imported inside
the functions; the comparison is pure and tested on CPU tensors.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject

if TYPE_CHECKING:  # torch is optional and imported inside the functions
    import torch

__all__ = ["LEVELS", "SDC_SCHEMA", "Workload", "flip_one_bit", "level_for_tier", "majority",
           "run_sdc", "spec_text"]

SDC_SCHEMA = "gpu-preflight.sdc/v1"


@dataclass(frozen=True, slots=True)
class Workload:
    """One chained GEMM: `steps` products X <- X @ W_i (n x n, `dtype`; each W_i scaled by
    1/sqrt(n), so the values stay near 1 and no step overflows fp16)."""

    name: str
    dtype: str
    n: int
    steps: int
    seed: int


#: Per level and device type: the work. Short (preflight): a few hundred ms on a GPU. Long
#: (certify, diagnose): larger shapes and more steps (still seconds, bounded by the part's
#: timeout). CPU: the same code at a size two busy cores do in well under a second.
def _work(seed: int, *shapes: tuple[int, int]) -> tuple[Workload, ...]:
    """bf16, fp16 and fp32 chains of (n, steps) each, seeded from `seed` + 1, + 2, + 3."""
    return tuple(Workload(f"{name} gemm", dtype, n, steps, seed + i)
                 for i, ((name, dtype), (n, steps)) in enumerate(
                     zip((("bf16", "bfloat16"), ("fp16", "float16"), ("fp32", "float32")),
                         shapes, strict=True), start=1))


LEVELS: dict[str, dict[str, tuple[Workload, ...]]] = {
    "short": {"cuda": _work(10, (4096, 4), (4096, 2), (2048, 2)),
              "cpu": _work(10, (48, 3), (32, 2), (48, 2))},
    "long": {"cuda": _work(20, (8192, 16), (8192, 8), (4096, 8)),
             "cpu": _work(20, (96, 6), (64, 4), (96, 4))},
}


def level_for_tier(tier: str) -> str:
    """preflight: short; certify and diagnose: long."""
    return "short" if tier == "preflight" else "long"


def spec_text(level: str, device_type: str) -> str:
    """The workload's own name, part of the comparison key (a change of shapes or seeds must
    never read as a difference between devices)."""
    work = LEVELS[level]["cuda" if device_type == "cuda" else "cpu"]
    return f"sdc/v1 {level} " + "; ".join(f"{w.name} n={w.n} steps={w.steps} seed={w.seed}"
                                          for w in work)


def flip_one_bit(tensor: torch.Tensor) -> None:
    """Flip the lowest bit of the first element, in place (the selftest's and the tests'
    stand-in for a corrupted result: the smallest difference there is)."""
    import torch

    flat = tensor.view(-1)
    raw = flat[:1].view(torch.uint8)
    raw[0] ^= 1


def _digest(tensor: torch.Tensor) -> str:
    from harness.probes.gpu_compute import digest

    return digest(tensor)


def _chain(device: torch.device, w: Workload, flip: bool) -> tuple[str, str, float]:
    """(digest of the products, digest of the reductions, the final fp32 total)."""
    import hashlib

    import torch

    dtype = getattr(torch, w.dtype)
    gen = torch.Generator().manual_seed(w.seed)
    x = torch.randn((w.n, w.n), generator=gen, dtype=torch.float32).to(dtype).to(device)
    weights = [(torch.randn((w.n, w.n), generator=gen, dtype=torch.float32) / w.n ** 0.5)
               .to(dtype).to(device) for _ in range(w.steps)]
    products, reductions = hashlib.sha256(), hashlib.sha256()
    total = 0.0
    with torch.no_grad():
        for i, weight in enumerate(weights):
            x = x @ weight
            if flip and i == 0:
                flip_one_bit(x)  # early: every later product and reduction carries it
            rows = x.float().sum(dim=1)
            s = rows.sum()
            products.update(_digest(x).encode())
            reductions.update(_digest(rows).encode() + _digest(s).encode())
            total = float(s.item())
    return products.hexdigest(), reductions.hexdigest(), total


def run_sdc(device: torch.device, level: str, *, flip: bool = False) -> JSONObject:
    """This device's digests: `{"spec", "digest", "outputs": {name: digest}, "totals":
    {name: fp32 total}, "seconds", "sm_count"}`. TF32 is off for the fp32 GEMM (restored
    after): fp32 is compared as fp32. `flip`: corrupt one bit of the first product."""
    import hashlib

    import torch

    kind = "cuda" if device.type == "cuda" else "cpu"
    start = time.perf_counter()
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    outputs: dict[str, str] = {}
    totals: dict[str, float] = {}
    try:
        for w in LEVELS[level][kind]:
            products, reductions, total = _chain(device, w, flip)
            outputs[w.name] = products
            outputs[w.name.replace("gemm", "row sums")] = reductions
            totals[w.name] = total
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    if kind == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    combined = hashlib.sha256("".join(f"{k}={v};" for k, v in sorted(outputs.items()))
                              .encode()).hexdigest()
    sm_count = (torch.cuda.get_device_properties(device).multi_processor_count
                if kind == "cuda" else None)
    return {"spec": spec_text(level, kind), "digest": combined, "outputs": outputs,
            "totals": totals, "seconds": round(time.perf_counter() - start, 3),
            "sm_count": sm_count, "torch": torch.__version__, "cuda_build": torch.version.cuda}


def majority(values: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(the strict majority's value, the members that differ from it). Without a strict
    majority the good value cannot be told apart: (None, every member). One member alone:
    (its value, {})."""
    if not values:
        return None, {}
    counts = Counter(values.values())
    (top, n), *rest = counts.most_common()
    if rest and (n * 2 <= len(values)):
        return None, dict(sorted(values.items()))
    return top, {k: v for k, v in sorted(values.items()) if v != top}


def differing_outputs(mine: Mapping[str, str], good: Mapping[str, str]) -> list[str]:
    """The outputs (`bf16 gemm`, `fp32 row sums`, ...) whose digests differ."""
    return [k for k in sorted(set(mine) | set(good)) if mine.get(k) != good.get(k)]


def short(digest: str | None) -> str:
    return (digest or "none")[:12]


def rank_labels(ranks: Sequence[Mapping[str, object]]) -> dict[str, Mapping[str, object]]:
    """`rank R` -> that rank's record (CPU ranks share device 0; GPUs are named by the check)."""
    return {f"rank {r.get('rank')}": r for r in ranks}
