"""The job-shaped groups phase of the cluster step (mixed into `ClusterStep`, after the
cluster all_reduce): inside each tensor- and expert-parallel group that spans nodes
(harness.cluster.groups), an all_reduce at the group's message size, plus an all_to_all (the
MoE dispatch/combine pattern) in each expert group; a group below its threshold is isolated
pairwise among its own nodes, so that a failing link is named with its group. The master plans
each round and gathers it; every wait is bounded by the cluster timeouts, as in isolation.

Threshold: the cluster gate's floor on CPU profiles (gloo: a sanity check); on GPU profiles the
group's busbw against half the median of its kind's groups (as isolation judges pairs), since
one GPU per node over NCCL cannot be held to the 8-GPU floor (harness.cluster.node.gate_floor).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from harness.base.jsontypes import JSONObject
from harness.base.settings import get_str
from harness.cluster.group_wire import GroupResult, GroupsPlan, JobGroups
from harness.cluster.groups import (
    GroupError,
    NodeGroup,
    judge_sweep,
    layout_from_env,
    node_groups,
    pair_rounds,
    rounds,
)
from harness.cluster.node import gate_floor, gate_size
from harness.cluster.timeouts import MAX_GROUP_ROUNDS, ClusterTimeouts
from harness.cluster.wire import SnapshotError
from harness.profiles.model import Profile

__all__ = ["GroupPhases", "plan_groups"]

#: A group is below its kind when under this share of its kind's median busbw (GPU profiles).
RELATIVE = 0.5


class _Measured(NamedTuple):
    """One group's figures as the master gathered them, before they are judged."""

    group: NodeGroup
    busbw_gb_s: float | None
    alltoall_gb_s: float | None
    error: str | None


def plan_groups(profile: Profile, env: Mapping[str, str], num_nodes: int) -> GroupsPlan | None:
    """The master's plan: the layout and the groups to measure; None without a layout; one
    with an `error` when the layout cannot be used (said in the verdict, never ignored)."""
    try:
        layout = layout_from_env(env, get_str("PREFLIGHT_GROUPS", env))
        if layout is None:
            return None
        per_node = int(profile.num_gpus) if profile.has_gpus and profile.num_gpus else 1
        size = gate_size(profile, env)
        groups = node_groups(layout, num_nodes, per_node, {"tp": size, "ep": size})
    except GroupError as exc:
        return GroupsPlan(layout=None, error=str(exc), gpus_per_node=None, groups=())
    return GroupsPlan(layout=layout.describe(), error=None, gpus_per_node=per_node,
                      groups=tuple(groups))


