"""The one topology of the harness: from the launcher's environment to this node's place in
the job (nodes, rank, leader, hosts). Used by the probes, the fixtures and the control plane;
it imports nothing above it (kept by tests/test_layers.py)."""

from harness.topology.hostlist import compress_hostlist
from harness.topology.model import DEFAULT_PORT, Topology, TopologyError, expand_hostlist
from harness.topology.nodes import NodeCount, count_nodes, is_leader, sagemaker_hosts
from harness.topology.providers import detect_topology

__all__ = [
    "DEFAULT_PORT",
    "NodeCount",
    "Topology",
    "TopologyError",
    "compress_hostlist",
    "count_nodes",
    "detect_topology",
    "expand_hostlist",
    "is_leader",
    "sagemaker_hosts",
]
