"""The torch fallback of the single-node bandwidth gate measures the sizes the gate and the
report need: the gate's own size always (PF-BW-001 reads it there), the whole sweep in certify."""

from __future__ import annotations

import dataclasses

import pytest

from harness.fixtures.worker import bandwidth_args
from harness.profiles.table import get_profile

GIB, MIB = 2**30, 2**20


def _sizes(args: tuple[str, ...]) -> list[int]:
    (sizes,) = [a for a in args if a.startswith("--bw-sizes=")]
    return [int(s) for s in sizes.split("=", 1)[1].split(",")]


@pytest.mark.parametrize("tier", ["preflight", "certify"])
def test_the_single_node_gate_size_is_measured(tier: str) -> None:
    profile = get_profile("p5.48xlarge")
    assert profile.intra_gate_size_bytes == 16 * GIB != profile.bw_gate_size_bytes
    assert profile.intra_gate_size_bytes in _sizes(bandwidth_args(profile, tier))


def test_certify_measures_every_4x_from_1_mib() -> None:
    sizes = _sizes(bandwidth_args(get_profile("p5.48xlarge"), "certify"))
    assert sizes == [MIB * 4**k for k in range(8)]  # 1 MiB .. 16 GiB


def test_preflight_stays_short() -> None:
    profile = dataclasses.replace(get_profile("p5.48xlarge"), intra_gate_size_bytes=GIB)
    assert _sizes(bandwidth_args(profile, "preflight")) == [GIB // 4, GIB]