class GroupPhases:
    """The groups phase; `ClusterStep` holds the state (plane, timeouts, device, rank)."""

    plane: Any
    t: ClusterTimeouts
    profile: Profile
    device: Any
    clean: bool

    @property
    def rank(self) -> int:  # ClusterStep's (harness.cluster.collectives)
        raise NotImplementedError

    @property
    def is_master(self) -> bool:
        raise NotImplementedError

    def _groups_phase(self, snap: dict[str, Any]) -> dict[str, Any]:
        """Every node: the planned rounds; the master: the results, into `snap["groups"]`."""
        raw = snap.get("groups_plan")
        try:  # the master's own plan: one it cannot read is judged by the verdict
            plan = None if raw is None else GroupsPlan.from_dict(raw)
        except SnapshotError:
            return snap
        if plan is None or plan.error or plan.layout is None or not plan.groups or \
                (snap.get("bandwidth") or {}).get("missing"):
            return snap  # no layout, a bad one (judged), or nodes already gone
        results: list[_Measured] = []
        planned = rounds(plan.groups)
        for k, rnd in enumerate(planned[:MAX_GROUP_ROUNDS], start=1):
            results.extend(self._group_round(k, rnd))
        for rnd in planned[MAX_GROUP_ROUNDS:]:  # past the phase's bound: said, never passed
            results.extend(_Measured(g, None, None, f"not measured: more than "
                                     f"{MAX_GROUP_ROUNDS} rounds of node-disjoint groups")
                           for g in rnd)
        if not self.is_master:
            self._follow_pair_rounds()
            return self.plane.wait_for("snap/groups", time.monotonic() + self.t.gather_s)
        judged = self._isolate_failing(self._judge_groups(results))
        snap = {**{k: v for k, v in snap.items() if k != "verdict"},  # decided again
                "groups": JobGroups(plan.layout, tuple(judged)).to_json()}
        self.plane.publish("giso/done", 1)
        return self._share("snap/groups", snap)

    def _group_round(self, k: int, rnd: list[NodeGroup]) -> list[_Measured]:
        """One round of node-disjoint groups: each member measures its group; the master
        gathers (members that do not report are evidence)."""
        plane, t = self.plane, self.t
        start = time.monotonic()
        mine: JSONObject = {"busbw_gb_s": None, "alltoall_gb_s": None, "error": None}
        try:
            group = plane.member_groups([g.nodes for g in rnd], t.collective_s)
            own = next((g for g in rnd if self.rank in g.nodes), None)
            if group is not None and own is not None:
                mine = self._bench_group(group, own)
        except Exception as exc:
            self.clean = False
            mine = {"busbw_gb_s": None, "alltoall_gb_s": None,
                    "error": f"rank {self.rank}: group: {' '.join(str(exc).split())[:300]}"}
        plane.publish(f"grp/{k}/{self.rank}", mine, counter=f"count/grp/{k}")
        if not self.is_master:
            return []
        members = sorted({n for g in rnd for n in g.nodes})
        found, _ = plane.gather({r: f"grp/{k}/{r}" for r in members}, f"count/grp/{k}",
                                start + t.bench_s * 2)
        out = []
        for g in rnd:
            got = [found.get(n) for n in g.nodes]
            gone = [n for n, v in zip(g.nodes, got, strict=True) if v is None]
            errors = [v["error"] for v in got if v and v["error"]]
            values = [v["busbw_gb_s"] for v in got if v and v["busbw_gb_s"] is not None]
            a2a = [v["alltoall_gb_s"] for v in got if v and v["alltoall_gb_s"] is not None]
            error = (f"rank {gone[0]} did not report" if gone else errors[0] if errors else None)
            out.append(_Measured(g, min(values) if values and not error else None,
                                 min(a2a) if a2a and not error else None, error))
        return out

    def _bench_group(self, group: Any, own: NodeGroup) -> JSONObject:
        from harness.worker.bandwidth import allreduce_bench

        res = allreduce_bench(group=group, sizes_bytes=[own.size_bytes], warmup=1, iters=3,
                              timeout_s=self.t.collective_s, device=self.device)
        row = res.at_size(own.size_bytes) or res.largest
        if res.errors or not res.data_ok:
            self.clean = False
            return {"busbw_gb_s": None, "alltoall_gb_s": None,
                    "error": "; ".join(res.errors)[:400] or "wrong data"}
        a2a = None
        if own.kind == "ep":
            from harness.cluster.alltoall import alltoall_gb_s

            a2a = alltoall_gb_s(group, own.size_bytes, self.device, self.t.collective_s)
        return {"busbw_gb_s": row.busbw_gb_s if row else None, "alltoall_gb_s": a2a,
                "error": None}

    def _judge_groups(self, results: list[_Measured]) -> list[GroupResult]:
        """Each group's threshold (per kind) and pass, in the order measured."""
        floor = gate_floor(self.profile)
        thresholds: dict[str, float] = {}
        for kind in {r.group.kind for r in results}:
            values = [r.busbw_gb_s for r in results
                      if r.group.kind == kind and r.busbw_gb_s is not None]
            if floor is not None:
                thresholds[kind] = round(floor, 6)
            else:
                thresholds[kind] = round(RELATIVE * statistics.median(values), 6) \
                    if len(values) > 1 else 0.0
        return [GroupResult(r.group, r.busbw_gb_s, r.alltoall_gb_s, r.error,
                            threshold_gb_s=(thr := thresholds[r.group.kind]),
                            passed=r.error is None and r.busbw_gb_s is not None
                            and r.busbw_gb_s >= thr,
                            isolation=None, isolation_not_run=None) for r in results]

    # --- isolation inside a failing group: pairs among its own nodes. A group small enough
    # has every pair measured once (isolate's random first matching can miss the one slow
    # link of a 4-node group: tests/test_cluster_groups.py); a larger one uses isolate's rounds.
    def _pair_round(self, k: int, pairs: list[tuple[int, int]], size: int) -> JSONObject:
        mine: JSONObject = {"busbw_gb_s": None, "error": None}
        try:
            group = self.plane.pair_groups(pairs, self.t.collective_s)
            if group is not None:
                mine = self._bench_pair(group, size)  # type: ignore[attr-defined]
        except Exception as exc:
            self.clean = False
            mine = {"busbw_gb_s": None, "error": f"rank {self.rank}: pair group: "
                                                 f"{' '.join(str(exc).split())[:300]}"}
        self.plane.publish(f"giso/{k}/{self.rank}", mine, counter=f"count/giso/{k}")
        return mine

    def _follow_pair_rounds(self) -> None:
        """A non-master node: run each pair round the master plans until it says done."""
        k = 1
        while True:
            wait = time.monotonic() + self.t.bench_s + self.t.gather_s
            plan = self.plane.wait_for(f"giso/{k}/plan", wait) if not self.plane.has(
                "giso/done") else None
            if plan is None or plan == "done":
                return
            self._pair_round(k, [tuple(p) for p in plan["pairs"]], int(plan["size"]))
            k += 1

    def _isolate_failing(self, results: list[GroupResult]) -> list[GroupResult]:
        """The master: each failing group's pairwise rounds; a bad node or link is named with
        its group (`isolation` in that group's result)."""
        from harness.cluster.isolate import PairResult, isolate

        counter = [0]
        out = []
        for r in results:
            nodes, size = r.group.nodes, r.group.size_bytes
            if r.passed or len(nodes) < 2:
                out.append(r)
                continue

            def measure(pairs: Sequence[tuple[int, int]], size: int = size
                        ) -> list[PairResult]:
                counter[0] += 1
                k = counter[0]
                start = time.monotonic()
                self.plane.publish(f"giso/{k}/plan", {"pairs": [list(p) for p in pairs],
                                                      "size": size})
                self._pair_round(k, list(pairs), size)
                members = sorted({n for p in pairs for n in p})
                found, _ = self.plane.gather({n: f"giso/{k}/{n}" for n in members},
                                             f"count/giso/{k}", start + self.t.bench_s)
                got = []
                for a, b in pairs:
                    ra, rb = found.get(a), found.get(b)
                    if ra is None or rb is None:
                        got.append(PairResult(a, b, None, f"rank {a if ra is None else b} did "
                                                          "not report"))
                        continue
                    err = ra["error"] or rb["error"]
                    vals = [v["busbw_gb_s"] for v in (ra, rb) if v["busbw_gb_s"] is not None]
                    got.append(PairResult(a, b, min(vals) if vals and not err else None, err))
                return got

            sweep = pair_rounds(nodes)
            left = self.t.isolation_rounds - counter[0]  # the phase's bound: shared by groups
            if left <= 0:
                out.append(replace(r, isolation_not_run="the phase's isolation rounds were used "
                                   "by the groups before it"))
            elif len(sweep) <= left:  # every pair of the group, once
                out.append(replace(r, isolation=judge_sweep(
                    nodes, [measure(rnd) for rnd in sweep], r.threshold_gb_s)))
            else:  # a large group: the suspect-against-good rounds (harness.cluster.isolate)
                out.append(replace(r, isolation=isolate(
                    nodes, measure, floor_gb_s=r.threshold_gb_s,
                    relative=RELATIVE if self.profile.has_gpus else 0.0, max_rounds=left)))
        self.plane.publish(f"giso/{counter[0] + 1}/plan", "done")
        return out
