"""The tiny FSDP2 training step: which stack and precision recipe to run (pure functions), how
its tolerances and faults, its command-line options, and what one run of it gave.

The torch side (model, FSDP2, reference, comparisons) lives in `train_worker`, run as the
`train` part of the one distributed worker (harness.worker); this module imports without torch
and imports neither.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from harness.base.proc_result import ProcResult
from harness.base.settings import get_str

if TYPE_CHECKING:  # the parser is imported where the output is read
    from harness.parsers.train_step import TrainStepOutput

__all__ = [
    "FAULT_KINDS",
    "FP8_RECIPES",
    "RECIPES",
    "SCHEMA",
    "TOLERANCES",
    "TOLERANCE_BASIS",
    "Fault",
    "RecipePlan",
    "TeInfo",
    "Tolerance",
    "TrainRun",
    "TrainStepRun",
    "add_step_arguments",
    "model_tolerance",
    "parse_fault",
    "parse_train_run",
    "probe_te",
    "run_arguments",
    "select_recipe",
    "supported_recipes",
]

#: `schema` key of every JSON line the step prints (the result on rank 0, or a rank's error).
SCHEMA = "gpu-preflight.train_step/v1"
#: Environment variable that injects a fault (same syntax as `--fault`), for tests and drills.
FAULT_ENV = "PREFLIGHT_TRAIN_FAULT"

#: The FP8 recipes: their step is the stack check; bf16 judges corruption beside it.
FP8_RECIPES = ("fp8-delayed", "fp8-current", "mxfp8")
#: Recipes a profile may name (`Profile.te_recipe`) and the smallest TE version that has them.
#: Sources: TE release notes (MXFP8BlockScaling 2.0, Float8CurrentScaling 2.2); DelayedScaling
#: and bf16 are in every 1.x release.
RECIPES: dict[str, str] = {
    "fp8-delayed": "1.0",
    "fp8-current": "2.2",
    "mxfp8": "2.0",
    "bf16": "1.0",
}
#: Smallest compute capability per recipe. Source: TE `check_fp8_support` (FP8 needs sm89+,
#: Hopper sm90 always) and `check_mxfp8_support` (sm100+, Blackwell); bf16 tensor cores: sm80.
MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "fp8-delayed": (8, 9),
    "fp8-current": (8, 9),
    "mxfp8": (10, 0),
    "bf16": (8, 0),
}


@dataclass(frozen=True, slots=True)
class TeInfo:
    """What importing TransformerEngine gave: its version, or the error text."""

    available: bool
    version: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RecipePlan:
    """The stack the step runs: `te` or `torch` layers, in which precision recipe."""

    path: str
    """`te` (TransformerEngine layers) or `torch` (plain torch.nn layers)."""
    recipe: str
    """`fp8-delayed`, `fp8-current`, `mxfp8`, `bf16` or `fp32`."""
    requested: str | None
    """The profile's `te_recipe` (None: none named)."""
    note: str = ""
    """Why the plan differs from what was requested (empty when it does not)."""

    @property
    def as_requested(self) -> bool:
        return not self.note


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if not piece.isdigit() else piece
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def _cc(capability: tuple[int, int]) -> str:
    return f"sm{capability[0]}{capability[1]}"


#: MXFP8 runs on sm_10x only: TE's check_mxfp8_support answers "MXFP8 (for all gemm layouts)
#: is not supported on 12.0+ architectures yet." from compute capability 12.0 (sm_120: RTX PRO
#: 6000 Blackwell), where its default recipe is Float8CurrentScaling
#: (NVIDIA/TransformerEngine transformer_engine/pytorch/quantization.py).
MXFP8_BELOW = (12, 0)


def _unsupported(recipe: str, capability: tuple[int, int], te_version: str | None) -> str:
    """Why `recipe` cannot run on this GPU with this TE ('' when it can)."""
    need_cc = MIN_CAPABILITY[recipe]
    if capability < need_cc:
        return f"{recipe} needs {_cc(need_cc)}+, GPU is {_cc(capability)}"
    if recipe == "mxfp8" and capability >= MXFP8_BELOW:
        return (f"mxfp8 runs on sm10x only (TransformerEngine: not supported on 12.0+ yet), GPU "
                f"is {_cc(capability)}")
    need = RECIPES[recipe]
    if te_version and _version_tuple(te_version) < _version_tuple(need):
        return f"{recipe} needs TransformerEngine >= {need}, found {te_version}"
    return ""


