"""The device-check steps that read the machine rather than launch the worker: versions,
NVML beside nvidia-smi (with PCIe generations as NVML and the host report them), `dcgmi diag
-r 1`, and the NVLink error counters sampled across the whole run."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

from harness.base import proc
from harness.base.jsontypes import JSONObject
from harness.devicecheck.context import Context
from harness.devicecheck.record import Figure, StepResult, figure_key, settle

if TYPE_CHECKING:
    from harness.probes.nvml_nvlink import GpuCounters

__all__ = ["NvlinkSampler", "dcgm_step", "nvml_step", "versions_step"]

#: Printed by a child interpreter: versions as torch, TE and the tools see them.
VERSIONS = r"""
import importlib, json, shutil, subprocess
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_devices"] = torch.cuda.device_count()
    if torch.cuda.is_available():
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        out["capability"] = list(torch.cuda.get_device_capability(0))
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
try:
    te = importlib.import_module("transformer_engine.pytorch")
    out["te"] = str(getattr(te, "__version__", None)
                    or getattr(importlib.import_module("transformer_engine"), "__version__", "?"))
except Exception as exc:
    out["te_error"] = f"{type(exc).__name__}: {exc}"[:300]
smi = shutil.which("nvidia-smi")
if smi:
    lines = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60).stdout.splitlines()
    if lines and "," in lines[0]:
        out["driver"], out["gpu"] = (x.strip() for x in lines[0].split(",", 1))
        out["gpus"] = len(lines)
print("DEVICE-CHECK " + json.dumps(out))
"""


def _marked(output: str) -> JSONObject | None:
    for line in reversed(output.splitlines()):
        if line.startswith("DEVICE-CHECK "):
            try:
                found = json.loads(line.removeprefix("DEVICE-CHECK "))
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def versions_step(ctx: Context) -> StepResult:
    """torch, CUDA, NCCL, TE, the driver and the GPU, as the training image's python sees them."""
    step = StepResult("versions", "torch, its CUDA and NCCL, TransformerEngine, driver, GPU")
    res = proc.run([sys.executable, "-c", VERSIONS], timeout_s=ctx.limit(120.0), env=ctx.env)
    ctx.note("versions", f"{res.describe()}\n{res.output[-3000:]}")
    found = _marked(res.output) or {}
    if not found:
        step.problems.append(f"no versions line: {res.describe()}")
    units = {"cuda_devices": "devices", "gpus": "GPUs"}
    for key in ("torch", "torch_cuda", "nccl", "te", "te_error", "torch_error", "cuda_devices",
                "capability", "driver", "gpu", "gpus"):
        if key in found:
            value = found[key]
            if key == "capability" and isinstance(value, list):
                value = f"sm{value[0]}{value[1]}"
            step.figures.append(Figure(key, value, units.get(key, "")))
    ctx.facts.update(capability=found.get("capability"), te_version=found.get("te"),
                     driver=found.get("driver"), gpu=found.get("gpu"))
    expected = [figure_key(k) for k in ("torch", "driver", "gpu")]
    if ctx.device == "cuda":
        expected += [figure_key(k) for k in ("torch_cuda", "nccl", "capability")]
    if "torch_error" in found:
        step.problems.append(f"torch: {found['torch_error']}")
    return settle(step, expected)


def nvml_step(ctx: Context) -> StepResult:
    """NVML's inventory beside `nvidia-smi -q -x`'s, field by field; each GPU's PCIe maximum
    as NVML gives it for the device in this system, and the host's as nvidia-smi reports it."""
    from harness.base.errors import ProbeError
    from harness.probes import gpu
    from harness.probes.nvidia_smi import smi_query, smi_query_xml

    step = StepResult("nvml", "NVML beside nvidia-smi -q -x; PCIe generations (NVML's maximum "
                      "for the device in this system; the host's, reported)")
    try:
        nvml = gpu.query_gpus(ctx.nvml)
    except Exception as exc:
        step.problems.append(f"NVML: {type(exc).__name__}: {exc}")
        return settle(step)
    step.figures += [Figure("gpus", len(nvml.gpus), "GPUs", where="NVML"),
                     Figure("driver", nvml.driver_version, "", where="NVML")]
    for g in nvml.gpus:
        where = f"GPU {g.index}"
        for name, value in (("pcie_gen_max", g.pcie_gen_max),
                            ("pcie_gen_device_max", g.pcie_gen_device_max),
                            ("pcie_gen_current", g.pcie_gen_current),
                            ("nvlinks_active", len(g.nvlinks_active or ()))):
            if value is not None:
                step.figures.append(Figure(name, value, "" if "gen" in name else "links",
                                           where=where))
    try:  # the XML first; `-q` where a build prints no XML (the harness's own fallback order)
        try:
            smi = smi_query_xml(ctx.limit(60.0))
        except ProbeError as exc:
            ctx.note("nvml", f"nvidia-smi -q -x: {exc}; trying nvidia-smi -q")
            smi = smi_query(ctx.limit(60.0))
    except ProbeError as exc:
        step.problems.append(f"nvidia-smi: {exc}")
        return settle(step)
    differences = []
    for a, b in zip(nvml.gpus, smi.gpus, strict=False):
        row_a, row_b = asdict(a), asdict(b)
        for key, value in row_a.items():
            if key != "query_errors" and value is not None and row_b.get(key) not in (None,
                                                                                   value):
                differences.append(f"GPU {a.index} {key}: NVML {value!r}, smi {row_b[key]!r}")
        if b.pcie_gen_host_max:
            step.figures.append(Figure("pcie_gen_host_max", b.pcie_gen_host_max, "",
                                       where=f"GPU {b.index}, nvidia-smi (information)"))
    step.figures.append(Figure("nvml_smi_differences", len(differences), "fields"))
    ctx.note("nvml", "\n".join(differences) or "NVML and nvidia-smi agree")
    expected = [figure_key("gpus", "NVML"), figure_key("nvml_smi_differences")]
    expected += [figure_key("pcie_gen_max", f"GPU {g.index}") for g in nvml.gpus]
    return settle(step, expected)


