"""`preflight selftest cluster`: the real multi-node path on one machine. N local processes run
`preflight run` as nodes node0..node{N-1} (gloo on 127.0.0.1, a free port), with faults
injected by name through the environment; the driver prints each node's outcome and the
cluster verdict, and passes only when every node agrees and none handed off on a failure."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.base.jsontypes import JSONObject
from harness.cluster.node import FAULTS, PASSING_FAULTS
from harness.cluster.timeouts import ClusterTimeouts

__all__ = ["NodeOutcome", "SelftestConfig", "SelftestResult", "parse_injections", "run_selftest"]

#: Seconds the driver waits, after the last healthy node exits, before killing hung ones.
HUNG_GRACE_S = 5.0
#: On a signal: seconds the nodes get to stop their own checks and write their interrupted
#: reports (~1 s: the driver's SIGTERM reaches their check sessions too) before the driver
#: SIGKILLs them, within harness.run.interrupt.EXIT_WITHIN_S.
SELFTEST_TERM_GRACE_S = 6.0


#: The fault that flips one bit of a node's SDC results (harness.worker.sdc), and the seconds
#: of local budget its worker launch adds.
SDC_FAULT, SDC_EXTRA_S = "sdc", 60.0


class SelftestError(ValueError):
    """Bad selftest arguments; str() is the message."""


def parse_injections(specs: Sequence[str], nodes: int) -> dict[int, str]:
    """`slow=2`, `crash=1,3` -> {rank: fault}; one fault per node."""
    out: dict[int, str] = {}
    for spec in specs:
        fault, sep, ranks = spec.partition("=")
        if not sep or fault not in FAULTS:
            raise SelftestError(f"--inject {spec!r}: expected FAULT=K with FAULT one of "
                                f"{', '.join(FAULTS)}")
        for part in ranks.split(","):
            try:
                rank = int(part)
            except ValueError:
                raise SelftestError(f"--inject {spec!r}: {part!r} is not a node number") from None
            if not 0 <= rank < nodes:
                raise SelftestError(f"--inject {spec!r}: node {rank} not in 0..{nodes - 1}")
            if rank in out:
                raise SelftestError(f"--inject: node {rank} given two faults "
                                    f"({out[rank]}, {fault})")
            out[rank] = fault
    return out


@dataclass(kw_only=True, slots=True)
class SelftestConfig:
    nodes: int
    faults: Mapping[int, str] = field(default_factory=dict)
    work_dir: Path
    keyword: str = "env"
    """Node-local checks to run (-k): cheap ones, so the selftest takes seconds."""
    tier: str = "preflight"
    timeouts: ClusterTimeouts = field(default_factory=lambda: selftest_timeouts())
    """Every wait of every node (short: the nodes are local processes)."""
    slow_s: float = 0.5
    """Sleep before every all_reduce of a `slow` node, s."""
    floor_gb_s: float = 0.01
    """The selftest profile's gloo busbw floor, GB/s."""
    groups: str | None = None
    """The job layout every node is given (PREFLIGHT_GROUPS: harness.cluster.groups)."""

    def __post_init__(self) -> None:
        if not 2 <= self.nodes <= 64:
            raise SelftestError(f"--nodes {self.nodes}: between 2 and 64 local processes")
        if self.groups:
            self.timeouts = dataclasses.replace(self.timeouts, groups=True)
        if SDC_FAULT in self.faults.values():
            # Every node runs the SDC cross-check (PF-GPU-020: a worker launch of gloo ranks
            # per node), so that the corrupted node is compared with the others: the local
            # budget gets the launch's start-up (torch imports on shared cores).
            self.keyword = f"({self.keyword}) or sdc_cross_check"
            self.timeouts = dataclasses.replace(self.timeouts,
                                                local_s=self.timeouts.local_s + SDC_EXTRA_S)


@dataclass(slots=True)
class NodeOutcome:
    rank: int
    host: str
    fault: str
    exit_code: int | None
    """None: never started (absent); negative: killed by that signal."""
    executed: bool
    verdict: str | None
    bad_nodes: list[str]
    failure_text: str | None
    killed: bool = False


