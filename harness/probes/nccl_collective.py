"""A real short NCCL collective (an all_reduce under torchrun, NCCL_DEBUG=INFO) and the debug
logs it writes: the evidence the network checks judge in the longer tiers
(harness.fixtures.network). Facts only: no thresholds."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base import proc
from harness.base.proc_result import ProcResult
from harness.parsers import ParseError

if TYPE_CHECKING:  # types only: the parser is imported where a log is read (start-up)
    from harness.parsers.nccl_log_facts import NcclLogSummary

__all__ = ["CollectiveRun", "run_collective"]


@dataclass(frozen=True, slots=True)
class CollectiveRun:
    """A short all_reduce under torchrun: how it ended and the NCCL debug logs it wrote."""

    result: ProcResult
    log_files: tuple[Path, ...]
    workdir: Path

    def summary(self) -> NcclLogSummary:
        """The NCCL logs of every rank, parsed as one log (ParseError when there are none)."""
        if not self.log_files:
            raise ParseError(f"the collective wrote no NCCL debug log under {self.workdir}")
        from harness.parsers.nccl_log import parse_nccl_log_stream  # the C scan: where a log is

        handles = [path.open("rb") for path in self.log_files]
        try:
            return parse_nccl_log_stream(handles)
        finally:
            for fh in handles:
                fh.close()


#: Repository root, so that `-m harness.worker.nccl` imports in the ranks.
_ROOT = Path(__file__).resolve().parents[2]


def run_collective(
    nproc: int,
    *,
    env: Mapping[str, str],
    workdir: Path,
    timeout_s: float,
    backend: str = "nccl",
    force_net: bool = True,
    python: str = sys.executable,
    worker_args: tuple[str, ...] = (),
) -> CollectiveRun:
    """All_reduce on `nproc` local ranks (torchrun --standalone) with NCCL_DEBUG=INFO,
    NCCL_DEBUG_SUBSYS=INIT,NET and NCCL_DEBUG_FILE under `workdir`.

    `force_net` disables NCCL's P2P, SHM and NVLS transports so that even a single node sends
    through the network plugin: the channel lines then show the NIC path (`via NET/.../GDRDMA`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    child = dict(env)
    child.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET",
                 NCCL_DEBUG_FILE=str(workdir / "nccl-%h-%p.log"))
    if force_net:
        child.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NVLS_ENABLE="0")
    child["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
    # The ranks' own timeout fires before ours, so a hang ends as an error message, not a kill.
    rank_timeout_s = max(5.0, timeout_s - 20.0)
    argv = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "harness.worker.nccl", "--backend", backend,
            "--timeout-s", f"{rank_timeout_s:g}", *worker_args]
    result = proc.run(argv, timeout_s=timeout_s, env=child, cwd=workdir,
                      output_path=workdir / "torchrun.log")
    return CollectiveRun(result, tuple(sorted(workdir.glob("nccl-*.log"))), workdir)
