"""The tiers, from the fastest to the deepest: the one list that the CLI, the check model,
the pytest plugin and the SageMaker launcher share. A check of a tier also runs in every
deeper tier."""

from __future__ import annotations

__all__ = ["TIERS"]

TIERS = ("preflight", "certify", "diagnose")
"""preflight: every job, well under a minute; certify: nightly, every node and link;
diagnose: one bad node, everything that can be measured."""
