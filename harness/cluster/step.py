"""The cluster step of `preflight run` on a multi-node job: join the control plane, run the
node-local checks (the runner), gather every node's result, run the cluster bandwidth check and,
when it fails (or in certify), the pairwise isolation; every node then decides the same verdict.

Timeline (each phase has its own timeout; their sum is the hard upper bound printed at start):
  join (reach the master) -> local checks (the tier budget) -> gather -> cluster all_reduce
  -> isolation rounds -> exit handshake.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from harness.cluster.node import FAULTS, gate_floor, gate_size, inject_fault, node_facts
from harness.cluster.plane import ControlPlane, PlaneError
from harness.cluster.timeouts import ClusterTimeouts
from harness.cluster.verdict import ClusterVerdict, decide, node_summary
from harness.settings import get_str
from harness.topology import Topology, TopologyError, detect_topology

__all__ = ["FAULTS", "ClusterStep", "ClusterTimeouts"]

#: Exit status of a node whose own watchdog stopped it at the hard upper bound.
EXIT_WATCHDOG = 1


_T0 = time.monotonic()


def _log(msg: str) -> None:
    print(f"preflight cluster [{time.monotonic() - _T0:6.1f} s]: {msg}", flush=True)



class ClusterStep:
    """One node's part in the cluster verdict. `start` before the local checks, `finish`
    after them, `close` before exiting or handing off."""

    def __init__(self, topo: Topology, timeouts: ClusterTimeouts, *, profile: Any, tier: str,
                 env: Mapping[str, str]) -> None:
        self.topo, self.t, self.profile, self.tier, self.env = topo, timeouts, profile, tier, env
        self.t0 = time.monotonic()
        self.plane: ControlPlane | None = None
        self.join_error: str | None = None
        self.fault = get_str("PREFLIGHT_SELFTEST_FAULT", env) or ""
        self.watchdog: threading.Timer | None = None
        self.failure_file: Any = None
        self.clean = True
        self.device: Any = None
        self.published = False
        """Whether this node's node-local result is in the store (`abort` publishes one if not)."""

    @property
    def rank(self) -> int:
        return self.topo.node_rank

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    @classmethod
    def start(cls, *, profile: Any, tier: str, local_budget_s: float,
              env: Mapping[str, str], failure_file: Any = None) -> ClusterStep | None:
        """None on a single-node job; else joins the control plane (errors are kept for the
        verdict, never raised) and arms the watchdog at the hard upper bound."""
        from harness.detect import sagemaker_resource_config

        if (get_str("PREFLIGHT_CLUSTER", env) or "").lower() in ("0", "off", "false", "no"):
            return None  # node-local checks only, on purpose
        topo = detect_topology(env, sagemaker_resource_config(env))
        if topo is None:
            return None
        if topo.local_rank > 0:
            raise TopologyError(
                f"local rank {topo.local_rank} ({topo.source}): run preflight once per node "
                "(before torchrun, or with one task per node), not once per GPU")
        step = cls(topo, ClusterTimeouts.from_env(env, local_budget_s), profile=profile,
                   tier=tier, env=env)
        step.failure_file = failure_file
        _log(f"{topo.num_nodes}-node job ({topo.source}), this is node rank {topo.node_rank}; "
             f"hard upper bound {step.t.describe()}")
        step._arm_watchdog()
        try:
            step.plane = ControlPlane.join(topo, step.t.join_s, env)
            step.plane.publish(f"join/{step.rank}", {"host": _host(env)}, counter="count/join")
        except PlaneError as exc:
            step.join_error = str(exc)
            _log(step.join_error)
        return step

    # --- the watchdog: the hard upper bound holds even if this node hangs ---
    def _arm_watchdog(self) -> None:
        self.watchdog = threading.Timer(self.t.hard_bound_s + 5.0, self._expire)
        self.watchdog.daemon = True
        self.watchdog.start()

    def _expire(self) -> None:
        msg = (f"gpu-preflight FAILED: the cluster step on node rank {self.rank} did not finish "
               f"within its hard upper bound ({self.t.hard_bound_s:g} s); this node stopped "
               "answering (hung in a collective?)\n")
        print(f"preflight cluster: {msg}", file=sys.stderr, flush=True)
        if self.failure_file is not None:
            try:
                self.failure_file.parent.mkdir(parents=True, exist_ok=True)
                self.failure_file.write_text(msg, encoding="utf-8")
            except OSError:
                pass
        os._exit(EXIT_WATCHDOG)

    # --- the phases ---
    def finish(self, report: Any) -> ClusterVerdict:
        """Gather, judge, and record the cluster verdict in `report` (same on every node)."""
        snap = self._run(report)
        verdict = decide(snap)
        ids = {c["id"] for c in verdict.checks}
        report.checks = [c for c in report.checks if c.get("id") not in ids] + verdict.checks
        report.extra["cluster"] = {
            **verdict.to_dict(),
            "num_nodes": self.topo.num_nodes, "node_rank": self.rank, "source": self.topo.source,
            "master": f"{self.topo.master_addr}:{self.topo.port}",
            "hard_bound_s": self.t.hard_bound_s,
            "bandwidth": snap.get("bandwidth"), "isolation": snap.get("isolation"),
            "duration_s": round(time.monotonic() - self.t0, 3),
        }
        report.exit_code = verdict.exit_code
        self.clean = verdict.passed
        _log(f"verdict {verdict.verdict.upper()}"
             + (": bad nodes " + ", ".join(f"{b['host']} (rank {b['rank']})"
                                           for b in verdict.bad_nodes)
                if verdict.bad_nodes else ""))
        return verdict

    def _base(self) -> dict[str, Any]:
        return {"num_nodes": self.topo.num_nodes, "profile": self.profile.name,
                "tier": self.tier,
                "hosts": {str(r): h for r, h in enumerate(self.topo.hosts)}}

    def _lost_master(self, phase: str, why: str) -> dict[str, Any]:
        """What a node decides alone when the master is gone: the master is the bad node."""
        host = self.topo.hosts[0] if self.topo.hosts else self.topo.master_addr
        return {**self._base(), "missing": {"0": {
            "host": host,
            "reason": f"the control-plane master stopped answering during {phase} ({why})"}}}

    def _run(self, report: Any) -> dict[str, Any]:
        plane = self.plane
        if plane is None:
            return self._lost_master("join", self.join_error or "not joined")
        summary = node_summary(report, rank=self.rank, facts=node_facts(self.env),
                               env=self.env)
        _log(f"local verdict {report.verdict}; publishing it and gathering every node's")
        local_deadline = self.t0 + self.t.join_s + self.t.local_s + self.t.gather_s
        try:
            self.published = True
            plane.publish(f"result/{self.rank}", summary, counter="count/result")
            if self.is_master:
                snap = self._gather_local(local_deadline)
                plane.publish("snap/local", snap)
            else:
                snap = plane.wait_for("snap/local", local_deadline + self.t.gather_s)
        except PlaneError as exc:
            return self._lost_master("the gather of node-local results", str(exc))
        if not decide(snap).passed:
            self._done(snap)
            return snap
        snap = self._collectives(snap)
        self._done(snap)
        return snap

    def _gather_local(self, deadline: float) -> dict[str, Any]:
        assert self.plane is not None
        n = self.topo.num_nodes
        plane, join_end = self.plane, self.t0 + self.t.join_s

        def enough(results: int) -> bool:
            """Past the join timeout, nodes that never joined are not waited for."""
            return time.monotonic() > join_end and results >= plane.count("count/join")

        found, missing = plane.gather({r: f"result/{r}" for r in range(n)}, "count/result",
                                      deadline, enough)
        joined, _ = self.plane.gather({r: f"join/{r}" for r in missing}, "count/none", 0)
        waited = round(deadline - self.t0)
        snap = {**self._base(), "nodes": {str(r): s for r, s in found.items()}, "missing": {}}
        for r in missing:
            host = joined.get(r, {}).get("host") or self.topo.host_of(r)
            reason = (f"joined but reported no node-local result within {waited} s (hung or "
                      "died during its checks)" if r in joined
                      else f"never joined the control plane within the {self.t.join_s:g} s join "
                      "timeout (not started, crashed at start, or cannot reach the master)")
            snap["missing"][str(r)] = {"host": host, "reason": reason}
        return snap

    def _collectives(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Cluster all_reduce, then (if it fails, or in certify) isolation; master decides."""
        assert self.plane is not None
        plane, t = self.plane, self.t
        phase_start = time.monotonic()
        size = gate_size(self.profile, self.env)
        _log(f"cluster all_reduce of {size} bytes over {self.topo.num_nodes} nodes")
        result = self._bench_all(size)
        _log(f"cluster all_reduce: busbw {result['busbw_gb_s']} GB/s, errors "
             f"{len(result['errors'])}")
        try:
            plane.publish(f"bw/{self.rank}", result, counter="count/bw")
            if self.is_master:
                bw = self._gather_bw(phase_start + t.bench_s, size)
                snap = {**snap, "bandwidth": bw}
                snap["isolation_skipped"] = self._isolation_skip(snap)
                plane.publish("snap/bw", snap)
            else:
                snap = plane.wait_for("snap/bw", phase_start + t.bench_s + t.gather_s)
        except PlaneError as exc:
            return self._lost_master("the cluster all_reduce", str(exc))
        if snap.get("isolation_skipped"):
            return snap
        return self._isolation(snap)

    def _isolation_skip(self, snap: Mapping[str, Any]) -> str:
        """Why isolation does not run; '' when it runs (on every node: pairs need both)."""
        bw = snap["bandwidth"]
        if bw.get("missing"):
            return "nodes stopped answering in the cluster all_reduce (named above)"
        bw_failed = any(c["id"] == "PF-CLUSTER-004" and c["outcome"] == "fail"
                        for c in decide(snap).checks)
        if not bw_failed and self.tier == "preflight":
            return "cluster bandwidth passed (isolation runs on failure, or always in certify)"
        return ""

    def _bench_all(self, size: int) -> dict[str, Any]:
        """This node's part of the cluster-wide all_reduce (with the selftest's faults)."""
        from harness.probes.torch_bench import allreduce_bench

        assert self.plane is not None
        try:
            self.device = self.plane.init_collectives(self.t.collective_s,
                                                      gpus=self.profile.has_gpus)
        except Exception as exc:
            self.clean = False
            return {"busbw_gb_s": None, "data_ok": False,
                    "errors": [f"rank {self.rank}: process group init: {_short(exc)}"]}
        inject_fault(self.fault)
        try:
            res = allreduce_bench(sizes_bytes=[size], warmup=1, iters=3,
                                  timeout_s=self.t.collective_s, device=self.device)
        except Exception as exc:  # the bench turns collective errors into results; not these
            self.clean = False
            return {"busbw_gb_s": None, "data_ok": False,
                    "errors": [f"rank {self.rank}: all_reduce bench: {_short(exc)}"]}
        row = res.at_size(size) or res.largest
        if res.errors:
            self.clean = False
        return {"busbw_gb_s": row.busbw_gb_s if row else None, "data_ok": res.data_ok,
                "errors": list(res.errors), "nranks": res.nranks}

    def _gather_bw(self, deadline: float, size: int) -> dict[str, Any]:
        assert self.plane is not None
        n = self.topo.num_nodes
        plane, broken_at, scanned = self.plane, [0.0], [0]

        def enough(got: int) -> bool:
            """Once a published result shows the collective broke, a node still silent gets
            `gather_s` more (alive, it would have hit its own collective timeout too)."""
            if not broken_at[0] and got > scanned[0]:
                scanned[0] = got
                for r in range(n):
                    if plane.has(f"bw/{r}") and plane.wait_for(f"bw/{r}", 0)["errors"]:
                        broken_at[0] = time.monotonic()
                        break
            return bool(broken_at[0]) and time.monotonic() > broken_at[0] + self.t.gather_s

        found, missing = plane.gather({r: f"bw/{r}" for r in range(n)}, "count/bw", deadline,
                                      enough)
        values = [v["busbw_gb_s"] for v in found.values() if v["busbw_gb_s"] is not None]
        errors = [e for v in found.values() for e in v["errors"]]
        return {
            "size_bytes": size, "nranks": n, "floor_gb_s": gate_floor(self.profile),
            "busbw_gb_s": min(values) if values and len(values) == n else None,
            "data_ok": all(v["data_ok"] for v in found.values()),
            "per_rank": {str(r): v["busbw_gb_s"] for r, v in sorted(found.items())},
            "errors": errors[:8],
            "missing": {str(r): "stopped answering during the cluster all_reduce (hung or "
                                "died): no result within the collective timeout"
                        for r in missing},
        }

    def _isolation(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Pairwise rounds; the master plans each round and publishes the outcome."""
        from harness.cluster.isolate import PairResult, isolate

        assert self.plane is not None
        plane, t = self.plane, self.t
        size = snap["bandwidth"]["size_bytes"]
        round_no = [0]

        def run_round(pairs: list[tuple[int, int]], k: int) -> dict[str, Any]:
            mine: dict[str, Any] = {"busbw_gb_s": None, "error": None}
            try:
                group = plane.pair_groups(pairs, t.collective_s)
                if group is not None:
                    mine = self._bench_pair(group, size)
            except Exception as exc:  # the peer never connected (dead or hung): evidence
                self.clean = False
                mine = {"busbw_gb_s": None, "error": f"rank {self.rank}: pair group: "
                                                     f"{_short(exc)}"}
            plane.publish(f"iso/{k}/{self.rank}", mine, counter=f"count/iso/{k}")
            return mine

        if self.is_master:
            def measure(pairs: Any) -> list[PairResult]:
                round_no[0] += 1
                k = round_no[0]
                start = time.monotonic()
                plane.publish(f"iso/{k}/plan", [list(p) for p in pairs])
                run_round(list(pairs), k)
                members = sorted({n for p in pairs for n in p})
                found, _ = plane.gather({r: f"iso/{k}/{r}" for r in members},
                                        f"count/iso/{k}", start + t.bench_s)
                out = []
                for a, b in pairs:
                    ra, rb = found.get(a), found.get(b)
                    gone = [r for r, v in ((a, ra), (b, rb)) if v is None]
                    if gone:
                        out.append(PairResult(a, b, None, f"rank {gone[0]} did not report"))
                        continue
                    err = ra["error"] or rb["error"]
                    vals = [v["busbw_gb_s"] for v in (ra, rb) if v["busbw_gb_s"] is not None]
                    out.append(PairResult(a, b, min(vals) if vals and not err else None, err))
                return out

            try:
                # CPU profiles: gloo over TCP on shared cores is too noisy for a relative
                # rule; the sanity floor alone judges pairs there.
                result = isolate(list(range(self.topo.num_nodes)), measure,
                                 floor_gb_s=gate_floor(self.profile) or 0.0,
                                 relative=0.5 if self.profile.has_gpus else 0.0,
                                 max_rounds=t.isolation_rounds)
                snap = {**snap, "isolation": result.to_dict()}
                plane.publish(f"iso/{round_no[0] + 1}/plan", "done")
                plane.publish("snap/final", snap)
            except PlaneError as exc:
                return self._lost_master("isolation", str(exc))
            return snap
        try:
            k = 1
            while True:
                plan = plane.wait_for(f"iso/{k}/plan", time.monotonic() + t.bench_s + t.gather_s)
                if plan == "done":
                    break
                run_round([tuple(p) for p in plan], k)
                k += 1
            return plane.wait_for("snap/final", time.monotonic() + t.gather_s)
        except PlaneError as exc:
            return self._lost_master("isolation", str(exc))

    def _bench_pair(self, group: Any, size: int) -> dict[str, Any]:
        from harness.probes.torch_bench import allreduce_bench

        res = allreduce_bench(group=group, sizes_bytes=[size], warmup=1, iters=3,
                              timeout_s=self.t.collective_s, device=self.device)
        row = res.at_size(size) or res.largest
        if res.errors:
            self.clean = False
            return {"busbw_gb_s": None, "error": "; ".join(res.errors)[:400]}
        try:
            import torch.distributed as dist

            dist.destroy_process_group(group)
        except Exception:
            pass
        return {"busbw_gb_s": row.busbw_gb_s if row else None,
                "error": None if res.data_ok else "wrong data"}

    def _done(self, snap: Mapping[str, Any]) -> None:
        """Exit handshake: the master serves the store until every reporting node has read
        the verdict (bounded by exit_s)."""
        if self.plane is None:
            return
        try:
            self.plane.publish(f"done/{self.rank}", 1, counter="count/done")
            if self.is_master:
                bw_missing = {int(r) for r in (snap.get("bandwidth") or {}).get("missing", {})}
                alive = [int(r) for r in snap.get("nodes", {}) if int(r) not in bw_missing]
                self.plane.gather({r: f"done/{r}" for r in alive}, "count/done",
                                  time.monotonic() + self.t.exit_s)
        except PlaneError:
            pass

    def abort(self, report: Any) -> None:
        """A signal stopped this node before it published its node-local result: publish the
        interrupted one, so that the master names this node at once instead of waiting for it
        until the gather deadline (best effort: the signal cleanup bounds it). A node stopped
        later is seen by the peers as gone from the collectives (named, within their timeouts);
        a stopped master takes the store with it, which every peer names at once."""
        if self.plane is None or self.published:
            return
        self.published = True
        try:
            self.plane.publish(f"result/{self.rank}",
                               node_summary(report, rank=self.rank, facts={}, env=self.env),
                               counter="count/result")
        except PlaneError as exc:
            _log(f"could not tell the peers that this node was interrupted: {exc}")

    def close(self) -> None:
        """Before exit or hand-off: stop the watchdog, tear down, restore the environment."""
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.plane is not None:
            self.plane.close(self.clean)


def _host(env: Mapping[str, str]) -> str:
    from harness.detect import hostname

    return hostname(env)


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
