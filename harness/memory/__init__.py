"""A node's memory across runs: its identity, the store, certificates of a certify pass and the
bad-hardware ledger (docs/certification.md)."""
