"""`python -m harness` is the `preflight` command."""

from harness.base import sigmask

sigmask.hold()  # before anything else is imported (harness.base.sigmask)

from harness.cli import entrypoint  # noqa: E402

entrypoint()
