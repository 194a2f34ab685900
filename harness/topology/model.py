"""What a node's place in a multi-node job is (`Topology`), and the small readers every
launcher provider shares: integers as launchers write them, the control-plane port, the
single-node answer. The lowest layer of the topology: it imports nothing of the harness but
the Slurm hostlist reader and the settings registry."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from harness.base.settings import get_int, get_str
from harness.topology.hostlist import HostlistError
from harness.topology.hostlist import expand_hostlist as _expand_hostlist

__all__ = [
    "DEFAULT_PORT",
    "SET_EXPLICITLY",
    "SINGLE",
    "Answer",
    "Rc",
    "SingleNode",
    "Topology",
    "TopologyError",
    "control_port",
    "env_int",
    "expand_hostlist",
    "is_loopback",
    "local_rank_of",
    "make",
    "need",
    "own_host",
]

_T = TypeVar("_T", int, str)

#: torch's default MASTER_PORT is 29500; the control plane takes the next one so that the
#: training job, exec'd after preflight, can still bind its own.
DEFAULT_PORT = 29501


class TopologyError(ValueError):
    """The environment describes a cluster but inconsistently; str() is the message."""


def expand_hostlist(spec: str, variable: str | None = None) -> list[str]:
    """Slurm hostlist to names (harness.topology.hostlist); a bad one is a TopologyError that
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


def env_int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            if not _INTEGER.fullmatch(value):
                raise TopologyError(f"{name}={value[:200]!r} is not an integer")
            return int(value)
    return None


def need(value: _T | None, name: str, context: str, hint: str = "") -> _T:
    """`value`, or a TopologyError naming the variable that the launcher should have set."""
    if value is None or value == "":
        raise TopologyError(f"{context}, but {name} is unset: cannot tell this node's place; "
                            f"{hint or SET_EXPLICITLY}")
    return value


SET_EXPLICITLY = ("set PREFLIGHT_NNODES, PREFLIGHT_NODE_RANK and PREFLIGHT_MASTER_ADDR, or "
                   "PREFLIGHT_CLUSTER=off for node-local checks only")


def control_port(env: Mapping[str, str], master_port_var: str = "MASTER_PORT") -> int:
    explicit = get_int("PREFLIGHT_PORT", env, error=TopologyError)
    if explicit is not None:
        return explicit
    master = env_int(env, master_port_var)
    return master + 1 if master is not None else DEFAULT_PORT


#: Per-process local ranks of the launchers that start one process per GPU: any of them > 0
#: means this process is not the first on its node, whichever provider found the node.
_LOCAL_RANK_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def local_rank_of(env: Mapping[str, str]) -> int:
    return max((env_int(env, name) or 0 for name in _LOCAL_RANK_VARS), default=0)


class SingleNode:
    """A provider recognised its launcher, and the launcher describes one node."""


SINGLE = SingleNode()
Rc = Mapping[str, object] | None
Answer = Topology | SingleNode | None


def make(env: Mapping[str, str], n: int, rank: int, addr: str, port: int, source: str,
          hosts: tuple[str, ...] = (), *, as_given: bool = False) -> Topology | SingleNode:
    if n < 2:
        return SINGLE
    if rank == 0 and not as_given and is_loopback(addr):
        # A launcher tells the master itself "localhost" (kubeflow/pytorch-operator and
        # training-operator forks set MASTER_ADDR=localhost on the master pod): the other nodes
        # reach it by its host name, and gloo must not be pinned to loopback there.
        addr = own_host(env)
    return Topology(node_rank=rank, num_nodes=n, master_addr=addr, port=port, source=source,
                    hosts=hosts, local_rank=local_rank_of(env))


def is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


def own_host(env: Mapping[str, str]) -> str:
    return get_str("PREFLIGHT_HOSTNAME", env) or socket.gethostname()
