"""scripts/device-check's non-GPU parts: arguments, what it skips and why, the summary and the
bounded set of output files. (Its GPU steps run on the first GPU machine.)"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device-check"


def _module():
    loader = importlib.machinery.SourceFileLoader("device_check", str(SCRIPT))
    spec = importlib.util.spec_from_loader("device_check", loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["device_check"] = mod  # dataclasses resolve annotations through it
    loader.exec_module(mod)
    return mod


def _run(*args: str, path: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def test_list_names_every_step_in_order():
    out = _run("--list", path=os.environ["PATH"])
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert names[0] == "versions" and names[-1] == "preflight-diagnose"
    assert {"nvml-vs-smi", "nvlink-counters", "compute-1", "compute-2", "train-bf16",
            "nccl-1-rank", "nccl-all-gpus", "nccl-tests", "dcgm-diag"} <= set(names)


def test_out_dir_is_required_and_unknown_steps_are_refused(tmp_path):
    assert _run(path=os.environ["PATH"]).returncode == 2
    bad = _run(str(tmp_path), "--only", "versions,nope", path=os.environ["PATH"])
    assert bad.returncode == 2 and "unknown step(s): nope" in bad.stderr


def test_without_a_gpu_every_gpu_step_is_skipped_with_its_reason(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = _run(str(tmp_path / "out"), "--only", "versions,compute-1,nccl-tests,dcgm-diag",
               path=f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}/usr/bin:/bin")
    assert out.returncode == 0, out.stderr
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert set(files) <= {"summary.txt", "figures.json", "device-check.log", "report.json"}
    doc = json.loads((tmp_path / "out" / "figures.json").read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert steps["versions"]["outcome"] == "ok"
    assert "torch" in steps["versions"]["figures"]
    assert steps["compute-1"]["reason"].startswith("no NVIDIA GPU visible")
    assert steps["train-bf16"]["reason"] == "not selected (--only)"
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "compute-1            SKIPPED  no NVIDIA GPU visible" in summary
    assert summary.splitlines()[0].startswith("device-check: 0 GPU(s)")


def test_with_a_gpu_but_no_tools_or_te_the_reasons_name_them(tmp_path):
    mod = _module()
    ctx = mod.Context(out=tmp_path, env={}, gpus=2, tools={"dcgmi": None, "nvidia-smi": "x",
                                                            "all_reduce_perf": None}, te=False)
    steps = {s.name: s for s in mod.STEPS}
    assert mod.run_step(steps["dcgm-diag"], ctx, 100)["reason"] == "dcgmi is not installed"
    assert mod.run_step(steps["train-mxfp8"], ctx, 100)["reason"] == (
        "TransformerEngine is not importable")
    assert mod.run_step(steps["nccl-tests"], ctx, 100)["reason"] == (
        "all_reduce_perf is not installed")
    assert "no time left" in mod.run_step(steps["versions"], ctx, 5)["reason"]
    one = mod.Context(out=tmp_path, env={}, gpus=1, tools={}, te=False)
    assert "1 GPU" in mod.run_step(steps["nccl-all-gpus"], one, 100)["reason"]


def test_the_all_gpu_bench_reads_the_floors_sizes():
    mod = _module()
    ctx = mod.Context(out=Path("."), env={}, gpus=8, tools={}, te=False)
    argv = {s.name: s for s in mod.STEPS}["nccl-all-gpus"].argv(ctx)
    sizes = [int(x) for x in argv[argv.index("--sizes") + 1].split(",")]
    assert 16 * 1024**3 in sizes and 1024**3 in sizes and "--nproc-per-node=8" in argv


def test_figures_line_is_read_from_the_output():
    mod = _module()
    assert mod._figures('noise\nDEVICE-CHECK {"a": 1}\n') == {"a": 1}
    assert mod._figures("no figures here") is None
