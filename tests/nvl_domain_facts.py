"""Canned facts for checks/test_nvl_domain.py and checks/test_ib_sharp.py, built from recorded NCCL
logs (tests/data/nccl_log, sources in its SOURCES.md) parsed by harness.parsers.nccl_fabric, so
that the checks are judged on what real clusters printed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.fixtures.bandwidth import BandwidthRun
from harness.fixtures.nvl_domain import NVLS_GATE_SIZE, FabricEvidence
from harness.parsers.nccl_fabric import parse_fabric_log
from harness.probes.imex import ImexStatus
from harness.topology.nodes import NodeCount
from tests.fabric_facts import GB200, HGX

LOGS = Path(__file__).resolve().parent / "data" / "nccl_log"


def _log(name: str, *, keep: str | None = None):
    text = (LOGS / name).read_text(encoding="utf-8")
    if keep is not None:  # one block of a file that holds two machines
        text = "\n".join(ln for ln in text.splitlines() if keep in ln)
    return parse_fabric_log(text)


def _run(scope: str, log, **changes) -> BandwidthRun:
    run = BandwidthRun(
        scope=scope, source="nccl-tests all_reduce_perf", command="all_reduce_perf -b 128M -e 1G",
        num_nodes=1, node_source="this node only", nranks=8,
        busbw_by_size={NVLS_GATE_SIZE: 470.0}, num_wrong=0, out_of_bounds=0, completed=True,
        timed_out=False, duration_s=10.0, budget_s=300.0, problem=None, fabric_log=log)
    return replace(run, **changes)


GB200_LOG = _log("real_mnnvl_h200_gb200.txt", keep="gb200a-04")
HGX_LOG = _log("real_mnnvl_h200_gb200.txt", keep="msm-h200-2")
SHARP_OK = _log("real_collnet_sharp_connected.log")
SHARP_FALLBACK = _log("real_collnet_sharp_fallback.log")
NVLS_OK = _log("real_nvls_available_h100.log")
NVLS_MISSING = _log("real_nvls_not_available_h800.log")
# The GB200 tray's lines with its fourth GPU degraded (healthMask DEGRADED_BW TRUE) and in a
# second clique: what a tray with a bad NVLink switch port would print.
GB200_BAD = replace(GB200_LOG, mnnvl=(*GB200_LOG.mnnvl[:3], replace(GB200_LOG.mnnvl[3], line=replace(
    GB200_LOG.mnnvl[3].line, health_mask=0xA9, clique_id=0x7FFD))))
READY = ImexStatus("/usr/bin/nvidia-imex-ctl", "READY", None, "/etc/nvidia-imex/nodes_config.cfg",
                   ("10.0.0.1", "10.0.0.2"), None)
TWO_NODES = NodeCount(2, "PREFLIGHT_NUM_NODES")
IB_ENV = {"NCCL_COLLNET_ENABLE": "1", "PATH": "/usr/bin"}


def _scenario(log, **facts) -> dict[str, object]:
    base: dict[str, object] = {
        "fabric_evidence": FabricEvidence(_run("single-node", log), log),
        "gpu_fabric": GB200, "imex_status": READY, "environ": {"PATH": "/usr/bin"},
        "nvls_allreduce": _run("nvls", NVLS_OK), "node_count": NodeCount(1, "this node only"),
        "multi_node_allreduce": None,
    }
    return {**base, **facts}


SCENARIOS: dict[str, dict[str, object]] = {
    "gb200_healthy": _scenario(GB200_LOG),
    "gb200_bad_rank": _scenario(GB200_BAD),
    "gb200_no_nccl_log": _scenario(None, fabric_evidence=FabricEvidence(
        _run("single-node", None), None)),
    "gb200_imex_waiting": _scenario(GB200_LOG, imex_status=replace(
        READY, state="WAITING_FOR_PEERS")),
    "gb200_imex_hung": _scenario(GB200_LOG, imex_status=replace(
        READY, state=None, problem="`nvidia-imex-ctl -q` did not finish within 15 s and was "
        "killed; it printed nothing")),
    "hgx": _scenario(HGX_LOG, gpu_fabric=HGX, imex_status=replace(
        READY, state=None, tool=None, problem="nvidia-imex-ctl is not on PATH")),
    "h100_nvls_ok": _scenario(HGX_LOG, gpu_fabric=HGX),
    "h100_nvls_missing": _scenario(HGX_LOG, gpu_fabric=HGX, nvls_allreduce=_run(
        "nvls", NVLS_MISSING, busbw_by_size={}, completed=False,
        problem="all_reduce_perf failed: NCCL error 'invalid usage'")),
    "h100_nvls_slow": _scenario(HGX_LOG, gpu_fabric=HGX, nvls_allreduce=_run(
        "nvls", NVLS_OK, busbw_by_size={NVLS_GATE_SIZE: 250.0})),
    "sharp_used": _scenario(HGX_LOG, gpu_fabric=HGX, environ=IB_ENV, node_count=TWO_NODES,
                            multi_node_allreduce=_run("multi-node", SHARP_OK, num_nodes=4)),
    "sharp_fallback": _scenario(HGX_LOG, gpu_fabric=HGX, environ=IB_ENV, node_count=TWO_NODES,
                                multi_node_allreduce=_run("multi-node", SHARP_FALLBACK,
                                                          num_nodes=4)),
    "sharp_env_only": _scenario(HGX_LOG, gpu_fabric=HGX, node_count=TWO_NODES,
                                environ={"SHARP_COLL_LOG_LEVEL": "3", "PATH": "/usr/bin"}),
    "sharp_off": _scenario(HGX_LOG, gpu_fabric=HGX, node_count=TWO_NODES),
    "multi_bad_single_good": _scenario(GB200_LOG, multi_node_allreduce=_run(
        "multi-node", GB200_BAD, num_nodes=2), single_node_allreduce=_run("single-node", GB200_LOG)),
}
