"""SHARP in-network reduction through NCCL's CollNet, when the job asks for it (InfiniBand).

NCCL uses CollNet only with NCCL_COLLNET_ENABLE=1 and a collnet plugin (HPC-X's
nccl-rdma-sharp-plugins, `Loaded collnet plugin SHARP`). When SHARP cannot start a job (no
aggregation manager, no resources) NCCL prints `Cannot initialize CollNet, using point-to-point
network instead` and runs on: the job trains, slower than it was sized for, and nothing fails.
This check reads that from the multi-node bandwidth run's NCCL log (recorded case:
NVIDIA/nccl-tests#311)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from harness.base.errors import ProbeError
from harness.checking import check, fail, measure, not_applicable, warn
from harness.fixtures.fabric import require_ib
from harness.profiles.model import Profile
from harness.topology.nodes import NodeCount

REMEDY_SHARP = ("check that the SHARP aggregation manager runs beside the subnet manager "
                "(`systemctl status sharp_am` on the UFM/opensm host) and answers "
                "(`sharp_hello -d mlx5_0:1`), that the job's SHARP resources are not exhausted "
                "(`SHArP Job init error: No resource`), and that libnccl-net.so is HPC-X's "
                "nccl-rdma-sharp-plugins; or unset NCCL_COLLNET_ENABLE if SHARP is not wanted")
#: Settings of the SHARP plugin and library (Mellanox/nccl-rdma-sharp-plugins README, HPC-X).
SHARP_PREFIXES = ("NCCL_SHARP_", "SHARP_COLL_")


def sharp_settings(environ: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """(why CollNet is requested, or None; the SHARP settings present)."""
    sharp = sorted(k for k in environ if k.startswith(SHARP_PREFIXES))
    if environ.get("NCCL_COLLNET_ENABLE", "").strip() == "1":
        return "NCCL_COLLNET_ENABLE=1", sharp
    algo = environ.get("NCCL_ALGO", "")
    if "collnet" in algo.lower():
        return f"NCCL_ALGO={algo}", sharp
    return None, sharp


@check(
    "PF-IB-004",
    title="CollNet/SHARP is used when the job enables it",
    why="With NCCL_COLLNET_ENABLE=1 a job is sized for in-switch reduction; when SHARP cannot "
    "start, NCCL falls back to point-to-point IB without failing, and the job runs slower than "
    "planned with nothing in its own logs but one WARN line per rank.",
    remedy=REMEDY_SHARP,
    exclusive=True,
)
def test_collnet_sharp_used(profile: Profile, environ: dict[str, str], node_count: NodeCount,
                            request: pytest.FixtureRequest):
    require_ib(profile)
    why, sharp = sharp_settings(environ)
    if why is None:
        if sharp:
            warn(f"SHARP is configured ({', '.join(sharp)}) but NCCL_COLLNET_ENABLE is not 1: "
                 "NCCL will not use CollNet/SHARP", remedy="set NCCL_COLLNET_ENABLE=1, or drop "
                 "the SHARP settings")
            return
        not_applicable("CollNet/SHARP is not enabled (NCCL_COLLNET_ENABLE unset, no NCCL_SHARP_* "
                       "or SHARP_COLL_* setting)")
    if node_count.num_nodes < 2:
        not_applicable(f"single-node job (from {node_count.source}): CollNet reduces across "
                       "nodes only")
    run = request.getfixturevalue("multi_node_allreduce")
    if run is None:
        not_applicable(f"{node_count.num_nodes}-node job: the leader node launches the "
                       "multi-node test and judges its log")
    log = run.fabric_log
    if run.cannot_run or log is None:
        raise ProbeError(f"the multi-node run left no NCCL log to judge CollNet from: "
                         f"{run.problem or 'its output holds no NCCL INFO line'}")
    measure("CollNet connections", log.collnet_connections, op=">=", threshold=1,
            ok=log.collnet_connections > 0, name="collnet_connections")
    measure("SHARP ranks initialised", log.sharp_ranks, "ranks", name="sharp_ranks_initialised")
    am = ("the SHARP library reports: " + "; ".join(log.sharp_library_errors[:3])
          if log.sharp_library_errors else "")
    if log.collnet_errors:
        fail(f"{why}, but NCCL fell back to point-to-point: "
             f"{'; '.join(log.collnet_errors[:3])}" + (f"; {am}" if am else ""))
    if not log.collnet_connections:
        fail(f"{why}, but the multi-node run made no CollNet connection (no `CollNet NN/N : "
             f"... via COLLNET/` line; collnet plugin: {log.collnet_plugin or 'none loaded'})"
             + (f"; {am}" if am else ""))
    if am:
        fail(f"CollNet connected but {am}")
    if not log.sharp_ranks:
        warn("CollNet connected but no `SHARP rank r/n initialized` line: the aggregation "
             "manager's answer is not in the log (NCCL_DEBUG_SUBSYS without INIT?)")
    if log.collnet_gdr is False:
        warn("a CollNet connection runs without /GDRDMA: SHARP data is staged through host "
             "memory (see PF-IB-003)")
