"""The environment variables that change what NCCL and libfabric do: the ones every node of a
job must set alike (PF-CLUSTER-003, harness.cluster.snapshot) and the ones a node's identity
holds (harness.memory.identity). Here, in base/, because both rooms read them and neither
may import the other."""

from __future__ import annotations

__all__ = ["FABRIC_ENV_PREFIXES"]

#: Prefixes of the NCCL and libfabric variables.
FABRIC_ENV_PREFIXES = ("NCCL_", "FI_")
