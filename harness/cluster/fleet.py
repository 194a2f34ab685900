"""A simulated fleet for the control plane at scale: node rank 0 is the real master (a
`ClusterStep` serving the c10d TCPStore, in its own process) and every other node is a thread
in one of a few worker processes, each with its own TCPStore client, running the same
`ClusterStep.exchange` a real node runs after its node-local checks: join, publish its summary,
receive the snapshot, publish its cluster all_reduce result, receive the verdict, the exit
handshake. Only two things are simulated: the node-local checks (a canned summary, published
after `local_s` seconds, plus the fault's delay) and the cluster all_reduce (a canned result:
gloo over thousands of nodes cannot run on one machine; docs/multinode.md models it).

Faults: `slow` ranks publish their summary `slow_s` late and report a third of the busbw (a
straggler); `absent` ranks never start; `dying` ranks join and then drop their connection
before reporting (a node that crashed during its checks).

`python -m harness.cluster.fleet SPEC.json` runs one fleet and prints its figures as JSON
(bench/bench_fleet.py, tests/test_cluster_fleet.py). Threads (not processes) per node: 16,384
interpreters do not fit one machine; the store calls release the GIL, so threads wait as
processes would. Hand-written around torch's own TCPStore: no library simulates a c10d fleet.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.base.jsontypes import JSONObject
from harness.cluster.timeouts import ClusterTimeouts
from harness.cluster.wire import NodeSummary

__all__ = ["FleetSpec", "run_fleet"]

#: The NCCL/FI variables a simulated node publishes (a real EFA node's typical set: what
#: makes a summary ~1 KB, so the snapshot's size is realistic).
_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1",
        "NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "^docker,lo,veth", "NCCL_BUFFSIZE": "8388608",
        "NCCL_P2P_NET_CHUNKSIZE": "524288", "NCCL_TUNER_PLUGIN": "ofi",
        "NCCL_NVLS_ENABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_CROSS_NIC": "0",
        "NCCL_NET_GDR_LEVEL": "PHB"}
_FACTS = {"driver": "570.133.20", "cuda": "12.8", "nccl": "2.26.5", "ofi_nccl": "1.14.2",
          "libfabric": "2.1.0amzn3.0", "torch": "2.13.0", "gpu_count": 8,
          "gpu_model": "NVIDIA H100 80GB HBM3"}


@dataclass(kw_only=True)
class FleetSpec:
    """One simulated fleet. Timeouts as the cluster step's (PREFLIGHT_*_TIMEOUT_S)."""

    nodes: int
    procs: int = 0
    """Worker processes for ranks 1..N-1 (0: one per 2,048 nodes, at least 1)."""
    local_s: float = 0.0
    slow: list[int] = field(default_factory=list)
    slow_s: float = 2.0
    absent: list[int] = field(default_factory=list)
    dying: list[int] = field(default_factory=list)
    join_s: float = 60.0
    local_budget_s: float = 30.0
    gather_s: float = 20.0
    collective_s: float = 20.0
    exit_s: float = 10.0
    port: int = 0
    start_at: float = 0.0
    """Wall-clock time every node starts joining (set by `run_fleet`)."""

    def timeouts(self) -> ClusterTimeouts:
        return ClusterTimeouts(join_s=self.join_s, local_s=self.local_budget_s,
                               gather_s=self.gather_s, collective_s=self.collective_s,
                               isolation_rounds=0, exit_s=self.exit_s)


def _summary(rank: int, spec: FleetSpec) -> NodeSummary:
    """What `node_summary` publishes for a healthy node (the straggler: a third of the busbw)."""
    busbw = 100.0 + (rank % 7) * 0.5
    return NodeSummary(rank=rank, host=f"sim{rank:05d}", verdict="pass", failed=(), num_failed=0,
                       harness_errors=(), facts=dict(_FACTS), env=dict(_ENV),
                       figures={"node_busbw_gb_s": busbw / 3 if rank in spec.slow else busbw,
                                "step_time_s": None},
                       sdc=None, nothing_judged=None)


def _step(rank: int, spec: FleetSpec, hosts: tuple[str, ...]) -> Any:
    from harness.cluster.step import ClusterStep
    from harness.profiles.table import get_profile
    from harness.topology.model import Topology

    class SimStep(ClusterStep):
        def _bench_all(self, size: int) -> dict[str, Any]:  # the only simulated collective
            return {"busbw_gb_s": 1.0, "data_ok": True, "errors": [], "nranks": spec.nodes}

    topo = Topology(node_rank=rank, num_nodes=spec.nodes, master_addr="127.0.0.1",
                    port=spec.port, source="fleet simulator", hosts=hosts)
    env = {"PREFLIGHT_CLUSTER_BW_BYTES": "1024"}
    return SimStep(topo, spec.timeouts(), profile=get_profile("local-cpu"), tier="preflight",
                   env=env)


