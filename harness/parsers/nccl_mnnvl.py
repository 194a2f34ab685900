"""NCCL's multi-node NVLink lines and the NVML fabric health mask, decoded.

`MNNVL busId 0x%lx fabric UUID %lx.%lx cliqueId 0x%x state %d healthMask 0x%x` (NVIDIA/nccl
src/init.cc, 2.20.3 to 2.30.7): the UUID is the 16 bytes read as two 64-bit words printed in hex
without leading zeros, so a zero UUID prints `0.0`. NCCL enables MNNVL only when the state is
COMPLETED on every rank, the cluster UUID is non-zero and the clique has more than one member
(src/mnnvl.cc): an HGX box logs state 3 with UUID 0.0 and is not a domain.

healthMask (nvidia-ml-py 13.615.71, NVML_GPU_FABRIC_HEALTH_MASK_*): 2-bit fields DEGRADED_BW
(bits 1:0), ROUTE_RECOVERY (3:2), ROUTE_UNHEALTHY (5:4), ACCESS_TIMEOUT_RECOVERY (7:6), each 0 not
supported, 1 TRUE (the fault is present), 2 FALSE; INCORRECT_CONFIGURATION (11:8) 0 not supported,
1 none, 2+ a fault. So 0xaa is healthy (a real GB200 logs it, NVIDIA/nccl#1769) and 0x0 is
"not supported" (HGX H200, deepseek-ai/DeepEP#143). NCCL's bundled header's `0x11` width is not
the NVML layout and is not used here."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MnnvlLine", "health_faults", "parse_mnnvl_lines"]

_LINE = re.compile(
    r"MNNVL busId 0x(?P<bus>[0-9a-fA-F]+) fabric UUID (?P<hi>[0-9a-fA-F]+)\.(?P<lo>[0-9a-fA-F]+) "
    r"cliqueId 0x(?P<clique>[0-9a-fA-F]+) state (?P<state>[0-9]+) healthMask 0x(?P<mask>[0-9a-fA-F]+)")
#: (name, shift) of the 2-bit TRUE/FALSE fields.
_BOOL_FIELDS = (("degraded bandwidth", 0), ("route recovery", 2), ("route unhealthy", 4),
                ("access timeout recovery", 6))
COMPLETED = 3


@dataclass(frozen=True, slots=True)
class MnnvlLine:
    bus_id: int
    cluster_uuid: str
    """The two hex words as NCCL prints them (`0.0` when zero)."""
    clique_id: int
    state: int
    health_mask: int

    @property
    def in_domain(self) -> bool:
        """COMPLETED with a non-zero cluster UUID: part of a multi-node NVLink domain."""
        return self.state == COMPLETED and self.cluster_uuid not in ("0.0",)


def parse_mnnvl_lines(text: str) -> list[MnnvlLine]:
    """Every MNNVL line of an NCCL_DEBUG=INFO log, in order (hex kept ASCII-only by the regex)."""
    return [MnnvlLine(int(m["bus"], 16), f"{int(m['hi'], 16):x}.{int(m['lo'], 16):x}",
                      int(m["clique"], 16), int(m["state"]), int(m["mask"], 16))
            for m in _LINE.finditer(text)]


def health_faults(mask: int | None) -> list[str]:
    """The faults a healthMask reports (empty: healthy, or nothing supported)."""
    if mask is None:
        return []
    faults = [name for name, shift in _BOOL_FIELDS if (mask >> shift) & 0x3 == 1]
    config = (mask >> 8) & 0xF
    if config >= 2:
        faults.append(f"incorrect configuration (code {config})")
    return faults
