"""all_reduce bandwidth: the single-node NVLink gate, the multi-node network gate, the data check,
nccl-tests' out-of-bounds count, completion within the budget, and gloo on CPU-only profiles."""

from __future__ import annotations

from harness.base.errors import ProbeError
from harness.checking import check, expect_none, measure, not_applicable, settle, warn
from harness.fixtures.bandwidth import CPU_GATE_SIZE, BandwidthRun
from harness.judges import bandwidth
from harness.profiles.model import Profile
from harness.topology.nodes import NodeCount

NEXT_NVLINK = (
    "look at the NVLink checks (PF-GPU: active links, fabric manager), `nvidia-smi topo -m`, "
    "and NCCL_P2P_DISABLE / NCCL_NVLS_ENABLE / NCCL_ALGO in the environment; rerun with "
    "NCCL_DEBUG=INFO and check the channels go `via P2P` or NVLS, not `via SHM`"
)
NEXT_NETWORK = (
    "check the NCCL log (NCCL_DEBUG=INFO) for NET/Socket or missing GDRDMA; then the EFA "
    "checks (PF-NET), the security group, and `preflight run --tier diagnose` on node pairs"
)
NEXT_CPU = "the node is overloaded or its loopback is throttled: check `top` and cgroup CPU limits"


_size = bandwidth.size_text


def _gate(run: BandwidthRun, floor: bandwidth.Floor, profile: Profile, remedy: str) -> None:
    """Judge busbw at the floor's size (harness.judges.bandwidth.busbw_floor, which `preflight inspect
    nccl-tests` applies too); a run with no row there is a probe error naming the run."""
    size = floor.size_bytes
    busbw = run.busbw_at(size)
    # The whole sweep goes into the report (the HTML report plots busbw by size per node),
    # also when the gate row is missing: a run that died part-way shows how far it got.
    for swept, value in sorted(run.busbw_by_size.items()):
        if swept != size:
            measure(f"all_reduce busbw at {_size(swept)}", value, "GB/s", size_bytes=swept,
                    name="all_reduce_busbw_at", collective="all_reduce")
    if busbw is None:
        if run.problem:
            raise ProbeError(f"all_reduce over {run.where()}: {run.problem}")
        largest = _size(run.largest_size) if run.largest_size else "none"
        raise ProbeError(f"{run.source} printed no row at {_size(size)} (largest measured: "
                         f"{largest}); command: {run.command}")
    if run.nccl_log:
        remedy = f"the NCCL log says {run.nccl_log}; {remedy}"
    settle(bandwidth.busbw_floor(floor, profile, busbw, remedy=remedy, detail=run.where()))


def _measured(run: BandwidthRun | None, profile: Profile) -> BandwidthRun:
    """The run a gate judges. Its fixture gives None only where the gate does not apply (and
    the check said so first), so None here is the harness's own error, never a pass."""
    if run is None:
        raise ProbeError(f"no all_reduce measurement for profile {profile.name}")
    return run


@check(
    "PF-BW-001",
    family="bandwidth",
    title="Single-node all_reduce busbw at the floor's message size meets the NVLink (or PCIe) floor",
    why="A GPU with degraded NVLinks, a missing fabric manager, or an env var that disables P2P "
    "or NVLS still trains, at a fraction of the speed, and slows every rank of the job.",
    remedy=NEXT_NVLINK,
    exclusive=True,
)
def test_single_node_busbw_meets_nvlink_floor(profile: Profile,
                                              single_node_allreduce: BandwidthRun | None):
    floor = bandwidth.intra_node_floor(profile)
    if isinstance(floor, str):
        not_applicable(floor)
    if floor.field == "pcie_busbw_gb_s_min":
        remedy = ("PCIe-only GPUs (no NVLink): check `nvidia-smi topo -m`, the PCIe link width "
                  "and generation (PF-GPU), ACS/IOMMU settings and NCCL_P2P_DISABLE")
    else:
        remedy = NEXT_NVLINK
    _gate(_measured(single_node_allreduce, profile), floor, profile, remedy)


