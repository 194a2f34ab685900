"""The blast-radius cap (issue 30): the Slurm and Kubernetes integrations never drain or taint
more than a configured fraction (PREFLIGHT_DRAIN_CAP, default 0.5: NVSentinel stops at 50%) of
the nodes of one run. Past it the run is `suspect`: so many nodes failing at once points at a
shared cause (a bad image or driver, a fabric event, a wrong profile) rather than at that many
bad nodes, and taking them all out would empty the cluster for one cause. The verdict still
fails (the job does not start); only the draining is held back, and said.

Used by the cluster verdict (harness.cluster.verdict: its actions) and by the Kubernetes marks
(harness.report.kube); container/slurm/gpu-preflight-slurm.sh applies the same rule in shell."""

from __future__ import annotations

import math

from harness.base.jsontypes import JSONObject

__all__ = ["DEFAULT_CAP", "allowed", "blast_radius"]

#: NVSentinel's default: it stops cordoning past half of the cluster.
DEFAULT_CAP = 0.5


def allowed(num_nodes: int, cap: float) -> int:
    """How many of a run's `num_nodes` may be drained: floor(cap x nodes), and at least 1 (one
    failing node alone cannot tell a shared cause from a bad node)."""
    return max(1, math.floor(cap * num_nodes + 1e-9))


def blast_radius(num_nodes: int, num_bad: int, cap: float = DEFAULT_CAP) -> JSONObject:
    """report.json's `blast_radius`: the counts, the cap, and `suspect` with why past it."""
    limit = allowed(num_nodes, cap)
    out: JSONObject = {"num_nodes": num_nodes, "bad": num_bad, "cap": cap, "allowed": limit,
                       "suspect": num_bad > limit}
    if num_bad > limit:
        out["why"] = (f"suspect run: {num_bad} of {num_nodes} nodes failed, more than the "
                      f"{cap:.0%} any one run may drain ({limit}): likely a shared cause (the "
                      "image or driver, a fabric event, the profile) rather than "
                      f"{num_bad} bad nodes; no node is drained or tainted: find the shared "
                      "cause, then drain by hand the nodes that still fail")
    return out
