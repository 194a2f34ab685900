"""GPUs the NVIDIA driver could not initialise, in a kernel log: `NVRM: GPU 0000:0a:00.0:
RmInitAdapter failed! (0x24:0x72:1568)`, then `rm_init_adapter failed, device minor number 5`
(the driver's NV_DEV_PRINTF prefix `NVRM: GPU <domain:bus:device.function>: `). No Xid line
comes: the GPU never came up, so nothing else in the log names it, and every later open retries
and fails again (NVIDIA/gpu-operator#1146, #649: tests/data/kernel_log/real_*rminitadapter*)."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["InitFailure", "init_failure"]

_INIT_FAILED = re.compile(
    r"NVRM: GPU (?P<pci>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]): RmInitAdapter "
    r"failed! \((?P<code>[^)\n]{0,40})\)")


@dataclass(frozen=True, slots=True)
class InitFailure:
    """A GPU the driver failed to initialise: its first failure in the log, and how many."""

    pci: str
    code: str
    """The driver's `(status:module:line)` triple, as printed (`0x24:0x72:1568`)."""
    time: str | None
    line: int
    count: int = 1


def init_failure(line: str, when: str | None, n: int) -> InitFailure | None:
    """The failure `line` (an `NVRM:` line, unwrapped) reports, else None."""
    if "RmInitAdapter failed" not in line:
        return None
    m = _INIT_FAILED.search(line)
    return InitFailure(m["pci"], m["code"], when, n) if m else None
