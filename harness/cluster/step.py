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
from typing import TYPE_CHECKING, Any

from harness.base.jsontypes import JSONObject
from harness.base.settings import get_str
from harness.cluster.collectives import CollectivePhases, log
from harness.cluster.job import job_topology
from harness.cluster.node import node_facts
from harness.cluster.plane import ControlPlane, PlaneError
from harness.cluster.snapshot import (
    left_out,
    node_summary,
    not_measured,
)
from harness.cluster.timeouts import ClusterTimeouts
from harness.cluster.verdict import CLUSTER_IDS, ClusterVerdict, decide, verdict_of
from harness.cluster.wire import NodeSummary
from harness.results import results as typed_results
from harness.run.confirm import add_isolation
from harness.topology.model import Topology, TopologyError

if TYPE_CHECKING:
    from pathlib import Path

    from harness.profiles.model import Profile
    from harness.report.model import Report

__all__ = ["ClusterStep"]

#: Exit status of a node whose own watchdog stopped it at the hard upper bound.
EXIT_WATCHDOG = 1


class ClusterStep(CollectivePhases):
    """One node's part in the cluster verdict. `start` before the local checks, `finish`
    after them, `close` before exiting or handing off."""

    def __init__(self, topo: Topology, timeouts: ClusterTimeouts, *, profile: Profile, tier: str,
                 env: Mapping[str, str]) -> None:
        self.topo, self.t, self.profile, self.tier, self.env = topo, timeouts, profile, tier, env
        self.t0 = time.monotonic()
        self.plane: ControlPlane | None = None
        self.join_error: str | None = None
        self.fault = get_str("PREFLIGHT_SELFTEST_FAULT", env) or ""
        self.watchdog: threading.Timer | None = None
        self.failure_file: Path | None = None
        self.clean = True
        self.device: Any = None
        self.published = False
        self.master_lost: dict[str, str] | None = None
        """Where and how this node lost the master (its own view; not in the verdict)."""
        """Whether this node's node-local result is in the store (`abort` publishes one if not)."""
        self.members = list(range(topo.num_nodes))
        """The nodes the collectives run over: all, or those that passed their own checks."""

    @classmethod
    def start(cls, *, profile: Profile, tier: str, local_budget_s: float,
              env: Mapping[str, str], failure_file: Path | None = None) -> ClusterStep | None:
        """None on a single-node job; else joins the control plane (errors are kept for the
        verdict, never raised) and arms the watchdog at the hard upper bound."""
        topo = job_topology(env)
        if topo is None:
            return None
        if topo.local_rank > 0:
            raise TopologyError(
                f"local rank {topo.local_rank} ({topo.source}): run preflight once per node "
                "(before torchrun, or with one task per node), not once per GPU")
        step = cls(topo, ClusterTimeouts.from_env(env, local_budget_s), profile=profile,
                   tier=tier, env=env)
        step.failure_file = failure_file
        log(f"{topo.num_nodes}-node job ({topo.source}), this is node rank {topo.node_rank}; "
             f"hard upper bound {step.t.describe()}")
        step._arm_watchdog()
        try:
            step.plane = ControlPlane.join(topo, step.t.join_s, env)
            step.plane.publish(f"join/{step.rank}", {"host": _host(env)}, counter="count/join")
        except PlaneError as exc:
            step.join_error = str(exc)
            log(step.join_error)
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
    def finish(self, report: Report) -> ClusterVerdict:
        """Gather, judge, and record the cluster verdict in `report` (same on every node)."""
        snap = self._run(report)
        verdict = verdict_of(snap)
        ids = {c["id"] for c in verdict.checks}
        report.checks = [c for c in report.checks if c.id not in ids] + typed_results(
            verdict.checks)
        report.extra["cluster"] = {
            **verdict.to_dict(),
            "num_nodes": self.topo.num_nodes, "node_rank": self.rank, "source": self.topo.source,
            "master": f"{self.topo.master_addr}:{self.topo.port}",
            "hard_bound_s": self.t.hard_bound_s,
            "bandwidth": snap.get("bandwidth"), "isolation": snap.get("isolation"),
            "not_measured": snap.get("not_measured") or {},
            "left_out": snap.get("left_out") or {},
            "duration_s": round(time.monotonic() - self.t0, 3),
        }
        report.extra["confirmation"] = add_isolation(report.extra.get("confirmation"),
                                                     snap.get("isolation"))
        if verdict.usage_error and not report.usage_error:  # nothing judged on any node
            report.usage_error = verdict.usage_error
            report.harness_errors.insert(0, verdict.usage_error)
        if self.master_lost is not None:
            report.extra["cluster"]["master_lost"] = self.master_lost
        report.exit_code = verdict.exit_code
        self.clean = verdict.passed
        log(f"verdict {verdict.verdict.upper()}"
             + (": bad nodes " + ", ".join(f"{b['host']} (rank {b['rank']})"
                                           for b in verdict.bad_nodes)
                if verdict.bad_nodes else "")
            + ("; stragglers " + ", ".join(f"{s['host']} (rank {s['rank']})"
                                           for s in verdict.stragglers)
               if verdict.stragglers else ""))
        return verdict

    def _run(self, report: Any) -> dict[str, Any]:
        plane = self.plane
        if plane is None:
            return self._lost_master("join", self.join_error or "not joined")
        summary = node_summary(report, rank=self.rank, facts=node_facts(self.env),
                               env=self.env, cluster_ids=CLUSTER_IDS)
        log(f"local verdict {report.verdict}; publishing it and gathering every node's")
        return self.exchange(summary)

    def exchange(self, summary: NodeSummary) -> JSONObject:
        """Everything after the node-local checks: publish this node's summary, gather every
        node's (master) or receive the snapshot, the collective phases when it passes, and the
        exit handshake. The fleet simulator (harness.cluster.fleet) runs this very code."""
        plane = self.plane
        assert plane is not None
        local_deadline = self.t0 + self.t.join_s + self.t.local_s + self.t.gather_s
        try:
            self.published = True
            plane.publish(f"result/{self.rank}", summary.to_json(), counter="count/result")
            if self.is_master:
                snap = self._share("snap/local", self._plan(self._gather_local(local_deadline)))
            else:
                snap = plane.wait_for("snap/local", local_deadline + self.t.gather_s)
        except PlaneError as exc:
            return self._lost_master("the gather of node-local results", str(exc))
        left = {int(r) for r in snap.get("left_out") or {}}
        if snap.get("not_measured"):  # fast fail: the collectives are not run, and every
            log("; ".join(f"{k} not measured: {v}"  # output says so, and why
                          for k, v in snap["not_measured"].items()))
            self._done(snap)
            return snap
        if left:  # certify / diagnose: the nodes that passed their own checks are still
            log(f"cluster bandwidth and isolation over the {self.topo.num_nodes - len(left)} "
                "nodes that passed their own checks; left out: " + "; ".join(
                    f"{self.topo.hosts[r] if r < len(self.topo.hosts) else r} ({w})"
                    for r, w in sorted((int(r), w) for r, w in snap["left_out"].items())))
        snap = self._collectives(snap, [r for r in range(self.topo.num_nodes) if r not in left])
        self._done(snap)
        return snap

    def _plan(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Master, after the node-local gather: which nodes the collectives measure. A node
        that failed its own checks (or did not report) is left out (`left_out`: rank -> why);
        in preflight, or with fewer than 2 nodes left, the collectives are not run at all
        (`not_measured`: step -> why, as every output says it). Every node reads the plan from
        the snapshot it receives (the nodes' copy has no summaries to decide it from)."""
        local = decide(snap)
        if local.passed:
            return snap
        why = left_out(snap, local.bad_nodes)
        members = [r for r in sorted(int(k) for k in snap.get("nodes", {})) if r not in why]
        if self.tier == "preflight" or len(members) < 2:
            return {**snap, "not_measured": not_measured(snap, why, self.tier, members)}
        out = {str(r): w for r, w in why.items()}
        out.update({str(r): "did not report" for r in range(self.topo.num_nodes)
                    if r not in members and str(r) not in out})
        return {**snap, "left_out": out}

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

    def abort(self, report: Report) -> None:
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
                               node_summary(report, rank=self.rank, facts={},
                                            env=self.env).to_json(),
                               counter="count/result")
        except PlaneError as exc:
            log(f"could not tell the peers that this node was interrupted: {exc}")

    def close(self) -> None:
        """Before exit or hand-off: stop the watchdog, tear down, restore the environment."""
        if self.watchdog is not None:
            self.watchdog.cancel()
        if self.plane is not None:
            self.plane.close(self.clean)


def _host(env: Mapping[str, str]) -> str:
    from harness.detect.instance import hostname

    return hostname(env)
