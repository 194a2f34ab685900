"""Cluster checks (multi-node jobs): declared and judged in harness/cluster/checks.py (one
`@check` spec and one judge of the gathered snapshot per check), collected here so that
`preflight list`, `explain` and `-k PF-CLUSTER` see them as they see every check.

The cluster verdict runs them on the snapshot after the node-local checks, on every node
(harness.cluster.verdict.decide), and its results replace these. In a pytest session there is
no snapshot yet: the `cluster` fixture says why, as a not-applicable skip on a single-node job
or with the cluster step turned off, else that the cluster step judges them."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from harness.base.errors import ProbeError
from harness.base.settings import get_str
from harness.checking import current, not_applicable
from harness.cluster.checks import (
    test_cluster_bandwidth_meets_floor,
    test_every_node_passed_its_checks,
    test_every_node_reported,
    test_nodes_are_consistent,
    test_pairwise_rounds_find_no_bad_node,
)
from harness.cluster.group_check import test_job_shaped_groups_meet_their_threshold
from harness.cluster.job import cluster_off
from harness.cluster.sdc import test_no_silent_data_corruption_across_nodes
from harness.cluster.snapshot import ClusterView
from harness.cluster.straggler import test_no_straggler_node
from harness.topology.model import TopologyError
from harness.topology.nodes import NodeCount
from harness.topology.providers import detect_topology

__all__ = [
    "test_cluster_bandwidth_meets_floor",
    "test_every_node_passed_its_checks",
    "test_every_node_reported",
    "test_job_shaped_groups_meet_their_threshold",
    "test_no_silent_data_corruption_across_nodes",
    "test_no_straggler_node",
    "test_nodes_are_consistent",
    "test_pairwise_rounds_find_no_bad_node",
]


@pytest.fixture
def cluster(node_count: NodeCount, environ: dict[str, str],
            sagemaker_config: Mapping[str, object] | None) -> ClusterView:
    """The gathered snapshot, which exists only in the cluster step (after this session):
    the same decision as `ClusterStep.start` on whether there is one."""
    if node_count.num_nodes < 2:
        not_applicable(f"single-node job (1 node, from {node_count.source}): no other node "
                       "to judge it with")
    if cluster_off(environ):
        not_applicable(f"PREFLIGHT_CLUSTER={get_str('PREFLIGHT_CLUSTER', environ)}: node-local "
                       "checks only, no cluster verdict")
    try:
        topology = detect_topology(environ, sagemaker_config)
    except TopologyError as exc:
        raise ProbeError(f"the job's topology: {exc}") from None
    if topology is None:
        not_applicable(f"{node_count.num_nodes} nodes (from {node_count.source}), but no "
                       "launcher environment names them: no cluster step joins them")
    pytest.skip(f"[{current().check_id}] judged by the cluster step of this "
                f"{node_count.num_nodes}-node job after the node-local checks (its result "
                "replaces this one)")
