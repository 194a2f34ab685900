"""`python -m harness` is the `preflight` command."""

from harness.cli import entrypoint

entrypoint()
