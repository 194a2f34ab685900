"""A check-session plugin (`-p tests.count_starts`) that counts what a tier starts on a node:
process-group initialisations (torchrun launches of the worker or of the NCCL evidence run),
torch probes (a child interpreter asked for the CUDA device count) and nccl-tests runs, each
appended as a JSON line to $COUNT_STARTS_FILE. The torch launches are answered here, not run
(this machine has no CUDA): every part a launch was asked for ends ok at once, and the device
count is the profile's; nccl-tests is the fake tool on PATH. With tests.fake_gpu_node it makes
a fake p5.48xlarge whose checks take the GPU path."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from harness.base.proc_result import ProcResult

__all__ = ["answer", "pytest_configure"]

WORKER = "gpu-preflight.worker/v1"


def _record(kind: str, **fields: Any) -> None:
    path = os.environ.get("COUNT_STARTS_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"kind": kind, **fields}) + "\n")


def _worker_output(argv: Sequence[str]) -> str:
    nproc = int(next(a for a in argv if a.startswith("--nproc-per-node=")).split("=")[1])
    parts = argv[argv.index("--parts") + 1].split(",") if "--parts" in argv else []
    lines = [json.dumps({"schema": WORKER, "part": "worker", "event": "ready", "rank": r})
             for r in range(nproc)]
    for part in filter(None, parts):
        for r in range(nproc):
            lines.append(json.dumps({"schema": WORKER, "part": part, "event": "start", "rank": r}))
            lines.append(json.dumps({"schema": WORKER, "part": part, "event": "end", "rank": r,
                                     "status": "ok", "elapsed_s": 0.1}))
    return "\n".join(lines) + "\n"


def answer(argv: Sequence[str], real: Any, **kwargs: Any) -> ProcResult:
    """Count and answer one `proc.run`; anything else runs for real."""
    argv = [str(a) for a in argv]
    if "torch.distributed.run" in argv:
        module = argv[argv.index("-m", argv.index("torch.distributed.run") + 1) + 1]
        parts = argv[argv.index("--parts") + 1] if "--parts" in argv else None
        _record("pg_init", module=module, parts=parts)
        out = _worker_output(argv) if module == "harness.worker" else ""
        return ProcResult(tuple(argv), 0, out)
    if len(argv) >= 3 and argv[1] == "-c" and "torch.cuda.device_count()" in argv[2]:
        _record("torch_probe")
        return ProcResult(tuple(argv), 0, "8\n")
    if argv and argv[0].endswith("_perf") and "--help" not in argv:
        _record("nccl_tests", binary=os.path.basename(argv[0]))
    return real(argv, **kwargs)


def pytest_configure(config: object) -> None:
    import torch

    from harness.base import proc

    real = proc.run
    proc.run = lambda argv, **kw: answer(argv, real, **kw)  # type: ignore[assignment]
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
