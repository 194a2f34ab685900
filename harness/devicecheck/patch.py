"""figures.json -> a profile patch (TOML for `preflight run --profile-file`, or to fold into
harness/profiles/profiles.toml): each floor set from a figure measured here, its source citing "measured
on <GPU, driver, date>" and the figure it came from, and the field dropped from `estimates`.
Figures that are no profile field (the worker's start-up, the training tolerances) are written
as comments beside the constants they settle.

    scripts/profile-patch OUT/figures.json > patch.toml
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.base.jsontypes import JSONMapping, JSONObject

__all__ = ["FLOOR_SHARE", "Floor", "floors", "load", "main", "measured_on", "profile_patch"]

#: A floor is this share of the healthy figure: the margin the built-in floors use over their
#: sources (85% of 436.95 GB/s for p5's network floor, profiles.toml estimate-net-p5).
FLOOR_SHARE = 0.85


@dataclass(frozen=True, slots=True)
class Floor:
    """One profile field set from a measured figure."""

    field: str
    value: float
    source: str


def load(path: str | Path) -> JSONObject:
    doc = json.loads(Path(path).read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        raise ValueError(f"{path}: not a device-check figures.json (no steps[])")
    return doc


def measured_on(machine: JSONMapping) -> str:
    """`measured on NVIDIA H100 80GB HBM3, driver 550.90.07, 2027-01-05` (the rehearsal says
    so)."""
    what = f"measured on {machine.get('gpu')}, driver {machine.get('driver')}, " \
           f"{machine.get('date')}"
    return what + (" (REHEARSAL on CPU: not a measurement)" if machine.get("mode") != "device"
                   else "")


def _step(doc: JSONMapping, name: str) -> JSONObject | None:
    return next((s for s in doc["steps"] if s.get("step") == name and s.get("outcome") == "ok"),
                None)


def _values(step: JSONMapping | None, name: str) -> list[JSONObject]:
    return [f for f in (step or {}).get("figures", []) if f.get("name") == name
            and isinstance(f.get("value"), int | float) and not isinstance(f.get("value"), bool)]


def _size(n: int | None) -> str:
    if not n:
        return "?"
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n / 1024**2:g} MiB"


def floors(doc: JSONMapping) -> list[Floor]:
    """The floors this run's figures settle (only from steps that ended ok)."""
    machine = doc.get("machine", {})
    where = measured_on(machine)
    ranks = machine.get("ranks")
    out = []

    def largest(step: str, name: str) -> JSONObject | None:
        rows = _values(_step(doc, step), name)
        return max(rows, key=lambda f: f.get("size_bytes") or 0, default=None)

    bus = largest("nccl-tests", "busbw_gb_s")
    if bus is not None:
        field = "nvlink_busbw_gb_s_min" if machine.get("nvlink") else "pcie_busbw_gb_s_min"
        out.append(Floor(field, round(FLOOR_SHARE * bus["value"], 1),
                         f"{where}: nccl-tests all_reduce_perf busbw {bus['value']} GB/s at "
                         f"{_size(bus.get('size_bytes'))} on {ranks} GPUs; floor = "
                         f"{FLOOR_SHARE} x measured"))
    nvls = largest("nccl-tests-nvls", "busbw_gb_s")
    if nvls is not None:
        out.append(Floor("nvls_busbw_gb_s_min", round(FLOOR_SHARE * nvls["value"], 1),
                         f"{where}: all_reduce_perf NCCL_ALGO=NVLS busbw {nvls['value']} GB/s "
                         f"at {_size(nvls.get('size_bytes'))}; floor = {FLOOR_SHARE} x measured"))
    cpu = largest("worker", "allreduce_busbw_gb_s")
    if cpu is not None and machine.get("gpus") == 0:
        out.append(Floor("cpu_busbw_gb_s_min", round(FLOOR_SHARE * cpu["value"], 3),
                         f"{where}: torch.distributed (gloo) busbw {cpu['value']:.3g} GB/s at "
                         f"{_size(cpu.get('size_bytes'))}; floor = {FLOOR_SHARE} x measured"))
    for name, field_name, unit in (("matmul_tflops", "min_bf16_tflops", "TFLOP/s"),
                                   ("hbm_copy_gb_s", "min_hbm_copy_gb_s", "GB/s")):
        rows = _values(_step(doc, "worker"), name)
        if rows and machine.get("gpus"):
            low = min(rows, key=lambda f: f["value"])
            out.append(Floor(field_name, round(FLOOR_SHARE * low["value"], 1),
                             f"{where}: lowest of {len(rows)} GPUs {low['value']:.1f} {unit} "
                             f"({low.get('where')}); floor = {FLOOR_SHARE} x measured"))
    return out


def _notes(doc: JSONMapping) -> list[str]:
    """What is no profile field: the start-up the launch allowance covers, the tolerances."""
    lines = []
    starts = _values(_step(doc, "worker"), "startup_s")
    if starts:
        lines.append(f"# worker start-up (torchrun to every rank ready): {starts[0]['value']} s "
                     "-> harness/worker/launch.py Startup")
    for phase in ("import_s", "init_s", "first_collective_s"):
        rows = _values(_step(doc, "worker"), phase)
        if rows:
            lines.append(f"#   {phase}: max {max(f['value'] for f in rows):.3g} s over "
                         f"{len(rows)} ranks")
    for step in doc["steps"]:
        if not str(step.get("step", "")).startswith("train-"):
            continue
        for f in step.get("figures", []):
            if f.get("name") in ("update_rel_diff_max", "loss_max_rel_diff_max", "caught"):
                lines.append(f"# {step['step']} {f['name']} [{f.get('where', '')}]: {f['value']}"
                             " -> harness/probes/train_step.py TOLERANCES")
    return lines


def _toml_string(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def profile_patch(doc: JSONMapping) -> str:
    """The patch text: a header saying where it was measured, then one `[profiles."NAME"]`."""
    from harness.profiles.table import BUILTIN_PROFILES

    machine = doc.get("machine", {})
    name = str(machine.get("profile") or "derived")
    found = floors(doc)
    lines = ["# gpu-preflight profile patch from scripts/device-check's figures.json",
             f"# {measured_on(machine)} (host {machine.get('host')}, {machine.get('ranks')} "
             f"ranks, SKU {machine.get('sku')})",
             f"# floors are {FLOOR_SHARE} x the figure measured; use with "
             "`preflight run --profile-file THIS`, or fold into harness/profiles/profiles.toml with the "
             "source", *_notes(doc)]
    if not found:
        return "\n".join([*lines, "# no floor could be set: no step that measures one ended ok",
                          ""])
    if name not in BUILTIN_PROFILES:
        lines.append(f"# {name!r} is no built-in profile: copy these fields to the SKU's table "
                     f"([skus.\"{machine.get('sku')}\"]) of harness/profiles/profiles.toml")
    lines.append(f'[profiles."{name}"]')
    lines += [f"{f.field} = {f.value}" for f in found]
    sources = ", ".join(f"{f.field} = {_toml_string(f.source)}" for f in found)
    lines.append(f"sources = {{ {sources} }}")
    if name in BUILTIN_PROFILES:
        left = [e for e in BUILTIN_PROFILES[name].estimates if e not in {f.field for f in found}]
        lines.append(f"estimates = {json.dumps(left)}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """`scripts/profile-patch FIGURES_JSON`: print the patch."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: scripts/profile-patch OUT/figures.json > patch.toml", file=sys.stderr)
        return 2
    try:
        doc = load(args[0])
    except (OSError, ValueError) as exc:
        print(f"profile-patch: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(profile_patch(doc))
    return 0