def select_recipe(
    requested: str | None,
    capability: tuple[int, int] | None,
    te: TeInfo,
    *,
    cpu_dtype: str = "fp32",
) -> RecipePlan:
    """The stack and recipe to run, from the profile's recipe, the GPU's compute capability
    (None: no GPU) and what importing TE gave. Pure: no torch, no device queries.

    Without a GPU: plain torch in `cpu_dtype`. Without TE: plain torch, bf16 on sm80+. With TE:
    the requested recipe if the GPU and TE version support it, else the best of fp8-delayed and
    bf16 that they do (on sm12x fp8-current first; the note says why); no recipe requested:
    MXFP8 on sm10x, FP8 current scaling on sm12x, FP8 delayed scaling on Ada/Hopper, bf16 on
    Ampere.
    """
    if requested is not None and requested not in RECIPES:
        raise ValueError(f"te_recipe {requested!r} is not one of {', '.join(RECIPES)}")
    if capability is None:
        return RecipePlan("torch", cpu_dtype, requested,
                          f"no GPU: plain torch {cpu_dtype}" if requested else "")
    if not te.available:
        recipe = "bf16" if capability >= MIN_CAPABILITY["bf16"] else "fp32"
        return RecipePlan("torch", recipe, requested,
                          f"TransformerEngine not importable: {te.error}" if requested else "")
    if requested is None:  # TE's own default: MXFP8 on sm10x, current scaling on sm12x
        candidates: tuple[str, ...] = ("mxfp8", "fp8-current", "fp8-delayed", "bf16") if \
            capability >= MXFP8_BELOW else ("mxfp8", "fp8-delayed", "bf16")
    elif capability >= MXFP8_BELOW:  # FP8 wanted on sm12x: current scaling, as TE chooses
        candidates = ("fp8-current", "fp8-delayed", "bf16")
    else:
        candidates = ("fp8-delayed", "bf16")
    fallback = next((r for r in candidates if not _unsupported(r, capability, te.version)), None)
    if requested is None:
        return RecipePlan("torch", "fp32", None) if fallback is None else RecipePlan(
            "te", fallback, None)
    why = _unsupported(requested, capability, te.version)
    if not why:
        return RecipePlan("te", requested, requested)
    if fallback is None:
        return RecipePlan("torch", "fp32", requested, why)
    return RecipePlan("te", fallback, requested, why)


def supported_recipes(capability: tuple[int, int] | None, te: TeInfo) -> list[str]:
    """Every recipe this GPU and TE can run (scripts/device-check runs each): bf16 on sm80+, and
    with TE the FP8 recipes the GPU and TE version support; on CPU (None) fp32 and bf16."""
    if capability is None:
        return ["fp32", "bf16"]
    if not te.available:
        return ["bf16"] if capability >= MIN_CAPABILITY["bf16"] else []
    return [r for r in ("bf16", "fp8-delayed", "fp8-current", "mxfp8")
            if not _unsupported(r, capability, te.version)]


def probe_te(importer: Callable[[str], ModuleType] | None = None) -> TeInfo:
    """Import `transformer_engine.pytorch`; any exception (not only ImportError: a version
    mismatch is an AssertionError, a missing cuDNN a RuntimeError) becomes the error text."""
    if importer is None:
        import importlib

        importer = importlib.import_module
    try:
        te = importer("transformer_engine.pytorch")
    except Exception as exc:
        return TeInfo(False, error=f"{type(exc).__name__}: {exc}".strip()[:1000])
    version = getattr(te, "__version__", None)
    if version is None:
        try:
            version = getattr(importer("transformer_engine"), "__version__", None)
        except Exception:
            version = None
    return TeInfo(True, version=None if version is None else str(version))


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far the sharded step may differ from the unsharded reference, per precision."""

    loss_rel: float
    """Largest |loss_sharded - loss_ref| / |loss_ref| over the steps."""
    update_rel: float
    """Largest ||p_sharded - p_ref|| / ||p_ref - p_init||: the update's relative error."""


#: Unit roundoff of the format that carries the gradients (2^-(mantissa bits + 1)).
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "bf16": 2.0**-8}
#: How far above the error model's estimate the limit sits.
MODEL_MARGIN = 2.0


