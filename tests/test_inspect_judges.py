"""`preflight inspect` and the checks give one verdict on the same input (harness.judges.network): each
network check (PF-NET-003, 006 to 011) and bandwidth gate (PF-BW-001/002) is run as a function
on the facts parsed from a recorded output, and its outcome (pass, warn, fail, error, skip) and
message are compared with the `verdicts` `inspect` lists for that output and profile."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from checks import test_bandwidth, test_network
from harness.base.errors import ProbeError
from harness.checking import CheckContext, CheckFailure, set_current
from harness.cli import main
from harness.fixtures.bandwidth import BandwidthRun
from harness.fixtures.network import NcclNetEvidence
from harness.parsers import inspect_kinds
from harness.parsers.fi_info import parse_fi_info
from harness.parsers.nccl_log import parse_nccl_log
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.profiles.table import get_profile

DATA = Path(__file__).parent / "data"
PROFILES = ["p5.48xlarge", "p4d.24xlarge", "local-cpu"]

NET_CHECKS = {
    "PF-NET-006": test_network.test_ofi_plugin_loaded,
    "PF-NET-007": test_network.test_provider_is_efa,
    "PF-NET-008": test_network.test_network_not_socket,
    "PF-NET-009": test_network.test_net_channels_use_gdr,
    "PF-NET-010": test_network.test_ofi_nic_count,
    "PF-NET-011": test_network.test_nccl_log_has_no_warnings,
}


def _outcome(check_id: str, profile: str, fn: Any, *args: Any) -> tuple[str, str]:
    """(status in harness.judges.judgement's words, message) of running check function `fn`."""
    ctx = CheckContext(check_id=check_id, profile=profile)
    token = set_current(ctx)
    try:
        fn(*args)
    except CheckFailure as exc:
        return "fail", str(exc)
    except ProbeError as exc:
        return "unknown", str(exc)
    except pytest.skip.Exception as exc:
        return "n/a", str(exc)
    finally:
        set_current(None)
        del token
    return ("warn", " ".join(ctx.warnings)) if ctx.warnings else ("pass", "")


def _verdicts(kind: str, path: Path, profile: str) -> dict[str, dict[str, Any]]:
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        result = inspect_kinds()[kind](fh, profile=get_profile(profile))
    return {v["check"]: v for v in result["verdicts"]}


def _same(check: tuple[str, str], verdict: dict[str, Any]) -> None:
    status, message = check
    assert verdict["status"] == status, (verdict, message)
    assert verdict["message"] in message  # the check adds its ID and the remedy around it


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "nccl_log").glob("*.log")
                                         if p.name != "empty.log")[::3])  # empty: no NCCL log
