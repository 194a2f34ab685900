"""Which node am I, how many are there, where is the master: from the environment the job
already has (a provider chain, first answer wins), plus Slurm hostlist expansion/compression."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from harness.cluster.hostlist import HostlistError, compress_hostlist
from harness.cluster.hostlist import expand_hostlist as _expand_hostlist

__all__ = [
    "DEFAULT_PORT",
    "Topology",
    "TopologyError",
    "compress_hostlist",
    "detect_topology",
    "expand_hostlist",
]

_T = TypeVar("_T", int, str)

#: torch's default MASTER_PORT is 29500; the control plane takes the next one so that the
#: training job, exec'd after preflight, can still bind its own.
DEFAULT_PORT = 29501


class TopologyError(ValueError):
    """The environment describes a cluster but inconsistently; str() is the message."""


def expand_hostlist(spec: str, variable: str | None = None) -> list[str]:
    """Slurm hostlist to names (harness.cluster.hostlist); a bad one is a TopologyError that
    names the `variable` it came from."""
    try:
        return _expand_hostlist(spec)
    except HostlistError as exc:
        where = f"{variable}={spec[:200]!r}: " if variable else ""
        raise TopologyError(f"{where}{exc}") from None


@dataclass(frozen=True, kw_only=True, slots=True)
class Topology:
    """This node's place in a multi-node job (one preflight participant per node)."""

    node_rank: int
    num_nodes: int
    master_addr: str
    """Host of node rank 0: it serves the control plane's TCPStore."""
    port: int
    """Control-plane port: PREFLIGHT_PORT, else the training job's MASTER_PORT + 1."""
    source: str
    """Which environment answered (`Slurm`, `SageMaker resourceconfig.json`, ...)."""
    hosts: tuple[str, ...] = ()
    """Host name of every node rank, when the launcher lists them (Slurm, SageMaker)."""
    local_rank: int = 0
    """>0 when preflight was started once per GPU (torchrun worker, srun task): such a process
    only observes the verdict that local rank 0 takes part in."""

    def __post_init__(self) -> None:
        if self.num_nodes < 2:
            raise TopologyError(f"num_nodes({self.num_nodes}) < 2 is not a multi-node job")
        if not 0 <= self.node_rank < self.num_nodes:
            raise TopologyError(f"node rank {self.node_rank} not in [0, {self.num_nodes}) "
                                f"(from {self.source})")
        if self.hosts and len(self.hosts) != self.num_nodes:
            raise TopologyError(f"{len(self.hosts)} hosts listed != {self.num_nodes} nodes "
                                f"(from {self.source})")

    def host_of(self, rank: int) -> str:
        """The listed host name of `rank`, else `rank N`."""
        return self.hosts[rank] if self.hosts else f"rank {rank}"


#: An integer as launchers write one: ASCII digits (int() also takes `١٢`, `1_0` and raises on
#: 4,301 digits).
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            if not _INTEGER.fullmatch(value):
                raise TopologyError(f"{name}={value[:200]!r} is not an integer")
            return int(value)
    return None


def _need(value: _T | None, name: str, context: str, hint: str = "") -> _T:
    """`value`, or a TopologyError naming the variable that the launcher should have set."""
    if value is None or value == "":
        raise TopologyError(f"{context}, but {name} is unset: cannot tell this node's place; "
                            f"{hint or _SET_EXPLICITLY}")
    return value


_SET_EXPLICITLY = ("set PREFLIGHT_NNODES, PREFLIGHT_NODE_RANK and PREFLIGHT_MASTER_ADDR, or "
                   "PREFLIGHT_CLUSTER=off for node-local checks only")


def _port(env: Mapping[str, str], master_port_var: str = "MASTER_PORT") -> int:
    explicit = _int(env, "PREFLIGHT_PORT")
    if explicit is not None:
        return explicit
    master = _int(env, master_port_var)
    return master + 1 if master is not None else DEFAULT_PORT


#: Per-process local ranks of the launchers that start one process per GPU: any of them > 0
#: means this process is not the first on its node, whichever provider found the node.
_LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _local_rank(env: Mapping[str, str]) -> int:
    return max((_int(env, name) or 0 for name in _LOCAL_RANK_VARS), default=0)


class _SingleNode:
    """A provider recognised its launcher, and the launcher describes one node."""


SINGLE = _SingleNode()
_Rc = Mapping[str, object] | None
_Answer = Topology | _SingleNode | None
Provider = Callable[[Mapping[str, str], _Rc], _Answer]