def _node(rank: int, spec: FleetSpec, hosts: tuple[str, ...], out: dict[str, Any]) -> None:
    """One node's life; `out` gets its times (wall clock) and what it decided."""
    rec: dict[str, Any] = {"rank": rank}
    out[str(rank)] = rec
    try:
        _life(rank, spec, hosts, rec)
    except Exception as exc:  # a bug, not a fault: reported, never a silent thread
        rec["error"] = f"{type(exc).__name__}: {exc}"


def _life(rank: int, spec: FleetSpec, hosts: tuple[str, ...], rec: dict[str, Any]) -> None:
    from harness.cluster.plane import ControlPlane, PlaneError

    try:
        from harness.cluster.verdict import verdict_of
    except ImportError:  # a revision before it (bench_fleet's baseline): every node decides
        from harness.cluster.verdict import decide as verdict_of

    step = _step(rank, spec, hosts)
    try:
        step.plane = ControlPlane.join(step.topo, spec.join_s, {})
        step.plane.publish(f"join/{rank}", {"host": f"sim{rank:05d}"}, counter="count/join")
    except PlaneError as exc:
        rec["error"] = str(exc)
        return
    rec["joined"] = time.time()
    time.sleep(spec.local_s + (spec.slow_s if rank in spec.slow else 0.0))
    if rank in spec.dying:
        step.plane.store = None  # the client's socket closes: this node is gone
        rec["died"] = time.time()
        return
    rec["published"] = time.time()
    snap = step.exchange(_summary(rank, spec))
    verdict = verdict_of(snap)
    rec.update(verdict_at=time.time(), verdict=verdict.verdict,
               bad=[b["rank"] for b in verdict.bad_nodes],
               reasons={str(b["rank"]): b["reason"] for b in verdict.bad_nodes},
               stragglers=[s["rank"] for s in verdict.stragglers])
    if rank <= 1:  # the master's own snapshot, and what a node received
        rec["snap_bytes"] = len(json.dumps(snap))