def dcgm_step(ctx: Context) -> StepResult:
    """`dcgmi diag -r 1 -j`: how many of NVIDIA's own quick tests passed."""
    from harness.base.errors import ProbeError
    from harness.probes.dcgm import run_dcgm_diag

    step = StepResult("dcgm", "dcgmi diag -r 1 -j")
    if proc.which("dcgmi") is None:
        step.outcome, step.reason = "skipped", "dcgmi is not installed"
        return step
    try:
        diag = run_dcgm_diag(1, timeout_s=ctx.limit(120.0))
    except ProbeError as exc:
        step.problems.append(str(exc))
        return settle(step)
    step.figures += [Figure("dcgm_results", len(diag.results), "results"),
                     Figure("dcgm_failed", len(diag.failed), "results"),
                     Figure("dcgm_version", diag.dcgm_version, "")]
    if diag.passed is False:
        step.problems.append("dcgmi diag -r 1 failed: " + "; ".join(
            f"{r.test} {r.status}" for r in diag.failed[:5]))
    return settle(step, [figure_key("dcgm_results"), figure_key("dcgm_failed")])


class NvlinkSampler:
    """Samples every GPU's NVLink error counters every `interval_s` on a thread, from the run's
    start to its end (`stop`), so that errors the worker's or nccl-tests' traffic causes show
    as growth between two samples."""

    def __init__(self, ctx: Context, interval_s: float = 15.0) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.samples: list[tuple[float, dict[int, GpuCounters]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nvlink-sampler", daemon=True)

    def start(self) -> NvlinkSampler:
        self._sample()
        self._thread.start()
        return self

    def _sample(self) -> None:
        from harness.probes import gpu

        try:
            self.samples.append((time.monotonic(), gpu.sample_nvlink_errors(self.ctx.nvml)))
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def stop(self) -> StepResult:
        """The last sample, then the step: growth between the first and the last sample."""
        from harness.probes.nvml_nvlink import error_growth

        self._stop.set()
        self._thread.join(timeout=30)
        self._sample()
        step = StepResult("nvlink-counters", f"NVLink error counters sampled every "
                          f"{self.interval_s:g} s across the whole run")
        step.problems += self.errors[:3]
        if len(self.samples) < 2:
            step.problems.append(f"{len(self.samples)} sample(s): growth needs two")
            return settle(step)
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        growth = error_growth(first, last, t1 - t0)
        step.figures += [Figure("samples", len(self.samples), "samples"),
                         Figure("span_s", round(t1 - t0, 1), "s"),
                         Figure("gpus_read", len(growth.read), "GPUs")]
        for gpu_index in sorted(last):
            grown = sum(v for link in growth.growth.get(gpu_index, {}).values()
                        for v in link.values())
            step.figures.append(Figure("nvlink_error_growth", grown, "counts",
                                       where=f"GPU {gpu_index}"))
        for gpu_index, why in sorted(growth.unread.items()):
            step.problems.append(f"GPU {gpu_index}: {why}")
        if growth.growth:
            step.problems.append("NVLink error counters grew: " + json.dumps(
                {str(k): v for k, v in growth.growth.items()}))
        expected = [figure_key("samples"), figure_key("gpus_read")]
        expected += [figure_key("nvlink_error_growth", f"GPU {g}") for g in sorted(last)]
        return settle(step, expected)
