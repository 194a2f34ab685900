"""The collective phases of the cluster step (mixed into `ClusterStep`): the cluster-wide
all_reduce every node takes part in, gathered by the master, then, when it fails (or always in
certify), the pairwise isolation rounds the master plans. Every phase is bounded by its timeout;
a node or master that stops answering becomes evidence in the snapshot, never a hang."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from harness.base.jsontypes import JSONObject
from harness.base.settings import get_float
from harness.cluster.group_phase import GroupPhases, plan_groups
from harness.cluster.node import flaky_round, gate_floor, gate_size, inject_fault
from harness.cluster.plane import ControlPlane, PlaneError
from harness.cluster.timeouts import ClusterTimeouts
from harness.cluster.verdict import decide, for_nodes
from harness.cluster.wire import ClusterBandwidth, SnapshotHead
from harness.judges.cluster import StragglerLimits
from harness.profiles.model import Profile
from harness.topology.model import Topology

__all__ = ["CollectivePhases", "log", "short"]

_T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"preflight cluster [{time.monotonic() - _T0:6.1f} s]: {msg}", flush=True)


def short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CollectivePhases(GroupPhases):
    """The snapshot's collective part; `ClusterStep` holds the state these methods use."""

    topo: Topology
    t: ClusterTimeouts
    profile: Profile
    tier: str
    env: Mapping[str, str]
    plane: ControlPlane | None
    fault: str
    device: Any
    clean: bool
    master_lost: dict[str, str] | None
    members: list[int]
    """The nodes the collectives run over (ranks of the job, sorted)."""

    @property
    def rank(self) -> int:
        return self.topo.node_rank

    @property
    def is_master(self) -> bool:
        return self.rank == 0

    def _base(self) -> JSONObject:
        """The snapshot's head (harness.cluster.wire.SnapshotHead), as it travels."""
        return SnapshotHead(
            num_nodes=self.topo.num_nodes, profile=self.profile.name, tier=self.tier,
            straggler_limits=StragglerLimits.of(self.profile),
            drain_cap=get_float("PREFLIGHT_DRAIN_CAP", self.env),
            hosts=dict(enumerate(self.topo.hosts))).to_json()

    def _lost_master(self, phase: str, why: str) -> dict[str, Any]:
        """What a node decides alone when the master is gone: the master is the bad node, for
        one reason on every node. Where and how this node noticed (the phase it was in, its
        socket's error) differs from node to node, so it stays out of the verdict: it is
        logged and kept in this node's report (`cluster.master_lost`)."""
        host = self.topo.hosts[0] if self.topo.hosts else self.topo.master_addr
        self.master_lost = {"phase": phase, "error": why}
        log(f"lost the control-plane master during {phase}: {why}")
        return {**self._base(), "missing": {"0": {"host": host, "reason": (
            f"the control-plane master {host} (node rank 0, {self.topo.master_addr}:"
            f"{self.topo.port}) was lost: it crashed, was stopped, hangs or cannot be reached, "
            "and no node can take the cluster verdict without it")}}}

    def _share(self, key: str, snap: dict[str, Any]) -> dict[str, Any]:
        """Master: publish the snapshot for the nodes under `key` (its verdict, without each
        node's summary: `for_nodes`) and keep the full one, with that same verdict."""
        assert self.plane is not None
        shared = for_nodes(snap)
        self.plane.publish(key, shared)
        return {**snap, "verdict": shared["verdict"]}

    def _collectives(self, snap: dict[str, Any], members: list[int]) -> dict[str, Any]:
        """Cluster all_reduce over `members` (the nodes that passed their own checks), then
        (if it fails, or in certify) isolation among them; the master decides. A node left
        out measures nothing and waits for the master's final snapshot."""
        assert self.plane is not None
        plane, t = self.plane, self.t
        phase_start = time.monotonic()
        size = gate_size(self.profile, self.env)
        self.members = members
        if self.rank in members:
            log(f"cluster all_reduce of {size} bytes over {len(members)} nodes")
            result = self._bench_all(size)
            log(f"cluster all_reduce: busbw {result['busbw_gb_s']} GB/s, errors "
                 f"{len(result['errors'])}")
        try:
            if self.rank in members:
                plane.publish(f"bw/{self.rank}", result, counter="count/bw")
                if result["errors"]:
                    plane.bump("count/bw_broken")
            if self.is_master:
                bw = self._gather_bw(phase_start + t.bench_s, size)
                snap = _without_verdict(snap) | {"bandwidth": bw}
                snap["isolation_skipped"] = self._isolation_skip(snap)
                plan = plan_groups(self.profile, self.env, self.topo.num_nodes)
                snap["groups_plan"] = None if plan is None else plan.to_json()
                if snap["isolation_skipped"]:
                    snap["not_measured"] = {"pairwise isolation": snap["isolation_skipped"]}
                if snap["groups_plan"] and len(members) < self.topo.num_nodes:
                    snap["not_measured"] = {**snap.get("not_measured", {}), "job-shaped groups": (
                        "nodes were left out of the collectives (they failed their own checks): "
                        "a group with a node missing cannot be measured")}
                snap = self._share("snap/bw", snap)
            elif self.rank not in members:
                log("left out of the collectives (this node did not pass its own checks); "
                    "waiting for the verdict")
                return plane.wait_for("snap/final", phase_start + 2 * t.bench_s + t.isolation_s
                                      + 2 * t.gather_s)
            else:
                snap = plane.wait_for("snap/bw", phase_start + t.bench_s + t.gather_s)
        except PlaneError as exc:
            return self._lost_master("the cluster all_reduce", str(exc))
        if snap.get("isolation_skipped"):
            if self.is_master:
                snap = self._share("snap/final", _without_verdict(snap))
        else:
            snap = self._isolation(snap)
        if self.master_lost is not None or len(members) < self.topo.num_nodes:
            return snap  # left-out nodes already have snap/final: no phase after it
        try:
            return self._groups_phase(snap)  # job-shaped groups (harness.cluster.group_phase)
        except PlaneError as exc:
            return self._lost_master("the job-shaped groups", str(exc))

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
        from harness.worker.bandwidth import allreduce_bench

        assert self.plane is not None
        try:
            self.device = self.plane.init_collectives(self.t.collective_s,
                                                      gpus=self.profile.has_gpus,
                                                      members=self.members)
        except Exception as exc:
            self.clean = False
            return {"busbw_gb_s": None, "data_ok": False,
                    "errors": [f"rank {self.rank}: process group init: {short(exc)}"]}
        inject_fault(self.fault, self.rank)
        try:
            res = allreduce_bench(sizes_bytes=[size], warmup=1, iters=3,
                                  timeout_s=self.t.collective_s, device=self.device)
        except Exception as exc:  # the bench turns collective errors into results; not these
            self.clean = False
            return {"busbw_gb_s": None, "data_ok": False,
                    "errors": [f"rank {self.rank}: all_reduce bench: {short(exc)}"]}
        row = res.at_size(size) or res.largest
        if res.errors:
            self.clean = False
        return {"busbw_gb_s": row.busbw_gb_s if row else None, "data_ok": res.data_ok,
                "errors": list(res.errors), "nranks": res.nranks}

    def _gather_bw(self, deadline: float, size: int) -> JSONObject:
        """Master: the members' results as the snapshot's `bandwidth` (its wire form)."""
        assert self.plane is not None
        members = self.members
        plane, broken_at = self.plane, [0.0]

        def enough(got: int) -> bool:
            """Once a published result shows the collective broke (a node with errors bumps
            `count/bw_broken`: one read, not N), a node still silent gets `gather_s` more
            (alive, it would have hit its own collective timeout too)."""
            if not broken_at[0] and plane.count("count/bw_broken"):
                broken_at[0] = time.monotonic()
            return bool(broken_at[0]) and time.monotonic() > broken_at[0] + self.t.gather_s

        found, missing = plane.gather({r: f"bw/{r}" for r in members}, "count/bw", deadline,
                                      enough)
        values = [v["busbw_gb_s"] for v in found.values() if v["busbw_gb_s"] is not None]
        errors = [e for v in found.values() for e in v["errors"]]
        return ClusterBandwidth(
            size_bytes=size, nranks=len(members), ranks=tuple(members),
            floor_gb_s=gate_floor(self.profile),
            busbw_gb_s=min(values) if values and len(values) == len(members) else None,
            data_ok=all(v["data_ok"] for v in found.values()),
            per_rank={str(r): v["busbw_gb_s"] for r, v in sorted(found.items())},
            errors=tuple(errors[:8]),
            missing={str(r): "stopped answering during the cluster all_reduce (hung or died): "
                             "no result within the collective timeout" for r in missing},
        ).to_json()

    def _isolation(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Pairwise rounds; the master plans each round and publishes the outcome."""
        from harness.cluster.isolate import PairResult, confirmations, isolate

        assert self.plane is not None
        plane, t = self.plane, self.t
        size = snap["bandwidth"]["size_bytes"]
        round_no = [0]

        def run_round(pairs: list[tuple[int, int]], k: int) -> dict[str, Any]:
            mine: dict[str, Any] = {"busbw_gb_s": None, "error": None}
            try:
                group = plane.pair_groups(pairs, t.collective_s)
                if group is not None:
                    with flaky_round(self.fault, k):  # the selftest's `flaky` fault only
                        mine = self._bench_pair(group, size)
            except Exception as exc:  # the peer never connected (dead or hung): evidence
                self.clean = False
                mine = {"busbw_gb_s": None, "error": f"rank {self.rank}: pair group: "
                                                     f"{short(exc)}"}
            # Only a round's members report: the master counts its members' answers, and a
            # bystander's (a round that re-tests one link, or suspects against a few good
            # nodes) would end that count before a member's real answer came.
            if any(self.rank in p for p in pairs):
                plane.publish(f"iso/{k}/{self.rank}", mine, counter=f"count/iso/{k}")
            return mine

        if self.is_master:
            def measure(pairs: Sequence[tuple[int, int]]) -> list[PairResult]:
                round_no[0] += 1
                k = round_no[0]
                start = time.monotonic()
                plane.publish(f"iso/{k}/plan", [list(p) for p in pairs])
                if self.rank in self.members:  # a master left out plans, measures nothing
                    run_round(list(pairs), k)
                in_round = sorted({n for p in pairs for n in p})
                found, _ = plane.gather({r: f"iso/{k}/{r}" for r in in_round},
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
                result = isolate(list(self.members), measure,
                                 floor_gb_s=gate_floor(self.profile) or 0.0,
                                 relative=0.5 if self.profile.has_gpus else 0.0,
                                 max_rounds=t.isolation_rounds,
                                 confirmations=confirmations(self.profile))
                snap = _without_verdict(snap) | {"isolation": result.to_json()}
                plane.publish(f"iso/{round_no[0] + 1}/plan", "done")
                snap = self._share("snap/final", snap)
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
        from harness.worker.bandwidth import allreduce_bench

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


def _without_verdict(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot about to change: its verdict no longer holds (the master decides again)."""
    return {k: v for k, v in snap.items() if k != "verdict"}
