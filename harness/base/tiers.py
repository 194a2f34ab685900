"""The tiers, from the fastest to the deepest: the one list that the CLI, the check model,
the pytest plugin and the SageMaker launcher share. A check of a tier also runs in every
deeper tier."""

from __future__ import annotations

__all__ = ["ISSUING_TIERS", "REUSE_TIERS", "TIERS"]

TIERS = ("preflight", "certify", "diagnose")
"""preflight: every job, well under a minute; certify: nightly, every node and link;
diagnose: one bad node, everything that can be measured."""

#: Tiers whose pass issues a certificate (harness.memory.certificate; every check of a tier runs
#: in the deeper ones).
ISSUING_TIERS = ("certify", "diagnose")
#: Tiers a certificate may shorten: the job-start run.
REUSE_TIERS = ("preflight",)
