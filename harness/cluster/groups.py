"""Job-shaped groups: the job's parallel layout (tensor, context, expert, data and pipeline
parallel sizes) turned into the groups of nodes that talk to each other, so that the cluster
step's bandwidth gate and isolation also run inside each tensor- and expert-parallel group
that spans nodes, at that group's message size (and an all_to_all, the MoE dispatch/combine
pattern, inside each expert group). A bad link between two nodes of one tensor-parallel group
matters; one between two nodes that never talk in the job does not change the job.

Where the layout comes from, first found: `preflight run --groups tp=8,pp=4,ep=2` (or
`--groups FILE`, a JSON or TOML table of the same keys), PREFLIGHT_GROUPS (the same forms),
then the launcher's own environment where it says it: SageMaker passes the job's
hyperparameters as SM_HPS (JSON); the SageMaker model parallel library's
`tensor_parallel_degree`, `expert_parallel_degree`, `pipeline_parallel_degree`,
`context_parallel_degree`, and Megatron's `tensor_model_parallel_size`,
`pipeline_model_parallel_size`, `expert_model_parallel_size`, `context_parallel_size` are read
there. Without a layout, nothing here runs (the cluster step as before).

Rank order: Megatron-Core's default `order="tp-cp-ep-dp-pp"` (tensor parallel fastest:
consecutive ranks), global rank = node rank x GPUs per node + local rank; dp is what is left
(world / (tp x cp x ep x pp)). Pure functions: tested without torch."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.cluster.isolate import IsolationResult, PairResult
from harness.cluster.wire import items, required

__all__ = ["DIMS", "GroupError", "Layout", "NodeGroup", "layout_from_env", "node_groups",
           "parse_groups", "rounds"]

#: The dimensions, fastest first (Megatron-Core's default order).
DIMS = ("tp", "cp", "ep", "dp", "pp")
#: The kinds whose groups the cluster step measures (the communication-heavy ones).
MEASURED = ("tp", "ep")
#: Launcher hyperparameter names (SM_HPS) per dimension.
HP_NAMES = {
    "tp": ("tensor_parallel_degree", "tensor_model_parallel_size"),
    "pp": ("pipeline_parallel_degree", "pipeline_model_parallel_size"),
    "ep": ("expert_parallel_degree", "expert_model_parallel_size"),
    "cp": ("context_parallel_degree", "context_parallel_size"),
}


class GroupError(ValueError):
    """A layout that cannot be read or does not fit the job; str() says why."""


@dataclass(frozen=True, slots=True)
class Layout:
    """Parallel sizes (1: not split along that dimension) and where they were read."""

    sizes: Mapping[str, int]
    source: str

    def size(self, dim: str) -> int:
        return int(self.sizes.get(dim, 1))

    def describe(self) -> str:
        return ",".join(f"{d}={self.size(d)}" for d in DIMS if d in self.sizes) + \
            f" ({self.source})"


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """One group of the job that spans more than one node: its kind, its index among that
    kind's groups, its nodes, and the message size it is measured at."""

    kind: str
    index: int
    nodes: tuple[int, ...]
    size_bytes: int = 0
    ranks: tuple[int, ...] = field(default=(), compare=False)

    @property
    def name(self) -> str:
        return f"{self.kind} group {self.index}"

    def to_json(self) -> JSONObject:
        """The wire form (the snapshot's `groups_plan` and `groups`; `ranks` stays here)."""
        return {"kind": self.kind, "index": self.index, "nodes": list(self.nodes),
                "size_bytes": self.size_bytes}

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a job group") -> NodeGroup:
        """Every field of `to_json` required and of its type (SnapshotError naming it)."""
        return cls(kind=required(d, "kind", str, where), index=required(d, "index", int, where),
                   nodes=tuple(items(d, "nodes", int, where)),
                   size_bytes=required(d, "size_bytes", int, where))


def _sizes(table: Mapping[str, object], where: str) -> dict[str, int]:
    out = {}
    for key, value in table.items():
        dim = str(key).strip().lower()
        if dim not in DIMS:
            raise GroupError(f"{where}: {key!r} is not one of {', '.join(DIMS)}")
        try:
            n = int(str(value).strip())
        except ValueError:
            raise GroupError(f"{where}: {key}={value!r} is not a whole number") from None
        if n < 1:
            raise GroupError(f"{where}: {key}={n} must be at least 1")
        out[dim] = n
    if not out:
        raise GroupError(f"{where}: no size given (e.g. tp=8,pp=4,ep=2)")
    return out


def parse_groups(spec: str, where: str = "--groups") -> Layout:
    """`tp=8,pp=4,ep=2`, or the path of a JSON or TOML file with those keys."""
    text = spec.strip()
    if "=" not in text:
        from harness.profiles.check import read_toml

        path = Path(text)
        try:
            table = json.loads(path.read_text(encoding="utf-8")) if path.suffix == ".json" \
                else read_toml(path)
        except (OSError, ValueError) as exc:  # ProfileError, UnicodeDecodeError: ValueErrors
            raise GroupError(f"{where} {spec!r}: neither tp=N,... nor a readable JSON or TOML "
                             f"file ({type(exc).__name__}: {exc})") from None
        if not isinstance(table, dict):
            raise GroupError(f"{where} {spec!r}: expected a table of sizes")
        return Layout(_sizes(table, f"{where} {spec}"), f"{where} {spec}")
    pairs = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            raise GroupError(f"{where} {spec!r}: {part!r} is not DIM=N")
        pairs[key] = value
    return Layout(_sizes(pairs, f"{where} {spec!r}"), f"{where} {spec}")


