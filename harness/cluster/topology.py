"""Which node am I, how many are there, where is the master: from the environment the job
already has (a provider chain, first answer wins), plus Slurm hostlist expansion/compression."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PORT",
    "Topology",
    "TopologyError",
    "compress_hostlist",
    "detect_topology",
    "expand_hostlist",
]

#: torch's default MASTER_PORT is 29500; the control plane takes the next one so that the
#: training job, exec'd after preflight, can still bind its own.
DEFAULT_PORT = 29501


class TopologyError(ValueError):
    """The environment describes a cluster but inconsistently; str() is the message."""


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


def expand_hostlist(spec: str) -> list[str]:
    """Slurm hostlist to names: `node[01-03,07],gpu-a` -> node01 node02 node03 node07 gpu-a.
    Zero padding is kept from the range's first bound; several bracket groups multiply."""
    hosts: list[str] = []
    for item in _split_top(spec.strip()):
        if item:
            hosts.extend(_expand_one(item))
    return hosts


def _split_top(spec: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise TopologyError(f"unbalanced brackets in hostlist {spec!r}")
    parts.append("".join(cur))
    return parts


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise TopologyError(f"bad range {part!r} in hostlist {item!r}")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
    return out


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Names to a Slurm hostlist (the inverse of expand_hostlist for `prefixNN` names):
    node01 node02 node03 node07 -> node[01-03,07]. Order: by prefix, then number."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    numbered = []
    for h in dict.fromkeys(hosts):
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if m:
            numbered.append((m.group(1), m.group(2)))
        else:
            plain.append(h)
    # Zero-padded names (node07) fix their prefix's width; node10 then joins node[07-10].
    padded = {(p, len(d)) for p, d in numbered if d.startswith("0") and len(d) > 1}
    for prefix, digits in numbered:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out = []
    for (prefix, width), nums in sorted(groups.items()):
        nums.sort()
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(plain) + out)