def _explicit(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """PREFLIGHT_NNODES / PREFLIGHT_NODE_RANK / PREFLIGHT_MASTER_ADDR [/ PREFLIGHT_HOSTS]."""
    n = _int(env, "PREFLIGHT_NNODES")
    if n is None:
        return None
    rank = _int(env, "PREFLIGHT_NODE_RANK")
    addr = env.get("PREFLIGHT_MASTER_ADDR") or env.get("MASTER_ADDR")
    if n > 1 and (rank is None or not addr):
        raise TopologyError("PREFLIGHT_NNODES is set: PREFLIGHT_NODE_RANK and "
                            "PREFLIGHT_MASTER_ADDR (or MASTER_ADDR) must be set too")
    hosts = (tuple(expand_hostlist(env["PREFLIGHT_HOSTS"], "PREFLIGHT_HOSTS"))
             if env.get("PREFLIGHT_HOSTS") else ())
    return _make(env, n, rank or 0, addr or "", _port(env), "PREFLIGHT_NNODES", hosts,
                 as_given=True)


def _torchrun_worker(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """Inside a torchrun worker: GROUP_RANK is the node, GROUP_WORLD_SIZE the nodes (older
    torch: WORLD_SIZE / LOCAL_WORLD_SIZE)."""
    group = _int(env, "GROUP_RANK")
    if group is None:
        return None
    n = _int(env, "GROUP_WORLD_SIZE")
    if n is None:
        world = _need(_int(env, "WORLD_SIZE"), "WORLD_SIZE", "GROUP_RANK is set (torchrun worker)")
        local = _need(_int(env, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE",
                      "GROUP_RANK is set (torchrun worker)")
        if local < 1 or world % local:
            raise TopologyError(f"WORLD_SIZE({world}) is not a multiple of LOCAL_WORLD_SIZE({local}) "
                                "(torchrun worker): nodes run different process counts; set "
                                "GROUP_WORLD_SIZE or PREFLIGHT_NNODES")
        n = world // local
    if n < 2:
        return SINGLE
    addr = _need(env.get("MASTER_ADDR"), "MASTER_ADDR", f"torchrun worker of {n} nodes")
    return _make(env, n, group, addr, _port(env), "torchrun worker")


def _kubeflow(env: Mapping[str, str], _rc: _Rc) -> _Answer:
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
    n = _int(env, "PET_NNODES")
    assert n is not None
    if n < 2:
        return SINGLE
    rank = _need(_int(env, "PET_NODE_RANK"), "PET_NODE_RANK", f"PET_NNODES={n} (Kubeflow)")
    addr = _need(env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR"),
                 "PET_MASTER_ADDR (or MASTER_ADDR)", f"PET_NNODES={n} (Kubeflow)")
    port_var = "PET_MASTER_PORT" if env.get("PET_MASTER_PORT") else "MASTER_PORT"
    return _make(env, n, rank, addr, _port(env, port_var), "Kubeflow (PET_*)")


def _sagemaker(env: Mapping[str, str], rc: _Rc) -> _Answer:
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
    return _make(env, len(hosts), hosts.index(current), hosts[0], _port(env),
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


def _open_mpi(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """A process started by Open MPI's mpirun (MPIJob, mpirun inside Slurm): the node is
    OMPI_COMM_WORLD_RANK // OMPI_COMM_WORLD_LOCAL_SIZE when ranks fill nodes in order (mpirun's
    default by-slot placement); the master is MASTER_ADDR (`mpirun -x MASTER_ADDR=...`)."""
    size = _int(env, "OMPI_COMM_WORLD_SIZE")
    if size is None:
        return None
    ctx = f"OMPI_COMM_WORLD_SIZE={size} (Open MPI)"
    local_size = _need(_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE", ctx)
    rank = _need(_int(env, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK", ctx)
    local = _need(_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_RANK", ctx)
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
    addr = _need(env.get("MASTER_ADDR"), "MASTER_ADDR",
                 f"Open MPI job of {n} nodes (OMPI_COMM_WORLD_SIZE={size}, "
                 f"OMPI_COMM_WORLD_LOCAL_SIZE={local_size})",
                 f"pass it with `mpirun -x MASTER_ADDR=<first host>`, or {_SET_EXPLICITLY}")
    return _make(env, n, rank // local_size, addr, _port(env), "Open MPI (OMPI_COMM_WORLD_*)")


def _slurm(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """A Slurm task (srun): the step's nodes (SLURM_STEP_NUM_NODES / SLURM_STEP_NODELIST, which
    may be fewer than the job's), this node's SLURM_NODEID in the step; the first host is the
    master unless MASTER_ADDR is exported."""
    job_n = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    in_allocation = bool(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")) and (job_n or 0) > 1
    if not in_allocation and not any(
            env.get(k) for k in ("SLURM_NODEID", "SLURM_STEP_NODELIST", "SLURM_STEP_NUM_NODES")):
        return None
    node_id = _int(env, "SLURM_NODEID")
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
    n = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    n = _need(n, "SLURM_STEP_NUM_NODES", "SLURM step")
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
    rank = _need(node_id, "SLURM_NODEID", f"Slurm step of {n} nodes")
    addr = env.get("MASTER_ADDR") or (hosts[0] if hosts else None)
    addr = _need(addr, "SLURM_STEP_NODELIST (or MASTER_ADDR)", f"Slurm step of {n} nodes")
    return _make(env, n, rank, addr, _port(env), "Slurm", hosts)


def _aws_batch(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """AWS Batch multi-node parallel job: the main node (AWS_BATCH_JOB_MAIN_NODE_INDEX, not
    always 0) is rank 0; the others reach it at AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS,
    which Batch sets on the other nodes only."""
    n = _int(env, "AWS_BATCH_JOB_NUM_NODES")
    if n is None:
        return None
    if n < 2:
        return SINGLE
    ctx = f"AWS_BATCH_JOB_NUM_NODES={n}"
    index = _need(_int(env, "AWS_BATCH_JOB_NODE_INDEX"), "AWS_BATCH_JOB_NODE_INDEX", ctx)
    main = _need(_int(env, "AWS_BATCH_JOB_MAIN_NODE_INDEX"), "AWS_BATCH_JOB_MAIN_NODE_INDEX", ctx)
    for name, value in (("AWS_BATCH_JOB_NODE_INDEX", index), ("AWS_BATCH_JOB_MAIN_NODE_INDEX", main)):
        if not 0 <= value < n:
            raise TopologyError(f"{name}={value} not in [0, {n}) ({ctx})")
    addr = env.get("AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS", "").strip()
    if index == main:
        addr = addr or _own_host(env)
    addr = _need(addr, "AWS_BATCH_JOB_MAIN_NODE_PRIVATE_IPV4_ADDRESS",
                 f"{ctx}, this is node {index}, not the main node {main}")
    return _make(env, n, (index - main) % n, addr, _port(env), "AWS Batch multi-node")


def _pytorchjob(env: Mapping[str, str], _rc: _Rc) -> _Answer:
    """One process per node with MASTER_ADDR / RANK / WORLD_SIZE (Kubeflow PyTorchJob without
    nprocPerNode, many managed platforms); NODE_RANK / NNODES win when both are set."""
    addr = env.get("MASTER_ADDR")
    if not addr:
        return None
    for n_names, rank_name in ((("NNODES", "NUM_NODES"), "NODE_RANK"), (("WORLD_SIZE",), "RANK")):
        n, rank, n_name = _int(env, *n_names), _int(env, rank_name), n_names[0]
        if n is None and rank is None:
            continue
        # The first pair that is there decides: with NNODES set, WORLD_SIZE counts processes.
        n = _need(n, n_name, f"MASTER_ADDR and {rank_name}={rank} are set")
        if n < 2:
            return SINGLE
        rank = _need(rank, rank_name, f"MASTER_ADDR and {n_name}={n} are set")
        return _make(env, n, rank, addr, _port(env), f"MASTER_ADDR/{rank_name}/{n_name}")
    return None


def _make(env: Mapping[str, str], n: int, rank: int, addr: str, port: int, source: str,
          hosts: tuple[str, ...] = (), *, as_given: bool = False) -> Topology | _SingleNode:
    if n < 2:
        return SINGLE
    if rank == 0 and not as_given and _is_loopback(addr):
        # A launcher tells the master itself "localhost" (kubeflow/pytorch-operator and
        # training-operator forks set MASTER_ADDR=localhost on the master pod): the other nodes
        # reach it by its host name, and gloo must not be pinned to loopback there.
        addr = _own_host(env)
    return Topology(node_rank=rank, num_nodes=n, master_addr=addr, port=port, source=source,
                    hosts=hosts, local_rank=_local_rank(env))


def _is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


def _own_host(env: Mapping[str, str]) -> str:
    return env.get("PREFLIGHT_HOSTNAME") or socket.gethostname()


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