def layout_from_env(env: Mapping[str, str], given: str | None = None) -> Layout | None:
    """The layout from `given` (--groups / PREFLIGHT_GROUPS, already read), else SM_HPS."""
    if given:
        return parse_groups(given, "groups")
    raw = env.get("SM_HPS")
    if not raw:
        return None
    try:
        hps = json.loads(raw)
    except ValueError:
        return None  # the launcher's own variable: not ours to reject
    if not isinstance(hps, dict):
        return None
    found = {dim: hps[name] for dim, names in HP_NAMES.items() for name in names
             if name in hps}
    return Layout(_sizes(found, "SM_HPS"), "SM_HPS (the launcher's hyperparameters)") \
        if found else None


def _coords(rank: int, sizes: Sequence[int]) -> list[int]:
    out = []
    for n in sizes:
        out.append(rank % n)
        rank //= n
    return out


def node_groups(layout: Layout, num_nodes: int, gpus_per_node: int,
                sizes_bytes: Mapping[str, int] | None = None) -> list[NodeGroup]:
    """Each tp and ep group that spans more than one node (groups inside one node are the
    node-local checks' business), one per distinct node set of a kind, numbered by the first
    group of the job that has it. GroupError when the layout does not divide the job."""
    world = num_nodes * gpus_per_node
    fixed = 1
    for dim in DIMS:
        if dim != "dp":
            fixed *= layout.size(dim)
    if world % fixed:
        raise GroupError(f"layout {layout.describe()}: tp x cp x ep x pp = {fixed} does not "
                         f"divide the job's {world} ranks ({num_nodes} nodes x "
                         f"{gpus_per_node} GPUs)")
    dp = layout.size("dp") if "dp" in layout.sizes else world // fixed
    if fixed * dp != world:
        raise GroupError(f"layout {layout.describe()}: {fixed} x dp {dp} != {world} ranks")
    dims = [layout.size(d) if d != "dp" else dp for d in DIMS]
    out: list[NodeGroup] = []
    for kind in MEASURED:
        axis = DIMS.index(kind)
        if dims[axis] < 2:
            continue
        seen: dict[tuple[int, ...], int] = {}
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(world):
            c = _coords(rank, dims)
            key = tuple(v for i, v in enumerate(c) if i != axis)
            groups.setdefault(key, []).append(rank)
        for index, ranks in enumerate(groups.values()):
            nodes = tuple(sorted({r // gpus_per_node for r in ranks}))
            if len(nodes) > 1 and nodes not in seen:
                seen[nodes] = index
                out.append(NodeGroup(kind, index, nodes, (sizes_bytes or {}).get(kind, 0),
                                     tuple(ranks)))
    return out


def rounds(groups: Sequence[NodeGroup]) -> list[list[NodeGroup]]:
    """The groups in rounds of node-disjoint groups (each node in one group at a time), in
    order: a kind's groups usually partition the nodes, so each kind is one round."""
    out: list[list[NodeGroup]] = []
    for g in groups:
        for rnd in out:
            if rnd[0].kind == g.kind and not any(set(g.nodes) & set(o.nodes) for o in rnd):
                rnd.append(g)
                break
        else:
            out.append([g])
    return out


def pair_rounds(nodes: Sequence[int]) -> list[list[tuple[int, int]]]:
    """Every pair of `nodes` in rounds of disjoint pairs (the circle method: n-1 rounds for n
    nodes, one more with a bye when n is odd)."""
    ring = list(nodes) + ([None] if len(nodes) % 2 else [])  # type: ignore[list-item]
    n = len(ring)
    out = []
    for _ in range(n - 1):
        out.append([(a, b) for a, b in ((ring[i], ring[n - 1 - i]) for i in range(n // 2))
                    if a is not None and b is not None])
        ring = [ring[0], ring[-1], *ring[1:-1]]
    return out


def judge_sweep(nodes: Sequence[int], rounds: Sequence[Sequence[PairResult]],
                threshold_gb_s: float) -> IsolationResult:
    """Every pair of `nodes` measured once (`pair_rounds`), judged against the threshold: bad
    nodes (failed with every partner, at least two), and bad links (failed pairs between nodes
    that passed with someone else), in isolate's record (both confirmed after the last round)."""
    failed_with: dict[int, set[int]] = {n: set() for n in nodes}
    partners: dict[int, set[int]] = {n: set() for n in nodes}
    results = [(p.a, p.b, p.error is None and p.busbw_gb_s is not None
                and p.busbw_gb_s >= threshold_gb_s) for rnd in rounds for p in rnd]
    for a, b, ok in results:
        partners[a].add(b)
        partners[b].add(a)
        if not ok:
            failed_with[a].add(b)
            failed_with[b].add(a)
    bad = sorted(n for n in nodes if len(partners[n]) >= 2 and failed_with[n] == partners[n])
    links = sorted((min(a, b), max(a, b)) for a, b, ok in results
                   if not ok and a not in bad and b not in bad)
    return IsolationResult(nodes=tuple(nodes), rounds=tuple(tuple(r) for r in rounds),
                           threshold_gb_s=threshold_gb_s, bad_nodes=tuple(bad),
                           bad_links=tuple(links), suspects=(),
                           found_in_round=(len(rounds),) * len(bad))
