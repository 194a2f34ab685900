"""Whether this node is part of a multi-node job: the one decision on whether `preflight run`
runs a cluster step, made from the environment alone. Its own module so that a single-node run
decides it without importing the snapshot, the wire types and the cluster judges (start-up,
issue 28 item 6; tests/test_startup.py)."""

from __future__ import annotations

from collections.abc import Mapping

from harness.base.settings import get_str
from harness.detect.instance import sagemaker_resource_config
from harness.topology.model import Topology
from harness.topology.providers import detect_topology

__all__ = ["cluster_off", "job_topology"]


def cluster_off(env: Mapping[str, str]) -> bool:
    """PREFLIGHT_CLUSTER=off (0, false, no): node-local checks only, no cluster step."""
    return (get_str("PREFLIGHT_CLUSTER", env) or "").strip().lower() in ("0", "off", "false", "no")


def job_topology(env: Mapping[str, str]) -> Topology | None:
    """The multi-node job this node is part of (None: a single-node job, or PREFLIGHT_CLUSTER
    off): the one decision on whether a cluster step runs, light enough to make before
    harness.cluster.step (torch.distributed's store, the verdict, pytest) is imported.
    Raises TopologyError on a malformed launcher variable."""
    if cluster_off(env):
        return None  # node-local checks only, on purpose
    return detect_topology(env, sagemaker_resource_config(env))
