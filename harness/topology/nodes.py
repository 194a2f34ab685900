"""How many nodes the job has and whether this one leads the multi-node tests: the control
plane's `Topology` when the launcher describes one, else the looser launcher variables that a
node-local run still has (Slurm allocation sizes, SageMaker hosts, torchrun/Open MPI sizes)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from harness.base.settings import get_int
from harness.topology.model import Topology, TopologyError
from harness.topology.providers import detect_topology

__all__ = ["NodeCount", "count_nodes", "is_leader", "sagemaker_hosts"]


@dataclass(frozen=True, slots=True)
class NodeCount:
    """Nodes in this job and where that number came from (named in check messages)."""

    num_nodes: int
    source: str


def _positive(value: object) -> int | None:
    try:
        n = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def sagemaker_hosts(env: Mapping[str, str], sm_config: Mapping[str, object] | None) -> list[str]:
    """resourceconfig.json `hosts`, else $SM_HOSTS; [] when neither lists any."""
    hosts = sm_config.get("hosts") if sm_config else None
    if not isinstance(hosts, list) and env.get("SM_HOSTS"):
        try:
            hosts = json.loads(env["SM_HOSTS"])
        except ValueError:
            hosts = None
    return [str(h) for h in hosts] if isinstance(hosts, list) else []


def _cluster(env: Mapping[str, str], sm_config: Mapping[str, object] | None) -> Topology | None:
    """The multi-node topology the control plane uses, so that the node that launches the
    multi-node test is the plane's node rank 0; None when it finds no multi-node job or cannot
    read one (the cluster step reports that, before any check)."""
    try:
        return detect_topology(env, sm_config)
    except TopologyError:
        return None


def count_nodes(
    env: Mapping[str, str], sm_config: Mapping[str, object] | None = None
) -> NodeCount:
    """Nodes in the job: $PREFLIGHT_NUM_NODES, the cluster topology, else Slurm, SageMaker
    hosts, torchrun/Open MPI sizes."""
    if (n := _positive(get_int("PREFLIGHT_NUM_NODES", env, error=TopologyError))) is not None:
        return NodeCount(n, "PREFLIGHT_NUM_NODES")
    if (topo := _cluster(env, sm_config)) is not None:
        return NodeCount(topo.num_nodes, topo.source)
    for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        if (n := _positive(env.get(name))) is not None:
            return NodeCount(n, name)
    if hosts := sagemaker_hosts(env, sm_config):
        return NodeCount(len(hosts), "SageMaker hosts")
    for world, local in (("WORLD_SIZE", "LOCAL_WORLD_SIZE"),
                         ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        w, lo = _positive(env.get(world)), _positive(env.get(local))
        if w is not None and lo is not None and w % lo == 0:
            return NodeCount(w // lo, f"{world}/{local}")
    if (n := _positive(env.get("NNODES"))) is not None:
        return NodeCount(n, "NNODES")
    if (n := _positive(env.get("WORLD_SIZE"))) is not None:
        # A launcher that starts one preflight per node (Kubeflow PyTorchJob, SageMaker custom
        # entry points) sets WORLD_SIZE to the number of nodes.
        return NodeCount(n, "WORLD_SIZE")
    return NodeCount(1, "no multi-node launcher variables")


def is_leader(env: Mapping[str, str], sm_config: Mapping[str, object] | None = None) -> bool:
    """This node launches the multi-node test (the others only take part in it): the cluster
    topology's node rank 0, else the first rule below that applies."""
    if (topo := _cluster(env, sm_config)) is not None:
        return topo.node_rank == 0
    hosts = sagemaker_hosts(env, sm_config)
    current = (sm_config or {}).get("current_host") or env.get("SM_CURRENT_HOST")
    if hosts and current:
        return str(current) == sorted(hosts)[0]
    for name in ("SLURM_NODEID", "NODE_RANK", "GROUP_RANK", "OMPI_COMM_WORLD_NODE_RANK"):
        if name in env:
            return env[name].strip() == "0"
    if "RANK" in env and "LOCAL_WORLD_SIZE" not in env:
        return env["RANK"].strip() == "0"
    return True
