"""Foundations: settings, tiers, JSON types, redaction, deadlines, subprocesses, signals,
the GPU vocabulary. Imports nothing of the harness outside base/."""
