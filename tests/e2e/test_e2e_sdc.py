"""The SDC cross-check against the installed product, on real processes: `preflight selftest
cluster --inject sdc=K` (every node runs PF-GPU-020 in its own worker launch of gloo ranks;
node K flips one bit of its results, so only the cross-node comparison PF-CLUSTER-007 can see
it) names node K; and one gloo rank of a worker launch with a flipped bit is named by the node
check (multi-process: kept out of the unit stage)."""

from __future__ import annotations

import json
import subprocess

from tests.e2e import procs
from tests.e2e.shipped import Shipped


def _env(shipped: Shipped, tmp_path, token: str) -> dict[str, str]:
    return {"PATH": f"{shipped.bin}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
            "AWS_EC2_METADATA_DISABLED": "true", "E2E_RUN_TOKEN": token}


def test_selftest_names_the_node_whose_sdc_result_differs_by_one_bit(shipped: Shipped,
                                                                    tmp_path) -> None:
    token = procs.run_token("sdc")
    argv = [str(shipped.preflight), "selftest", "cluster", "--nodes", "3", "--inject", "sdc=1",
            "--work-dir", str(tmp_path / "world")]
    try:
        out = subprocess.run(argv, env=_env(shipped, tmp_path, token), cwd=tmp_path,
                             capture_output=True, text=True, timeout=300)
        why = out.stdout[-4000:] + out.stderr[-2000:]
        assert out.returncode == 1, why
        assert "cluster verdict: FAIL; bad nodes: node1 (" in out.stdout, why
        assert "node1 (rank 1): silent data corruption suspected: digest " in out.stdout, why
        for rank in (0, 2):  # the healthy nodes passed their own checks and judged node1
            report = json.loads((tmp_path / "world" / f"node{rank}" / "report.json").read_text())
            checks = {c["id"]: c for c in report["checks"]}
            assert checks["PF-GPU-020"]["outcome"] == "pass"
            assert checks["PF-CLUSTER-007"]["outcome"] == "fail"
            assert [b["host"] for b in report["cluster"]["bad_nodes"]] == ["node1"]
        bad = json.loads((tmp_path / "world" / "node1" / "report.json").read_text())
        assert {c["id"]: c["outcome"] for c in bad["checks"]}["PF-GPU-020"] == "pass"
        assert procs.leftovers(token) == []
    finally:
        procs.kill_leftovers(token)


WORKER = """
import json, os, sys
from checks.test_sdc import test_sdc_cross_check_in_node
from harness.checking import run_check
from harness.fixtures.sdc import SdcRun
from harness.profiles.table import get_profile
from harness.worker.compute import find_record
from harness.worker.launch import PartSpec, run_worker
run = run_worker(3, [PartSpec("sdc", 90)], env={**os.environ, "GLOO_SOCKET_IFNAME": "lo"},
                 extra=["--device=cpu", "--pg-timeout-s=60", "--sdc-flip-rank=2"])
record = find_record(run.parts["sdc"].output, "gpu-preflight.sdc/v1")
result = run_check(test_sdc_cross_check_in_node, SdcRun("short", record["ranks"], 3),
                   get_profile("local-cpu"), None, profile="local-cpu")
print(json.dumps([run.parts["sdc"].status, result.outcome, result.message]))
"""


def test_one_gloo_rank_with_a_flipped_bit_is_named(shipped: Shipped, tmp_path) -> None:
    token = procs.run_token("sdc-rank")
    try:
        out = subprocess.run([str(shipped.python), "-c", WORKER], cwd=tmp_path, timeout=180,
                             env=_env(shipped, tmp_path, token), capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        status, outcome, message = json.loads(out.stdout.strip().splitlines()[-1])
        assert (status, outcome) == ("ok", "fail"), message
        assert "rank 2 (CPU): silent data corruption suspected: digest " in message
        assert "on 2 of 3 devices" in message and "rank 0 (CPU):" not in message
        assert procs.leftovers(token) == []
    finally:
        procs.kill_leftovers(token)