@check(
    "PF-BW-002",
    title="Multi-node all_reduce busbw at the gate size meets the network floor",
    why="A silent fallback from EFA to TCP sockets, missing GPUDirect RDMA or a bad link keeps "
    "the job running at a tenth of its speed; only a measurement across nodes shows it.",
    remedy=NEXT_NETWORK,
    exclusive=True,
)
def test_multi_node_busbw_meets_network_floor(
    profile: Profile, node_count: NodeCount, multi_node_allreduce: BandwidthRun | None
):
    floor = bandwidth.net_floor(profile, node_count.num_nodes, node_count.source)
    if isinstance(floor, str):
        not_applicable(floor)
    run = multi_node_allreduce
    if run is None:
        not_applicable(f"{node_count.num_nodes}-node job: the leader node launches the "
                       "multi-node test, this node takes part in it")
    _gate(run, floor, profile, NEXT_NETWORK)


@check(
    "PF-BW-003",
    title="all_reduce results are exact (nccl-tests #wrong, torch data check)",
    why="Silent data corruption (1.4% of interruptions in Llama 3's 54-day run) makes training "
    "diverge without an error; a reduction of known data catches a corrupting GPU or link.",
    remedy="drain the node and run `preflight run --tier diagnose` (dcgmi diag -r 3); replace "
    "the GPU or node if the corruption repeats",
    exclusive=True,
)
def test_allreduce_results_exact(profile: Profile, bandwidth_runs: list[BandwidthRun]):
    runs = bandwidth_runs
    if not runs:
        not_applicable(f"profile {profile.name} measures no bandwidth")
    unchecked = [r for r in runs if r.num_wrong is None]
    expect_none("all_reduce runs with wrong elements",
                [f"{r.scope}: {r.num_wrong} wrong element(s) over {r.where()}"
                 for r in runs if r.num_wrong], name="all_reduce_runs_with_wrong_elements")
    if unchecked:
        raise ProbeError("reduced data not checked: " + "; ".join(
            f"{r.scope} ({r.source}): {r.problem or bandwidth.NO_WRONG_COUNT}"
            for r in unchecked))


@check(
    "PF-BW-004",
    title="nccl-tests reports no out-of-bounds values",
    why="nccl-tests' own verdict on the reduced data: any out-of-bounds value is corruption.",
    remedy="drain the node and run `preflight run --tier diagnose`; replace the GPU if it repeats",
    exclusive=True,
)
def test_nccl_tests_no_out_of_bounds(profile: Profile, bandwidth_runs: list[BandwidthRun]):
    if not profile.has_gpus:
        not_applicable(f"profile {profile.name} has no GPUs: nccl-tests does not run")
    runs = bandwidth_runs
    nccl = [r for r in runs if r.source.startswith("nccl-tests")]
    if not nccl:
        if all(r.problem for r in runs):
            raise ProbeError("; ".join(f"{r.scope}: {r.problem}" for r in runs))
        warn("nccl-tests is not installed: no out-of-bounds count; the torch.distributed data "
             "check (PF-BW-003) covered the reduced values",
             remedy="install nccl-tests (make MPI=1) or set PREFLIGHT_NCCL_TESTS_DIR")
        return
    missing = [r for r in nccl if r.out_of_bounds is None]
    expect_none("nccl-tests runs with out-of-bounds values",
                [f"{r.scope}: {r.out_of_bounds} out-of-bounds value(s) over {r.where()}"
                 for r in nccl if r.out_of_bounds],
                name="nccl_tests_runs_with_out_of_bounds_values")
    if missing:
        raise ProbeError(f"{bandwidth.NO_OUT_OF_BOUNDS}: " + "; ".join(
            f"{r.scope}: {r.problem or 'footer missing'}" for r in missing))