def _int(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                raise TopologyError(f"{name}={value!r} is not an integer") from None
    return None


def _port(env: Mapping[str, str], master_port_var: str = "MASTER_PORT") -> int:
    explicit = _int(env, "PREFLIGHT_PORT")
    if explicit is not None:
        return explicit
    master = _int(env, master_port_var)
    return master + 1 if master is not None else DEFAULT_PORT


Provider = Callable[[Mapping[str, str], "Mapping[str, object] | None"], "Topology | None"]


def _explicit(env: Mapping[str, str], _rc: Mapping[str, object] | None) -> Topology | None:
    """PREFLIGHT_NNODES / PREFLIGHT_NODE_RANK / PREFLIGHT_MASTER_ADDR [/ PREFLIGHT_HOSTS]."""
    n = _int(env, "PREFLIGHT_NNODES")
    if n is None:
        return None
    rank = _int(env, "PREFLIGHT_NODE_RANK")
    addr = env.get("PREFLIGHT_MASTER_ADDR") or env.get("MASTER_ADDR")
    if rank is None or not addr:
        raise TopologyError("PREFLIGHT_NNODES is set: PREFLIGHT_NODE_RANK and "
                            "PREFLIGHT_MASTER_ADDR (or MASTER_ADDR) must be set too")
    hosts = tuple(expand_hostlist(env["PREFLIGHT_HOSTS"])) if env.get("PREFLIGHT_HOSTS") else ()
    return _make(n, rank, addr, _port(env), "PREFLIGHT_NNODES", hosts)


def _torchrun_worker(env: Mapping[str, str], _rc: Mapping[str, object] | None) -> Topology | None:
    """Inside a torchrun worker: GROUP_RANK is the node, WORLD_SIZE / LOCAL_WORLD_SIZE nodes."""
    group = _int(env, "GROUP_RANK")
    local_world = _int(env, "LOCAL_WORLD_SIZE")
    world = _int(env, "WORLD_SIZE")
    if group is None or not local_world or world is None or not env.get("MASTER_ADDR"):
        return None
    return _make(world // local_world, group, env["MASTER_ADDR"], _port(env), "torchrun worker",
                 local_rank=_int(env, "LOCAL_RANK") or 0)


def _kubeflow(env: Mapping[str, str], _rc: Mapping[str, object] | None) -> Topology | None:
    """Kubeflow PyTorchJob with nprocPerNode: PET_NNODES / PET_NODE_RANK / PET_MASTER_ADDR."""
    n = _int(env, "PET_NNODES")
    rank = _int(env, "PET_NODE_RANK")
    addr = env.get("PET_MASTER_ADDR") or env.get("MASTER_ADDR")
    if n is None or rank is None or not addr:
        return None
    port_var = "PET_MASTER_PORT" if env.get("PET_MASTER_PORT") else "MASTER_PORT"
    return _make(n, rank, addr, _port(env, port_var), "Kubeflow PyTorchJob (PET_*)")


def _sagemaker(_env: Mapping[str, str], rc: Mapping[str, object] | None) -> Topology | None:
    """resourceconfig.json: `hosts` (first is the master), `current_host`."""
    if not rc:
        return None
    hosts, current = rc.get("hosts"), rc.get("current_host")
    if not isinstance(hosts, list) or not isinstance(current, str):
        return None
    hosts = [str(h) for h in hosts]
    if current not in hosts:
        raise TopologyError(f"resourceconfig.json: current_host {current!r} not in hosts {hosts}")
    return _make(len(hosts), hosts.index(current), hosts[0], _port(_env),
                 "SageMaker resourceconfig.json", tuple(hosts))


def _slurm(env: Mapping[str, str], _rc: Mapping[str, object] | None) -> Topology | None:
    """SLURM_NNODES / SLURM_NODEID / SLURM_JOB_NODELIST (first host is the master)."""
    n = _int(env, "SLURM_JOB_NUM_NODES", "SLURM_NNODES")
    rank = _int(env, "SLURM_NODEID")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if n is None or rank is None or not nodelist:
        return None
    hosts = tuple(expand_hostlist(nodelist))
    addr = env.get("MASTER_ADDR") or hosts[0]
    return _make(n, rank, addr, _port(env), "Slurm", hosts if len(hosts) == n else (),
                 local_rank=_int(env, "SLURM_LOCALID") or 0)


def _pytorchjob(env: Mapping[str, str], _rc: Mapping[str, object] | None) -> Topology | None:
    """One process per node with MASTER_ADDR / RANK / WORLD_SIZE (Kubernetes PyTorchJob
    without nprocPerNode, many managed platforms); NODE_RANK / NNODES also accepted."""
    addr = env.get("MASTER_ADDR")
    if not addr:
        return None
    n, rank = _int(env, "NNODES", "NUM_NODES"), _int(env, "NODE_RANK")
    if n is None or rank is None:
        n, rank = _int(env, "WORLD_SIZE"), _int(env, "RANK")
    if n is None or rank is None:
        return None
    return _make(n, rank, addr, _port(env), "MASTER_ADDR/RANK/WORLD_SIZE")


def _make(n: int, rank: int, addr: str, port: int, source: str, hosts: tuple[str, ...] = (),
          local_rank: int = 0) -> Topology | None:
    if n < 2:
        return None
    return Topology(node_rank=rank, num_nodes=n, master_addr=addr, port=port, source=source,
                    hosts=hosts, local_rank=local_rank)


#: Order matters: the most explicit first; a torchrun worker's env also has MASTER_ADDR/RANK.
PROVIDERS: tuple[Provider, ...] = (_explicit, _torchrun_worker, _kubeflow, _sagemaker, _slurm,
                                   _pytorchjob)


def detect_topology(
    env: Mapping[str, str], resourceconfig: Mapping[str, object] | None = None
) -> Topology | None:
    """This node's Topology, or None for a single-node job. The first provider that recognises
    its variables answers (a single-node answer from it stops the chain too)."""
    for provider in PROVIDERS:
        found = provider(env, resourceconfig)
        if found is not None:
            return found
        if _recognised(provider.__name__, env, resourceconfig):
            return None
    return None


def _recognised(name: str, env: Mapping[str, str], rc: Mapping[str, object] | None) -> bool:
    """The provider's variables are present but describe one node: stop looking."""
    keys = {
        "_explicit": ("PREFLIGHT_NNODES",),
        "_torchrun_worker": ("GROUP_RANK",),
        "_kubeflow": ("PET_NNODES",),
        "_slurm": ("SLURM_NODEID",),
    }.get(name, ())
    if name == "_sagemaker":
        return bool(rc and isinstance(rc.get("hosts"), list))
    return any(env.get(k) for k in keys)
