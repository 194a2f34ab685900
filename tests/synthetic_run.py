"""Synthetic multi-node run directories in the shape a real `preflight run` on N nodes leaves:
each node's report.json with its node-local checks (a certify busbw sweep as typed
measurements), then the cluster verdict of harness.cluster (decide() over the gathered
snapshot, pairwise isolation by isolate() on a simulated cluster) added to every report, the
way harness.cluster.step does. Used by the HTML report tests and bench/bench_html_report.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.cluster.isolate import isolate, simulate_measure
from harness.cluster.snapshot import FACT_KEYS, left_out, node_summary, not_measured
from harness.cluster.verdict import decide
from harness.judges.cluster import DEFAULT_LIMITS
from harness.report.model import Report
from harness.results import CheckResult, Measurement, results

GIB, MIB = 2**30, 2**20
#: The certify sweep of PF-BW-001 (1 MiB to 16 GiB by 2x, as nccl-tests -b 1M -e 16G -f 2).
SWEEP = tuple(MIB * 2**k for k in range(15))
GATE = 16 * GIB
FLOOR_GB_S = 360.0
PEAK_GB_S = 480.0
PROFILE = "p5.48xlarge"


def busbw(size: int, peak: float) -> float:
    """A plausible all_reduce curve: latency-bound at small sizes, flat at `peak`."""
    return round(peak * size / (size + 256 * MIB), 1)


def _check(cid: str, outcome: str = "pass", message: str = "", title: str = "",
           measurements: tuple[Measurement, ...] = (), remedy: str = "") -> dict[str, Any]:
    return CheckResult(id=cid, outcome=outcome, nodeid=f"checks/test_x.py::{cid}",
                       title=title or cid, tier="certify", message=message,
                       measurements=measurements, remedy=remedy).to_dict()


def node_checks(host: str, peak: float, fault: str | None = None) -> list[dict[str, Any]]:
    """A node's own checks; `fault` "xid" makes PF-GPU-003 fail (GPU 5 fell off the bus)."""
    sweep = tuple(Measurement(what=f"all_reduce busbw at {s}", value=busbw(s, peak), unit="GB/s",
                              size_bytes=s, collective="all_reduce") for s in SWEEP if s != GATE)
    gate_value = busbw(GATE, peak)
    judged = Measurement(what="all_reduce busbw at 16 GiB", value=gate_value, unit="GB/s",
                         op=">=", threshold=FLOOR_GB_S, ok=gate_value >= FLOOR_GB_S,
                         size_bytes=GATE, collective="all_reduce")
    bw_outcome = "pass" if judged.ok else "fail"
    checks = [
        _check("PF-ENV-001", title="NCCL/FI variables are set as the profile needs"),
        _check("PF-GPU-001", title="Every GPU is visible"),
        _check("PF-BW-001", bw_outcome, "" if judged.ok else
               f"[PF-BW-001] all_reduce busbw at 16 GiB {gate_value} GB/s < {FLOOR_GB_S} GB/s "
               f"required for {PROFILE}; check NVLink", "Single-node all_reduce busbw",
               (*sweep, judged), "check NVLink"),
    ]
    if fault == "xid":
        checks.append(_check(
            "PF-GPU-003", "fail", f"[PF-GPU-003] fatal XIDs on {host}: GPU 5: Xid 79, GPU has "
            "fallen off the bus; drain the node", "No fatal XID",
            (Measurement(what="fatal XIDs", value=1, unit="", op="==", threshold=0, ok=False,
                         gpu_index=5),), "drain the node"))
    else:
        checks.append(_check("PF-GPU-003", title="No fatal XID"))
    return checks


def run(num_nodes: int, *, slow: Mapping[int, float] | None = None,
        faults: Mapping[int, str] | None = None, prefix: str = "node",
        tier: str = "certify") -> list[Report]:
    """Every node's report. `slow`: rank -> factor on its network busbw (the cluster
    isolates it); `faults`: rank -> a node-local fault ("xid"); `tier`: certify measures the
    nodes that passed their own checks, preflight stops after the node-local gather (as
    harness.cluster.step does)."""
    slow, faults = dict(slow or {}), dict(faults or {})
    hosts = {r: f"{prefix}-{r}" for r in range(num_nodes)}
    reports = []
    for r, host in hosts.items():
        rep = Report(host=host, profile=PROFILE, profile_source="test", tier=tier,
                     started_at="2026-11-28T03:00:00+00:00",
                     finished_at="2026-11-28T03:09:00+00:00", duration_s=540.0)
        rep.checks = results(node_checks(host, PEAK_GB_S * (0.97 + 0.02 * ((r * 7) % 3)),
                                         faults.get(r)))
        reports.append(rep)
    facts = {k: "same" for k in FACT_KEYS}
    snap: dict[str, Any] = {
        "num_nodes": num_nodes, "profile": PROFILE, "tier": tier,
        "straggler_limits": DEFAULT_LIMITS.to_dict(), "drain_cap": None,
        "hosts": {str(r): h for r, h in hosts.items()},
        "nodes": {str(r): node_summary(rep, rank=r, facts=facts, env={}).to_json()
                  for r, rep in enumerate(reports)},
    }
    # As step.py does: after a node-local failure, preflight stops before the collectives
    # (saying what was not measured); certify measures the nodes that passed.
    local = decide(snap)
    members = [r for r in hosts if r not in {b["rank"] for b in local.bad_nodes}]
    if num_nodes > 1 and not local.passed:
        why = left_out(snap, local.bad_nodes)
        if tier == "preflight" or len(members) < 2:
            snap["not_measured"] = not_measured(snap, why, tier, members)
            members = []
        else:
            snap["left_out"] = {str(r): w for r, w in why.items()}
    if num_nodes > 1 and members:
        per_rank = {str(r): round(200.0 * slow.get(r, 1.0), 1) for r in members}
        snap["bandwidth"] = {"size_bytes": GIB, "nranks": len(members), "ranks": list(members),
                             "floor_gb_s": 100.0,
                             "busbw_gb_s": min(per_rank.values()), "data_ok": True,
                             "per_rank": per_rank, "errors": [], "missing": {}}
        if slow:
            result = isolate(members, simulate_measure(healthy_gb_s=200.0, bad_nodes=slow,
                                                       seed=1), floor_gb_s=100.0)
            snap["isolation"] = result.to_json()
    if num_nodes > 1:
        verdict = decide(snap)
        for r, rep in enumerate(reports):
            rep.checks = rep.checks + results(verdict.checks)
            rep.extra["cluster"] = {**verdict.to_dict(), "num_nodes": num_nodes, "node_rank": r,
                                    "bandwidth": snap.get("bandwidth"),
                                    "isolation": snap.get("isolation"),
                                    "not_measured": snap.get("not_measured") or {},
                                    "left_out": snap.get("left_out") or {}}
    return reports


def write_run(directory: Path, reports: list[Report]) -> Path:
    """One folder per host with its report.json (what `--report-dir` leaves)."""
    for r in reports:
        (directory / r.host).mkdir(parents=True, exist_ok=True)
        (directory / r.host / "report.json").write_text(json.dumps(r.to_dict()),
                                                        encoding="utf-8")
    return directory