def model_tolerance(recipe: str, steps: int = 5) -> Tolerance:
    """The error model (docs/training.md, "Error model"): the sharded step and the reference
    differ only in the order of sums, so an output rounded to the gradient format lands at most
    one unit (u) apart on the elements that flip, compounding over the steps: the update's
    relative error is c u sqrt(steps) with c < 1; the loss, a mean over many tokens, averages
    the flips out (a tenth of it). The limit is MODEL_MARGIN times c = 1."""
    update = MODEL_MARGIN * UNIT_ROUNDOFF[recipe] * math.sqrt(steps)
    return Tolerance(loss_rel=round(update / 10, 6), update_rel=round(update, 5))


#: Tolerances by recipe: how far the judged comparison may differ. bf16 is the corruption
#: judgement on every GPU profile (an FP8/MXFP8 step is compared in bf16 beside it): the error
#: model above, 2 u sqrt(5) = 1.75e-2 (update) and 1.75e-3 (loss); measured on CPU (2 gloo
#: ranks, 3 seeds, equal per-token scaling): see TOLERANCE_BASIS; to be confirmed on GPU by
#: scripts/device-check (train-bf16 update_rel_diff_max). A one-rank perturbation s of n ranks
#: moves the update by about s/n: it is caught for s > n x 1.75e-2 (3.5% on 2 ranks, 14% on 8).
#: fp32 (CPU) is measured: the model's 2^-24 says nothing of reduction order in fp32.
#: The FP8 entries are the stack check's (same recipe both sides): reported, never judged.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(loss_rel=1e-5, update_rel=1e-4),
    "bf16": model_tolerance("bf16"),
    "fp8-delayed": Tolerance(loss_rel=5e-2, update_rel=2.5e-1),
    "fp8-current": Tolerance(loss_rel=5e-2, update_rel=2.5e-1),
    "mxfp8": Tolerance(loss_rel=5e-2, update_rel=2.5e-1),
}
#: Where each tolerance comes from (reported with the result; docs/training.md).
TOLERANCE_BASIS: dict[str, str] = {
    "fp32": "measured (CPU, gloo, 2 ranks): loss 1.8e-7, update 3.9e-7",
    "bf16": "error model 2 u(bf16) sqrt(5 steps); measured CPU gloo 2 ranks, 3 seeds: update "
            "<= 2.1e-3; GPU: scripts/device-check",
    "fp8-delayed": "stack check: not judged (the bf16 comparison is)",
    "fp8-current": "stack check: not judged (the bf16 comparison is)",
    "mxfp8": "stack check: not judged (the bf16 comparison is)",
}

#: Faults the step can inject (tests, drills): see `parse_fault`.
FAULT_KINDS = ("grad-perturb", "nan", "corrupt-replica", "hang", "oom")


@dataclass(frozen=True, slots=True)
class Fault:
    """An injected fault: `kind` on rank `rank` at step `step` (0-based)."""

    kind: str
    rank: int = -1
    """-1: the last rank."""
    step: int = 1
    scale: float = 0.05
    """grad-perturb: that rank's local gradients are multiplied by (1 + scale)."""

    def describe(self) -> str:
        return f"{self.kind} on rank {self.rank} at step {self.step}"


