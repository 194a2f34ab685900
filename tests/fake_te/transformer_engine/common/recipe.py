"""Recipe stand-ins: only DelayedScaling reduces amax (TE common/recipe/__init__.py)."""

from dataclasses import dataclass


class Format:
    E4M3 = "E4M3"
    HYBRID = "HYBRID"


@dataclass
class DelayedScaling:
    fp8_format: str = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    reduce_amax: bool = True


@dataclass
class Float8CurrentScaling:
    fp8_format: str = Format.HYBRID
    reduce_amax: bool = False


@dataclass
class MXFP8BlockScaling:
    fp8_format: str = Format.E4M3
    reduce_amax: bool = False