def _usage() -> dict[str, float]:
    """This process's CPU seconds, peak RSS, descriptors and sockets now."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    fds = os.listdir("/proc/self/fd")
    socks = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # closed since listed
            socks += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    with open("/proc/self/status", encoding="ascii") as f:
        threads = next(int(line.split()[1]) for line in f if line.startswith("Threads:"))
    return {"cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
            "fds": len(fds), "sockets": socks, "threads": threads}


class _Sampler(threading.Thread):
    """Peak descriptors/sockets/threads of this process, every `every` s."""

    def __init__(self, every: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.every, self.peak, self.stop = every, {"fds": 0, "sockets": 0, "threads": 0}, False

    def run(self) -> None:
        while not self.stop:
            u = _usage()
            for k in self.peak:
                self.peak[k] = max(self.peak[k], u[k])
            time.sleep(self.every)


def _serve(role: str, spec: FleetSpec, ranks: list[int], out_path: str) -> None:
    """A process of the fleet: the master (rank 0) or a worker holding `ranks`."""
    import torch.distributed  # noqa: F401 (imported before the start: not timed)

    import harness.cluster.step
    import harness.profiles.table  # noqa: F401

    threading.stack_size(256 * 1024)
    hosts = tuple(f"sim{r:05d}" for r in range(spec.nodes))  # as Slurm lists them
    base = _usage()
    sampler = _Sampler()
    sampler.start()
    out: dict[str, Any] = {}
    go = threading.Event()

    def node(rank: int) -> None:
        go.wait()
        _node(rank, spec, hosts, out)

    threads = [threading.Thread(target=node, args=(r,), daemon=True)
               for r in ranks if r not in spec.absent]
    for t in threads:
        t.start()
    Path(out_path + ".ready").write_text("", encoding="utf-8")
    go_file = Path(out_path).parent / "go"
    while not go_file.exists():
        time.sleep(0.05)
    spec.start_at = float(go_file.read_text(encoding="utf-8"))
    ready = time.time()
    # The master serves the store before the nodes come (its join is not what is measured).
    time.sleep(max(0.0, spec.start_at - ready - (1.5 if role == "master" else 0.0)))
    go.set()
    bound = spec.timeouts().hard_bound_s + 30
    for t in threads:
        t.join(timeout=max(0.1, spec.start_at + bound - time.time()))
    sampler.stop = True
    end = _usage()
    Path(out_path).write_text(json.dumps({
        "role": role, "nodes": out, "late_s": max(0.0, ready - spec.start_at),
        "hung": sum(t.is_alive() for t in threads),
        "base": base, "end": end, "peak": sampler.peak,
        "cpu_s": end["cpu_s"] - base["cpu_s"]}), encoding="utf-8")
    os._exit(0)  # hung node threads must not keep the process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _child_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """The processes' environment. c10d looks up the peer's name of every store connection;
    where no DNS server answers (this sandbox), each lookup waits out the resolver's timeout
    (5 s by default): 1 s, one attempt, keeps that artifact small and visible in join_s."""
    out = dict(os.environ if env is None else env)
    out.setdefault("RES_OPTIONS", "timeout:1 attempts:1")
    return out


def run_fleet(spec: FleetSpec, workdir: Path, *, python: str = sys.executable,
              env: Mapping[str, str] | None = None, tree: Path | None = None) -> JSONObject:
    """Run one fleet (the master and the workers as processes) and return its figures;
    `tree`: another checkout whose control plane the processes run (bench_fleet's pairs)."""
    if tree is not None:  # `-m` puts the working directory first on sys.path
        env = {**(os.environ if env is None else env), "PYTHONPATH": str(tree)}
    spec.port = spec.port or _free_port()
    procs = spec.procs or max(1, -(-(spec.nodes - 1) // 2048))
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec)), encoding="utf-8")
    others = list(range(1, spec.nodes))
    chunks = [others[i::procs] for i in range(procs)]
    jobs = [("master", [0])] + [(f"worker{i}", c) for i, c in enumerate(chunks)]
    children = []
    for role, ranks in jobs:
        (workdir / f"{role}.ranks").write_text(json.dumps(ranks), encoding="utf-8")
        cmd = [python, "-m", "harness.cluster.fleet", "--serve", role, str(spec_path),
               str(workdir / f"{role}.ranks"), str(workdir / f"{role}.json")]
        with open(workdir / f"{role}.log", "wb") as log:
            children.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             env=_child_env(env), cwd=tree))
    ready = [workdir / f"{role}.json.ready" for role, _ in jobs]
    limit = time.monotonic() + 600
    while not all(p.exists() for p in ready) and time.monotonic() < limit and \
            all(c.poll() is None for c in children):
        time.sleep(0.1)
    spec.start_at = time.time() + 2.0
    (workdir / "go").write_text(repr(spec.start_at), encoding="utf-8")
    bound = spec.timeouts().hard_bound_s + 60
    for child in children:
        try:
            child.wait(timeout=max(1.0, spec.start_at + bound - time.time()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return summarize(spec, [workdir / f"{role}.json" for role, _ in jobs])


def summarize(spec: FleetSpec, paths: list[Path]) -> JSONObject:
    """The fleet's figures: seconds from the common start, the master's load, descriptors."""
    parts = [json.loads(p.read_text(encoding="utf-8")) for p in paths if p.exists()]
    nodes = {int(r): v for part in parts for r, v in part["nodes"].items()}
    t0 = spec.start_at

    def latest(key: str) -> float | None:
        times = [v[key] for v in nodes.values() if key in v]
        return round(max(times) - t0, 3) if times else None

    master = next((p for p in parts if p["role"] == "master"), None)
    workers = [p for p in parts if p["role"] != "master"]
    decided = [v for v in nodes.values() if "verdict" in v]
    m0 = nodes.get(0, {})
    return {
        "nodes": spec.nodes, "processes": len(parts), "processes_lost": len(paths) - len(parts),
        "join_s": latest("joined"), "last_result_s": latest("published"),
        "master_snapshot_s": round(m0["verdict_at"] - t0, 3) if "verdict_at" in m0 else None,
        "all_decided_s": latest("verdict_at"),
        "decided": len(decided), "expected": spec.nodes - len(spec.absent) - len(spec.dying),
        "verdicts": sorted({v["verdict"] for v in decided}),
        "bad": _few(m0.get("bad")), "num_bad": len(m0.get("bad") or ()),
        "reasons": dict(list((m0.get("reasons") or {}).items())[:10]),
        "stragglers": _few(m0.get("stragglers")),
        "agree": len({json.dumps([v["verdict"], v["bad"], v["stragglers"]]) for v in decided}) == 1,
        "errors": sorted({v["error"][:200] for v in nodes.values() if "error" in v})[:5],
        "hung_threads": sum(p["hung"] for p in parts),
        "late_start_s": round(max((p["late_s"] for p in parts), default=0.0), 2),
        "snapshot_bytes": m0.get("snap_bytes"),
        "node_snapshot_bytes": nodes.get(1, {}).get("snap_bytes"),
        "master": master and {"cpu_s": round(master["cpu_s"], 2),
                              "peak_rss_mb": round(master["end"]["peak_rss_mb"], 1),
                              "peak_fds": master["peak"]["fds"],
                              "peak_sockets": master["peak"]["sockets"]},
        "worker_cpu_s": round(sum(p["cpu_s"] for p in workers), 2),
        "fds_per_node": round(max(((p["peak"]["fds"] - p["base"]["fds"]) / max(1, len(p["nodes"]))
                                   for p in workers), default=0), 2),
    }


def _few(ranks: list[int] | None, limit: int = 10) -> list[int] | None:
    return None if ranks is None else ranks[:limit]


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--serve":
        role, spec_path, ranks_path, out_path = argv[1:5]
        import harness

        print(f"harness from {Path(harness.__file__).parent}", file=sys.stderr, flush=True)
        spec = FleetSpec(**json.loads(Path(spec_path).read_text(encoding="utf-8")))
        ranks = json.loads(Path(ranks_path).read_text(encoding="utf-8"))
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (the process's life)
        _serve(role, spec, ranks, out_path)
        return 0
    import tempfile

    spec = FleetSpec(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        print(json.dumps(run_fleet(spec, Path(tmp)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