@check(
    "PF-BW-005",
    title="Bandwidth runs completed within the time budget",
    why="A collective that hangs or crashes here (a dead link, a stuck GPU, an init failure) "
    "would hang or crash the training job; the raw output names the failing rank.",
    remedy="read the output tail in the report; rerun with NCCL_DEBUG=INFO",
    exclusive=True,
)
def test_bandwidth_runs_completed(profile: Profile, bandwidth_runs: list[BandwidthRun]):
    runs = bandwidth_runs
    if not runs:
        not_applicable(f"profile {profile.name} measures no bandwidth")
    for r in runs:
        if r.cannot_run:
            raise ProbeError(f"{r.scope}: {r.problem}")
    offenders = []
    for r in runs:
        if r.problem:
            offenders.append(f"{r.scope} ({r.where()}): {r.problem}")
            # The raw output goes into the report: it names the failing rank and host.
            measure(f"{r.scope} output tail", r.output_tail, ok=False, name="output_tail")
        elif r.duration_s > r.budget_s:
            offenders.append(f"{r.scope}: took {r.duration_s:.0f} s, budget {r.budget_s:.0f} s")
    expect_none("bandwidth runs that did not complete", offenders,
                name="bandwidth_runs_that_did_not_complete")
    for r in runs:
        for line in r.warnings:
            warn(f"{r.scope}: {line} (a modified nccl-tests build, or output from another tool)",
                 remedy="compare the binary with a clean nccl-tests build")


@check(
    "PF-BW-006",
    family="bandwidth",
    title="gloo all_reduce busbw between local processes meets the CPU floor",
    why="On CPU-only machines (CI, laptops) this proves torch.distributed works end to end: "
    "rendezvous, gloo transport, a reduction of known data, and a sane bandwidth.",
    remedy=NEXT_CPU,
    exclusive=True,
)
def test_cpu_gloo_busbw_meets_floor(profile: Profile, cpu_allreduce: BandwidthRun | None):
    floor = bandwidth.cpu_floor(profile, CPU_GATE_SIZE)
    if isinstance(floor, str):
        not_applicable(floor)
    _gate(_measured(cpu_allreduce, profile), floor, profile, NEXT_CPU)


@check(
    "PF-BW-007",
    title="all_gather, reduce_scatter and alltoall complete with exact data",
    why="FSDP/ZeRO training runs on all_gather and reduce_scatter, MoE on alltoall: a collective "
    "that hangs, crashes or corrupts data fails the job even when all_reduce is healthy.",
    remedy="read the failing collective's output tail in the report; rerun it with "
    "NCCL_DEBUG=INFO; run `preflight run --tier diagnose` on the node",
    tier="certify",
    exclusive=True,
)
def test_other_collectives_complete_and_exact(profile: Profile,
                                              collective_runs: list[BandwidthRun]):
    if not profile.has_gpus:
        not_applicable(f"profile {profile.name} has no GPUs: nccl-tests does not run")
    runs = collective_runs
    offenders = []
    for r in runs:
        if r.cannot_run:
            continue
        for size, busbw in sorted(r.busbw_by_size.items()):  # the whole sweep, for the plots
            measure(f"{r.scope} busbw at {_size(size)}", busbw, "GB/s", size_bytes=size,
                    name="busbw_at", collective=r.scope)
        if r.problem:
            offenders.append(f"{r.scope}: {r.problem}")
            measure(f"{r.scope} output tail", r.output_tail, ok=False, name="output_tail")
        if r.num_wrong:
            offenders.append(f"{r.scope}: {r.num_wrong} wrong element(s) over {r.where()}")
        if r.out_of_bounds:
            offenders.append(f"{r.scope}: {r.out_of_bounds} out-of-bounds value(s)")
    expect_none("collectives that failed, hung or corrupted data", offenders,
                name="collectives_that_failed_hung_or_corrupted_data")
    missing = [r for r in runs if r.cannot_run]
    if missing:
        raise ProbeError("; ".join(f"{r.scope}: {r.problem}" for r in missing))
