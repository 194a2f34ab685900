"""`python -m harness` is the `preflight` command."""

from harness import sigmask

sigmask.hold()  # before anything else is imported (harness.sigmask)

from harness.cli import entrypoint  # noqa: E402

entrypoint()
