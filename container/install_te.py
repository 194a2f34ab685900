"""Installs TransformerEngine (TE) for the CUDA major version the image's torch was built for,
then proves the install is whole: `python3 install_te.py [VERSION]` (container/Dockerfile,
INSTALL_TE=1). Exit 1 with the reason when it is not, so an image never ships a TE that falls
back to plain torch at run time and hides the FP8 training-step check.

What TE's packaging does (NVIDIA/TransformerEngine, setup.py and transformer_engine/pytorch/
setup.py, tags v2.8 to v2.12 read):
- The `transformer_engine` meta package has extras `core_cu12` and, from v2.9, `core_cu13`
  (the compiled core library for CUDA 12 or 13); `pytorch` pulls `transformer_engine_torch`.
- From v2.9 `transformer_engine_torch` requires `transformer_engine_cu<torch.version.cuda
  major>`; before v2.9 only CUDA 12 cores exist: a CUDA-13 torch cannot have TE < 2.9.
- At import, `transformer_engine.common.get_te_core_package_info` looks for the cu12 core
  first, then cu13: a stray cu12 core beside the cu13 one is the one loaded.
- `import transformer_engine` succeeds even when its PyTorch extension cannot load
  (`transformer_engine/__init__.py` catches ImportError and warns on FileNotFoundError); only
  `import transformer_engine.pytorch` says what is wrong.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from importlib import metadata

#: CUDA major -> the first TE release with a core wheel for it.
FIRST_TE_FOR_CUDA = {12: (1, 0), 13: (2, 9)}
#: Import failures that mean "no GPU driver here" (a `docker build` has none): the import is
#: proven at run time by PF-TRAIN-002 instead. Any other failure stops the build.
NO_DRIVER_HINTS = ("libcuda.so", "CUDA driver", "no CUDA-capable device", "cudaErrorNoDevice",
                   "NVIDIA driver")


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isascii() and c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    return tuple(parts)


def requirement(cuda_major: int | None, version: str = "") -> str:
    """The pip requirement for TE on this CUDA major (`transformer_engine[pytorch,core_cu13]
    ==2.10`); ValueError saying why there is none."""
    if cuda_major not in FIRST_TE_FOR_CUDA:
        built = cuda_major or "none (a CPU build)"
        raise ValueError(f"the image's torch is built for CUDA {built}: TransformerEngine has "
                         "core wheels for CUDA 12 and 13 only")
    first = FIRST_TE_FOR_CUDA[cuda_major]
    if version and _release(version)[:2] < first:
        raise ValueError(f"TE_VERSION={version} has no CUDA {cuda_major} core wheel (the "
                         f"first is {'.'.join(map(str, first))}): use a newer TE_VERSION or a "
                         f"CUDA {min(FIRST_TE_FOR_CUDA)} base image")
    return f"transformer_engine[pytorch,core_cu{cuda_major}]" + (f"=={version}" if version else "")


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def install_problems(cuda_major: int,
                     dist_version: Callable[[str], str | None] = _dist_version) -> list[str]:
    """What is wrong with the installed TE packages: a missing one, versions that differ, or a
    cu12 core beside the cu13 one (TE would load the cu12 one)."""
    want = {"transformer_engine": None, "transformer_engine_torch": None,
            f"transformer_engine_cu{cuda_major}": None}
    problems = []
    for name in want:
        want[name] = dist_version(name)
        if want[name] is None:
            problems.append(f"{name} is not installed")
    versions = {v for v in want.values() if v is not None}
    if len(versions) > 1:
        problems.append("TE package versions differ: " + ", ".join(
            f"{name} {v}" for name, v in want.items() if v is not None))
    # TE looks for the cu12 core first: beside a cu13 core it is the one loaded.
    stray = dist_version("transformer_engine_cu12") if cuda_major != 12 else None
    if stray is not None:
        problems.append(f"transformer_engine_cu12 {stray} is installed too, and TE loads it "
                        f"before the CUDA {cuda_major} core: `pip uninstall "
                        "transformer_engine_cu12`")
    return problems


def import_problem(python: str = sys.executable) -> str | None:
    """None when `import transformer_engine.pytorch` works, or fails only for want of a GPU
    driver; else the error's last line."""
    res = subprocess.run([python, "-c", "import transformer_engine.pytorch"],
                         capture_output=True, text=True, timeout=600, check=False)
    if res.returncode == 0:
        return None
    err = (res.stderr.strip().splitlines() or [f"exit status {res.returncode}"])[-1]
    if any(hint in res.stderr for hint in NO_DRIVER_HINTS):
        print(f"install_te: import transformer_engine.pytorch needs the GPU driver ({err}); "
              "PF-TRAIN-002 proves it at run time", file=sys.stderr)
        return None
    return err


def torch_cuda_major() -> int | None:
    """The CUDA major version of the installed torch (None: a CPU build)."""
    import torch

    cuda = torch.version.cuda
    return int(cuda.split(".")[0]) if cuda else None


def main(argv: list[str]) -> int:
    version = argv[1] if len(argv) > 1 else ""
    major = torch_cuda_major()
    try:
        req = requirement(major, version)
    except ValueError as exc:
        print(f"install_te: {exc}", file=sys.stderr)
        return 1
    print(f"install_te: torch is built for CUDA {major}: installing {req}", flush=True)
    pip = [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--no-build-isolation", req]
    if subprocess.run(pip, check=False).returncode != 0:
        print(f"install_te: `{' '.join(pip)}` failed", file=sys.stderr)
        return 1
    assert major is not None  # requirement() refused a CPU build
    problems = install_problems(major)
    failed = import_problem() if not problems else None
    if failed:
        problems.append(f"import transformer_engine.pytorch failed: {failed}")
    for problem in problems:
        print(f"install_te: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
