"""Which node am I, how many are there, where is the master: from the environment the job
already has, one provider per launcher (a chain, first answer wins)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from harness.base.settings import get_int, get_str
from harness.topology.model import (
    SET_EXPLICITLY,
    SINGLE,
    Answer,
    Rc,
    Topology,
    TopologyError,
    control_port,
    env_int,
    expand_hostlist,
    make,
    need,
    own_host,
)

__all__ = ["PROVIDERS", "Provider", "detect_topology"]

Provider = Callable[[Mapping[str, str], Rc], Answer]

def _explicit(env: Mapping[str, str], _rc: Rc) -> Answer:
    """PREFLIGHT_NNODES / PREFLIGHT_NODE_RANK / PREFLIGHT_MASTER_ADDR [/ PREFLIGHT_HOSTS]."""
    n = get_int("PREFLIGHT_NNODES", env, error=TopologyError)
    if n is None:
        return None
    rank = get_int("PREFLIGHT_NODE_RANK", env, error=TopologyError)
    addr = get_str("PREFLIGHT_MASTER_ADDR", env) or env.get("MASTER_ADDR")
    if n > 1 and (rank is None or not addr):
        raise TopologyError("PREFLIGHT_NNODES is set: PREFLIGHT_NODE_RANK and "
                            "PREFLIGHT_MASTER_ADDR (or MASTER_ADDR) must be set too")
    listed = get_str("PREFLIGHT_HOSTS", env)
    hosts = tuple(expand_hostlist(listed, "PREFLIGHT_HOSTS")) if listed else ()
    return make(env, n, rank or 0, addr or "", control_port(env), "PREFLIGHT_NNODES", hosts,
                 as_given=True)


def _torchrun_worker(env: Mapping[str, str], _rc: Rc) -> Answer:
    """Inside a torchrun worker: GROUP_RANK is the node, GROUP_WORLD_SIZE the nodes (older
    torch: WORLD_SIZE / LOCAL_WORLD_SIZE)."""
    group = env_int(env, "GROUP_RANK")
    if group is None:
        return None
    n = env_int(env, "GROUP_WORLD_SIZE")
    if n is None:
        world = need(env_int(env, "WORLD_SIZE"), "WORLD_SIZE", "GROUP_RANK is set (torchrun worker)")
        local = need(env_int(env, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE",
                      "GROUP_RANK is set (torchrun worker)")
        if local < 1 or world % local:
            raise TopologyError(f"WORLD_SIZE({world}) is not a multiple of LOCAL_WORLD_SIZE({local}) "
                                "(torchrun worker): nodes run different process counts; set "
                                "GROUP_WORLD_SIZE or PREFLIGHT_NNODES")
        n = world // local
    if n < 2:
        return SINGLE
    addr = need(env.get("MASTER_ADDR"), "MASTER_ADDR", f"torchrun worker of {n} nodes")
    return make(env, n, group, addr, control_port(env), "torchrun worker")


def _kubeflow(env: Mapping[str, str], _rc: Rc) -> Answer:
    """Kubeflow PyTorchJob (training-operator v1 sets PET_NNODES / PET_NODE_RANK next to
    MASTER_ADDR) and Trainer v2 TrainJobs (PET_NNODES / PET_NODE_RANK / PET_MASTER_ADDR)."""
    raw = env.get("PET_NNODES", "").strip()
    if not raw:
        return None
    if ":" in raw:
        raise TopologyError(f"PET_NNODES={raw!r} is an elastic range (PyTorchJob elasticPolicy): "
                            "node ranks are only known after torchrun's rendezvous; run preflight "
                            "with PREFLIGHT_NNODES/PREFLIGHT_NODE_RANK/PREFLIGHT_MASTER_ADDR, or "
                            "PREFLIGHT_CLUSTER=off")
    n = env_int(env, "PET_NNODES")
    assert n is not None
    if n < 2:
        return SINGLE
    rank = need(env_int(env, "PET_NODE_RANK"), "PET_NODE_RANK", f"PET_NNODES={n} (Kubeflow)")
    addr = need(env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR"),
                 "PET_MASTER_ADDR (or MASTER_ADDR)", f"PET_NNODES={n} (Kubeflow)")
    port_var = "PET_MASTER_PORT" if env.get("PET_MASTER_PORT") else "MASTER_PORT"
    return make(env, n, rank, addr, control_port(env, port_var), "Kubeflow (PET_*)")


def _sagemaker(env: Mapping[str, str], rc: Rc) -> Answer:
    """resourceconfig.json `hosts` (first is the master) and `current_host`; SM_HOSTS /
    SM_CURRENT_HOST only when the file is not readable (the file wins: under SageMaker's MPI
    launcher SM_CURRENT_HOST is the master's on every node)."""
    where = "resourceconfig.json"
    if rc and "hosts" in rc:
        hosts, current = rc.get("hosts"), rc.get("current_host")
    elif env.get("SM_HOSTS"):
        where = "SM_HOSTS/SM_CURRENT_HOST"
        if env.get("OMPI_COMM_WORLD_RANK"):
            # SageMaker's mpirun copies the master's SM_CURRENT_HOST to every node
            # (aws/sagemaker-training-toolkit#158): only the per-node file can be trusted.
            raise TopologyError("resourceconfig.json is not readable and SM_CURRENT_HOST cannot "
                                "be trusted under SageMaker's mpirun (it is the master's on every "
                                "node); set PREFLIGHT_OPT_ML to the directory that holds "
                                "input/config/resourceconfig.json")
        try:
            hosts = json.loads(env["SM_HOSTS"])
        except ValueError:
            raise TopologyError(f"SM_HOSTS={env['SM_HOSTS']!r} is not a JSON list") from None
        current = env.get("SM_CURRENT_HOST")
    else:
        return None
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
        raise TopologyError(f"{where}: hosts {hosts!r} is not a list of host names")
    if not isinstance(current, str) or not current:
        raise TopologyError(f"{where}: current_host is missing (hosts {hosts})")
    if len(set(hosts)) != len(hosts):
        raise TopologyError(f"{where}: hosts {hosts} lists a host twice")
    if current not in hosts:
        raise TopologyError(f"{where}: current_host {current!r} not in hosts {hosts}")
    _check_instance_groups(rc or {}, hosts, current)
    if len(hosts) < 2:
        return SINGLE
    return make(env, len(hosts), hosts.index(current), hosts[0], control_port(env),
                 f"SageMaker {where}", tuple(hosts))


def _check_instance_groups(rc: Mapping[str, object], hosts: list[str], current: str) -> None:
    """Heterogeneous clusters: every group's hosts are in `hosts`, the current host in its group."""
    groups = rc.get("instance_groups")
    if not isinstance(groups, list):
        return
    grouped: dict[str, list[str]] = {}
    for group in groups:
        if isinstance(group, dict) and isinstance(group.get("hosts"), list):
            grouped[str(group.get("instance_group_name"))] = [str(h) for h in group["hosts"]]
    stray = sorted({h for g in grouped.values() for h in g} - set(hosts))
    if stray:
        raise TopologyError(f"resourceconfig.json: instance_groups list {stray} that are not in "
                            f"hosts {hosts}")
    name = rc.get("current_group_name")
    if isinstance(name, str) and name in grouped and current not in grouped[name]:
        raise TopologyError(f"resourceconfig.json: current_host {current!r} is not in its "
                            f"current_group_name {name!r} hosts {grouped[name]}")


def _open_mpi(env: Mapping[str, str], _rc: Rc) -> Answer:
    """A process started by Open MPI's mpirun (MPIJob, mpirun inside Slurm): the node is
    OMPI_COMM_WORLD_RANK // OMPI_COMM_WORLD_LOCAL_SIZE when ranks fill nodes in order (mpirun's
    default by-slot placement); the master is MASTER_ADDR (`mpirun -x MASTER_ADDR=...`)."""
    size = env_int(env, "OMPI_COMM_WORLD_SIZE")
    if size is None:
        return None
    ctx = f"OMPI_COMM_WORLD_SIZE={size} (Open MPI)"
    local_size = need(env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE", ctx)
    rank = need(env_int(env, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK", ctx)
    local = need(env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_RANK", ctx)
    if local_size < 1 or size % local_size:
        raise TopologyError(f"OMPI_COMM_WORLD_SIZE({size}) is not a multiple of "
                            f"OMPI_COMM_WORLD_LOCAL_SIZE({local_size}): nodes run different "
                            "process counts; set PREFLIGHT_NNODES/PREFLIGHT_NODE_RANK")
    n = size // local_size
    if n < 2:
        return SINGLE
    if rank % local_size != local:
        raise TopologyError(f"OMPI_COMM_WORLD_RANK={rank} with OMPI_COMM_WORLD_LOCAL_RANK={local} "
                            f"and OMPI_COMM_WORLD_LOCAL_SIZE={local_size}: ranks are not placed "
                            "node by node (--map-by node?), so the node rank is unknown; use "
                            "--map-by slot or ppr:N:node, or set PREFLIGHT_NODE_RANK")
    addr = need(env.get("MASTER_ADDR"), "MASTER_ADDR",
                 f"Open MPI job of {n} nodes (OMPI_COMM_WORLD_SIZE={size}, "
                 f"OMPI_COMM_WORLD_LOCAL_SIZE={local_size})",
                 f"pass it with `mpirun -x MASTER_ADDR=<first host>`, or {SET_EXPLICITLY}")
    return make(env, n, rank // local_size, addr, control_port(env), "Open MPI (OMPI_COMM_WORLD_*)")


def _slurm(env: Mapping[str, str], _rc: Rc) -> Answer:
    """A Slurm task (srun): the step's nodes (SLURM_STEP_NUM_NODES / SLURM_STEP_NODELIST, which
    may be fewer than the job's), this node's SLURM_NODEID in the step; the first host is the
    master unless MASTER_ADDR is exported."""
    job_n = env_int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    in_allocation = bool(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")) and (job_n or 0) > 1
    if not in_allocation and not any(
            env.get(k) for k in ("SLURM_NODEID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES")):
        return None
    node_id = env_int(env, "SLURM_NODEID")
    in_step = bool(env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID") or env.get("SLURM_STEP_NODELIST"))
    if not in_step and node_id is None:
        # salloc's shell, or a process that mpirun started without Open MPI's variables: it
        # sees the allocation's nodes but is not one task per node of a step.
        raise TopologyError(
            f"SLURM_JOB_NUM_NODES/SLURM_NNODES={job_n} but SLURM_NODEID and SLURM_STEP_ID are "
            "unset: this process is not a task of a Slurm step, so its node is unknown; start "
            "preflight with `srun --ntasks-per-node=1 preflight run -- ...`, or set "
            "PREFLIGHT_CLUSTER=off to check this node only")
    # The batch script (node 0 only) has the job's SLURM_NODEID=0 and SLURM_NNODES but no step.
    if not in_step and node_id == 0:
        if job_n is not None and job_n > 1:
            raise TopologyError(
                f"SLURM_NODEID is set but SLURM_STEP_ID is not: this is the sbatch batch script, "
                f"which runs on the first of the job's {job_n} nodes only (SLURM_JOB_NUM_NODES); "
                "start preflight once per node with `srun --ntasks-per-node=1 preflight run -- ...`, "
                "or set PREFLIGHT_CLUSTER=off to check this node only")
        return SINGLE
    n = env_int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    n = need(n, "SLURM_STEP_NUM_NODES", "SLURM step")
    step_list = env.get("SLURM_STEP_NODELIST", "").strip()
    hosts = tuple(expand_hostlist(step_list, "SLURM_STEP_NODELIST")) if step_list else ()
    if hosts and len(hosts) != n:
        raise TopologyError(f"SLURM_STEP_NODELIST={step_list!r} names {len(hosts)} nodes but "
                            f"SLURM_STEP_NUM_NODES/SLURM_NNODES says {n}")
    if not hosts:
        job_var = "SLURM_JOB_NODELIST" if env.get("SLURM_JOB_NODELIST") else "SLURM_NODELIST"
        job_list = env.get(job_var, "").strip()
        expanded = tuple(expand_hostlist(job_list, job_var)) if job_list else ()
        hosts = expanded if len(expanded) == n else ()
    if n < 2:
        return SINGLE
    rank = need(node_id, "SLURM_NODEID", f"Slurm step of {n} nodes")
    addr = env.get("MASTER_ADDR") or (hosts[0] if hosts else None)
    addr = need(addr, "SLURM_STEP_NODELIST (or MASTER_ADDR)", f"Slurm step of {n} nodes")
    return make(env, n, rank, addr, control_port(env), "Slurm", hosts)


def _aws_batch(env: Mapping[str, str], _rc: Rc) -> Answer:
    """AWS Batch multi-node parallel job: the main node (AWS_BATCH_JOB_MAIN_NODE_INDEX, not
    always 0) is rank 0; the others reach it at AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS,
    which Batch sets on the other nodes only."""
    n = env_int(env, "AWS_BATCH_JOB_NUM_NODES")
    if n is None:
        return None
    if n < 2:
        return SINGLE
    ctx = f"AWS_BATCH_JOB_NUM_NODES={n}"
    index = need(env_int(env, "AWS_BATCH_JOB_NODE_INDEX"), "AWS_BATCH_JOB_NODE_INDEX", ctx)
    main = need(env_int(env, "AWS_BATCH_JOB_MAIN_NODE_INDEX"), "AWS_BATCH_JOB_MAIN_NODE_INDEX", ctx)
    for name, value in (("AWS_BATCH_JOB_NODE_INDEX", index), ("AWS_BATCH_JOB_MAIN_NODE_INDEX", main)):
        if not 0 <= value < n:
            raise TopologyError(f"{name}={value} not in [0, {n}) ({ctx})")
    addr = env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "").strip()
    if index == main:
        addr = addr or own_host(env)
    addr = need(addr, "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS",
                 f"{ctx}, this is node {index}, not the main node {main}")
    return make(env, n, (index - main) % n, addr, control_port(env), "AWS Batch multi-node")


def _pytorchjob(env: Mapping[str, str], _rc: Rc) -> Answer:
    """One process per node with MASTER_ADDR / RANK / WORLD_SIZE (Kubeflow PyTorchJob without
    nprocPerNode, many managed platforms); NODE_RANK / NNODES win when both are set."""
    addr = env.get("MASTER_ADDR")
    if not addr:
        return None
    for n_names, rank_name in ((("NNODES", "NUM_NODES"), "NODE_RANK"), (("WORLD_SIZE",), "RANK")):
        n, rank, n_name = env_int(env, *n_names), env_int(env, rank_name), n_names[0]
        if n is None and rank is None:
            continue
        # The first pair that is there decides: with NNODES set, WORLD_SIZE counts processes.
        n = need(n, n_name, f"MASTER_ADDR and {rank_name}={rank} are set")
        if n < 2:
            return SINGLE
        rank = need(rank, rank_name, f"MASTER_ADDR and {n_name}={n} are set")
        return make(env, n, rank, addr, control_port(env), f"MASTER_ADDR/{rank_name}/{n_name}")
    return None



#: Order matters: the most explicit first; a torchrun worker's env also has MASTER_ADDR/RANK
#: (and PET_* under Kubeflow); SageMaker's MPI launcher also sets OMPI_*; mpirun inside a Slurm
#: allocation inherits SLURM_* that describe mpirun's own steps, not this process.
PROVIDERS: tuple[Provider, ...] = (_explicit, _torchrun_worker, _kubeflow, _sagemaker, _open_mpi,
                                   _slurm, _aws_batch, _pytorchjob)


def detect_topology(
    env: Mapping[str, str], resourceconfig: Mapping[str, object] | None = None
) -> Topology | None:
    """This node's Topology, or None for a single-node job. The first provider that recognises
    its variables answers (a single-node answer from it stops the chain too); a provider that
    recognises its launcher but finds a variable missing or inconsistent raises TopologyError."""
    for provider in PROVIDERS:
        found = provider(env, resourceconfig)
        if isinstance(found, Topology):
            return found
        if found is SINGLE:
            return None
    return None
