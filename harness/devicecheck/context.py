"""What every device-check step reads: the mode (on the device, or rehearsed on CPU), the
profile the production launch would use, the environment its subprocesses get, NVML (the real
module, or the project's fake in a rehearsal), and the budget's deadline."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.deadline import Deadline
from harness.base.jsontypes import JSONObject
from harness.profiles.model import Profile

__all__ = ["DEVICE", "REHEARSE", "Context"]

DEVICE, REHEARSE = "device", "rehearse"


@dataclass
class Context:
    """The run's state, shared by its steps."""

    out: Path
    mode: str
    """DEVICE (NVIDIA GPUs, NCCL) or REHEARSE (CPU, gloo, 2 ranks, fakes)."""
    profile: Profile
    """The profile a preflight of this machine resolves (derived from it on the device,
    `local-cpu` in a rehearsal): what the production worker launch is planned from."""
    env: dict[str, str]
    """The environment every subprocess gets (fakes first on PATH in a rehearsal)."""
    deadline: Deadline
    nvml: object | None = None
    """The pynvml module, or a stand-in with its API (None: import pynvml)."""
    nvls: bool = False
    """Whether an NVLS-only nccl-tests pass applies (NVSwitch, Hopper or newer)."""
    log: list[str] = field(default_factory=list)
    facts: JSONObject = field(default_factory=dict)
    """What earlier steps learnt that later ones use (compute capability, TE version)."""
    started: float = field(default_factory=time.monotonic)

    @property
    def rehearsal(self) -> bool:
        return self.mode == REHEARSE

    @property
    def device(self) -> str:
        return "cpu" if self.rehearsal or not self.profile.has_gpus else "cuda"

    @property
    def nproc(self) -> int:
        """Ranks of a launch: one per GPU, 2 gloo processes in a rehearsal."""
        return self.profile.num_gpus if self.device == "cuda" else 2

    @property
    def logs(self) -> Path:
        path = self.out / "logs"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def limit(self, cap_s: float) -> float:
        """A step's time: its own cap, or what is left of the budget."""
        return self.deadline.limit(cap_s)

    def note(self, step: str, text: str) -> None:
        """One entry of device-check.log: a command, its status and its output's tail."""
        self.log.append(f"=== {step}\n{text.rstrip()}\n")