def test_nccl_log_inspect_and_checks_agree(name: str, profile: str):
    path = DATA / "nccl_log" / name
    summary = parse_nccl_log(path.read_text(encoding="utf-8", errors="replace"))
    evidence = NcclNetEvidence(summary, run_ok=True)
    verdicts = _verdicts("nccl-log", path, profile)
    assert set(verdicts) == set(NET_CHECKS)
    prof = get_profile(profile)
    for cid, fn in NET_CHECKS.items():
        args = (prof, evidence, None) if cid == "PF-NET-006" else (prof, evidence)
        if cid == "PF-NET-006" and verdicts[cid]["status"] == "fail" and summary.plugin != \
                "aws-ofi-nccl":
            # The check also says whether it found the library on disk; inspect did not look.
            assert _outcome(cid, profile, fn, *args)[0] == "fail"
            continue
        _same(_outcome(cid, profile, fn, *args), verdicts[cid])


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "fi_info").glob("*.txt")))
def test_fi_info_inspect_and_check_agree(name: str, profile: str):
    path = DATA / "fi_info" / name
    try:
        info = parse_fi_info(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        pytest.skip("nothing recognised: inspect refuses it (exit 2)")
    verdict = _verdicts("fi-info", path, profile)["PF-NET-003"]
    _same(_outcome("PF-NET-003", profile, test_network.test_fi_info_lists_efa,
                   get_profile(profile), info), verdict)


@dataclass
class _Nodes:
    num_nodes: int
    source: str = "its rank lines"


def _run(result: Any) -> BandwidthRun:
    rows = {r.size_bytes: r.busbw_gb_s for r in result.rows if r.busbw_gb_s is not None}
    return BandwidthRun(
        scope="single-node", source="nccl-tests all_reduce_perf", command="all_reduce_perf",
        num_nodes=result.num_nodes or 0, node_source="its rank lines", nranks=result.nranks,
        busbw_by_size=rows, num_wrong=result.num_wrong, out_of_bounds=result.out_of_bounds,
        completed=result.completed, timed_out=False, duration_s=1.0, budget_s=60.0,
        problem=None)


@pytest.mark.parametrize("profile", ["p5.48xlarge", "g5.48xlarge", "p4d.24xlarge"])
@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "nccl_tests").glob("*.txt")))
def test_nccl_tests_inspect_and_gates_agree(name: str, profile: str):
    path = DATA / "nccl_tests" / name
    result = parse_nccl_tests(path.read_text(encoding="utf-8", errors="replace"))
    verdicts = _verdicts("nccl-tests", path, profile)
    prof = get_profile(profile)
    nodes = result.num_nodes
    if nodes is None or result.collective not in (None, "all_reduce"):
        return  # which gate applies is unknown (or none does): no check runs on it as is
    run = _run(result)
    if nodes == 1:
        check = _outcome("PF-BW-001", profile,
                         test_bandwidth.test_single_node_busbw_meets_nvlink_floor, prof,
                         run)
        verdict = verdicts["PF-BW-001"]
    else:
        check = _outcome("PF-BW-002", profile,
                         test_bandwidth.test_multi_node_busbw_meets_network_floor, prof,
                         _Nodes(nodes), run)
        verdict = verdicts["PF-BW-002"]
    assert verdict["status"] == check[0], (verdict, check)
    if check[0] != "unknown":  # (an unknown names the run it lacks a row of, in its words)
        # The check's detail says where the run came from; the judgement is the same.
        assert verdict["message"].split(" (", 1)[0] in check[1]


def test_a_socket_fallback_fails_inspect_on_a_gpu_profile(capsys):
    log = DATA / "nccl_log" / "real_socket_no_plugin.log"
    assert main(["inspect", "nccl-log", str(log), "--fail-on", "problem"]) == 0  # local-cpu
    assert main(["inspect", "nccl-log", str(log), "--fail-on", "problem",
                 "--profile", "p5.48xlarge"]) == 1
    err = capsys.readouterr().err
    assert "PF-NET-008 fail: network NCCL used is NET/Socket" in err


def test_busbw_under_the_floor_is_the_checks_verdict():
    # One H100 node, 8 ranks, all_reduce at the p5 gate size below the NVLink floor.
    prof = get_profile("p5.48xlarge")
    size = prof.intra_gate_size_bytes
    banner = "".join(f"#  Rank  {r} Group  0 Pid 1 on  node-a device  {r} [0x00] NVIDIA H100\n"
                     for r in range(8))
    text = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup "
            "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n" + banner +
            "#\n#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong\n"
            f"  {size}  {size // 4}     float     sum      -1  1e+05   100.0  175.0      0  "
            "1e+05  100.0  175.0      0\n"
            "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 175 \n")
    result = inspect_kinds()["nccl-tests"](io.StringIO(text), profile=prof)
    verdict = {v["check"]: v for v in result["verdicts"]}["PF-BW-001"]
    parsed = parse_nccl_tests(text)
    check = _outcome("PF-BW-001", prof.name,
                     test_bandwidth.test_single_node_busbw_meets_nvlink_floor, prof,
                     _run(parsed))
    assert verdict["status"] == check[0] != "pass"
    assert (verdict["value"], verdict["threshold"]) == (175.0, prof.intra_node_floor[1])
