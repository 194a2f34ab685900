"""Multi-node preflight: the control plane, the cluster verdict, bad-node isolation and the
local selftest (the topology they stand on is harness.topology). Nothing here imports torch at
module level."""
