"""Multi-node preflight: topology detection, the control plane, the cluster verdict, bad-node
isolation and the local selftest. Nothing here imports torch at module level."""

from harness.cluster.step import ClusterStep, ClusterTimeouts
from harness.cluster.topology import Topology, TopologyError, detect_topology

__all__ = ["ClusterStep", "ClusterTimeouts", "Topology", "TopologyError", "detect_topology"]
