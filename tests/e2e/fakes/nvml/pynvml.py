"""A fake `pynvml` for the end-to-end tests: the installed harness's NVML probe talks to
tests/fake_nvml.py's FakeNvml (eight healthy H100s) instead of a driver. Constants and NVMLError
classes are the real nvidia-ml-py's. sitecustomize.py beside it installs it as `pynvml`.

$FAKE_NVML (JSON) changes the node: {"init_error": "NVMLError_LibraryNotFound"} (no driver),
{"gpus": {"3": {"ecc_volatile": 2}}} (FakeGpu fields per GPU index). Every nvmlInit appends its
pid to $FAKE_STATE/nvml-used, so a test can tell that NVML answered.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_TESTS = _HERE.parents[2]


def _real_pynvml():
    """nvidia-ml-py's pynvml module, found on sys.path past this folder."""
    for entry in sys.path:
        if not entry or Path(entry).resolve() == _HERE:
            continue
        candidate = Path(entry) / "pynvml.py"
        if candidate.is_file():
            spec = importlib.util.spec_from_file_location("_real_pynvml", candidate)
            module = importlib.util.module_from_spec(spec)
            sys.modules["_real_pynvml"] = module  # it looks itself up there (its error classes)
            spec.loader.exec_module(module)
            return module
    raise ImportError("the fake pynvml found no real nvidia-ml-py to take constants from")


def _fake():
    me = sys.modules[__name__]
    real = _real_pynvml()
    sys.modules["pynvml"] = real  # tests/fake_nvml.py imports the real constants by this name
    try:
        spec = importlib.util.spec_from_file_location("_fake_nvml", _TESTS / "fake_nvml.py")
        fake_nvml = importlib.util.module_from_spec(spec)
        sys.modules["_fake_nvml"] = fake_nvml  # dataclasses look their module up there
        spec.loader.exec_module(fake_nvml)
    finally:
        sys.modules["pynvml"] = me
    cfg = json.loads(os.environ.get("FAKE_NVML") or "{}")
    per_gpu = {f"gpu{k}": v for k, v in cfg.get("gpus", {}).items()}
    init_error = getattr(real, cfg["init_error"]) if cfg.get("init_error") else None
    return fake_nvml.FakeNvml(fake_nvml.h100_node(**per_gpu), init_error=init_error)


_NVML = _fake()


def nvmlInit() -> None:
    if os.environ.get("FAKE_STATE"):
        with open(Path(os.environ["FAKE_STATE"]) / "nvml-used", "a") as fh:
            fh.write(f"{os.getpid()}\n")
    _NVML.nvmlInit()


def __getattr__(name: str):
    return getattr(_NVML, name)