@dataclass(slots=True)
class SelftestResult:
    nodes: list[NodeOutcome]
    duration_s: float
    hard_bound_s: float

    @property
    def healthy(self) -> list[NodeOutcome]:
        return [n for n in self.nodes if not n.fault]

    @property
    def verdict(self) -> str:
        """The verdict the healthy nodes agree on, or `disagree`."""
        verdicts = {n.verdict for n in self.healthy}
        return verdicts.pop() if len(verdicts) == 1 else "disagree"

    @property
    def bad_nodes(self) -> list[str]:
        named = {tuple(n.bad_nodes) for n in self.healthy}
        return list(named.pop()) if len(named) == 1 else []

    @property
    def consistent(self) -> bool:
        """Healthy nodes agree on verdict, bad nodes, exit code and failure text; no node
        handed off unless the verdict was pass, and no faulted node at all, except one whose
        fault the run must survive (`flaky`), and a slow link that no job-shaped group crosses
        (it passes, rightly: the job never uses it)."""
        h = self.healthy
        agree = (len({n.verdict for n in h}) == 1 and len({tuple(n.bad_nodes) for n in h}) == 1
                 and len({n.exit_code for n in h}) == 1 and len({n.failure_text for n in h}) == 1)
        handoff_ok = all(n.executed == (self.verdict == "pass") for n in h) and not any(
            n.executed for n in self.nodes
            if n.fault and n.fault not in PASSING_FAULTS
            and not (n.fault == "slowlink" and self.verdict == "pass"))
        return agree and handoff_ok

    @property
    def exit_code(self) -> int:
        return 0 if self.verdict == "pass" and self.consistent else 1

    def to_dict(self, cfg: SelftestConfig) -> JSONObject:
        """`preflight selftest --json`: what the table and the verdict line say, by key."""
        from dataclasses import asdict

        text = next((n.failure_text for n in self.healthy if n.failure_text), None)
        return {"verdict": self.verdict, "exit_code": self.exit_code,
                "consistent": self.consistent, "bad_nodes": self.bad_nodes,
                "tier": cfg.tier, "num_nodes": cfg.nodes,
                "faults": {f"node{r}": f for r, f in sorted(cfg.faults.items())},
                "duration_s": round(self.duration_s, 3), "hard_bound_s": self.hard_bound_s,
                "failure_reason": text.split("\n", 1)[0] if text else None,
                "work_dir": str(cfg.work_dir),
                "nodes": [{k: v for k, v in asdict(n).items() if k != "failure_text"}
                          for n in self.nodes]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _node_env(cfg: SelftestConfig, rank: int, port: int, base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items()
           if not k.startswith(("SLURM_", "PET_", "SM_", "PREFLIGHT_", "NCCL_", "FI_", "OMPI_",
                                "AWS_BATCH_"))
           and k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                         "GROUP_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "NNODES",
                         "GROUP_WORLD_SIZE", "MPI_LOCALRANKID")}
    root = str(Path(__file__).resolve().parents[2])
    env.update({
        "PYTHONPATH": os.pathsep.join(p for p in (root, base.get("PYTHONPATH")) if p),
        "PREFLIGHT_NNODES": str(cfg.nodes), "PREFLIGHT_NODE_RANK": str(rank),
        "PREFLIGHT_MASTER_ADDR": "127.0.0.1", "PREFLIGHT_PORT": str(port),
        "PREFLIGHT_HOSTNAME": f"node{rank}", "PREFLIGHT_HOSTS": f"node[0-{cfg.nodes - 1}]",
        **cfg.timeouts.to_env(),
        "PREFLIGHT_CLUSTER_BW_BYTES": "1M",
        "PREFLIGHT_SELFTEST_SLOW_S": f"{cfg.slow_s:g}",
        "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    fault = cfg.faults.get(rank, "")
    if fault:
        env["PREFLIGHT_SELFTEST_FAULT"] = fault
    if fault == "slowlink":  # the link between every two slowlink nodes is slow
        env["PREFLIGHT_SELFTEST_SLOW_LINK"] = ",".join(
            str(r) for r, f in sorted(cfg.faults.items()) if f == "slowlink")
    if cfg.groups:
        env["PREFLIGHT_GROUPS"] = cfg.groups
    if fault == "fail-check":  # a real node-local failure: PF-ENV-004 rejects this value
        env["NCCL_DEBUG"] = "verbose"
    return env


def selftest_timeouts(scale: float = 1.0) -> ClusterTimeouts:
    """The selftest's waits, s (`--timeout-scale` multiplies them on slow machines); the exit
    handshake gets the gather slack."""
    return ClusterTimeouts(join_s=20.0 * scale, local_s=40.0 * scale, gather_s=8.0 * scale,
                           collective_s=6.0 * scale, isolation_rounds=3, exit_s=8.0 * scale)


def run_selftest(cfg: SelftestConfig, base_env: Mapping[str, str] | None = None,
                 echo: bool = True) -> SelftestResult:
    """Start the nodes, wait (killing hung ones once the others are done), collect outcomes."""
    base_env = dict(os.environ if base_env is None else base_env)
    work = cfg.work_dir
    work.mkdir(parents=True, exist_ok=True)
    profile_file = work / "selftest-profile.toml"
    budget = f"{cfg.timeouts.local_s:g}"
    # A short local budget (it bounds the run), and a floor far below a healthy loopback
    # pair (~0.1-1 GB/s on 2 busy cores) and far above a `slow` one (~0.002 GB/s).
    profile_file.write_text(f'[profiles."local-cpu"]\nrun_budget_s = {{preflight = {budget}, '
                            f"certify = {budget}, diagnose = {budget}}}\n"
                            f"cpu_busbw_gb_s_min = {cfg.floor_gb_s:g}\n")
    port = _free_port()
    bound = cfg.timeouts.hard_bound_s
    if echo:
        print(f"preflight selftest: {cfg.nodes} nodes on 127.0.0.1:{port}, faults "
              f"{dict(cfg.faults) or 'none'}; hard upper bound {bound:g} s; work dir {work}",
              flush=True)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    start = time.monotonic()
    for rank in range(cfg.nodes):
        if cfg.faults.get(rank) == "absent":
            continue
        node_dir = work / f"node{rank}"
        node_dir.mkdir(parents=True, exist_ok=True)
        marker = node_dir / "EXECUTED"
        marker.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
                "--profile-file", str(profile_file), "--tier", cfg.tier, "-k", cfg.keyword,
                "--report-dir", str(work), "--failure-file", str(node_dir / "failure"),
                "--workers", "0", "--",
                sys.executable, "-c", "import pathlib,sys; pathlib.Path(sys.argv[1]).touch()",
                str(marker)]
        with (node_dir / "output.txt").open("wb") as out:
            procs[rank] = subprocess.Popen(  # concurrent nodes: proc.run is one at a time
                argv, env=_node_env(cfg, rank, port, base_env), stdout=out,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    killed = _wait_all(procs, cfg, start + bound + 30.0)
    outcomes = [_outcome(cfg, rank, procs.get(rank), killed) for rank in range(cfg.nodes)]
    result = SelftestResult(outcomes, time.monotonic() - start, bound)
    if echo:
        print(format_result(result), flush=True)
    return result


def _wait_all(procs: Mapping[int, subprocess.Popen[bytes]], cfg: SelftestConfig,
              deadline: float) -> set[int]:
    """Wait for every node; once the fault-free ones are done, give the rest HUNG_GRACE_S."""
    from harness.base.proc import kill_tree

    healthy = [r for r in procs if not cfg.faults.get(r)]
    grace_end: float | None = None
    while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
        if grace_end is None and all(procs[r].poll() is not None for r in healthy):
            grace_end = time.monotonic() + HUNG_GRACE_S
        if grace_end is not None and time.monotonic() > grace_end:
            break
        time.sleep(0.1)
    killed = set()
    for rank, p in procs.items():
        if p.poll() is None:
            kill_tree(p.pid)  # the node and all it started (its check session, tools)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=HUNG_GRACE_S)  # dead or dying: reap it (unkillable: left)
            killed.add(rank)
    return killed


def _outcome(cfg: SelftestConfig, rank: int, p: subprocess.Popen[bytes] | None,
             killed: set[int]) -> NodeOutcome:
    node_dir = cfg.work_dir / f"node{rank}"
    report: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        report = json.loads((node_dir / "report.json").read_text())
    cluster = report.get("cluster") or {}
    failure = node_dir / "failure"
    return NodeOutcome(
        rank=rank, host=f"node{rank}", fault=cfg.faults.get(rank, ""),
        exit_code=None if p is None else p.returncode,
        executed=(node_dir / "EXECUTED").exists(),
        verdict=cluster.get("verdict"),
        bad_nodes=[b["host"] for b in cluster.get("bad_nodes", [])],
        failure_text=failure.read_text() if failure.exists() else None,
        killed=rank in killed,
    )


def format_result(result: SelftestResult) -> str:
    lines = [f"{'node':8} {'fault':11} {'exit':>5}  {'handed off':10} verdict"]
    for n in result.nodes:
        code = ("absent" if n.fault == "absent" else "killed" if n.killed
                else str(n.exit_code))
        lines.append(f"{n.host:8} {n.fault or '-':11} {code:>5}  "
                     f"{'yes' if n.executed else 'no':10} {n.verdict or '-'}"
                     + (f" (bad: {', '.join(n.bad_nodes)})" if n.bad_nodes else ""))
    verdict = result.verdict.upper()
    lines.append(f"cluster verdict: {verdict}"
                 + (f"; bad nodes: {', '.join(result.bad_nodes)}" if result.bad_nodes else "")
                 + f" ({result.duration_s:.1f} s, hard upper bound {result.hard_bound_s:g} s)")
    if not result.consistent:
        lines.append("INCONSISTENT: the fault-free nodes disagree, or a node handed off on a "
                     "failure (see each node's output.txt)")
    text = next((n.failure_text for n in result.healthy if n.failure_text), None)
    if text:
        lines.append("failure reason (the same on every fault-free node):")
        lines.append("  " + text.split("\n", 1)[0][:1024])
    return "\n".join(lines)


def print_interrupted(cfg: SelftestConfig, signum: int) -> None:
    """After a signal (every node stopped): what each node's report says."""
    from harness.run.interrupt import signal_name

    lines = [f"preflight selftest: INTERRUPTED by {signal_name(signum)}; the nodes' reports:"]
    for rank in range(cfg.nodes):
        report: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            report = json.loads((cfg.work_dir / f"node{rank}" / "report.json").read_text())
        lines.append(f"  node{rank}: {report.get('verdict', 'no report')}")
    print("\n".join(lines), flush=True)


def default_work_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="preflight-selftest-"))
