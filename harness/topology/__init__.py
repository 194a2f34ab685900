"""The one topology of the harness: from the launcher's environment to this node's place in
the job (nodes, rank, leader, hosts). Used by the probes, the fixtures and the control plane;
it imports nothing above it (kept by tests/test_layers.py)."""