def parse_fault(text: str | None) -> Fault | None:
    """`KIND[,rank=R][,step=S][,scale=X]` (e.g. `nan,rank=1,step=2`); empty/None: no fault."""
    if not text or not text.strip():
        return None
    kind, *options = (p.strip() for p in text.split(","))
    if kind not in FAULT_KINDS:
        raise ValueError(f"fault {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    values: dict[str, int | float] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in ("rank", "step", "scale"):
            raise ValueError(f"fault option {option!r}: expected rank=N, step=N or scale=X")
        try:
            values[key] = float(value) if key == "scale" else int(value)
        except ValueError:
            raise ValueError(f"fault option {option!r}: {value!r} is not a number") from None
    return Fault(kind, **values)


@dataclass(frozen=True, slots=True)
class TrainRun:
    """One run of the step among several in one launch (`--train-run RECIPE:SEED[:FAULT]`)."""

    recipe: str
    """A TE recipe (RECIPES) or `fp32`; on CPU `fp32` or `bf16` (the plain-torch dtype)."""
    seed: int
    fault: Fault | None = None


def parse_train_run(text: str) -> TrainRun:
    """`bf16:1234`, `fp8-delayed:1235`, `bf16:1234:grad-perturb,rank=1,scale=0.5`."""
    recipe, sep, rest = text.strip().partition(":")
    seed_text, _, fault_text = rest.partition(":")
    if recipe not in (*RECIPES, "fp32") or not sep:
        raise ValueError(f"train run {text!r}: expected RECIPE:SEED[:FAULT], RECIPE one of "
                         f"{', '.join((*RECIPES, 'fp32'))}")
    try:
        seed = int(seed_text)
    except ValueError:
        raise ValueError(f"train run {text!r}: seed {seed_text!r} is not a number") from None
    return TrainRun(recipe, seed, parse_fault(fault_text))


def run_arguments(args: argparse.Namespace, run: TrainRun, device_type: str) -> argparse.Namespace:
    """The step's options for one run: its seed, and its recipe as the CPU dtype (on CPU) or
    the TE recipe asked for (on GPU; `fp32`: no TE recipe, plain torch)."""
    out = argparse.Namespace(**vars(args))
    out.seed = run.seed
    if device_type == "cpu":
        if run.recipe not in ("fp32", "bf16"):
            raise ValueError(f"train run {run.recipe}: on CPU only fp32 or bf16 run")
        out.cpu_dtype = run.recipe
    elif run.recipe == "fp32":
        out.te_recipe, out.plan = None, "torch:fp32"
    else:
        out.te_recipe = run.recipe
    return out


@dataclass(frozen=True, slots=True)
class StepConfig:
    """Model and run sizes of the step (small enough for seconds on 2 CPU cores)."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    ffn: int = 256
    vocab: int = 256
    seq: int = 32
    batch_per_rank: int = 4
    steps: int = 5
    lr: float = 0.5
    seed: int = 1234


#: Sizes on GPUs: TE's FP8 GEMMs want dims divisible by 16 and MXFP8 by 32.
GPU_SIZES = {"hidden": 256, "heads": 4, "ffn": 1024, "seq": 128, "batch_per_rank": 4}


@dataclass(frozen=True, slots=True)
class TrainStepRun:
    """The step's part of one worker launch: the launch, what its output said, and times."""

    proc: ProcResult
    """The worker launch that ran the step (shared with the launch's other parts)."""
    output: TrainStepOutput | None
    """What the output said; None when nothing in it was recognised."""
    parse_error: str | None
    nproc: int
    part_s: float | None = None
    """The step's own time on rank 0 (model, FSDP2, steps, reference, comparison); None when
    the part did not end."""
    startup_s: float | None = None
    """Launch to process group ready (torchrun, imports, init): shared by every part."""
    not_finished: str | None = None
    """Why the part did not end (its watchdog fired, the launch was killed, never started)."""

    @property
    def wall_s(self) -> float:
        """The step's own time (the start-up is the launch's, not the step's)."""
        return self.part_s if self.part_s is not None else self.proc.duration_s


def add_step_arguments(p: argparse.ArgumentParser) -> None:
    """The step's options, on the worker's command line (harness.worker.parts)."""
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--cpu-dtype", choices=("fp32", "bf16"), default="fp32",
                   help="precision of the plain-torch path on CPU")
    p.add_argument("--te-recipe", choices=tuple(RECIPES), default=None)
    p.add_argument("--te-required", action="store_true",
                   help="the profile requires TE: report its import error as the result")
    p.add_argument("--pg-timeout-s", type=float, default=60.0,
                   help="process-group timeout: a hung collective errors after this")
    p.add_argument("--teardown", choices=("hard", "normal"), default="hard",
                   help="after barrier and destroy: os._exit (hard) or a normal interpreter exit "
                   "(normal: only to measure the abort-at-exit rate, bench/)")
    p.add_argument("--fault", default=get_str(FAULT_ENV),
                   help=f"inject a fault: {parse_fault.__doc__} (env {FAULT_ENV})")
    p.add_argument("--plan", default=None, help=argparse.SUPPRESS)  # tests: PATH:RECIPE
    for name, default in StepConfig.__dataclass_fields__.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(default.default), default=None)
