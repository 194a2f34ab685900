"""Cluster checks (multi-node jobs): judged by the cluster step after the node-local checks
(harness/cluster/verdict.py), declared here so that `preflight list` and `explain` show them.
In a session of their own they only say where their verdict comes from."""

from __future__ import annotations

from collections.abc import Callable

from harness.checking import check, not_applicable
from harness.cluster.verdict import CLUSTER_CHECKS


def _declare(cid: str) -> Callable[[], None]:
    title, why, remedy = CLUSTER_CHECKS[cid]

    def test() -> None:
        not_applicable("judged across nodes by the cluster step of a multi-node job, after "
                       "the node-local checks (single-node here)")

    test.__name__ = f"test_cluster_{cid.rsplit('-', 1)[1]}"
    return check(cid, title=title, why=why, remedy=remedy)(test)


test_cluster_001 = _declare("PF-CLUSTER-001")
test_cluster_002 = _declare("PF-CLUSTER-002")
test_cluster_003 = _declare("PF-CLUSTER-003")
test_cluster_004 = _declare("PF-CLUSTER-004")
test_cluster_005 = _declare("PF-CLUSTER-005")
