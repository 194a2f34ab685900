"""The report of a run and every writer of it (JSON, terminal, plain text, junit helpers,
metrics, S3, Kubernetes, the HTML page)."""
