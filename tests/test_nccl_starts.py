"""How many times a tier starts NCCL on a node (issue 27): the preflight tier initialises one
process group per node (the worker's launch, whose NCCL log is also the network checks'
evidence), asks no child interpreter for the CUDA device count, and runs nccl-tests once for
the single-node gate when it is installed; the worker's torch sweep runs only without it.
Counted on a fake p5.48xlarge (tests.fake_gpu_node) by tests.count_starts."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from harness import cli
from tests.e2e.node import FAKES
from tests.fake_gpu_node import use_fake_gpu_node


def count_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tier: str, *,
                 nccl_tests: bool) -> tuple[Counter, list[dict]]:
    bin_dir = use_fake_gpu_node(monkeypatch, tmp_path,
                                "-p tests.fake_gpu_node -p tests.count_starts")
    if nccl_tests:
        tool = bin_dir / "all_reduce_perf"
        tool.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES / "fake_tool.py"}" '
                        'all_reduce_perf "$@"\n')
        tool.chmod(0o755)
    counts = tmp_path / "starts.jsonl"
    monkeypatch.setenv("COUNT_STARTS_FILE", str(counts))
    # The checks' own starts: no failure is run again to confirm it (harness.run.confirm's second
    # session starts its own worker, by design; tests/test_confirm.py).
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles."p5.48xlarge"]\nconfirm_families = []\n')
    cli.main(["run", "--profile", "p5.48xlarge", "--profile-file", str(profiles), "--tier", tier,
              "--workers", "1", "--report-dir", str(tmp_path / "r")])
    lines = [json.loads(x) for x in counts.read_text().splitlines()] if counts.exists() else []
    return Counter(x["kind"] for x in lines), lines


@pytest.mark.parametrize("nccl_tests", [True, False], ids=["nccl-tests", "no-nccl-tests"])
def test_preflight_initialises_one_process_group_per_node(tmp_path, monkeypatch, nccl_tests):
    counts, lines = count_starts(tmp_path, monkeypatch, "preflight", nccl_tests=nccl_tests)
    assert counts["pg_init"] == 1, lines
    assert counts["torch_probe"] == 0, lines
    assert counts["nccl_tests"] == (1 if nccl_tests else 0), lines
    (launch,) = [x for x in lines if x["kind"] == "pg_init"]
    assert launch["module"] == "harness.worker"
    parts = set(launch["parts"].split(","))
    assert {"compute", "links", "train"} <= parts
    assert ("bandwidth" in parts) is not nccl_tests  # the torch sweep: only without nccl-tests


def test_the_torch_sweep_is_wanted_only_where_nothing_else_measures(tmp_path):
    import types

    from harness.fixtures.worker import wanted_parts
    from harness.profiles.table import BUILTIN_PROFILES

    item = types.SimpleNamespace(fixturenames=("single_node_allreduce",),
                                 module=types.SimpleNamespace(__name__="checks.test_bandwidth"))
    p5, cpu = BUILTIN_PROFILES["p5.48xlarge"], BUILTIN_PROFILES["local-cpu"]
    tool = tmp_path / "all_reduce_perf"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    with_tool = {"PATH": str(tmp_path)}
    without = {"PATH": str(tmp_path / "none")}
    assert wanted_parts([item], p5, with_tool) == ()
    assert wanted_parts([item], p5, without) == ("bandwidth",)
    assert wanted_parts([item], cpu, with_tool) == ("bandwidth",)  # the gloo floor: PF-BW-006
