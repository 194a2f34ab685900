"""Multi-node NVLink as NCCL saw it, the IMEX service the domain needs, and NVLink SHARP (NVLS).

PF-NVL-001..003 (checks/test_fabric.py) judge what NVML reports; these judge what NCCL printed in
the session's own bandwidth run (the MNNVL lines of every rank), the IMEX daemon, and an all_reduce
forced onto NVLS. Off a multi-node NVLink domain (p5, an HGX box, one node) the MNNVL and IMEX
checks are not applicable and say why: other tools raise false IMEX alarms on such nodes
(NVIDIA/NVSentinel#1471 on p5.48xlarge, NVIDIA/DCGM#308)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from harness.base.errors import ProbeError
from harness.checking import check, expect_none, fail, measure, not_applicable, warn
from harness.fixtures.fabric import domain_gpus, one_domain
from harness.fixtures.nvl_domain import NVLS_GATE_SIZE, FabricEvidence
from harness.parsers.nccl_mnnvl import health_faults

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.probes.fabric import FabricInfo
    from harness.probes.imex import ImexStatus
    from harness.profiles.model import Profile

REMEDY_MNNVL = ("check every tray's fabric (`nvidia-smi -q | grep -A8 Fabric`: State Completed, "
                "Status Success, one Cluster UUID and Clique ID), the NVLink switch trays and "
                "NMX/fabric manager; for the IMEX WARN see PF-NVL-005 and PF-NVL-003")
REMEDY_IMEX = ("start the IMEX service on every node of the domain (`systemctl start nvidia-imex`, "
               "with every node's address in /etc/nvidia-imex/nodes_config.cfg) and check "
               "`nvidia-imex-ctl -N`; on EKS the NVIDIA DRA driver's ComputeDomain runs IMEX: "
               "run preflight where nvidia-imex-ctl can reach the daemon")
REMEDY_NVLS = ("NVLS needs the fabric manager running (`systemctl status nvidia-fabricmanager`), "
               "a driver with CUDA >= 12.1 multicast and healthy NVSwitches (`nvidia-smi -q | "
               "grep -A8 Fabric`); do not set NCCL_NVLS_ENABLE=0; restart the fabric manager "
               "after a driver update")
NO_NVLS = ("NCCL builds NVLS only with NVSwitches and compute capability >= 9.0: PCIe GPUs, "
           "A100 and single GPUs have none; NVIDIA/nccl src/graph/search.cc")
_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}


def _no_domain(profile: Profile, why: str) -> None:
    not_applicable(f"no multi-node NVLink domain ({why}): MNNVL and IMEX are not judged, "
                   "as NCCL does not use them here")


@check(
    "PF-NVL-004",
    title="NCCL's MNNVL lines show every rank in one completed, healthy NVLink domain",
    why="NCCL decides per rank from its own fabric query whether multi-node NVLink works: a rank "
    "in another clique, with a zero cluster UUID, an incomplete registration or a degraded "
    "health mask falls back to the network or fails to initialise the communicator.",
    remedy=REMEDY_MNNVL,
    exclusive=True,
)
def test_nccl_mnnvl_domain(profile: Profile, fabric_evidence: FabricEvidence):
    log, run = fabric_evidence.log, fabric_evidence.run
    ranks = log.mnnvl if log else ()
    if not profile.nvlink_domain and not any(r.line.in_domain for r in ranks):
        _no_domain(profile, "the profile has none" + (
            f", and NCCL's {len(ranks)} MNNVL line(s) show a zero cluster UUID" if ranks else ""))
    if run.cannot_run or log is None:
        raise ProbeError(f"the bandwidth run ({run.where()}) left no NCCL log to read MNNVL "
                         f"from: {run.problem or 'its output holds no NCCL INFO line'}")
    if not ranks:
        raise ProbeError("the NCCL log of the bandwidth run has no `MNNVL busId ...` line (NCCL "
                         "< 2.20.3, NCCL_DEBUG_SUBSYS without INIT, or NVML reported the fabric "
                         "as not supported): the domain is unproven")
    bad = []
    for r in ranks:
        x, where = r.line, f"{r.host or '?'} busId {r.line.bus_id:#x}"
        if x.state != 3:
            bad.append(f"{where}: fabric state {_STATES.get(x.state, x.state)}")
        elif not x.in_domain:
            bad.append(f"{where}: cluster UUID 0.0 (not registered in a domain)")
        if faults := health_faults(x.health_mask):
            bad.append(f"{where}: {', '.join(faults)} (healthMask {x.health_mask:#x})")
    uuids = {r.line.cluster_uuid for r in ranks if r.line.in_domain}
    cliques = {r.line.clique_id for r in ranks if r.line.in_domain}
    hosts = {r.host for r in ranks if r.host}
    measure("ranks with an MNNVL line", len(ranks), "ranks", name="ranks_with_an_mnnvl_line")
    measure("hosts in the log", len(hosts), "hosts", name="hosts_in_the_log")
    bad += one_domain(uuids, cliques, "ranks")
    bad += [f"NCCL: {m}" for m in log.mnnvl_errors]
    expect_none("ranks outside one healthy NVLink domain", bad,
                name="ranks_outside_one_healthy_nvlink_domain")
    multi = [(n, flag) for n, flag in log.comm_mnnvl if n > 1]
    if multi and not any(flag for _, flag in multi):
        warn(f"NCCL did not enable MNNVL on its {len(multi)} multi-node communicator(s) (`MNNVL "
             "0`): traffic between trays goes over the network (NCCL_MNNVL_ENABLE=0, or a clique "
             "of one)")


@check(
    "PF-NVL-005",
    title="The IMEX service is READY where the node is part of a multi-node NVLink domain",
    why="Memory shared over multi-node NVLink is imported and exported by the IMEX daemon: "
    "without a READY daemon (and every tray in its nodes config) NCCL reports MNNVL 'available "
    "but not working' and the job fails at its first communicator.",
    remedy=REMEDY_IMEX,
)
def test_imex_service_ready(profile: Profile, gpu_fabric: list[FabricInfo],
                            request: pytest.FixtureRequest):
    domain_gpus(profile, gpu_fabric)  # off a domain: not applicable before any tool runs
    s: ImexStatus = request.getfixturevalue("imex_status")
    measure("IMEX daemon state", s.state or "unknown", op="==", threshold="READY",
            ok=s.state == "READY", name="imex_daemon_state")
    measure("nodes in the IMEX nodes config", len(s.nodes), "nodes",
            name="nodes_in_the_imex_nodes_config")
    if s.state is None:
        raise ProbeError(f"the IMEX daemon's state is unknown: {s.problem}")
    if s.state != "READY":
        fail(f"the IMEX daemon is {s.state}, not READY (`nvidia-imex-ctl -q`); nodes config "
             f"{s.config_path}: {s.config_problem or f'{len(s.nodes)} node(s)'}")
    if s.config_problem:
        warn(f"IMEX is READY but its nodes config is not readable here ({s.config_problem}): "
             "the domain's membership is not shown")


@check(
    "PF-NVL-006",
    title="NVLink SHARP (NVLS) is available and an NVLS all_reduce meets its floor",
    why="On NVSwitch systems of Hopper and later NCCL reduces in the switch (NVLS), which is "
    "faster than rings; a fabric manager or NVSwitch fault silently removes it and every "
    "all_reduce slows down.",
    remedy=REMEDY_NVLS,
    tier="certify",
    exclusive=True,
)
def test_nvls_allreduce(profile: Profile, environ: dict[str, str],
                        request: pytest.FixtureRequest):
    if not profile.nvls:
        why = profile.sources.get("nvls") or NO_NVLS
        not_applicable(f"the profile expects no NVLS ({why})")
    if profile.num_gpus < 2 and not profile.gpus_from_machine:
        not_applicable("fewer than 2 GPUs: no NVLS collective")
    sourced = "nvls" in profile.sources
    run = request.getfixturevalue("nvls_allreduce")
    if run.cannot_run:
        raise ProbeError(f"the NVLS all_reduce could not run: {run.problem}")
    log = run.fabric_log
    if environ.get("NCCL_NVLS_ENABLE") == "0":
        warn("NCCL_NVLS_ENABLE=0 in the job's environment: training will not use NVLS, whatever "
             "this check measures", remedy="unset NCCL_NVLS_ENABLE")
    problems = []
    if log is not None and log.nvls_unavailable:
        problems.append(f"NCCL says NVLS multicast support is not available on "
                        f"{log.nvls_unavailable} GPU(s) ({log.nvls_available} available)")
    if run.problem:
        detail = "; ".join(log.warnings[:3]) if log and log.warnings else run.output_tail[-300:]
        problems.append(f"all_reduce with NCCL_ALGO=NVLS failed: {run.problem} ({detail})")
    if problems:
        if not sourced:
            warn("; ".join(problems) + " (the profile's NVLS expectation has no source: a "
                 "warning, not a failure)")
            return
        fail("; ".join(problems))
    if log is None or not log.nvls_available:
        raise ProbeError("the NVLS run's NCCL log has no `NVLS multicast support is available` "
                         "line (NCCL < 2.17, or NCCL_DEBUG_SUBSYS without INIT): NVLS unproven")
    busbw = run.busbw_at(NVLS_GATE_SIZE)
    if busbw is None:
        raise ProbeError(f"the NVLS run printed no row at 1 GiB; command: {run.command}")
    floor = profile.nvls_busbw_gb_s_min
    ok = floor is None or busbw >= floor
    measure("NVLS all_reduce busbw at 1 GiB", busbw, "GB/s", op=">=" if floor else None,
            threshold=floor, ok=ok, size_bytes=NVLS_GATE_SIZE,
            name="nvls_all_reduce_busbw_at_1_gib", collective="all_reduce")
    if not ok:
        fail(f"NVLS all_reduce busbw at 1 GiB {busbw:g} GB/s < {floor:g} GB/s required "
             f"({run.where()}; floor: {profile.sources.get('nvls_busbw_gb_s_min', 'profile')})")
